// See goblin/gateway/h2_message.h.
#include "goblin/gateway/h2_message.h"

#include <charconv>

namespace goblin::gateway::h2 {

bool ConnectionSpecific(std::string_view name) {
  return name == "connection" || name == "keep-alive" || name == "proxy-connection" ||
         name == "transfer-encoding" || name == "upgrade" || name == "te";
}

bool ValidSettingsPayload(std::string_view p) {
  if (p.size() % 6 != 0) return false;
  for (size_t at = 0; at < p.size(); at += 6) {
    const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(p[at + i])); };
    const uint32_t id = (b(0) << 8) | b(1);
    const uint32_t v = (b(2) << 24) | (b(3) << 16) | (b(4) << 8) | b(5);
    if ((id == NGHTTP2_SETTINGS_ENABLE_PUSH && v > 1) ||
        (id == NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE && v > (1u << 31) - 1) ||
        (id == NGHTTP2_SETTINGS_MAX_FRAME_SIZE && (v < (1u << 14) || v > (1u << 24) - 1)))
      return false;
  }
  return true;
}

void SetServerLimits(nghttp2_option* option) {
  nghttp2_option_set_stream_reset_rate_limit(option, 1000, 33);
  nghttp2_option_set_max_outbound_ack(option, 1000);
  nghttp2_option_set_max_settings(option, 32);
  nghttp2_option_set_max_continuations(option, 8);
}

bool RequestBuilder::Add(std::string_view n, std::string_view v, size_t max_header_bytes) {
  header_bytes_ += n.size() + v.size() + 32;
  if (header_bytes_ > max_header_bytes) return false;
  if (n == ":method") {
    method_.assign(v);
  } else if (n == ":path") {
    path_.assign(v);
  } else if (n == ":authority") {
    authority_.assign(v);
  } else if (n.starts_with(':')) {  // (:scheme; nghttp2 refuses the others)
  } else if (n == "host") {
    if (authority_.empty()) authority_.assign(v);
  } else if (n == "cookie") {  // (HTTP/2 splits it: one field again, RFC 9113 8.2.3)
    if (!cookies_.empty()) cookies_ += "; ";
    cookies_.append(v);
  } else if (n != "content-length") {  // (set from the body received)
    lines_.append(n).append(": ").append(v).append("\r\n");
  }
  return true;
}

void RequestBuilder::ToHttp1(std::string_view body, bool with_body, std::string* out) const {
  std::string& r = *out;
  r.clear();
  r.append(method_).append(" ").append(path_.empty() ? authority_ : path_);
  r.append(" HTTP/1.1\r\nHost: ").append(authority_).append("\r\n").append(lines_);
  if (!cookies_.empty()) r.append("cookie: ").append(cookies_).append("\r\n");
  if (!body.empty() || (method_ != "GET" && method_ != "HEAD")) {
    char n[24];
    auto [end, ec] = std::to_chars(n, n + sizeof n, body.size());
    r.append("content-length: ").append(n, end).append("\r\n");
  }
  r.append("\r\n");
  if (with_body) r.append(body);
}

void RequestBuilder::Clear() {
  method_.clear();
  path_.clear();
  authority_.clear();
  lines_.clear();
  cookies_.clear();
  header_bytes_ = 0;
}

std::span<const nghttp2_nv> ResponseHead::From(const http::Response& resp) {
  const auto nv = [](const char* n, size_t nlen, std::string_view v) {
    return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(n)),
                      reinterpret_cast<uint8_t*>(const_cast<char*>(v.data())), nlen, v.size(),
                      NGHTTP2_NV_FLAG_NONE};
  };
  auto [end, ec] = std::to_chars(status_, status_ + sizeof status_, resp.status);
  nv_.clear();
  nv_.push_back(nv(":status", 7, std::string_view(status_, end - status_)));
  size_t total = 0;
  for (const http::Header& hd : resp.headers) total += hd.name.size();
  names_.clear();
  names_.reserve(total);  // (the names' addresses stay put from here on)
  bool length = false;    // a Content-Length went in already
  for (const http::Header& hd : resp.headers) {
    const size_t at = names_.size();
    for (char ch : hd.name) names_.push_back(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
    const std::string_view name = std::string_view(names_).substr(at);
    // RFC 9110 8.6: never a Content-Length in a 204, and one only of identical ones (which
    // HTTP/1.1 takes, and an HTTP/2 client refuses: nghttp2 resets the stream).
    const bool is_length = name == "content-length";
    if (ConnectionSpecific(name) || (is_length && (length || resp.status == 204))) {
      names_.resize(at);
      continue;
    }
    length |= is_length;
    nv_.push_back(nv(names_.data() + at, hd.name.size(), hd.value));
  }
  return nv_;
}

}  // namespace goblin::gateway::h2
