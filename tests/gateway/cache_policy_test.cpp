// The mirror's cache rules in process: what is stored and for how long, and when a
// conditional request is a 304, and the cache key a request maps to.
#include "goblin/gateway/cache_policy.h"

#include <gtest/gtest.h>

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
  EXPECT_EQ(Key(header, "/a?q", "X-Device: mobile\r\n"), "h/a?q#x-device=mobile#accept-language=");
  EXPECT_EQ(Key(header, "/a"), "h/a#x-device=#accept-language=");
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
  EXPECT_EQ(Key(o, "/a", "Accept-Encoding: gzip, br\r\n"), "h/a#accept-encoding=br,gzip");
}

}  // namespace
}  // namespace goblin::gateway
