// Revalidation end to end (goblin-core + goblin-gateway --mirror in front of the test
// origin; --net sync and async; HTTP/1.1 and h2c): an object past its freshness is asked for
// conditionally; a 304 refreshes it in place (new headers and TTL, Age from 0, the same
// bytes, no body from the origin), a 200 replaces it; no-cache objects are stored and
// revalidated at every use; concurrent requests for a stale object share one revalidation
// (across workers); an origin error while revalidating passes through and loses nothing: the
// next request after the origin heals is answered from the refreshed object. Grace: a stale
// object is served at once while one revalidation runs behind (--grace,
// stale-while-revalidate); stale-if-error (and --grace) answers origin errors and a sick
// origin with the stale copy within its window, not after; must-revalidate never. Soft purge
// (X-Purge-Soft: 1, of a URL or a prefix) keeps objects but makes them stale. Purge by tag
// (Surrogate-Key / xkey from the origin; X-Purge-Tag or xkey-purge), hard and soft, and the
// tags after a restart of the core.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>

#include "tests/system/mirror_harness.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;

using test::NetMode;

class Revalidation : public testing::TestWithParam<NetMode>, public test::MirrorHarness {
 protected:
  void SetUp() override {
    if (!test::HaveCurlAndPython()) GTEST_SKIP() << "curl and python3 are needed";
    ASSERT_TRUE(StartCoreAndOrigin("rv-" + test::CurrentTestName()))
        << (core_ ? core_->Output() : std::string());
    rev_ = dir_ + "/rev";
    SetRev("1");
  }
  void TearDown() override { StopAll(); }
  void SetRev(const std::string& v) {
    std::ofstream(rev_, std::ios::trunc) << v;
    // (Last-Modified is the file's mtime, in seconds: a new version must look newer)
    std::filesystem::last_write_time(rev_, std::filesystem::file_time_type::clock::now() +
                                               std::chrono::seconds(++rev_count_ * 10));
  }
  Reply Get(const std::string& path, std::vector<std::string> args = {},
            const std::string& tag = "c") {
    args.push_back(GetParam().curl_protocol());
    return Curl(path, args, tag);
  }
  static std::string Header(const Reply& r, const std::string& name) {
    std::smatch m;
    std::regex re("(?:^|\\n)" + name + ": ([^\\r]*)\\r", std::regex::icase);
    return std::regex_search(r.headers, m, re) ? m[1].str() : "";
  }
  // Conditional requests the origin got for `path`.
  int OriginConditionals(const std::string& path) {
    std::ifstream f(dir_ + "/access.log");
    int n = 0;
    for (std::string line; std::getline(f, line);) {
      if (line.find(" " + path + " ") != std::string::npos && line.ends_with(" cond")) ++n;
    }
    return n;
  }
  // The next request for `path`: answered from the cache after one 304 (byte-exact).
  void ExpectRevalidatedHit(const std::string& path, const std::string& body) {
    Reply r = Get(path);
    ASSERT_EQ(r.code, 200) << r.headers;
    EXPECT_EQ(Header(r, "x-cache"), "HIT");
    EXPECT_EQ(Header(r, "x-validated"), "1");
    EXPECT_TRUE(r.body == body);
  }
  // Asks for `path` every 50 ms (5 s at most) until the answer says the origin validated it
  // once (X-Validated: 1); the last answer.
  Reply UntilValidated(const std::string& path) {
    Reply r;
    for (int i = 0; i < 100 && Header(r, "x-validated") != "1"; ++i) {
      std::this_thread::sleep_for(50ms);
      r = Get(path);
    }
    return r;
  }
  std::string rev_;
  int rev_count_ = 0;
};

TEST_P(Revalidation, A304RefreshesInPlaceAndA200Replaces) {
  StartGateway(GetParam().net, {"--keep", "60s"});
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  const std::string path = "/gen/300K/a?cc=max-age=1&rev=" + rev_;
  const std::string v1 = Origin(path);
  ASSERT_EQ(v1.size(), 300u * 1024);
  Reply r = Get(path);
  ASSERT_EQ(r.code, 200);
  EXPECT_EQ(Header(r, "x-cache"), "MISS");
  EXPECT_TRUE(r.body == v1);
  r = Get(path);
  EXPECT_EQ(Header(r, "x-cache"), "HIT");
  EXPECT_EQ(Header(r, "x-validated"), "");
  EXPECT_EQ(Header(r, "x-goblin-fresh-until"), "");  // (ours, never sent)
  const int before = OriginHits(path);               // (the test's own fetch included)
  std::this_thread::sleep_for(1100ms);
  // Stale: asked conditionally, answered 304: the stored bytes with the 304's headers.
  r = Get(path);
  ASSERT_EQ(r.code, 200) << r.headers;
  EXPECT_EQ(Header(r, "x-cache"), "HIT");
  EXPECT_EQ(Header(r, "x-validated"), "1");
  EXPECT_EQ(Header(r, "age"), "0");
  EXPECT_EQ(Header(r, "x-goblin-fresh-until"), "");
  EXPECT_TRUE(r.body == v1);
  EXPECT_EQ(OriginHits(path), before + 1);
  EXPECT_EQ(OriginConditionals(path), 1);
  // Fresh again for 1 s: a plain hit.
  r = Get(path);
  EXPECT_EQ(Header(r, "x-cache"), "HIT");
  EXPECT_EQ(Header(r, "x-validated"), "1");
  EXPECT_TRUE(r.body == v1);
  EXPECT_EQ(OriginHits(path), before + 1);
  // A conditional client request on a stale object: revalidated, then its own 304.
  const std::string etag = Header(r, "etag");
  ASSERT_FALSE(etag.empty());
  std::this_thread::sleep_for(1100ms);
  r = Get(path, {"-H", "If-None-Match: " + etag});
  EXPECT_EQ(r.code, 304) << r.headers;
  EXPECT_EQ(Header(r, "x-validated"), "2");
  EXPECT_EQ(OriginConditionals(path), 2);
  // A new version at the origin: the conditional request gets a 200, which replaces it.
  SetRev("2");
  const std::string v2 = Origin(path);
  ASSERT_EQ(v2.size(), v1.size());
  ASSERT_FALSE(v2 == v1);
  std::this_thread::sleep_for(1100ms);
  r = Get(path);
  ASSERT_EQ(r.code, 200);
  EXPECT_EQ(Header(r, "x-cache"), "MISS");
  EXPECT_EQ(Header(r, "x-validated"), "");
  EXPECT_TRUE(r.body == v2);
  EXPECT_EQ(OriginConditionals(path), 3);
  r = Get(path);
  EXPECT_EQ(Header(r, "x-cache"), "HIT");
  EXPECT_TRUE(r.body == v2);
  gateway_.reset();  // (its exit line counts them)
}

TEST_P(Revalidation, NoCacheIsStoredAndRevalidatedAtEveryUse) {
  StartGateway(GetParam().net, {"--keep", "60s"});
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  const std::string path = "/gen/70K/n?cc=no-cache&rev=" + rev_;
  const std::string body = Origin(path);
  Reply r = Get(path);
  ASSERT_EQ(r.code, 200);
  EXPECT_EQ(Header(r, "x-cache"), "MISS");
  EXPECT_TRUE(r.body == body);
  for (int i = 1; i <= 3; ++i) {
    r = Get(path);
    ASSERT_EQ(r.code, 200);
    EXPECT_EQ(Header(r, "x-cache"), "HIT");
    EXPECT_EQ(Header(r, "x-validated"), std::to_string(i));
    EXPECT_TRUE(r.body == body);
    EXPECT_EQ(OriginConditionals(path), i);
  }
  // HEAD and a range revalidate too.
  r = Get(path, {"-I"});
  EXPECT_EQ(r.code, 200);
  EXPECT_EQ(Header(r, "content-length"), "71680");
  EXPECT_EQ(OriginConditionals(path), 4);
  r = Get(path, {"-r", "100-199"});
  EXPECT_EQ(r.code, 206);
  EXPECT_TRUE(r.body == body.substr(100, 100));
  // Without --keep a no-cache response is not stored: every request goes to the origin whole.
  StartGateway(GetParam().net, {"--keep", "0"}, "gateway2.log");
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  const std::string other = "/gen/70K/n2?cc=no-cache&rev=" + rev_;
  for (int i = 0; i < 2; ++i) {
    r = Get(other);
    EXPECT_EQ(Header(r, "x-cache"), "MISS");
    EXPECT_TRUE(r.body == Origin(other));
  }
  EXPECT_EQ(OriginConditionals(other), 0);
}

TEST_P(Revalidation, ConcurrentStaleRequestsShareOneRevalidation) {
  StartGateway(GetParam().net, {"--keep", "60s", "--threads", "2"});
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  const std::string path = "/gen/200K/c?cc=max-age=1&slow304=700&rev=" + rev_;
  const std::string body = Origin(path);
  ASSERT_EQ(Get(path).code, 200);
  std::this_thread::sleep_for(1200ms);
  std::vector<Background> clients;
  for (int i = 0; i < 6; ++i) {
    std::vector<std::string> args{GetParam().curl_protocol()};
    clients.push_back(CurlInBackground(path, "p" + std::to_string(i), args));
  }
  for (auto& b : clients) {
    Reply r = Finish(b);
    EXPECT_EQ(r.code, 200) << r.headers;
    EXPECT_TRUE(r.body == body);
  }
  EXPECT_EQ(OriginConditionals(path), 1);
  EXPECT_EQ(OriginHits(path), 3);  // (the test's fetch, the miss, the revalidation)
}

TEST_P(Revalidation, AnOriginErrorWhileRevalidatingLosesNothing) {
  StartGateway(GetParam().net, {"--keep", "60s"});
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  const std::string bad = dir_ + "/bad";
  const std::string path = "/gen/100K/e?cc=max-age=1&fail_if=" + bad + "&rev=" + rev_;
  const std::string body = Origin(path);
  ASSERT_EQ(Get(path).code, 200);
  std::this_thread::sleep_for(1200ms);
  std::ofstream(bad) << "x";
  Reply r = Get(path);
  EXPECT_EQ(r.code, 500);  // (the origin's answer; stale-if-error is not configured)
  std::filesystem::remove(bad);
  // The next request: the stored object is still there, revalidated and served.
  ExpectRevalidatedHit(path, body);
  EXPECT_EQ(OriginConditionals(path), 2);
}

TEST_P(Revalidation, GraceServesStaleWhileOneRevalidationRunsInTheBackground) {
  StartGateway(GetParam().net, {"--keep", "60s", "--grace", "30s", "--threads", "2"});
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  // --grace, and a response's own stale-while-revalidate (which wins over it).
  int n = 0;
  for (const std::string cc : {"max-age=1", "max-age=1,stale-while-revalidate=30"}) {
    const std::string path = fmt::format("/gen/150K/g{}?slow304=800&cc={}&rev={}", ++n, cc, rev_);
    const std::string body = Origin(path);
    ASSERT_EQ(Get(path).code, 200);
    std::this_thread::sleep_for(1200ms);
    // Stale, in grace: served at once, while one revalidation asks the origin (it takes
    // 800 ms to answer 304): every client meanwhile gets the stale copy.
    for (int i = 0; i < 3; ++i) {
      Reply r = Get(path, {}, "s" + std::to_string(i));
      ASSERT_EQ(r.code, 200) << r.headers;
      EXPECT_EQ(Header(r, "x-cache"), "STALE") << cc;
      EXPECT_EQ(Header(r, "x-validated"), "");
      EXPECT_TRUE(r.body == body);
    }
    // Once the 304 is in, the refreshed object is a plain hit.
    Reply r = UntilValidated(path);
    EXPECT_EQ(Header(r, "x-cache"), "HIT") << cc;
    EXPECT_EQ(Header(r, "x-validated"), "1");
    EXPECT_TRUE(r.body == body);
    EXPECT_EQ(OriginConditionals(path), 1) << cc;
  }
}

TEST_P(Revalidation, StaleIfErrorServesStaleWithinItsWindowAndNotAfter) {
  const std::string bad = dir_ + "/bad";
  StartGateway(GetParam().net, {"--keep", "60s", "--grace", "1s"});
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  // Grace 1 s (--grace), stale-if-error 4 s (the response's).
  const std::string path =
      "/gen/100K/s?cc=max-age=1,stale-if-error=4&fail_if=" + bad + "&rev=" + rev_;
  const std::string body = Origin(path);
  ASSERT_EQ(Get(path).code, 200);
  std::this_thread::sleep_for(1100ms);  // (stale, in grace: served, revalidated behind)
  std::ofstream(bad) << "x";
  Reply r = Get(path);
  EXPECT_EQ(Header(r, "x-cache"), "STALE");
  EXPECT_TRUE(r.body == body);
  // Past grace but within stale-if-error: the origin's 500 is not passed on.
  std::this_thread::sleep_for(1500ms);
  r = Get(path);
  ASSERT_EQ(r.code, 200) << r.headers;
  EXPECT_EQ(Header(r, "x-cache"), "STALE");
  EXPECT_TRUE(r.body == body);
  std::this_thread::sleep_for(2600ms);
  // Past it: the origin's answer.
  std::this_thread::sleep_for(1100ms);
  r = Get(path);
  EXPECT_EQ(r.code, 500);
  // The origin heals: the next request revalidates the object, which was never lost.
  std::filesystem::remove(bad);
  ExpectRevalidatedHit(path, body);
  // must-revalidate: never stale, whatever --grace says.
  const std::string strict = "/gen/100K/m?cc=max-age=1,must-revalidate&fail_if=" + bad;
  ASSERT_EQ(Get(strict).code, 200);
  std::this_thread::sleep_for(1100ms);
  std::ofstream(bad) << "x";
  EXPECT_EQ(Get(strict).code, 500);
  std::filesystem::remove(bad);
  EXPECT_EQ(Get(strict).code, 200);
}

TEST_P(Revalidation, ASickOriginIsNotAskedWhileStaleIfErrorAllows) {
  const std::string bad = dir_ + "/bad";
  StartGateway(GetParam().net,
               {"--keep", "60s", "--origin-probe", "/gen/1K/probe?fail_if=" + bad,
                "--origin-probe-interval", "100ms", "--origin-probe-threshold", "1"});
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  const std::string path = "/gen/100K/k?cc=max-age=1,stale-if-error=60&rev=" + rev_;
  const std::string body = Origin(path);
  ASSERT_EQ(Get(path).code, 200);
  std::ofstream(bad) << "x";
  std::this_thread::sleep_for(1200ms);  // (stale, and the probe has failed)
  const int asked = OriginHits(path);
  for (int i = 0; i < 3; ++i) {
    Reply r = Get(path);
    ASSERT_EQ(r.code, 200) << r.headers;
    EXPECT_EQ(Header(r, "x-cache"), "STALE");
    EXPECT_TRUE(r.body == body);
  }
  EXPECT_EQ(OriginHits(path), asked);  // (a sick origin is not asked)
  // A miss still gets the 503 of a sick origin.
  EXPECT_EQ(Get("/gen/1K/other").code, 503);
  // Healthy again: revalidated.
  std::filesystem::remove(bad);
  Reply r = UntilValidated(path);
  EXPECT_EQ(Header(r, "x-cache"), "HIT");
  EXPECT_TRUE(r.body == body);
}

TEST_P(Revalidation, SoftPurgeMarksStaleAndTheNextRequestRevalidates) {
  StartGateway(GetParam().net, {"--keep", "60s"});
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  const std::string path = "/gen/50K/sp/one?cc=max-age=600&rev=" + rev_;
  const std::string body = Origin(path);
  ASSERT_EQ(Get(path).code, 200);
  EXPECT_EQ(Header(Get(path), "x-cache"), "HIT");  // (a local hit next time, if it can)
  Reply r = Get(path, {"-X", "PURGE", "-H", "X-Purge-Soft: 1"});
  EXPECT_EQ(r.code, 200);
  EXPECT_EQ(r.body, "200 Soft-purged\n");
  // Kept, but stale: revalidated (304: the same bytes), then fresh again.
  r = Get(path);
  ASSERT_EQ(r.code, 200) << r.headers;
  EXPECT_EQ(Header(r, "x-cache"), "HIT");
  EXPECT_EQ(Header(r, "x-validated"), "1");
  EXPECT_TRUE(r.body == body);
  EXPECT_EQ(OriginConditionals(path), 1);
  r = Get(path);
  EXPECT_EQ(Header(r, "x-cache"), "HIT");
  EXPECT_EQ(OriginConditionals(path), 1);
  // By prefix: every object under it, counted once.
  const std::string a = "/gen/50K/sp/pre/a?rev=" + rev_, b = "/gen/50K/sp/pre/b?rev=" + rev_;
  ASSERT_EQ(Get(a).code, 200);
  ASSERT_EQ(Get(b).code, 200);
  r = Get("/gen/50K/sp/pre/", {"-X", "PURGE", "-H", "X-Purge: prefix", "-H", "X-Purge-Soft: 1"});
  EXPECT_EQ(r.body, "200 Soft-purged 2 objects\n");
  EXPECT_EQ(Header(Get(a), "x-validated"), "1");
  EXPECT_EQ(Header(Get(b), "x-validated"), "1");
  // A new version behind a soft purge: the conditional request gets it whole.
  SetRev("2");
  ASSERT_EQ(Get(path, {"-X", "PURGE", "-H", "X-Purge-Soft: 1"}).code, 200);
  r = Get(path);
  EXPECT_EQ(Header(r, "x-cache"), "MISS");
  EXPECT_TRUE(r.body == Origin(path));
  EXPECT_FALSE(r.body == body);
  // A hard purge still deletes.
  EXPECT_EQ(Get(path, {"-X", "PURGE"}).body, "200 Purged\n");
  EXPECT_EQ(Header(Get(path), "x-cache"), "MISS");
}

TEST_P(Revalidation, PurgeByTagHardAndSoft) {
  StartGateway(GetParam().net, {"--keep", "60s"});
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  const std::string a = "/gen/20K/t/a?tags=red%20blue&rev=" + rev_;
  const std::string b = "/gen/20K/t/b?tags=red,green&rev=" + rev_;
  const std::string c = "/gen/20K/t/c?xkey=blue&rev=" + rev_;
  const std::string d = "/gen/20K/t/d?rev=" + rev_;
  for (const auto& p : {a, b, c, d}) {
    Reply r = Get(p);
    ASSERT_EQ(r.code, 200) << p;
    EXPECT_EQ(Header(r, "surrogate-key"), "");  // (for the cache, not for clients)
  }
  for (const auto& p : {a, b, c, d}) EXPECT_EQ(Header(Get(p), "x-cache"), "HIT") << p;
  EXPECT_EQ(Header(Get(c), "xkey"), "blue");  // (Varnish's field is passed on)
  // Hard, by one tag (Varnish's xkey-purge as well as X-Purge-Tag).
  Reply r = Get("/", {"-X", "PURGE", "-H", "X-Purge-Tag: red"});
  EXPECT_EQ(r.body, "200 Purged 2 objects\n");
  EXPECT_EQ(Header(Get(a), "x-cache"), "MISS");
  EXPECT_EQ(Header(Get(b), "x-cache"), "MISS");
  EXPECT_EQ(Header(Get(c), "x-cache"), "HIT");
  EXPECT_EQ(Header(Get(d), "x-cache"), "HIT");
  // Soft, by two tags (an object carrying both counts once per tag it was found by).
  r = Get("/", {"-X", "PURGE", "-H", "xkey-purge: green", "-H", "X-Purge-Soft: 1"});
  EXPECT_EQ(r.body, "200 Soft-purged 1 objects\n");
  r = Get(b);
  EXPECT_EQ(Header(r, "x-cache"), "HIT");
  EXPECT_EQ(Header(r, "x-validated"), "1");  // (kept, revalidated: 304)
  r = Get("/", {"-X", "PURGE", "-H", "X-Purge-Tag: blue", "-H", "X-Purge-Soft: 1"});
  EXPECT_EQ(r.body, "200 Soft-purged 2 objects\n");
  EXPECT_EQ(Header(Get(a), "x-validated"), "1");
  EXPECT_EQ(Header(Get(c), "x-validated"), "1");
  EXPECT_EQ(Header(Get(d), "x-validated"), "");
  // A tag nobody carries; tags survive a restart of the core (journaled with the records).
  EXPECT_EQ(Get("/", {"-X", "PURGE", "-H", "X-Purge-Tag: none"}).body, "200 Purged 0 objects\n");
  core_.reset();
  ASSERT_TRUE(StartCore());
  for (int i = 0; i < 100 && Get(d).code != 200; ++i) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(Header(Get(c), "x-cache"), "HIT");
  EXPECT_EQ(Get("/", {"-X", "PURGE", "-H", "X-Purge-Tag: blue"}).body, "200 Purged 2 objects\n");
  EXPECT_EQ(Header(Get(c), "x-cache"), "MISS");
  EXPECT_EQ(Header(Get(d), "x-cache"), "HIT");
}

INSTANTIATE_TEST_SUITE_P(Modes, Revalidation, test::AllNetModes(), test::NetModeName);

}  // namespace
}  // namespace goblin
