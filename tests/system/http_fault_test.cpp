// Origin faults, core faults and what the *next* request sees, through the whole HTTP mirror
// (goblin-core + goblin-gateway --mirror + tests/support/test_origin.py), in both --net modes.
// For each way an origin response can end early (FIN mid-body, RST mid-body, a chunked body
// without its last chunk, silence past --origin-timeout, a body longer than declared, a
// malformed head): the requesting client and a concurrent follower are cut off (or told 5xx
// before any head), nothing is stored, and the next request goes to the origin again and gets
// the right bytes once the origin has recovered (then a HIT). Also: the core refusing a fill
// (a full tier), the core dying mid-fill and coming back (the gateway reconnects), 502/504
// bodies that say the code of their status line, and stored metadata without a final CRLF
// in a multipart answer.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "tests/system/mirror_harness.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

using test::CurrentTestName;
using test::HaveCurlAndPython;

// A body that arrived is always a prefix of the object (never other bytes).
void ExpectPrefix(const std::string& got, const std::string& want, const std::string& who) {
  ASSERT_LE(got.size(), want.size()) << who;
  EXPECT_EQ(got, want.substr(0, got.size())) << who << ": wrong bytes";
}

// ---- one origin fault x one --net mode ----

struct Fault {
  const char* name;
  bool head_first;  // the response head reaches the client before the fault
};

class OriginFaults : public testing::TestWithParam<std::tuple<std::string, Fault>>,
                     public test::MirrorHarness {
 protected:
  void SetUp() override {
    if (!HaveCurlAndPython()) GTEST_SKIP() << "curl and python3 are needed";
    ASSERT_TRUE(StartCoreAndOrigin(CurrentTestName())) << (core_ ? core_->Output() : std::string());
    StartGateway(std::get<0>(GetParam()));
    ASSERT_FALSE(port_.empty()) << gateway_->Output();
  }
  void TearDown() override { StopAll(); }
};

TEST_P(OriginFaults, EveryReaderIsCutOffNothingIsStoredTheNextRequestRefetches) {
  const Fault fault = std::get<1>(GetParam());
  const std::string path = fmt::format("/gen/1M/{}", fault.name);
  // The fault happens once (the origin recovers); 64 KiB every 40 ms, so a second client
  // arrives while the first is still being filled.
  const std::string url = path + fmt::format("?fault={}&once=1&pace=40", fault.name);
  const std::string want = Origin(path);
  ASSERT_EQ(want.size(), 1u << 20);

  auto leader_bg = CurlInBackground(url, "leader");
  std::this_thread::sleep_for(120ms);
  auto follower_bg = CurlInBackground(url, "follower");
  Reply leader = Finish(leader_bg), follower = Finish(follower_bg);

  for (const auto& [who, r] : {std::pair{"leader", &leader}, std::pair{"follower", &follower}}) {
    SCOPED_TRACE(who);
    ASSERT_NE(r->curl_exit, -1) << "the client hung (curl did not finish)";
    if (std::string_view(fault.name) == "long") {
      // The declared bytes are all the client asked for: complete, or cut off; never more.
      ExpectPrefix(r->body, want, who);
    } else if (fault.head_first) {
      // A 200 head went out, then the body stopped: the connection was closed early.
      EXPECT_EQ(r->code, 200);
      EXPECT_NE(r->curl_exit, 0) << "a cut-off body must not look complete";
      EXPECT_LT(r->body.size(), want.size());
      ExpectPrefix(r->body, want, who);
    } else {
      EXPECT_EQ(r->code, 502);
      EXPECT_TRUE(r->body.starts_with("502 Bad Gateway: ")) << r->body;
    }
    // Never labelled a hit: nothing was committed.
    EXPECT_FALSE(HasHeader(r->headers, "X-Cache: HIT")) << r->headers;
  }
  // One origin request served both clients (the follower joined the fill).
  EXPECT_EQ(OriginHits(url), 1);

  // The next request is not poisoned: a fresh origin request, the whole object.
  Reply next = Curl(url);
  EXPECT_EQ(next.code, 200);
  EXPECT_EQ(next.curl_exit, 0);
  EXPECT_TRUE(HasHeader(next.headers, "X-Cache: MISS")) << next.headers;
  EXPECT_EQ(next.body, want);
  EXPECT_EQ(OriginHits(url), 2);
  // ... and that one was stored.
  Reply hit = Curl(url);
  EXPECT_TRUE(HasHeader(hit.headers, "X-Cache: HIT")) << hit.headers;
  EXPECT_EQ(hit.body, want);
  EXPECT_EQ(OriginHits(url), 2);
  EXPECT_EQ(gateway_->Wait(0ms), -1) << "the gateway died:\n" << gateway_->Output();
}

// ---- two gateways (or workers) in front of one core: the core's reservation decides ----

class TwoGateways : public testing::TestWithParam<std::string>, public test::MirrorHarness {
 protected:
  void SetUp() override {
    if (!HaveCurlAndPython()) GTEST_SKIP() << "curl and python3 are needed";
    ASSERT_TRUE(StartCoreAndOrigin(CurrentTestName())) << (core_ ? core_->Output() : std::string());
    StartGateway(GetParam(), {"--threads", "1"}, "gateway-a.log");
    ASSERT_FALSE(port_.empty()) << gateway_->Output();
    a_ = std::move(gateway_);
    base_a_ = base_;
    StartGateway(GetParam(), {"--threads", "1"}, "gateway-b.log");
    ASSERT_FALSE(port_.empty()) << gateway_->Output();
    base_b_ = base_;
  }
  void TearDown() override {
    a_.reset();
    StopAll();
  }
  // The leader through gateway A, a second client through B 120 ms later (one site name:
  // the Host is part of the key).
  std::pair<Reply, Reply> LeaderAndFollower(const std::string& url) {
    base_ = base_a_;
    auto lead = CurlInBackground(url, "a", Site());
    std::this_thread::sleep_for(120ms);
    base_ = base_b_;
    auto follow = CurlInBackground(url, "b", Site());
    Reply l = Finish(lead), f = Finish(follow);
    return {l, f};
  }
  static std::vector<std::string> Site() { return {"-H", "Host: site.example"}; }
  std::unique_ptr<test::Process> a_;
  std::string base_a_, base_b_;
};

TEST_P(TwoGateways, OneOriginRequestServesBothAndTheCoreTellsEachWhatHappened) {
  {  // A cacheable miss: B waits in the core for A's reservation, then follows the fill.
    const std::string url = "/gen/1M/both?pace=40";
    const std::string want = Origin("/gen/1M/both");
    auto [l, f] = LeaderAndFollower(url);
    for (const Reply* r : {&l, &f}) {
      EXPECT_EQ(r->code, 200);
      EXPECT_EQ(r->curl_exit, 0);
      EXPECT_EQ(r->body, want);
      EXPECT_TRUE(HasHeader(r->headers, "X-Cache: MISS")) << r->headers;
    }
    EXPECT_EQ(OriginHits(url), 1) << "one origin request across both gateways";
    base_ = base_b_;
    Reply hit = Curl(url, Site());
    EXPECT_TRUE(HasHeader(hit.headers, "X-Cache: HIT")) << hit.headers;
    EXPECT_EQ(hit.body, want);
    EXPECT_EQ(OriginHits(url), 1);
  }
  {  // The origin fails the head: B, waiting for it in the core, is told (502), not hung.
    const std::string url = "/gen/1M/bad?fault=badhead&once=1&pace=40";
    auto [l, f] = LeaderAndFollower(url);
    for (const Reply* r : {&l, &f}) {
      EXPECT_EQ(r->code, 502) << r->headers;
      EXPECT_TRUE(r->body.starts_with("502 Bad Gateway: ")) << r->body;
    }
    EXPECT_EQ(OriginHits(url), 1);
    base_ = base_b_;  // and the key is free: the next request fetches and stores it
    Reply next = Curl(url, Site());
    EXPECT_EQ(next.code, 200);
    EXPECT_EQ(next.body, Origin("/gen/1M/bad"));
    EXPECT_EQ(OriginHits(url), 2);
    base_ = base_a_;
    EXPECT_TRUE(HasHeader(Curl(url, Site()).headers, "X-Cache: HIT"));
  }
  {  // Uncacheable: the reservation ends at the head and B asks the origin itself.
    const std::string url = "/gen/1M/private?cc=no-store&pace=40";
    const std::string want = Origin("/gen/1M/private?cc=no-store");
    auto [l, f] = LeaderAndFollower(url);
    for (const Reply* r : {&l, &f}) {
      EXPECT_EQ(r->code, 200);
      EXPECT_EQ(r->body, want);
    }
    EXPECT_EQ(OriginHits(url), 2);
    base_ = base_a_;
    Reply again = Curl(url, Site());
    EXPECT_TRUE(HasHeader(again.headers, "X-Cache: MISS")) << again.headers;
    EXPECT_EQ(OriginHits(url), 3);
  }
  {  // The leader's gateway dies while the origin is slow: B is told, the key is free.
    const std::string url = "/gen/1M/gone?pace=40&fault=badhead";
    base_ = base_a_;
    auto lead = CurlInBackground(url, "a", Site());
    std::this_thread::sleep_for(120ms);
    base_ = base_b_;
    auto follow = CurlInBackground(url, "b", Site());
    std::this_thread::sleep_for(60ms);
    a_->Signal(SIGKILL);
    Reply f = Finish(follow);
    Finish(lead);
    EXPECT_EQ(f.code, 502) << f.headers;
    base_ = base_b_;
    Reply next = Curl("/gen/1M/gone?pace=1", Site());
    EXPECT_EQ(next.code, 200);
  }
  EXPECT_EQ(gateway_->Wait(0ms), -1) << "gateway B died:\n" << gateway_->Output();
}

INSTANTIATE_TEST_SUITE_P(Net, TwoGateways, testing::Values("sync", "async"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

INSTANTIATE_TEST_SUITE_P(
    Net, OriginFaults,
    testing::Combine(testing::Values("sync", "async"),
                     testing::Values(Fault{"fin", true}, Fault{"rst", true},
                                     Fault{"chunkcut", true}, Fault{"silence", true},
                                     Fault{"long", true}, Fault{"badhead", false})),
    [](const testing::TestParamInfo<std::tuple<std::string, Fault>>& i) {
      return std::get<0>(i.param) + "_" + std::get<1>(i.param).name;
    });

// ---- faults of the core, and error bodies ----

class CoreFaults : public testing::TestWithParam<std::string>, public test::MirrorHarness {
 protected:
  void SetUp() override {
    if (!HaveCurlAndPython()) GTEST_SKIP() << "curl and python3 are needed";
  }
  void Start(std::vector<std::string> core_extra = {}) {
    ASSERT_TRUE(StartCoreAndOrigin(CurrentTestName(), std::move(core_extra)))
        << (core_ ? core_->Output() : std::string());
    StartGateway(GetParam());
    ASSERT_FALSE(port_.empty()) << gateway_->Output();
  }
  void TearDown() override { StopAll(); }
};

TEST_P(CoreFaults, ErrorBodiesSayTheCodeOfTheirStatusLine) {
  ASSERT_NO_FATAL_FAILURE(Start());
  Reply hang = Curl("/gen/1K/h?fault=hang");
  EXPECT_EQ(hang.code, 504);
  EXPECT_TRUE(hang.body.starts_with("504 Gateway Timeout: ")) << hang.body;
  Reply bad = Curl("/gen/1K/b?fault=badhead");
  EXPECT_EQ(bad.code, 502);
  EXPECT_TRUE(bad.body.starts_with("502 Bad Gateway: ")) << bad.body;
  origin_.reset();  // the origin is down now
  Reply down = Curl("/gen/1K/d");
  EXPECT_EQ(down.code, 502);
  EXPECT_TRUE(down.body.starts_with("502 Bad Gateway: ")) << down.body;
}

TEST_P(CoreFaults, AFullTierIsAPassNotAHole) {
  // Four 1 MiB extents of space: an 8 MiB object cannot be stored.
  ASSERT_NO_FATAL_FAILURE(Start({"--ssd-size", "4M", "--tier-file-size", "4M"}));
  const std::string want = Origin("/gen/8M/big");
  // Announced size: refused at once. The client still gets every byte from the origin.
  Reply a = Curl("/gen/8M/big");
  EXPECT_EQ(a.code, 200);
  EXPECT_EQ(a.body, want);
  Reply b = Curl("/gen/8M/big");
  EXPECT_EQ(b.body, want);
  EXPECT_TRUE(HasHeader(b.headers, "X-Cache: MISS"));
  EXPECT_EQ(OriginHits("/gen/8M/big"), 3);  // ours, then each request went to the origin
  // Unknown size (chunked): refused by the core mid-fill when the tier is full. The leader
  // gets every byte; a follower of the core's fill is cut off; the next request refetches.
  const std::string url = "/gen/8M/ch?chunked=1&pace=20";
  const std::string want_ch = Origin("/gen/8M/ch");
  auto leader_bg = CurlInBackground(url, "leader");
  std::this_thread::sleep_for(300ms);
  auto follower_bg = CurlInBackground(url, "follower");
  Reply leader = Finish(leader_bg), follower = Finish(follower_bg);
  EXPECT_EQ(leader.curl_exit, 0);
  EXPECT_EQ(leader.body, want_ch);
  ExpectPrefix(follower.body, want_ch, "follower");
  if (follower.body.size() == want_ch.size()) {
    // (it arrived after the refusal and fetched for itself)
    EXPECT_EQ(follower.curl_exit, 0);
  }
  Reply next = Curl(url);
  EXPECT_EQ(next.body, want_ch);
  EXPECT_FALSE(HasHeader(next.headers, "X-Cache: HIT"));
  EXPECT_NE(gateway_->Output().find("served uncached"), std::string::npos) << gateway_->Output();
  // Something that fits is still cached.
  ASSERT_EQ(Curl("/gen/100K/small").code, 200);
  EXPECT_TRUE(HasHeader(Curl("/gen/100K/small").headers, "X-Cache: HIT"));
}

TEST_P(CoreFaults, TheGatewaySurvivesTheCoreRestarting) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string want = Origin("/gen/300K/kept");
  ASSERT_EQ(Curl("/gen/300K/kept").code, 200);
  ASSERT_TRUE(HasHeader(Curl("/gen/300K/kept").headers, "X-Cache: HIT"));

  // The core dies in the middle of a fill with a follower.
  const std::string url = "/gen/2M/mid?pace=30";
  const std::string want_mid = Origin("/gen/2M/mid");
  auto leader_bg = CurlInBackground(url, "leader");
  std::this_thread::sleep_for(200ms);
  auto follower_bg = CurlInBackground(url, "follower");
  std::this_thread::sleep_for(200ms);
  core_->Signal(SIGKILL);
  ASSERT_EQ(core_->Wait(5s), 128 + SIGKILL);
  // While the core is away: 503, at once.
  Reply away = Curl("/gen/300K/kept");
  EXPECT_EQ(away.code, 503);
  EXPECT_TRUE(away.body.starts_with("503 Service Unavailable: ")) << away.body;
  EXPECT_TRUE(HasHeader(away.headers, "Retry-After: 1"));
  Reply leader = Finish(leader_bg), follower = Finish(follower_bg);
  // The leader reads the origin, not the core: it gets every byte. The follower read the
  // core's fill: cut off.
  EXPECT_EQ(leader.curl_exit, 0);
  EXPECT_EQ(leader.body, want_mid);
  EXPECT_NE(follower.curl_exit, 0);
  ExpectPrefix(follower.body, want_mid, "follower");

  ASSERT_TRUE(StartCore()) << core_->Output();
  Reply back;
  for (int i = 0; i < 100; ++i) {  // the gateway reconnects with back-off (<= 2 s)
    back = Curl("/gen/300K/kept");
    if (back.code == 200) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(back.code, 200) << gateway_->Output();
  EXPECT_TRUE(HasHeader(back.headers, "X-Cache: HIT"));  // committed before: still there
  EXPECT_EQ(back.body, want);
  // The interrupted fill was not stored: MISS, then HIT.
  Reply again = Curl(url);
  EXPECT_TRUE(HasHeader(again.headers, "X-Cache: MISS"));
  EXPECT_EQ(again.body, want_mid);
  Reply hit = Curl(url);
  EXPECT_TRUE(HasHeader(hit.headers, "X-Cache: HIT"));
  EXPECT_EQ(hit.body, want_mid);
  EXPECT_NE(gateway_->Output().find("goblin-core is back"), std::string::npos);
  EXPECT_EQ(gateway_->Wait(0ms), -1) << "the gateway died:\n" << gateway_->Output();
}

// The core comes back with another shard count (on a fresh tier: a tier keeps its own):
// the gateway's link reads the new count from the Welcome, connects to every shard and
// sends each key to its shard; nothing it held for the old core is sent to the new one.
TEST_P(CoreFaults, TheGatewayFollowsACoreRestartedWithMoreShards) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_EQ(Curl("/gen/100K/before").code, 200);
  core_->Signal(SIGTERM);
  ASSERT_EQ(core_->Wait(10s), 0) << core_->Output();
  EXPECT_EQ(Curl("/gen/100K/before").code, 503);
  const std::string tier3 = tier_ + "-3";
  ASSERT_EQ(test::RunCommand({GOBLIN_CORE_BIN, "--prepare", tier3}, dir_ + "/prep3.log").first, 0);
  for (size_t i = 0; i + 1 < core_args_.size(); ++i) {
    if (core_args_[i] == "--ssd-dir") core_args_[i + 1] = tier3;
    if (core_args_[i] == "--cores") core_args_[i + 1] = "3";
  }
  ASSERT_TRUE(StartCore()) << core_->Output();
  Reply back;
  for (int i = 0; i < 100; ++i) {
    back = Curl("/gen/100K/before");
    if (back.code == 200) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(back.code, 200) << gateway_->Output();
  EXPECT_TRUE(HasHeader(back.headers, "X-Cache: MISS"));  // a new, empty store
  std::vector<std::string> paths;
  for (int i = 0; i < 12; ++i) paths.push_back(fmt::format("/gen/{}K/after{}", 20 + i, i));
  for (const auto& p : paths) ASSERT_EQ(Curl(p).code, 200) << p;
  for (const auto& p : paths) {
    Reply hit = Curl(p);
    EXPECT_TRUE(HasHeader(hit.headers, "X-Cache: HIT")) << p;
    EXPECT_EQ(hit.body, Origin(p)) << p;
  }
  EXPECT_NE(gateway_->Output().find("3 shards"), std::string::npos) << gateway_->Output();
  EXPECT_EQ(gateway_->Wait(0ms), -1) << "the gateway died:\n" << gateway_->Output();
}

TEST_P(CoreFaults, AFollowerIsAMissUntilTheObjectIsCommitted) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string url = "/gen/1M/f?pace=30";
  const std::string want = Origin("/gen/1M/f");
  auto leader_bg = CurlInBackground(url, "leader");
  std::this_thread::sleep_for(150ms);
  auto follower_bg = CurlInBackground(url, "follower");
  Reply leader = Finish(leader_bg), follower = Finish(follower_bg);
  EXPECT_EQ(leader.body, want);
  EXPECT_EQ(follower.body, want);
  EXPECT_TRUE(HasHeader(leader.headers, "X-Cache: MISS"));
  EXPECT_TRUE(HasHeader(follower.headers, "X-Cache: MISS")) << follower.headers;
  EXPECT_TRUE(HasHeader(Curl(url).headers, "X-Cache: HIT"));
  EXPECT_EQ(OriginHits(url), 1);
}

TEST_P(CoreFaults, StoredMetadataWithoutCrlfIsServedAndRangedSafely) {
  ASSERT_NO_FATAL_FAILURE(Start());
  // Written by hand with the native CLI: metadata that does not end in CRLF, plus a line
  // that is not a header at all.
  std::string file = dir_ + "/obj";
  std::string body(200000, 'q');
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>('a' + i % 26);
  std::ofstream(file, std::ios::binary) << body;
  std::string key = "127.0.0.1:" + port_ + "/meta";
  auto [rc, out] = test::RunCommand({GOBLIN_CLI_BIN, "--target", "unix:" + core_sock_, "put", key,
                                     file, "--meta", "Content-Type: text/x-test\r\nnot a header"},
                                    dir_ + "/put.log", 30s);
  ASSERT_EQ(rc, 0) << out;
  Reply whole = Curl("/meta");
  EXPECT_EQ(whole.code, 200);
  EXPECT_EQ(whole.body, body);
  EXPECT_TRUE(HasHeader(whole.headers, "Content-Type: text/x-test"));
  EXPECT_EQ(whole.headers.find("not a header"), std::string::npos);
  Reply parts = Curl("/meta", {"-H", "Range: bytes=0-9,100000-100009"});
  EXPECT_EQ(parts.code, 206);
  EXPECT_NE(parts.body.find("Content-Type: text/x-test\r\nContent-Range: bytes 0-9/200000\r\n\r\n" +
                            body.substr(0, 10)),
            std::string::npos)
      << parts.body.substr(0, 400);
  EXPECT_EQ(parts.curl_exit, 0);
}

INSTANTIATE_TEST_SUITE_P(Net, CoreFaults, testing::Values("sync", "async"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

// ---- the origin's health probe ----

class OriginHealth : public testing::TestWithParam<std::string>, public test::MirrorHarness {
 protected:
  void SetUp() override {
    if (!HaveCurlAndPython()) GTEST_SKIP() << "curl and python3 are needed";
    ASSERT_TRUE(StartCoreAndOrigin(CurrentTestName())) << (core_ ? core_->Output() : std::string());
  }
  void TearDown() override { StopAll(); }
  bool LogSays(const std::string& what) {
    for (int i = 0; i < 200; ++i) {  // (10 s)
      if (gateway_->Output().find(what) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
};

// A probe that fails twice in a row marks the origin sick: misses are answered 503 at once
// (the origin is not asked), hits are served; the first good probe makes it healthy again
// and the next miss is fetched.
TEST_P(OriginHealth, ASickOriginIsNotAskedHitsAreServed) {
  const std::string flag = dir_ + "/sick";
  StartGateway(GetParam(),
               {"--origin-probe", "/gen/1K/probe?fail_if=" + flag, "--origin-probe-interval",
                "100ms", "--origin-probe-threshold", "2", "--threads", "2"});
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  EXPECT_EQ(Curl("/gen/10K/a").code, 200);
  std::ofstream(flag) << "1";
  ASSERT_TRUE(LogSays("origin marked sick: 2 probes")) << gateway_->Output();
  EXPECT_EQ(Curl("/gen/10K/a").code, 200);  // a hit
  for (const char* path : {"/gen/10K/b", "/gen/10K/c?cc=no-store"}) {
    Reply r = Curl(path);
    EXPECT_EQ(r.code, 503) << path;
    EXPECT_NE(r.body.find("503 Service Unavailable: the origin is marked sick by its health probe"),
              std::string::npos)
        << r.body;
  }
  Reply post = Curl("/gen/1K/p", {"-d", "x"});
  EXPECT_EQ(post.code, 503);
  EXPECT_EQ(Curl("/gen/10K/d", {"--http2-prior-knowledge"}).code, 503);  // (an HTTP/2 stream)
  EXPECT_EQ(Curl("/gen/10K/a", {"--http2-prior-knowledge"}).code, 200);
  EXPECT_EQ(OriginHits("/gen/10K/b"), 0);
  std::filesystem::remove(flag);
  ASSERT_TRUE(LogSays("origin healthy again")) << gateway_->Output();
  Reply b = Curl("/gen/10K/b");
  EXPECT_EQ(b.code, 200);
  EXPECT_EQ(b.body, Origin("/gen/10K/b"));
  EXPECT_EQ(Curl("/gen/10K/b").code, 200);
  Reply d = Curl("/gen/10K/d", {"--http2-prior-knowledge"});  // (the stream's key, next time)
  EXPECT_EQ(d.code, 200);
  EXPECT_EQ(d.body, Origin("/gen/10K/d"));
  gateway_->Signal(SIGTERM);
  EXPECT_EQ(gateway_->Wait(std::chrono::seconds(20)), 0);
}

INSTANTIATE_TEST_SUITE_P(Net, OriginHealth, testing::Values("sync", "async"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace goblin
