// Fuzz target: HTTP request and response heads, the chunked decoder, stored header blocks
// (ForEachHeaderLine), the Range / Cache-Control / date helpers, base64url (HTTP/1.1's
// HTTP2-Settings) and the cache key. The first byte picks the parser; any input must give a
// result without reading out of bounds, and a complete head's views must lie inside it.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "goblin/gateway/cache_policy.h"
#include "goblin/gateway/http.h"

using namespace goblin::gateway::http;

namespace {
void Inside(std::string_view in, std::string_view v) {
  if (v.empty()) return;
  if (v.data() < in.data() || v.data() + v.size() > in.data() + in.size()) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  Limits limits;
  limits.max_request_line = 512;
  limits.max_header_bytes = 4096;
  switch (data[0] % 7) {
    case 0: {
      Request r;
      int status = 0;
      if (ParseRequest(in, limits, &r, &status) == Parse::kComplete) {
        if (r.head_bytes > in.size()) std::abort();
        Inside(in, r.method);
        Inside(in, r.target);
        for (const Header& h : r.headers) {
          Inside(in, h.name);
          Inside(in, h.value);
        }
        if (r.framing.chunked && r.framing.content_length) std::abort();
      }
      break;
    }
    case 1: {
      Response r;
      if (ParseResponse(in, limits, false, &r) == Parse::kComplete) {
        if (r.head_bytes > in.size() || r.status < 100 || r.status > 999) std::abort();
      }
      break;
    }
    case 2: {
      ChunkedDecoder d;
      std::vector<std::string_view> out;
      size_t pos = 0;
      (void)d.Feed(in, &pos, &out);
      if (pos > in.size()) std::abort();
      uint64_t total = 0;
      for (auto v : out) {
        Inside(in, v);
        total += v.size();
      }
      if (total != d.total()) std::abort();
      break;
    }
    case 3: {
      std::vector<ByteRange> ranges;
      uint64_t object = in.size() * 977;
      if (ParseRange(in, object, &ranges) == RangeResult::kOk) {
        for (size_t i = 0; i < ranges.size(); ++i) {
          if (ranges[i].first > ranges[i].last || ranges[i].last >= object) std::abort();
          if (i > 0 && ranges[i].first <= ranges[i - 1].last + 1) std::abort();  // coalesced
        }
      }
      break;
    }
    case 4: {
      size_t lines = 0;
      ForEachHeaderLine(in, [&](std::string_view name, std::string_view value) {
        Inside(in, name);
        Inside(in, value);
        if (name.empty()) std::abort();
        for (char c : value) {
          if (c == '\r' || c == '\n') std::abort();
        }
        ++lines;
      });
      if (lines > in.size()) std::abort();
      break;
    }
    case 5: {
      std::string out;
      if (DecodeBase64Url(in, &out) && out.size() > in.size()) std::abort();
      // The cache key of any target, every option on: never longer than host + target +
      // the header parts, every byte of it from them.
      goblin::gateway::policy::CacheKeyOptions o;
      o.query = in.size() % 2 ? goblin::gateway::policy::CacheKeyOptions::Query::kSort
                              : goblin::gateway::policy::CacheKeyOptions::Query::kKeep;
      o.strip = {"utm_*", "a"};
      o.headers = {"x"};
      Request none;
      std::vector<std::string_view> scratch;
      std::string key;
      goblin::gateway::policy::BuildCacheKey(&key, "h", in, o, none, &scratch);
      // (the header part after one NUL: the object's name before it, the first NUL unless
      // the target had one of its own)
      if (key.size() > 1 + in.size() + 4 || !key.ends_with(std::string_view("\0#x=", 4)) ||
          (in.find('\0') == std::string_view::npos && key.find('\0') != key.size() - 4))
        std::abort();
      [[fallthrough]];
    }
    default:
      (void)ParseCacheControl(in);
      if (auto t = ParseHttpDate(in)) (void)FormatHttpDate(*t);
      break;
  }
  return 0;
}
