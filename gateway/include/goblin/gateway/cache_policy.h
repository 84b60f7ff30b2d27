// Cache policy of the HTTP mirror, as pure functions over parsed messages (no I/O, no
// state), so every rule is unit-tested in process: whether an origin response may be
// stored and for how long (a shared cache's view of RFC 9111, as Goblin implements it
// today), whether a conditional request is answered 304 from what is stored, and the cache
// key a request maps to.
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "goblin/gateway/http.h"

namespace goblin::gateway::policy {

struct Storability {
  bool store = false;
  int64_t ttl_seconds = 0;
  std::string_view why_not;  // when !store: the rule that said no (for logs and tests)
};

// A response is stored when it is a 200 without no-store, private, no-cache, Set-Cookie or
// "Vary: *", and its freshness lifetime is positive: s-maxage, else max-age, else Expires
// minus Date (or minus `now` without a usable Date), else `default_ttl`. Other Vary fields
// do not stop it: the origin is asked with only the request headers the cache key holds
// (--cache-key-header), so a response varies only on those, and each of their values is
// an object of its own.
Storability Decide(const http::Response& r, int64_t default_ttl, int64_t now_unix_seconds);

// If-None-Match (weak comparison; "*" matches anything stored) against the stored ETag;
// without If-None-Match, If-Modified-Since against the stored Last-Modified. True: 304.
bool NotModified(std::string_view if_none_match, std::string_view if_modified_since,
                 std::string_view etag, std::string_view last_modified);

// The cache key: Host + URL (Varnish's default hash), normalized as configured
// (--cache-key-query, --cache-key-strip, --cache-key-header). Only the key changes: the
// origin is asked for the URL as the client sent it (as nginx's proxy_cache_key).
struct CacheKeyOptions {
  enum class Query { kKeep, kSort, kIgnore };
  Query query = Query::kKeep;        // kSort: parameters in byte order; kIgnore: no query
  std::vector<std::string> strip;    // parameters left out, by name ("utm_*": a prefix)
  std::vector<std::string> headers;  // request headers (lower-case names) whose values count
  bool plain() const { return query == Query::kKeep && strip.empty() && headers.empty(); }
};
// `host` is lower-cased by the caller, `target` the request-target. With kSort or strip,
// empty parameters ("a&&b") are dropped; a query left empty drops its '?'. Each header
// adds "#name=value" ('#' never appears in a request-target; an absent header adds
// "#name="); accept-encoding's value is normalized (AppendAcceptEncoding). `scratch`
// keeps its capacity between calls.
// Appends to `out` the content codings an Accept-Encoding accepts, of br, deflate, gzip and
// zstd (q > 0), in that order, comma-separated (nothing for none): "gzip, deflate, br" and
// "br;q=1,gzip, deflate" are one variant.
void AppendAcceptEncoding(std::string_view value, std::string* out);
void BuildCacheKey(std::string* key, std::string_view host, std::string_view target,
                   const CacheKeyOptions& o, const http::Request& r,
                   std::vector<std::string_view>* scratch);

}  // namespace goblin::gateway::policy
