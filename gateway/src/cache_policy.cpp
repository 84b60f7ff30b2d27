#include "goblin/gateway/cache_policy.h"

namespace goblin::gateway::policy {
namespace {

bool EtagMatches(std::string_view if_none_match, std::string_view etag) {
  if (etag.empty()) return false;
  auto strip = [](std::string_view e) {
    if (e.starts_with("W/")) e.remove_prefix(2);
    return e;
  };
  std::string_view want = strip(etag);
  while (!if_none_match.empty()) {
    size_t comma = if_none_match.find(',');
    std::string_view item = if_none_match.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item == "*" || strip(item) == want) return true;
    if (comma == std::string_view::npos) break;
    if_none_match.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

Storability Decide(const http::Response& r, int64_t default_ttl, int64_t now_unix_seconds) {
  Storability s;
  auto cc = http::ParseCacheControl(r.Get("cache-control"));
  if (r.status != 200) {
    s.why_not = "status is not 200";
  } else if (cc.no_store) {
    s.why_not = "Cache-Control: no-store";
  } else if (cc.is_private) {
    s.why_not = "Cache-Control: private";
  } else if (cc.no_cache) {
    s.why_not = "Cache-Control: no-cache";
  } else if (!r.Get("set-cookie").empty()) {
    s.why_not = "Set-Cookie";
  }
  int64_t ttl = default_ttl;
  if (cc.s_maxage) {
    ttl = *cc.s_maxage;
  } else if (cc.max_age) {
    ttl = *cc.max_age;
  } else if (auto exp = http::ParseHttpDate(r.Get("expires"))) {
    auto date = http::ParseHttpDate(r.Get("date"));
    ttl = *exp - (date ? *date : now_unix_seconds);
  } else if (!r.Get("expires").empty()) {
    ttl = 0;  // an unparseable Expires means "already expired" (RFC 9111 5.3)
  }
  s.ttl_seconds = ttl;
  if (s.why_not.empty() && ttl <= 0) s.why_not = "no freshness lifetime";
  s.store = s.why_not.empty();
  return s;
}

bool NotModified(std::string_view if_none_match, std::string_view if_modified_since,
                 std::string_view etag, std::string_view last_modified) {
  if (!if_none_match.empty()) return EtagMatches(if_none_match, etag);
  if (if_modified_since.empty() || last_modified.empty()) return false;
  auto since = http::ParseHttpDate(if_modified_since);
  auto modified = http::ParseHttpDate(last_modified);
  return since && modified && *modified <= *since;
}

}  // namespace goblin::gateway::policy
