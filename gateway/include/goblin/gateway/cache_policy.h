// Cache policy of the HTTP mirror, as pure functions over parsed messages (no I/O, no
// state), so every rule is unit-tested in process: whether an origin response may be
// stored and for how long (a shared cache's view of RFC 9111, as Goblin implements it
// today), and whether a conditional request is answered 304 from what is stored.
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

#include "goblin/gateway/http.h"

namespace goblin::gateway::policy {

struct Storability {
  bool store = false;
  int64_t ttl_seconds = 0;
  std::string_view why_not;  // when !store: the rule that said no (for logs and tests)
};

// A response is stored when it is a 200 without no-store, private, no-cache or Set-Cookie,
// and its freshness lifetime is positive: s-maxage, else max-age, else Expires minus Date
// (or minus `now` without a usable Date), else `default_ttl`.
Storability Decide(const http::Response& r, int64_t default_ttl, int64_t now_unix_seconds);

// If-None-Match (weak comparison; "*" matches anything stored) against the stored ETag;
// without If-None-Match, If-Modified-Since against the stored Last-Modified. True: 304.
bool NotModified(std::string_view if_none_match, std::string_view if_modified_since,
                 std::string_view etag, std::string_view last_modified);

}  // namespace goblin::gateway::policy
