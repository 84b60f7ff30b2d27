// HTTP/1.1 message parsing for goblin-gateway (RFC 9110/9112): requests from clients and
// responses from the origin, incremental over a connection's input buffer, with explicit
// limits and the status code each violation maps to (400 malformed, 414 request line too
// long, 431 headers too large, 501 unknown transfer coding, 505 version). Views point into
// the input buffer and are valid until it changes. Request smuggling vectors are refused:
// Content-Length together with Transfer-Encoding, differing Content-Lengths, obsolete line
// folding, whitespace before the colon. A chunked body decoder and small helpers (header
// lookup, Range and Cache-Control parsing, HTTP dates) complete it.
// Fuzzed: fuzz_http_request, fuzz_http_response. Threading: none (pure functions/objects).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace goblin::gateway::http {

struct Header {
  std::string_view name, value;
};

struct Limits {
  size_t max_request_line = 8 * 1024;
  size_t max_header_bytes = 64 * 1024;  // request line + headers
  size_t max_headers = 100;
};

enum class Parse { kComplete, kNeedMore, kError };

// Framing of a message body.
struct Framing {
  bool chunked = false;
  std::optional<uint64_t> content_length;  // neither: no body (requests) / until close (responses)
};

struct Request {
  std::string_view method, target, path, query;  // path: target up to '?'
  int minor = 1;                                 // HTTP/1.minor
  std::vector<Header> headers;
  Framing framing;
  bool keep_alive = true;
  size_t head_bytes = 0;  // bytes of request line + headers (the body starts there)
  std::string_view Get(std::string_view name) const;  // first value, case-insensitive; "" if none
  bool Has(std::string_view name) const;
};

struct Response {
  int status = 0;
  int minor = 1;
  std::string_view reason;
  std::vector<Header> headers;
  Framing framing;
  bool keep_alive = true;
  size_t head_bytes = 0;
  std::string_view Get(std::string_view name) const;
};

// Parses a request head at the start of `in`. kError: `*status` is the status to answer
// with (and close). Requests without a body have neither framing field set.
Parse ParseRequest(std::string_view in, const Limits& limits, Request* out, int* status);
// Parses a response head. `head_request`: the request was HEAD (no body whatever the
// headers say). 1xx informational responses are reported as such (the caller skips them).
Parse ParseResponse(std::string_view in, const Limits& limits, bool head_request, Response* out);

// Incremental chunked decoder: feed input, get body bytes out.
class ChunkedDecoder {
 public:
  // Consumes from `in` (advancing *pos), appending decoded bytes to `out` (views into
  // `in`). Returns kComplete after the last chunk and trailers, kNeedMore, or kError.
  Parse Feed(std::string_view in, size_t* pos, std::vector<std::string_view>* out);
  uint64_t total() const { return total_; }

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer, kDone } state_ = State::kSize;
  uint64_t left_ = 0;
  uint64_t total_ = 0;
};

// Byte ranges of a "Range: bytes=..." header against an object of `size` bytes.
struct ByteRange {
  uint64_t first = 0, last = 0;  // inclusive
  uint64_t length() const { return last - first + 1; }
};
enum class RangeResult { kNone, kOk, kUnsatisfiable, kIgnore };
// kNone: no Range header; kIgnore: malformed or not bytes (serve the whole object, as
// RFC 9110 allows); kUnsatisfiable: 416; kOk: `ranges` (coalesced when they overlap).
RangeResult ParseRange(std::string_view header, uint64_t size, std::vector<ByteRange>* ranges);

struct CacheControl {
  bool no_store = false, no_cache = false, is_private = false;
  bool must_revalidate = false;  // must-revalidate or proxy-revalidate: never served stale
  std::optional<int64_t> max_age, s_maxage;
  std::optional<int64_t> stale_while_revalidate, stale_if_error;  // RFC 5861
};
CacheControl ParseCacheControl(std::string_view value);

// IMF-fixdate (and the two obsolete forms) to Unix seconds; nullopt if unparseable.
std::optional<int64_t> ParseHttpDate(std::string_view s);
std::string FormatHttpDate(int64_t unix_seconds);

bool IEquals(std::string_view a, std::string_view b);
// RFC 9110 token characters (header names, methods).
bool IsTokenChar(char c);

// A stored header block: "Name: value" lines as goblin-gateway keeps an origin's end-to-end
// headers in an object's metadata (other writers, e.g. `goblin put --meta`, may store
// anything). Calls fn(name, value) for each well-formed line (a token, a colon, optional
// spaces, a value without CR, LF or NUL; trailing spaces dropped) and skips the rest; lines
// end in CRLF or LF, the last may have neither. Never reads outside `block`.
template <typename Fn>
void ForEachHeaderLine(std::string_view block, Fn&& fn) {
  size_t pos = 0;
  while (pos < block.size()) {
    size_t nl = block.find('\n', pos);
    size_t end = nl == std::string_view::npos ? block.size() : nl;
    std::string_view line = block.substr(pos, end - pos);
    pos = nl == std::string_view::npos ? block.size() : nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t colon = line.find(':');
    if (colon == 0 || colon == std::string_view::npos) continue;
    std::string_view name = line.substr(0, colon), value = line.substr(colon + 1);
    bool ok = true;
    for (char c : name) ok = ok && IsTokenChar(c);
    for (char c : value) ok = ok && c != '\r' && c != '\n' && c != '\0';
    if (!ok) continue;
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    fn(name, value);
  }
}
// True when a comma-separated header value lists `token` (case-insensitive).
bool HasToken(std::string_view value, std::string_view token);
// base64url (RFC 4648 section 5), the '=' padding optional: HTTP2-Settings' token68. False
// (and *out unspecified) for any other character, a misplaced '=' or a length no encoder
// gives.
bool DecodeBase64Url(std::string_view in, std::string* out);

}  // namespace goblin::gateway::http
