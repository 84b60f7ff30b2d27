// Cache key options end to end (goblin-core + goblin-gateway --mirror in front of the test
// origin; --net sync and async; HTTP/1.1 and h2c): --cache-key-query sort / ignore,
// --cache-key-strip (names and prefixes) and --cache-key-header; what the origin is asked
// (the URL as the client sent it, once per key), PURGE of a normalized key and of a prefix
// with its header variants, and the next request after each.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "tests/system/mirror_harness.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

using test::NetMode;

// `s` lower-cased but for the cache status words tests look for.
std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* w : {"miss", "hit"}) {
    for (size_t at = s.find(std::string("x-cache: ") + w); at != std::string::npos;
         at = s.find(std::string("x-cache: ") + w, at + 1)) {
      for (size_t i = at + 9; i < at + 9 + std::strlen(w); ++i)
        s[i] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[i])));
    }
  }
  return s;
}

class CacheKey : public testing::TestWithParam<NetMode>, public test::MirrorHarness {
 protected:
  void SetUp() override {
    if (!test::HaveCurlAndPython()) GTEST_SKIP() << "curl and python3 are needed";
    // (Three shards: an object's variants must still meet on one to be counted.)
    const bool bounded = test::CurrentTestName().find("Bounded") != std::string::npos;
    ASSERT_TRUE(
        StartCoreAndOrigin("ck-" + test::CurrentTestName(),
                           bounded ? std::vector<std::string>{"--max-variants", "2", "--cores", "3"}
                                   : std::vector<std::string>{}))
        << (core_ ? core_->Output() : std::string());
  }
  void TearDown() override { StopAll(); }
  // X-Cache of `path` (and its status, which must be 200).
  std::string Cache(const std::string& path, std::vector<std::string> args = {}) {
    args.push_back(GetParam().curl_protocol());
    Reply r = Curl(path, args);
    EXPECT_EQ(r.code, 200) << path;
    std::smatch m;
    return std::regex_search(r.headers, m, std::regex("[Xx]-[Cc]ache: (\\w+)")) ? m[1].str() : "";
  }
  int Purge(const std::string& path, std::vector<std::string> args = {}) {
    args.insert(args.end(), {"-X", "PURGE"});
    return Curl(path, args).code;
  }
};

TEST_P(CacheKey, SortStripAndHeaders) {
  StartGateway(GetParam().net, {"--cache-key-query", "sort", "--cache-key-strip", "utm_*",
                                "--cache-key-strip", "fbclid", "--cache-key-header", "X-Device"});
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  EXPECT_EQ(Cache("/gen/10K/k?b=2&a=1"), "MISS");
  EXPECT_EQ(Cache("/gen/10K/k?a=1&b=2"), "HIT");
  EXPECT_EQ(Cache("/gen/10K/k?utm_source=mail&a=1&fbclid=9&b=2&utm_medium=x"), "HIT");
  EXPECT_EQ(Cache("/gen/10K/k?a=1&b=3"), "MISS");  // (another value: another object)
  // The origin was asked for the URLs as the clients sent them, once per key.
  EXPECT_EQ(OriginHits("/gen/10K/k?b=2&a=1"), 1);
  EXPECT_EQ(OriginHits("/gen/10K/k?a=1&b=2"), 0);
  EXPECT_EQ(OriginHits("/gen/10K/k?a=1&b=3"), 1);
  // A header in the key: a variant per value, the request without it is one more.
  EXPECT_EQ(Cache("/gen/10K/k?a=1&b=2", {"-H", "X-Device: mobile"}), "MISS");
  EXPECT_EQ(Cache("/gen/10K/k?b=2&a=1", {"-H", "X-Device: mobile"}), "HIT");
  EXPECT_EQ(Cache("/gen/10K/k?a=1&b=2", {"-H", "X-Device: desktop"}), "MISS");
  EXPECT_EQ(Cache("/gen/10K/k?a=1&b=2"), "HIT");
  // PURGE goes by the normalized key: one variant, then every variant under the path.
  EXPECT_EQ(Purge("/gen/10K/k?utm_campaign=z&b=2&a=1", {"-H", "X-Device: mobile"}), 200);
  EXPECT_EQ(Cache("/gen/10K/k?a=1&b=2", {"-H", "X-Device: mobile"}), "MISS");
  EXPECT_EQ(Cache("/gen/10K/k?a=1&b=2"), "HIT");
  EXPECT_EQ(Purge("/gen/10K/k", {"-H", "X-Purge: prefix"}), 200);
  for (const char* device : {"mobile", "desktop"}) {
    EXPECT_EQ(Cache("/gen/10K/k?a=1&b=2", {"-H", std::string("X-Device: ") + device}), "MISS");
  }
  EXPECT_EQ(Cache("/gen/10K/k?a=1&b=2"), "MISS");
  EXPECT_EQ(Cache("/gen/10K/k?a=1&b=2"), "HIT");
}

TEST_P(CacheKey, IgnoreTheQuery) {
  StartGateway(GetParam().net, {"--cache-key-query", "ignore"});
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  EXPECT_EQ(Cache("/gen/10K/i?v=1"), "MISS");
  EXPECT_EQ(Cache("/gen/10K/i?v=2"), "HIT");
  EXPECT_EQ(Cache("/gen/10K/i"), "HIT");
  EXPECT_EQ(OriginHits("/gen/10K/i?v=1"), 1);
  EXPECT_EQ(OriginHits("/gen/10K/i?v=2"), 0);
  EXPECT_EQ(Purge("/gen/10K/i?v=3"), 200);
  EXPECT_EQ(Cache("/gen/10K/i?v=2"), "MISS");
  EXPECT_EQ(OriginHits("/gen/10K/i?v=2"), 1);
}

// Vary: the origin is asked with the cache key's headers (and no other of the client's), so
// each of their values is an object of its own (Accept-Encoding normalized: the same
// codings are one variant); Vary on a header the gateway does not pass on is stored (the
// origin never saw the client's value); Vary: * is never stored.
TEST_P(CacheKey, VaryVariantsPerKeyedHeader) {
  StartGateway(GetParam().net, {"--cache-key-header", "Accept-Encoding"});
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  const std::string path = "/gen/10K/v?vary=Accept-Encoding";
  auto body = [&](const std::string& ae) {  // (the origin's own answer for this header)
    return CurlUrl("http://127.0.0.1:" + origin_port_ + path, {"-H", "Accept-Encoding: " + ae}, "o")
        .body;
  };
  auto get = [&](const std::string& ae, const std::string& want_cache) {
    std::vector<std::string> args{GetParam().curl_protocol(), "-H", "Accept-Encoding: " + ae};
    Reply r = Curl(path, args);
    EXPECT_EQ(r.code, 200) << ae;
    EXPECT_NE(Lower(r.headers).find("x-cache: " + want_cache), std::string::npos) << ae << "\n"
                                                                                  << r.headers;
    EXPECT_NE(Lower(r.headers).find("vary: accept-encoding"), std::string::npos) << r.headers;
    return r.body;
  };
  const std::string gzip = get("gzip, deflate", "MISS");
  EXPECT_TRUE(gzip == body("gzip, deflate"));
  EXPECT_TRUE(get("deflate,gzip", "HIT") == gzip);  // (the same codings: the same variant)
  EXPECT_TRUE(get("br;q=0, gzip;q=0.8, deflate", "HIT") == gzip);
  const std::string br = get("br", "MISS");
  EXPECT_TRUE(br == body("br"));
  EXPECT_TRUE(br != gzip);
  EXPECT_TRUE(get("br", "HIT") == br);
  EXPECT_TRUE(get("identity", "MISS") == body("identity"));
  EXPECT_EQ(OriginHits(path), 3 + 3);  // (three variants filled, and ours)
  // Vary on a header the gateway does not pass on: stored; Vary: *: passed through each time.
  for (const std::string vary : {"X-Other", "*", "Accept-Encoding,*"}) {
    const std::string p = "/gen/10K/w?vary=" + vary;
    for (const char* want : {"MISS", vary == "X-Other" ? "HIT" : "MISS"}) {
      Reply r = Curl(p, {GetParam().curl_protocol(), "-H", "X-Other: 1"});
      EXPECT_EQ(r.code, 200);
      EXPECT_NE(Lower(r.headers).find(std::string("x-cache: ") + want), std::string::npos)
          << vary << "\n"
          << r.headers;
    }
  }
}

// --max-variants (the core's, 2 here, over three shards): a third variant of an object drops
// the least recently used of the other two (a hit counts as a use, a local one too), which
// is fetched again when it is asked for; other objects are not counted against it.
TEST_P(CacheKey, VariantsAreBoundedPerObject) {
  StartGateway(GetParam().net, {"--cache-key-header", "X-Device"});
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  const std::string path = "/gen/10K/bounded";
  auto as = [&](const std::string& device) { return Cache(path, {"-H", "X-Device: " + device}); };
  EXPECT_EQ(as("a"), "MISS");
  EXPECT_EQ(as("b"), "MISS");
  EXPECT_EQ(as("b"), "HIT");
  std::this_thread::sleep_for(1100ms);  // (uses are counted to the second)
  EXPECT_EQ(as("a"), "HIT");            // a is now the most recently used...
  EXPECT_EQ(as("c"), "MISS");           // ...so b goes
  EXPECT_EQ(as("a"), "HIT");
  EXPECT_EQ(as("c"), "HIT");
  EXPECT_EQ(as("b"), "MISS");
  EXPECT_EQ(as("b"), "HIT");
  EXPECT_EQ(OriginHits(path), 4);
  for (const char* other : {"/gen/10K/other1", "/gen/10K/other2"}) {
    EXPECT_EQ(Cache(other, {"-H", "X-Device: a"}), "MISS");
    EXPECT_EQ(Cache(other, {"-H", "X-Device: a"}), "HIT");
  }
  // Without the header: a variant too (the empty value).
  EXPECT_EQ(Cache("/gen/10K/other1"), "MISS");
  EXPECT_EQ(Cache("/gen/10K/other1"), "HIT");
  EXPECT_EQ(Cache("/gen/10K/other2", {"-H", "X-Device: a"}), "HIT");
}

INSTANTIATE_TEST_SUITE_P(Modes, CacheKey, test::AllNetModes(), test::NetModeName);

}  // namespace
}  // namespace goblin
