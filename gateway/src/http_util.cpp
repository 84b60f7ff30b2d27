#include "http_util.h"

#include <time.h>

#include <cctype>

#include <fmt/format.h>

#include "goblin/gateway/http.h"

namespace goblin::gateway::detail {

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 206:
      return "Partial Content";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 416:
      return "Range Not Satisfiable";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

bool EndToEnd(std::string_view name) {
  static constexpr std::string_view kHop[] = {"connection",
                                              "keep-alive",
                                              "transfer-encoding",
                                              "te",
                                              "trailer",
                                              "upgrade",
                                              "proxy-authenticate",
                                              "proxy-authorization",
                                              "content-length",
                                              "date",
                                              "age",
                                              "via",
                                              "x-cache",
                                              "accept-ranges",
                                              "x-goblin-fresh-until",
                                              "surrogate-key"};
  for (auto h : kHop) {
    if (http::IEquals(name, h)) return false;
  }
  return true;
}

void LowerInPlace(std::string* s) {
  for (char& c : *s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}

std::string_view MetaGet(std::string_view meta, std::string_view name) {
  std::string_view found;
  bool done = false;
  http::ForEachHeaderLine(meta, [&](std::string_view n, std::string_view v) {
    if (!done && http::IEquals(n, name)) {
      found = v;
      done = true;
    }
  });
  return found;
}

void AppendStoredHeaders(std::string* out, std::string_view meta, bool drop_content_type) {
  http::ForEachHeaderLine(meta, [&](std::string_view n, std::string_view v) {
    if (!EndToEnd(n) || (drop_content_type && http::IEquals(n, "content-type"))) return;
    out->append(n);
    out->append(": ");
    out->append(v);
    out->append("\r\n");
  });
}

HeaderLine ContentLength(uint64_t n) {
  HeaderLine h;
  auto r = fmt::format_to_n(h.buf, sizeof h.buf, "Content-Length: {}\r\n", n);
  h.n = static_cast<size_t>(r.out - h.buf);
  return h;
}

uint64_t NowSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec);
}

uint64_t NowUnixNanos() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

int StatusFor(OriginFault f) {
  return f == OriginFault::kTimeout ? 504 : f == OriginFault::kSick ? 503 : 502;
}

std::string_view Describe(OriginFault f) {
  switch (f) {
    case OriginFault::kUnreachable:
      return "cannot reach the origin";
    case OriginFault::kSick:
      return "the origin is marked sick by its health probe";
    case OriginFault::kReset:
      return "the origin reset the connection";
    case OriginFault::kClosed:
      return "the origin closed the connection before answering";
    case OriginFault::kTruncated:
      return "the origin closed the connection mid-body (truncated)";
    case OriginFault::kTimeout:
      return "the origin did not answer in time";
    case OriginFault::kMalformed:
      return "malformed response from the origin";
    case OriginFault::kBadChunk:
      return "malformed chunked body from the origin";
    case OriginFault::kTooLong:
      return "the origin sent more than it declared";
  }
  return "origin error";
}

std::string ErrorBody(int status, std::string_view why) {
  return fmt::format("{} {}: {}\n", status, Reason(status), why);
}

}  // namespace goblin::gateway::detail
