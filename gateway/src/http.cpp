#include "goblin/gateway/http.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <ctime>

namespace goblin::gateway::http {
namespace {

bool IsTchar(char c) {
  if (std::isalnum(static_cast<unsigned char>(c))) return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != '\0';
}

bool IsToken(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), IsTchar); }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool ParseU64(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc();
}

// Finds the end of the head (the empty line); returns the offset after it or npos.
// Accepts CRLF and bare LF line endings.
size_t HeadEnd(std::string_view in) {
  for (size_t i = in.find('\n'); i != std::string_view::npos; i = in.find('\n', i + 1)) {
    if (i + 1 < in.size() && in[i + 1] == '\n') return i + 2;
    if (i + 2 < in.size() && in[i + 1] == '\r' && in[i + 2] == '\n') return i + 3;
  }
  return std::string_view::npos;
}

// Splits the head into lines (without their line endings).
template <typename Fn>
bool ForEachLine(std::string_view head, Fn&& fn) {
  size_t pos = 0;
  while (pos < head.size()) {
    size_t nl = head.find('\n', pos);
    if (nl == std::string_view::npos) nl = head.size();
    std::string_view line = head.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!fn(line)) return false;
    pos = nl + 1;
  }
  return true;
}

// Headers and body framing, shared by requests and responses. False: malformed.
bool ParseHeaders(std::string_view lines, const Limits& limits, std::vector<Header>* headers,
                  Framing* framing, bool* keep_alive, int minor, int* status) {
  headers->clear();
  bool ok = ForEachLine(lines, [&](std::string_view line) {
    if (line.empty()) return true;
    if (line[0] == ' ' || line[0] == '\t') {  // obsolete line folding
      *status = 400;
      return false;
    }
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || !IsToken(line.substr(0, colon))) {
      *status = 400;  // includes whitespace before the colon
      return false;
    }
    if (headers->size() >= limits.max_headers) {
      *status = 431;
      return false;
    }
    std::string_view value = Trim(line.substr(colon + 1));
    for (char c : value) {
      if ((c < 0x20 && c != '\t') || c == 0x7f) {
        *status = 400;
        return false;
      }
    }
    headers->push_back({line.substr(0, colon), value});
    return true;
  });
  if (!ok) return false;
  *keep_alive = minor >= 1;
  bool te = false;
  for (const Header& h : *headers) {
    if (IEquals(h.name, "content-length")) {
      uint64_t v = 0;
      if (!ParseU64(h.value, &v) || (framing->content_length && *framing->content_length != v)) {
        *status = 400;
        return false;
      }
      framing->content_length = v;
    } else if (IEquals(h.name, "transfer-encoding")) {
      te = true;
      // Only "chunked" (last) is understood.
      std::string_view v = Trim(h.value);
      if (!IEquals(v, "chunked")) {
        *status = 501;
        return false;
      }
      framing->chunked = true;
    } else if (IEquals(h.name, "connection")) {
      if (HasToken(h.value, "close")) *keep_alive = false;
      if (HasToken(h.value, "keep-alive")) *keep_alive = true;
    }
  }
  if (te && framing->content_length) {
    *status = 400;  // smuggling: both framings
    return false;
  }
  return true;
}

}  // namespace

bool IsTokenChar(char c) { return IsTchar(c); }

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

bool HasToken(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    size_t comma = value.find(',');
    std::string_view item = Trim(value.substr(0, comma));
    if (IEquals(item, token)) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

bool DecodeBase64Url(std::string_view in, std::string* out) {
  out->clear();
  size_t pad = 0;
  while (pad < 2 && pad < in.size() && in[in.size() - 1 - pad] == '=') ++pad;
  if (pad > 0 && in.size() % 4 != 0) return false;  // (padded: whole quads)
  in.remove_suffix(pad);
  if (in.size() % 4 == 1) return false;
  uint32_t acc = 0;
  int bits = 0;
  for (char ch : in) {
    uint32_t v;
    if (ch >= 'A' && ch <= 'Z') {
      v = static_cast<uint32_t>(ch - 'A');
    } else if (ch >= 'a' && ch <= 'z') {
      v = static_cast<uint32_t>(ch - 'a') + 26;
    } else if (ch >= '0' && ch <= '9') {
      v = static_cast<uint32_t>(ch - '0') + 52;
    } else if (ch == '-') {
      v = 62;
    } else if (ch == '_') {
      v = 63;
    } else {
      return false;
    }
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return true;
}

std::string_view Request::Get(std::string_view name) const {
  for (const Header& h : headers) {
    if (IEquals(h.name, name)) return h.value;
  }
  return {};
}

bool Request::Has(std::string_view name) const {
  return std::any_of(headers.begin(), headers.end(),
                     [&](const Header& h) { return IEquals(h.name, name); });
}

std::string_view Response::Get(std::string_view name) const {
  for (const Header& h : headers) {
    if (IEquals(h.name, name)) return h.value;
  }
  return {};
}

Parse ParseRequest(std::string_view in, const Limits& limits, Request* out, int* status) {
  *status = 400;
  size_t first_nl = in.find('\n');
  if (first_nl == std::string_view::npos) {
    if (in.size() > limits.max_request_line) {
      *status = 414;
      return Parse::kError;
    }
    return Parse::kNeedMore;
  }
  if (first_nl > limits.max_request_line) {
    *status = 414;
    return Parse::kError;
  }
  size_t end = HeadEnd(in);
  if (end == std::string_view::npos) {
    if (in.size() > limits.max_header_bytes) {
      *status = 431;
      return Parse::kError;
    }
    return Parse::kNeedMore;
  }
  if (end > limits.max_header_bytes) {
    *status = 431;
    return Parse::kError;
  }
  std::string_view line = in.substr(0, first_nl);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  // method SP request-target SP HTTP-version
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return Parse::kError;
  }
  Request& r = *out;
  {
    auto keep = std::move(r.headers);  // reuse its capacity
    r = Request{};
    r.headers = std::move(keep);
  }
  r.method = line.substr(0, sp1);
  r.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = line.substr(sp2 + 1);
  if (!IsToken(r.method) || r.target.empty()) return Parse::kError;
  for (char c : r.target) {
    if (c <= 0x20 || c == 0x7f) return Parse::kError;
  }
  if (version.size() != 8 || version.substr(0, 7) != "HTTP/1." || version[7] < '0' ||
      version[7] > '9') {
    if (version.starts_with("HTTP/") && version.size() == 8 && version[6] == '.') {
      *status = 505;
    }
    return Parse::kError;
  }
  r.minor = version[7] - '0';
  size_t q = r.target.find('?');
  r.path = r.target.substr(0, q);
  r.query = q == std::string_view::npos ? std::string_view() : r.target.substr(q + 1);
  if (!ParseHeaders(in.substr(first_nl + 1, end - first_nl - 1), limits, &r.headers, &r.framing,
                    &r.keep_alive, r.minor, status)) {
    return Parse::kError;
  }
  if (r.minor >= 1 && !r.Has("host")) return Parse::kError;  // RFC 9112: Host is required
  r.head_bytes = end;
  return Parse::kComplete;
}

Parse ParseResponse(std::string_view in, const Limits& limits, bool head_request, Response* out) {
  size_t end = HeadEnd(in);
  if (end == std::string_view::npos) {
    return in.size() > limits.max_header_bytes ? Parse::kError : Parse::kNeedMore;
  }
  if (end > limits.max_header_bytes) return Parse::kError;
  size_t first_nl = in.find('\n');
  std::string_view line = in.substr(0, first_nl);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  // HTTP/1.x SP 3DIGIT SP reason
  if (line.size() < 12 || line.substr(0, 7) != "HTTP/1." || line[8] != ' ') return Parse::kError;
  Response& r = *out;
  {
    auto keep = std::move(r.headers);
    r = Response{};
    r.headers = std::move(keep);
  }
  r.minor = line[7] - '0';
  if (r.minor < 0 || r.minor > 9) return Parse::kError;
  for (int i = 9; i < 12; ++i) {
    if (line[i] < '0' || line[i] > '9') return Parse::kError;
  }
  r.status = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
  if (r.status < 100) return Parse::kError;
  r.reason = line.size() > 13 ? line.substr(13) : std::string_view();
  int status = 0;
  if (!ParseHeaders(in.substr(first_nl + 1, end - first_nl - 1), limits, &r.headers, &r.framing,
                    &r.keep_alive, r.minor, &status)) {
    return Parse::kError;
  }
  if (head_request || r.status < 200 || r.status == 204 || r.status == 304) {
    r.framing = Framing{false, uint64_t{0}};  // no body
  }
  r.head_bytes = end;
  return Parse::kComplete;
}

Parse ChunkedDecoder::Feed(std::string_view in, size_t* pos, std::vector<std::string_view>* out) {
  while (*pos < in.size()) {
    switch (state_) {
      case State::kSize: {
        size_t nl = in.find('\n', *pos);
        if (nl == std::string_view::npos)
          return in.size() - *pos > 1024 ? Parse::kError : Parse::kNeedMore;
        std::string_view line = in.substr(*pos, nl - *pos);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        line = line.substr(0, line.find(';'));  // extensions are ignored
        line = Trim(line);
        if (line.empty() || line.size() > 15) return Parse::kError;
        uint64_t size = 0;
        auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), size, 16);
        if (ec != std::errc() || p != line.data() + line.size()) return Parse::kError;
        *pos = nl + 1;
        left_ = size;
        state_ = size == 0 ? State::kTrailer : State::kData;
        break;
      }
      case State::kData: {
        size_t n = std::min<uint64_t>(left_, in.size() - *pos);
        out->push_back(in.substr(*pos, n));
        *pos += n;
        left_ -= n;
        total_ += n;
        if (left_ == 0) state_ = State::kDataEnd;
        break;
      }
      case State::kDataEnd: {
        if (in[*pos] == '\r') {
          if (*pos + 1 >= in.size()) return Parse::kNeedMore;
          if (in[*pos + 1] != '\n') return Parse::kError;
          *pos += 2;
        } else if (in[*pos] == '\n') {
          *pos += 1;
        } else {
          return Parse::kError;
        }
        state_ = State::kSize;
        break;
      }
      case State::kTrailer: {
        size_t nl = in.find('\n', *pos);
        if (nl == std::string_view::npos)
          return in.size() - *pos > 8192 ? Parse::kError : Parse::kNeedMore;
        std::string_view line = in.substr(*pos, nl - *pos);
        *pos = nl + 1;
        if (line.empty() || line == "\r") {
          state_ = State::kDone;
          return Parse::kComplete;
        }
        break;
      }
      case State::kDone:
        return Parse::kComplete;
    }
  }
  return state_ == State::kDone ? Parse::kComplete : Parse::kNeedMore;
}

RangeResult ParseRange(std::string_view header, uint64_t size, std::vector<ByteRange>* ranges) {
  ranges->clear();
  if (header.empty()) return RangeResult::kNone;
  header = Trim(header);
  if (header.size() < 6 || !IEquals(header.substr(0, 6), "bytes=")) return RangeResult::kIgnore;
  std::string_view specs = header.substr(6);
  bool any_valid_syntax = false;
  while (!specs.empty()) {
    size_t comma = specs.find(',');
    std::string_view spec = Trim(specs.substr(0, comma));
    specs = comma == std::string_view::npos ? std::string_view() : specs.substr(comma + 1);
    if (spec.empty()) continue;
    size_t dash = spec.find('-');
    if (dash == std::string_view::npos) return RangeResult::kIgnore;
    std::string_view a = Trim(spec.substr(0, dash)), b = Trim(spec.substr(dash + 1));
    uint64_t first = 0, last = 0;
    if (a.empty()) {  // suffix: the last b bytes
      if (!ParseU64(b, &last)) return RangeResult::kIgnore;
      any_valid_syntax = true;
      if (last == 0 || size == 0) continue;
      first = last >= size ? 0 : size - last;
      ranges->push_back({first, size - 1});
      continue;
    }
    if (!ParseU64(a, &first)) return RangeResult::kIgnore;
    if (b.empty()) {
      last = UINT64_MAX;
    } else if (!ParseU64(b, &last) || last < first) {
      return RangeResult::kIgnore;
    }
    any_valid_syntax = true;
    if (first >= size) continue;  // unsatisfiable on its own
    ranges->push_back({first, std::min(last, size - 1)});
  }
  if (!any_valid_syntax) return RangeResult::kIgnore;
  if (ranges->empty()) return RangeResult::kUnsatisfiable;
  // Coalesce overlapping or adjacent ranges (keeps the response small and unambiguous).
  std::sort(ranges->begin(), ranges->end(),
            [](const ByteRange& x, const ByteRange& y) { return x.first < y.first; });
  std::vector<ByteRange> merged;
  for (const ByteRange& r : *ranges) {
    if (!merged.empty() && r.first <= merged.back().last + 1) {
      merged.back().last = std::max(merged.back().last, r.last);
    } else {
      merged.push_back(r);
    }
  }
  *ranges = std::move(merged);
  return RangeResult::kOk;
}

CacheControl ParseCacheControl(std::string_view value) {
  CacheControl cc;
  while (!value.empty()) {
    size_t comma = value.find(',');
    std::string_view item = Trim(value.substr(0, comma));
    value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
    size_t eq = item.find('=');
    std::string_view key = Trim(item.substr(0, eq));
    std::string_view arg =
        eq == std::string_view::npos ? std::string_view() : Trim(item.substr(eq + 1));
    if (arg.size() >= 2 && arg.front() == '"' && arg.back() == '"')
      arg = arg.substr(1, arg.size() - 2);
    auto number = [&]() -> std::optional<int64_t> {
      uint64_t v = 0;
      if (!ParseU64(arg, &v)) return std::nullopt;
      return static_cast<int64_t>(std::min<uint64_t>(v, INT64_MAX));
    };
    if (IEquals(key, "no-store")) {
      cc.no_store = true;
    } else if (IEquals(key, "no-cache")) {
      cc.no_cache = true;
    } else if (IEquals(key, "private")) {
      cc.is_private = true;
    } else if (IEquals(key, "max-age")) {
      cc.max_age = number();
    } else if (IEquals(key, "s-maxage")) {
      cc.s_maxage = number();
    } else if (IEquals(key, "must-revalidate") || IEquals(key, "proxy-revalidate")) {
      cc.must_revalidate = true;
    } else if (IEquals(key, "stale-while-revalidate")) {
      cc.stale_while_revalidate = number();
    } else if (IEquals(key, "stale-if-error")) {
      cc.stale_if_error = number();
    }
  }
  return cc;
}

std::optional<int64_t> ParseHttpDate(std::string_view s) {
  std::string str(Trim(s));
  struct tm tm {};
  const char* formats[] = {"%a, %d %b %Y %H:%M:%S GMT", "%A, %d-%b-%y %H:%M:%S GMT",
                           "%a %b %e %H:%M:%S %Y"};
  for (const char* f : formats) {
    tm = {};
    const char* end = strptime(str.c_str(), f, &tm);
    if (end != nullptr && *end == '\0') return static_cast<int64_t>(timegm(&tm));
  }
  return std::nullopt;
}

std::string FormatHttpDate(int64_t unix_seconds) {
  time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[64];
  size_t n = strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return std::string(buf, n);
}

}  // namespace goblin::gateway::http
