// HTTP/2 messages as the HTTP front's HTTP/1.1 machinery sees them (RFC 9113 section 8):
// a stream's request fields, as nghttp2 hands them over one by one, become the HTTP/1.1
// request the front parses (RequestBuilder); the HTTP/1.1 response head the front writes
// becomes the field list of a HEADERS frame (ResponseHead). The translation adds nothing
// and loses nothing a cache looks at: the method, target, Host (from :authority), every
// other field in order, cookies joined again (8.2.3), and a Content-Length of the body
// actually received (the client's own is dropped; 8.1.1 makes a mismatch an error anyway).
// Connection-specific fields never cross (8.2.2). Pure, no I/O; fuzzed by fuzz_h2, which
// feeds random frames to an nghttp2 server session and checks that what it accepts parses
// back as the same request and that every response field is one an HTTP/2 peer accepts.
// Threading: none (objects owned by one loop).
#pragma once

#include <nghttp2/nghttp2.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "goblin/gateway/http.h"

namespace goblin::gateway::h2 {

// Fields HTTP/2 forbids in a response (RFC 9113 8.2.2): connection, keep-alive,
// proxy-connection, transfer-encoding, upgrade, and te (a request's, and there only as
// "trailers"; an HTTP/2 client resets a response carrying another). `name` in lower case.
bool ConnectionSpecific(std::string_view name);

// An HTTP2-Settings payload a SETTINGS frame could carry (RFC 9113 6.5): whole entries,
// ENABLE_PUSH 0 or 1, INITIAL_WINDOW_SIZE up to 2^31-1, MAX_FRAME_SIZE 2^14 to 2^24-1.
bool ValidSettingsPayload(std::string_view payload);

// The flood limits every server session of the front runs with (nghttp2's defaults,
// written down): RST_STREAM (rapid reset) 1000 at once then 33/s, 1000 queued SETTINGS/PING
// acks, 32 settings per frame, 8 CONTINUATION frames per header block.
void SetServerLimits(nghttp2_option* option);

// One stream's request, field by field.
class RequestBuilder {
 public:
  // A field of the request's header block, as nghttp2 validated it. False when the block
  // has grown past `max_header_bytes` (each field counted as RFC 9113 does: name + value
  // + 32): the stream is refused.
  bool Add(std::string_view name, std::string_view value, size_t max_header_bytes);
  // The HTTP/1.1 request: "METHOD target HTTP/1.1", Host, the other fields, cookie, a
  // Content-Length when there is a body or the method may carry one, then `body` unless
  // `with_body` is false (a body past the front's limit: it answers 413 without reading it).
  // `out` is cleared first; its capacity is reused.
  void ToHttp1(std::string_view body, bool with_body, std::string* out) const;
  const std::string& method() const { return method_; }
  const std::string& path() const { return path_; }
  const std::string& authority() const { return authority_; }
  size_t header_bytes() const { return header_bytes_; }
  // Forgets the fields (after ToHttp1: the stream conn's input holds them now).
  void Clear();

 private:
  std::string method_, path_, authority_;
  std::string lines_;    // the other fields, "name: value\r\n" each
  std::string cookies_;  // cookie fields, joined with "; "
  size_t header_bytes_ = 0;
};

// A response head's fields for nghttp2_submit_response: ":status", then each field of the
// HTTP/1.1 head in order, names lower-cased, connection-specific ones left out, and so are a
// 204's Content-Length and repeats of an identical one (HTTP/1.1's parser takes both; an
// HTTP/2 client resets the stream for either). The storage
// is kept from one response to the next (no allocation once it has seen the largest head).
class ResponseHead {
 public:
  // Views `resp`'s values (valid while the bytes it was parsed from are) and this object's
  // own names: used at once (nghttp2 copies the fields it submits).
  std::span<const nghttp2_nv> From(const http::Response& resp);

 private:
  char status_[8] = {};
  std::string names_;  // the lower-cased names, back to back
  std::vector<nghttp2_nv> nv_;
};

}  // namespace goblin::gateway::h2
