// The mirror's cache rules in process: what is stored and for how long, and when a
// conditional request is a 304, and the cache key a request maps to.
#include "goblin/gateway/cache_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace goblin::gateway {
namespace {

constexpr int64_t kNow = 1'700'000'000;  // (Tue, 14 Nov 2023 22:13:20 GMT)

// A parsed origin response head (the views point into `text`, kept alive by the caller).
http::Response Head(const std::string& text) {
  http::Response r;
  EXPECT_EQ(http::ParseResponse(text, http::Limits{}, false, &r), http::Parse::kComplete) << text;
  return r;
}

TEST(CachePolicy, A200WithoutDirectivesTakesTheDefaultTtl) {
  std::string t = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
  auto v = policy::Decide(Head(t), 120, kNow);
  EXPECT_TRUE(v.store);
  EXPECT_EQ(v.ttl_seconds, 120);
}

TEST(CachePolicy, SMaxageWinsOverMaxAgeWhichWinsOverExpires) {
  std::string a =
      "HTTP/1.1 200 OK\r\nCache-Control: max-age=60, s-maxage=600\r\nExpires: Wed, 15 Nov 2023 "
      "00:00:00 GMT\r\nContent-Length: 0\r\n\r\n";
  EXPECT_EQ(policy::Decide(Head(a), 120, kNow).ttl_seconds, 600);
  std::string b =
      "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nExpires: Wed, 15 Nov 2023 00:00:00 "
      "GMT\r\nContent-Length: 0\r\n\r\n";
  EXPECT_EQ(policy::Decide(Head(b), 120, kNow).ttl_seconds, 60);
  // Expires minus Date; without a Date, minus now.
  std::string c =
      "HTTP/1.1 200 OK\r\nDate: Tue, 14 Nov 2023 23:00:00 GMT\r\nExpires: Wed, 15 Nov 2023 "
      "00:00:00 "
      "GMT\r\nContent-Length: 0\r\n\r\n";
  EXPECT_EQ(policy::Decide(Head(c), 120, kNow).ttl_seconds, 3600);
  std::string d =
      "HTTP/1.1 200 OK\r\nExpires: Wed, 15 Nov 2023 00:00:00 GMT\r\nContent-Length: 0\r\n\r\n";
  EXPECT_EQ(policy::Decide(Head(d), 120, kNow).ttl_seconds, 6400);
}

TEST(CachePolicy, WhatIsNeverStored) {
  struct Case {
    const char* head;
    const char* why;
  } cases[] = {
      {"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", "status is not 200"},
      {"HTTP/1.1 206 Partial Content\r\nContent-Length: 0\r\n\r\n", "status is not 200"},
      {"HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: 0\r\n\r\n", "no-store"},
      {"HTTP/1.1 200 OK\r\nCache-Control: private, max-age=60\r\nContent-Length: 0\r\n\r\n",
       "private"},
      {"HTTP/1.1 200 OK\r\nCache-Control: no-cache\r\nContent-Length: 0\r\n\r\n", "no-cache"},
      {"HTTP/1.1 200 OK\r\nSet-Cookie: a=b\r\nContent-Length: 0\r\n\r\n", "Set-Cookie"},
      {"HTTP/1.1 200 OK\r\nCache-Control: max-age=0\r\nContent-Length: 0\r\n\r\n", "lifetime"},
      // An Expires that is not a date means already expired (RFC 9111 5.3), "0" included.
      {"HTTP/1.1 200 OK\r\nExpires: 0\r\nContent-Length: 0\r\n\r\n", "lifetime"},
      {"HTTP/1.1 200 OK\r\nExpires: Mon, 13 Nov 2023 00:00:00 GMT\r\nContent-Length: 0\r\n\r\n",
       "lifetime"},
  };
  for (const Case& c : cases) {
    std::string t = c.head;
    auto v = policy::Decide(Head(t), 120, kNow);
    EXPECT_FALSE(v.store) << c.head;
    EXPECT_NE(std::string(v.why_not).find(c.why), std::string::npos) << c.head << v.why_not;
  }
  // max-age overrides a bad Expires.
  std::string t =
      "HTTP/1.1 200 OK\r\nExpires: 0\r\nCache-Control: max-age=5\r\nContent-Length: 0\r\n\r\n";
  EXPECT_TRUE(policy::Decide(Head(t), 120, kNow).store);
}

TEST(CachePolicy, ObjectsWithAValidatorAreKeptForRevalidation) {
  // no-cache with an ETag: stored, fresh for 0 s (revalidated at every use), kept --keep.
  std::string a = "HTTP/1.1 200 OK\r\nCache-Control: no-cache\r\nETag: \"x\"\r\n\r\n";
  auto v = policy::Decide(Head(a), 120, kNow, 600);
  EXPECT_TRUE(v.store);
  EXPECT_EQ(v.ttl_seconds, 0);
  EXPECT_EQ(v.keep_seconds, 600);
  EXPECT_FALSE(policy::Decide(Head(a), 120, kNow, 0).store);  // (nothing to keep it for)
  // max-age=0 with a Last-Modified: the same.
  std::string b =
      "HTTP/1.1 200 OK\r\nCache-Control: max-age=0\r\nLast-Modified: Tue, 14 Nov 2023 "
      "00:00:00 GMT\r\n\r\n";
  v = policy::Decide(Head(b), 120, kNow, 30);
  EXPECT_TRUE(v.store);
  EXPECT_EQ(v.ttl_seconds, 0);
  EXPECT_EQ(v.keep_seconds, 30);
  // Without a validator nothing is kept past freshness; stored only while fresh.
  std::string c = "HTTP/1.1 200 OK\r\nCache-Control: max-age=5\r\n\r\n";
  v = policy::Decide(Head(c), 120, kNow, 600);
  EXPECT_TRUE(v.store);
  EXPECT_EQ(v.ttl_seconds, 5);
  EXPECT_EQ(v.keep_seconds, 0);
  std::string d = "HTTP/1.1 200 OK\r\nCache-Control: no-cache\r\n\r\n";
  EXPECT_FALSE(policy::Decide(Head(d), 120, kNow, 600).store);
  // no-store and private still win.
  std::string e = "HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nETag: \"x\"\r\n\r\n";
  EXPECT_FALSE(policy::Decide(Head(e), 120, kNow, 600).store);
}

TEST(CachePolicy, StaleMergeAndConditionalLines) {
  const std::string meta =
      "Content-Type: text/plain\r\nETag: \"v1\"\r\nLast-Modified: Tue, 14 Nov 2023 00:00:00 "
      "GMT\r\nCache-Control: max-age=1\r\nX-Goblin-Fresh-Until: 1000\r\n";
  EXPECT_FALSE(policy::Judge(meta, 999, 0).stale);
  EXPECT_TRUE(policy::Judge(meta, 1000, 0).stale);
  EXPECT_EQ(policy::FreshUntilMs(meta), 1000u);
  EXPECT_FALSE(policy::Judge("ETag: \"v1\"\r\n", UINT64_MAX - 1, 0).stale);  // (no line)
  EXPECT_EQ(policy::FreshUntilMs("ETag: \"v1\"\r\n"), UINT64_MAX);
  EXPECT_TRUE(policy::Judge("x-goblin-fresh-until: junk\r\n", 1, 0).stale);  // (unreadable)
  EXPECT_EQ(policy::FreshUntilMs("x-goblin-fresh-until: 12x\r\n"), 0u);
  EXPECT_EQ(policy::ConditionalLines(meta),
            "If-None-Match: \"v1\"\r\nIf-Modified-Since: Tue, 14 Nov 2023 00:00:00 GMT\r\n");
  EXPECT_EQ(policy::ConditionalLines("Content-Type: a\r\n"), "");
  // A 304's fields replace the stored ones of the same name; the others stay; framing and
  // our own line are neither kept nor taken.
  std::string nm =
      "HTTP/1.1 304 Not Modified\r\nCache-Control: max-age=60\r\nETag: \"v1\"\r\nX-New: "
      "1\r\nContent-Length: 5\r\nX-Goblin-Fresh-Until: 99\r\n\r\n";
  auto end_to_end = [](std::string_view n) {
    return !http::IEquals(n, "content-length") && !http::IEquals(n, policy::kFreshUntil);
  };
  EXPECT_EQ(policy::MergeNotModified(meta, Head(nm), +end_to_end),
            "Content-Type: text/plain\r\nLast-Modified: Tue, 14 Nov 2023 00:00:00 GMT\r\n"
            "Cache-Control: max-age=60\r\nETag: \"v1\"\r\nX-New: 1\r\n");
}

TEST(CachePolicy, StaleWindowsFromDirectivesAndGrace) {
  auto w = policy::Windows(http::ParseCacheControl("max-age=5"), 10);
  EXPECT_EQ(w.grace_seconds, 10);
  EXPECT_EQ(w.if_error_seconds, 10);
  w = policy::Windows(http::ParseCacheControl("max-age=5, stale-while-revalidate=30"), 10);
  EXPECT_EQ(w.grace_seconds, 30);
  EXPECT_EQ(w.if_error_seconds, 10);
  w = policy::Windows(http::ParseCacheControl("max-age=5, stale-if-error=600"), 0);
  EXPECT_EQ(w.grace_seconds, 0);
  EXPECT_EQ(w.if_error_seconds, 600);
  w = policy::Windows(http::ParseCacheControl("max-age=5, must-revalidate, stale-if-error=9"), 10);
  EXPECT_EQ(w.grace_seconds, 0);
  EXPECT_EQ(w.if_error_seconds, 0);
  w = policy::Windows(http::ParseCacheControl("proxy-revalidate"), 10);
  EXPECT_EQ(w.grace_seconds + w.if_error_seconds, 0);
  w = policy::Windows(http::ParseCacheControl("no-cache, stale-if-error=7"), 10);
  EXPECT_EQ(w.grace_seconds, 0);  // (no-cache: only what it says)
  EXPECT_EQ(w.if_error_seconds, 7);
  // The core keeps an object for the longest of --keep (with a validator) and its windows.
  std::string a = "HTTP/1.1 200 OK\r\nCache-Control: max-age=5, stale-if-error=900\r\n\r\n";
  auto v = policy::Decide(Head(a), 120, kNow, 600, 10);
  EXPECT_TRUE(v.store);
  EXPECT_EQ(v.ttl_seconds, 5);
  EXPECT_EQ(v.keep_seconds, 900);
  std::string b = "HTTP/1.1 200 OK\r\nCache-Control: max-age=5\r\nETag: \"e\"\r\n\r\n";
  EXPECT_EQ(policy::Decide(Head(b), 120, kNow, 600, 10).keep_seconds, 600);
  EXPECT_EQ(policy::Decide(Head(b), 120, kNow, 0, 10).keep_seconds, 10);
  // Judged from the stored lines: fresh, in grace, in stale-if-error, past both.
  const std::string meta =
      "Cache-Control: max-age=5, stale-while-revalidate=2, stale-if-error=4\r\n"
      "x-goblin-fresh-until: 10000\r\n";
  EXPECT_FALSE(policy::Judge(meta, 9999, 0).stale);
  auto f = policy::Judge(meta, 11000, 0);
  EXPECT_TRUE(f.stale && f.in_grace() && f.if_error());
  EXPECT_EQ(f.stale_ms, 1000u);
  EXPECT_EQ(f.if_error_until(11000), 14000u);
  f = policy::Judge(meta, 13000, 0);
  EXPECT_FALSE(f.in_grace());
  EXPECT_TRUE(f.if_error());
  f = policy::Judge(meta, 14000, 0);
  EXPECT_FALSE(f.in_grace() || f.if_error());
  EXPECT_EQ(f.if_error_until(14000), 0u);
  // Soft-purged: stale from now (with its windows), whatever its freshness says.
  f = policy::Judge(meta, 5000, 0, /*soft_purged=*/true);
  EXPECT_TRUE(f.stale && f.in_grace());
  EXPECT_EQ(f.stale_ms, 0u);
  EXPECT_TRUE(policy::Judge("Content-Type: a\r\n", 5000, 3, true).in_grace());
}

TEST(CachePolicy, SurrogateKeysAndPurgeTags) {
  std::string a =
      "HTTP/1.1 200 OK\r\nSurrogate-Key: red  blue,red\r\nxkey: green\r\nXKey: blue "
      "white\r\n\r\n";
  EXPECT_EQ(policy::SurrogateKeys(Head(a)), "red blue green white");
  EXPECT_EQ(policy::SurrogateKeys(Head("HTTP/1.1 200 OK\r\n\r\n")), "");
  std::string many = "HTTP/1.1 200 OK\r\nSurrogate-Key:";
  for (int i = 0; i < 100; ++i) many += " t" + std::to_string(i);
  many += " " + std::string(300, 'x') + "\r\n\r\n";
  const std::string tags = policy::SurrogateKeys(Head(many));
  EXPECT_EQ(std::count(tags.begin(), tags.end(), ' ') + 1, 64);  // (kMaxTags; too long: out)
  EXPECT_EQ(policy::PurgeTags(" a,b  a\tc "), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(policy::PurgeTags(" , ").empty());
}

TEST(CachePolicy, ConditionalRequests) {
  const std::string etag = "\"abc\"", lm = "Tue, 14 Nov 2023 22:00:00 GMT";
  EXPECT_TRUE(policy::NotModified("\"abc\"", "", etag, lm));
  EXPECT_TRUE(policy::NotModified("W/\"abc\"", "", etag, lm));  // weak comparison
  EXPECT_TRUE(policy::NotModified("\"x\", \"abc\"", "", etag, lm));
  EXPECT_TRUE(policy::NotModified("*", "", etag, lm));
  EXPECT_FALSE(policy::NotModified("\"other\"", "", etag, lm));
  EXPECT_FALSE(policy::NotModified("\"abc\"", "", "", lm));  // nothing stored to match
  // If-None-Match decides alone when present (RFC 9110 13.2.2).
  EXPECT_FALSE(policy::NotModified("\"other\"", "Wed, 15 Nov 2023 00:00:00 GMT", etag, lm));
  EXPECT_TRUE(policy::NotModified("", "Wed, 15 Nov 2023 00:00:00 GMT", etag, lm));
  EXPECT_TRUE(policy::NotModified("", lm, etag, lm));  // equal: not modified since
  EXPECT_FALSE(policy::NotModified("", "Tue, 14 Nov 2023 21:00:00 GMT", etag, lm));
  EXPECT_FALSE(policy::NotModified("", "not a date", etag, lm));
  EXPECT_FALSE(policy::NotModified("", "Wed, 15 Nov 2023 00:00:00 GMT", etag, ""));
}

// The cache key of a request with `target` (and `extra` header lines) under `o`.
std::string Key(const policy::CacheKeyOptions& o, const std::string& target,
                const std::string& extra = "") {
  const std::string text = "GET " + target + " HTTP/1.1\r\nHost: h\r\n" + extra + "\r\n";
  http::Request r;
  int status = 0;
  EXPECT_EQ(http::ParseRequest(text, http::Limits{}, &r, &status), http::Parse::kComplete);
  std::string key;
  std::vector<std::string_view> scratch;
  policy::BuildCacheKey(&key, "h", r.target, o, r, &scratch);
  return key;
}

TEST(CacheKey, HostAndUrlNormalizedAsConfigured) {
  using Q = policy::CacheKeyOptions::Query;
  policy::CacheKeyOptions keep;
  EXPECT_EQ(Key(keep, "/a?b=2&a=1"), "h/a?b=2&a=1");
  EXPECT_EQ(Key(keep, "/a"), "h/a");
  policy::CacheKeyOptions sort;
  sort.query = Q::kSort;
  EXPECT_EQ(Key(sort, "/a?b=2&a=1&a=0"), "h/a?a=0&a=1&b=2");
  EXPECT_EQ(Key(sort, "/a?&&b&a="), "h/a?a=&b");
  EXPECT_EQ(Key(sort, "/a?"), "h/a");
  EXPECT_EQ(Key(sort, "/a?x=1?y"), "h/a?x=1?y");
  policy::CacheKeyOptions ignore;
  ignore.query = Q::kIgnore;
  EXPECT_EQ(Key(ignore, "/a?b=2&a=1"), "h/a");
  policy::CacheKeyOptions strip;
  strip.strip = {"utm_*", "fbclid"};
  EXPECT_EQ(Key(strip, "/a?utm_source=x&b=2&fbclid=1&utm=3&a=1"), "h/a?b=2&utm=3&a=1");
  EXPECT_EQ(Key(strip, "/a?utm_source=x&fbclid"), "h/a");
  strip.query = Q::kSort;
  EXPECT_EQ(Key(strip, "/a?utm_source=x&b=2&a=1"), "h/a?a=1&b=2");
  policy::CacheKeyOptions header;
  header.headers = {"x-device", "accept-language"};
  EXPECT_EQ(Key(header, "/a?q", "X-Device: mobile\r\n"),
            std::string("h/a?q\0#x-device=mobile#accept-language=", 39));
  EXPECT_EQ(Key(header, "/a"), std::string("h/a\0#x-device=#accept-language=", 31));
}

TEST(CachePolicy, VaryStarIsNeverStoredOtherVaryIs) {
  const std::string star =
      "HTTP/1.1 200 OK\r\nVary: Accept-Encoding, *\r\nContent-Length: 0\r\n\r\n";
  EXPECT_FALSE(policy::Decide(Head(star), 120, kNow).store);
  EXPECT_EQ(policy::Decide(Head(star), 120, kNow).why_not, "Vary: *");
  const std::string ae =
      "HTTP/1.1 200 OK\r\nVary: Accept-Encoding\r\nVary: X-Device\r\n"
      "Content-Length: 0\r\n\r\n";
  EXPECT_TRUE(policy::Decide(Head(ae), 120, kNow).store);
}

TEST(CacheKey, AcceptEncodingIsNormalized) {
  std::string out;
  for (const auto& [in, want] : std::vector<std::pair<std::string, std::string>>{
           {"gzip, deflate, br", "br,deflate,gzip"},
           {"br;q=1.0,GZIP , deflate", "br,deflate,gzip"},
           {"gzip;q=0, br", "br"},
           {"gzip;q=0.000", ""},
           {"gzip;q=0.5", "gzip"},
           {"identity, *", ""},
           {"", ""},
           {"zstd,,gzip", "gzip,zstd"}}) {
    out = "x";
    policy::AppendAcceptEncoding(in, &out);
    out.erase(0, 1);
    EXPECT_EQ(out, want) << in;
  }
  policy::CacheKeyOptions o;
  o.headers = {"accept-encoding"};
  EXPECT_EQ(Key(o, "/a", "Accept-Encoding: gzip, br\r\n"),
            std::string("h/a\0#accept-encoding=br,gzip", 28));
}

}  // namespace
}  // namespace goblin::gateway
