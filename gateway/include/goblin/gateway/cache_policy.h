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
  int64_t ttl_seconds = 0;  // fresh for this long (0: revalidated at every use)
  // Then kept this long: for revalidation (--keep, with a validator) and to be served stale
  // (its StaleWindows), whichever is longer.
  int64_t keep_seconds = 0;
  std::string_view why_not;  // when !store: the rule that said no (for logs and tests)
};

// How long past its freshness a response may be served stale: while it is revalidated in
// the background (stale-while-revalidate, else `grace`) and when the origin fails or is
// sick (stale-if-error, else `grace`). must-revalidate / proxy-revalidate: never; no-cache:
// only what the response's own directives allow.
struct StaleWindows {
  int64_t grace_seconds = 0, if_error_seconds = 0;
};
StaleWindows Windows(const http::CacheControl& cc, int64_t grace);

// A response is stored when it is a 200 without no-store, private, Set-Cookie or
// "Vary: *", and it is fresh for a while or can be revalidated. Its freshness lifetime:
// s-maxage, else max-age, else Expires minus Date (or minus `now` without a usable Date),
// else `default_ttl`; no-cache makes it 0 (stored, but revalidated at every use). A
// response with a validator (ETag or Last-Modified) is kept `keep_seconds` past its
// freshness, to be revalidated with a conditional request (--keep) rather than fetched
// again; one without is stored only while fresh. Other Vary fields do not stop it: the
// origin is asked with only the request headers the cache key holds (--cache-key-header),
// so a response varies only on those, and each of their values is an object of its own.
Storability Decide(const http::Response& r, int64_t default_ttl, int64_t now_unix_seconds,
                   int64_t keep_seconds = 0, int64_t grace_seconds = 0);

// Revalidation. A stored object's metadata carries the end of its freshness as a line of
// its own (kFreshUntil: unix milliseconds), never sent to clients nor taken from an origin.
inline constexpr std::string_view kFreshUntil = "x-goblin-fresh-until";
// What a stored object is at `now_unix_ms`: fresh, or stale for how long and what its
// windows allow (read from its stored Cache-Control with `grace`). No freshness line: fresh.
struct Freshness {
  bool stale = false;
  uint64_t stale_ms = 0;  // how long past its freshness
  StaleWindows windows;
  bool in_grace() const { return stale && stale_ms < ms(windows.grace_seconds); }
  bool if_error() const { return stale && stale_ms < ms(windows.if_error_seconds); }
  // Unix ms until which an origin error may be answered with it (0: not at all).
  uint64_t if_error_until(uint64_t now_unix_ms) const {
    return if_error() ? now_unix_ms + ms(windows.if_error_seconds) - stale_ms : 0;
  }

 private:
  static uint64_t ms(int64_t s) { return static_cast<uint64_t>(s) * 1000; }
};
// `soft_purged`: marked stale by a soft purge: stale from now if it is not already.
Freshness Judge(std::string_view meta, uint64_t now_unix_ms, int64_t grace,
                bool soft_purged = false);
// The freshness end a stored head names (unix ms; UINT64_MAX: no such line, always fresh; 0:
// unreadable, stale). Local hits read it once per head they learn.
uint64_t FreshUntilMs(std::string_view meta);
// The stored header lines ("Name: value\r\n") updated by a 304 (RFC 9111 4.3.4): each
// field the 304 carries replaces the stored fields of that name, the others stay; fields
// `end_to_end` rejects (hop-by-hop, framing, our own) are neither kept nor taken.
std::string MergeNotModified(std::string_view stored, const http::Response& not_modified,
                             bool (*end_to_end)(std::string_view name));
// Tags of a response (surrogate keys, for purge by tag): the words of its Surrogate-Key
// (Fastly) and xkey (Varnish) fields, separated by spaces or commas, each once, joined by
// single spaces; at most kMaxTags of at most kMaxTagBytes each (the rest ignored).
inline constexpr size_t kMaxTags = 64, kMaxTagBytes = 256;
std::string SurrogateKeys(const http::Response& r);
// The tags a purge request names (X-Purge-Tag or xkey-purge: words as above), one each.
std::vector<std::string> PurgeTags(std::string_view value);

// The conditional request lines for a stored object: If-None-Match with its ETag,
// If-Modified-Since with its Last-Modified (each when stored).
std::string ConditionalLines(std::string_view stored);

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
// "#name="), all of them after one NUL byte: "host/path?q\0#accept-encoding=gzip". The part
// before the NUL names the object, whose variants share its shard and are bounded in
// number by the core (ShardOf, kPutVariant). accept-encoding's value is normalized
// (AppendAcceptEncoding). `scratch` keeps its capacity between calls.
// Appends to `out` the content codings an Accept-Encoding accepts, of br, deflate, gzip and
// zstd (q > 0), in that order, comma-separated (nothing for none): "gzip, deflate, br" and
// "br;q=1,gzip, deflate" are one variant.
void AppendAcceptEncoding(std::string_view value, std::string* out);
void BuildCacheKey(std::string* key, std::string_view host, std::string_view target,
                   const CacheKeyOptions& o, const http::Request& r,
                   std::vector<std::string_view>* scratch);

}  // namespace goblin::gateway::policy
