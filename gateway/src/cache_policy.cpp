#include "goblin/gateway/cache_policy.h"

#include <algorithm>

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

StaleWindows Windows(const http::CacheControl& cc, int64_t grace) {
  StaleWindows w;
  if (cc.must_revalidate) return w;
  const int64_t otherwise = cc.no_cache ? 0 : std::max<int64_t>(grace, 0);
  w.grace_seconds = cc.stale_while_revalidate.value_or(otherwise);
  w.if_error_seconds = cc.stale_if_error.value_or(otherwise);
  return w;
}

Storability Decide(const http::Response& r, int64_t default_ttl, int64_t now_unix_seconds,
                   int64_t keep_seconds, int64_t grace_seconds) {
  Storability s;
  auto cc = http::ParseCacheControl(r.Get("cache-control"));
  bool vary_any = false;  // Vary: * (in any Vary field)
  for (const http::Header& h : r.headers) {
    if (http::IEquals(h.name, "vary") && http::HasToken(h.value, "*")) vary_any = true;
  }
  if (r.status != 200) {
    s.why_not = "status is not 200";
  } else if (cc.no_store) {
    s.why_not = "Cache-Control: no-store";
  } else if (cc.is_private) {
    s.why_not = "Cache-Control: private";
  } else if (!r.Get("set-cookie").empty()) {
    s.why_not = "Set-Cookie";
  } else if (vary_any) {
    s.why_not = "Vary: *";
  }
  int64_t ttl = default_ttl;
  if (cc.no_cache) {
    ttl = 0;  // stored, revalidated at every use
  } else if (cc.s_maxage) {
    ttl = *cc.s_maxage;
  } else if (cc.max_age) {
    ttl = *cc.max_age;
  } else if (auto exp = http::ParseHttpDate(r.Get("expires"))) {
    auto date = http::ParseHttpDate(r.Get("date"));
    ttl = *exp - (date ? *date : now_unix_seconds);
  } else if (!r.Get("expires").empty()) {
    ttl = 0;  // an unparseable Expires means "already expired" (RFC 9111 5.3)
  }
  s.ttl_seconds = std::max<int64_t>(ttl, 0);
  const bool validator = !r.Get("etag").empty() || !r.Get("last-modified").empty();
  const StaleWindows w = Windows(cc, grace_seconds);
  s.keep_seconds = std::max({validator ? std::max<int64_t>(keep_seconds, 0) : int64_t{0},
                             w.grace_seconds, w.if_error_seconds});
  if (s.why_not.empty() && s.ttl_seconds + s.keep_seconds <= 0) {
    s.why_not = cc.no_cache ? "Cache-Control: no-cache without a validator or --keep"
                            : "no freshness lifetime";
  }
  s.store = s.why_not.empty();
  return s;
}

namespace {
uint64_t ParseMs(std::string_view v) {
  uint64_t until = 0;
  for (char ch : v) {
    if (ch < '0' || ch > '9' || until > UINT64_MAX / 10 - 10) return 0;  // (unreadable: stale)
    until = until * 10 + static_cast<uint64_t>(ch - '0');
  }
  return until;
}
}  // namespace

uint64_t FreshUntilMs(std::string_view meta) {
  uint64_t until = UINT64_MAX;
  http::ForEachHeaderLine(meta, [&](std::string_view n, std::string_view v) {
    if (until == UINT64_MAX && http::IEquals(n, kFreshUntil)) until = ParseMs(v);
  });
  return until;
}

Freshness Judge(std::string_view meta, uint64_t now_unix_ms, int64_t grace, bool soft_purged) {
  Freshness f;
  uint64_t until = UINT64_MAX;
  std::string_view cache_control;
  http::ForEachHeaderLine(meta, [&](std::string_view n, std::string_view v) {
    if (cache_control.empty() && http::IEquals(n, "cache-control")) {
      cache_control = v;
    } else if (until == UINT64_MAX && http::IEquals(n, kFreshUntil)) {
      until = ParseMs(v);
    }
  });
  const bool expired = now_unix_ms >= until;
  if (!soft_purged && !expired) return f;
  f.stale = true;
  f.stale_ms = expired ? now_unix_ms - until : 0;
  f.windows = Windows(http::ParseCacheControl(cache_control), grace);
  return f;
}

std::string MergeNotModified(std::string_view stored, const http::Response& not_modified,
                             bool (*end_to_end)(std::string_view name)) {
  std::string out;
  out.reserve(stored.size() + 128);
  auto in_304 = [&](std::string_view name) {
    for (const http::Header& h : not_modified.headers) {
      if (http::IEquals(h.name, name)) return true;
    }
    return false;
  };
  auto add = [&](std::string_view n, std::string_view v) {
    out.append(n);
    out.append(": ");
    out.append(v);
    out.append("\r\n");
  };
  http::ForEachHeaderLine(stored, [&](std::string_view n, std::string_view v) {
    if (end_to_end(n) && !in_304(n)) add(n, v);
  });
  for (const http::Header& h : not_modified.headers) {
    if (end_to_end(h.name)) add(h.name, h.value);
  }
  return out;
}

namespace {
// Calls fn(word) for each word of `v` (separated by spaces, tabs or commas).
template <typename Fn>
void ForEachWord(std::string_view v, Fn&& fn) {
  while (!v.empty()) {
    const size_t start = v.find_first_not_of(" \t,");
    if (start == std::string_view::npos) break;
    v.remove_prefix(start);
    const size_t end = v.find_first_of(" \t,");
    fn(v.substr(0, end));
    if (end == std::string_view::npos) break;
    v.remove_prefix(end);
  }
}
}  // namespace

std::string SurrogateKeys(const http::Response& r) {
  std::vector<std::string_view> tags;
  for (const http::Header& h : r.headers) {
    if (!http::IEquals(h.name, "surrogate-key") && !http::IEquals(h.name, "xkey")) continue;
    ForEachWord(h.value, [&](std::string_view w) {
      if (tags.size() < kMaxTags && w.size() <= kMaxTagBytes &&
          std::find(tags.begin(), tags.end(), w) == tags.end())
        tags.push_back(w);
    });
  }
  std::string out;
  for (std::string_view t : tags) {
    if (!out.empty()) out.push_back(' ');
    out.append(t);
  }
  return out;
}

std::vector<std::string> PurgeTags(std::string_view value) {
  std::vector<std::string> tags;
  ForEachWord(value, [&](std::string_view w) {
    if (tags.size() < kMaxTags && w.size() <= kMaxTagBytes &&
        std::find(tags.begin(), tags.end(), w) == tags.end())
      tags.emplace_back(w);
  });
  return tags;
}

std::string ConditionalLines(std::string_view stored) {
  std::string out;
  http::ForEachHeaderLine(stored, [&](std::string_view n, std::string_view v) {
    if (http::IEquals(n, "etag")) {
      out += "If-None-Match: ";
    } else if (http::IEquals(n, "last-modified")) {
      out += "If-Modified-Since: ";
    } else {
      return;
    }
    out.append(v);
    out += "\r\n";
  });
  return out;
}

bool NotModified(std::string_view if_none_match, std::string_view if_modified_since,
                 std::string_view etag, std::string_view last_modified) {
  if (!if_none_match.empty()) return EtagMatches(if_none_match, etag);
  if (if_modified_since.empty() || last_modified.empty()) return false;
  auto since = http::ParseHttpDate(if_modified_since);
  auto modified = http::ParseHttpDate(last_modified);
  return since && modified && *modified <= *since;
}

void AppendAcceptEncoding(std::string_view value, std::string* out) {
  static constexpr std::string_view kCodings[] = {"br", "deflate", "gzip", "zstd"};
  bool accepted[std::size(kCodings)] = {};
  while (!value.empty()) {
    const size_t comma = value.find(',');
    std::string_view item = value.substr(0, comma);
    value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
    std::string_view params;
    if (const size_t semi = item.find(';'); semi != std::string_view::npos) {
      params = item.substr(semi + 1);
      item = item.substr(0, semi);
    }
    auto trim = [](std::string_view t) {
      while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
      while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
      return t;
    };
    item = trim(item);
    params = trim(params);
    // q=0 (q=0.0, q=0.000) refuses the coding.
    bool refused = false;
    if (params.size() >= 3 && (params[0] == 'q' || params[0] == 'Q') && params[1] == '=') {
      std::string_view q = params.substr(2);
      refused =
          !q.empty() && q.front() == '0' && q.find_first_not_of("0.", 1) == std::string_view::npos;
    }
    for (size_t i = 0; i < std::size(kCodings); ++i) {
      if (http::IEquals(item, kCodings[i])) accepted[i] = !refused;
    }
  }
  bool first = true;
  for (size_t i = 0; i < std::size(kCodings); ++i) {
    if (!accepted[i]) continue;
    if (!first) out->push_back(',');
    out->append(kCodings[i]);
    first = false;
  }
}

void BuildCacheKey(std::string* key, std::string_view host, std::string_view target,
                   const CacheKeyOptions& o, const http::Request& r,
                   std::vector<std::string_view>* scratch) {
  key->assign(host);
  const size_t q = target.find('?');
  if (q == std::string_view::npos ||
      (o.query == CacheKeyOptions::Query::kKeep && o.strip.empty())) {
    key->append(target);
  } else {
    key->append(target.substr(0, q));
    if (o.query != CacheKeyOptions::Query::kIgnore) {
      auto stripped = [&](std::string_view name) {
        for (const std::string& s : o.strip) {
          if (!s.empty() && s.back() == '*'
                  ? name.starts_with(std::string_view(s).substr(0, s.size() - 1))
                  : name == s)
            return true;
        }
        return false;
      };
      scratch->clear();
      std::string_view query = target.substr(q + 1);
      while (!query.empty()) {
        const size_t amp = query.find('&');
        const std::string_view param = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
        if (param.empty() || stripped(param.substr(0, param.find('=')))) continue;
        scratch->push_back(param);
      }
      if (o.query == CacheKeyOptions::Query::kSort) std::sort(scratch->begin(), scratch->end());
      for (size_t i = 0; i < scratch->size(); ++i) {
        key->push_back(i == 0 ? '?' : '&');
        key->append((*scratch)[i]);
      }
    }
  }
  // The headers after a NUL: the part before it names the object (its shard, and the
  // group of variants the core bounds: ShardOf, kPutVariant).
  if (!o.headers.empty()) key->push_back('\0');
  for (const std::string& h : o.headers) {
    key->push_back('#');
    key->append(h);
    key->push_back('=');
    if (h == "accept-encoding") {
      AppendAcceptEncoding(r.Get(h), key);  // (straight into the key: no copy per request)
    } else {
      key->append(r.Get(h));
    }
  }
}

}  // namespace goblin::gateway::policy
