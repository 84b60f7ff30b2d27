// Small pieces of the HTTP front shared by its files: reason phrases, which headers are
// end-to-end, the stored metadata of an object (an origin's end-to-end headers), clocks,
// and the kinds of origin failure with the status each maps to. (Cache rules proper are in
// goblin/gateway/cache_policy.h.)
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace goblin::gateway::detail {

const char* Reason(int status);
// Hop-by-hop and framing headers are never stored or passed through (and neither are the
// ones the gateway writes itself: Date, Age, Via, X-Cache, Accept-Ranges).
bool EndToEnd(std::string_view name);
void LowerInPlace(std::string* s);

// The first value of `name` in a stored header block ("" if none).
std::string_view MetaGet(std::string_view meta, std::string_view name);
// Appends the block's well-formed end-to-end lines, each ending in CRLF (whatever the
// stored block ends with), optionally without Content-Type (multipart parts carry it).
void AppendStoredHeaders(std::string* out, std::string_view meta, bool drop_content_type);

// "Content-Length: N\r\n" in a buffer of its own (no allocation).
struct HeaderLine {
  char buf[48];
  size_t n = 0;
  std::string_view view() const { return {buf, n}; }
};
HeaderLine ContentLength(uint64_t n);

uint64_t NowSeconds();    // CLOCK_REALTIME
uint64_t NowUnixNanos();  // CLOCK_REALTIME

// Why an origin fetch failed. Timeout answers 504, every other kind 502 (when no response
// head has gone to the client yet; after that the connection is closed).
enum class OriginFault : uint8_t {
  kUnreachable,  // connect failed (refused, unresolvable, unreachable)
  kReset,        // the origin reset the connection
  kClosed,       // FIN before a complete response head
  kTruncated,    // FIN before the declared length (or the last chunk)
  kTimeout,      // silence past --origin-timeout
  kMalformed,    // not an HTTP/1.1 response head
  kBadChunk,     // a malformed chunked body
  kTooLong,      // bytes beyond the declared length (or after the last chunk)
  kSick,         // not asked: its health probe (--origin-probe) marks it sick
};
int StatusFor(OriginFault f);
std::string_view Describe(OriginFault f);
// "502 Bad Gateway: <why>\n": the body names the same code as the status line.
std::string ErrorBody(int status, std::string_view why);

}  // namespace goblin::gateway::detail
