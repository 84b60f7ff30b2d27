// Heap allocations on the hot path (issue #20, docs/hot-path.md): goblin-core and
// goblin-gateway run with tests/support/malloc_count.cpp preloaded, each counting into a
// file of its own; a keep-alive client warms a 4 KiB object up, then the test counts what
// 1,000 more hits cost each process, in both --net modes: served locally by the gateway
// (the default) and through the core (--local-hits false); and in the core alone, a warm
// native GET and a PUBLISH to one subscriber. The budgets below are today's (measured,
// rounded up); every change that removes an allocation lowers them. Release build only (a
// sanitizer replaces malloc).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "goblin/client/connection.h"
#include "tests/system/mirror_harness.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// Allocations per warm keep-alive 4 KiB hit, gateway and core (see the header), with a
// little room for what idle threads allocate meanwhile. A local hit allocates nothing in
// either process (the core does not hear of it); through the core, nothing either (the
// loan points at the record's extent list, a kept stream's strings are reused, the
// eviction policy's lookup takes a view).
constexpr double kLocalGatewayBudget = 0.02, kLocalCoreBudget = 0.02;
constexpr double kCoreGatewayBudget = 0.02, kCoreCoreBudget = 0.02;
// A hit on a connection of its own, in the gateway (either way).
constexpr double kConnectionGatewayBudget = 0.02;

// The count a preloaded process keeps in `path` (0 before the file exists).
uint64_t ReadCount(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  uint64_t v = 0;
  if (pread(fd, &v, sizeof v, 0) != sizeof v) v = 0;
  close(fd);
  return v;
}

// (--net mode, served locally)
class HotPath : public testing::TestWithParam<std::tuple<std::string, bool>>,
                public test::MirrorHarness {
 protected:
  void SetUp() override {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    GTEST_SKIP() << "a sanitizer build replaces malloc";
#endif
    if (!fs::exists(GOBLIN_MALLOC_COUNT_LIB) || !fs::exists("/usr/bin/python3")) {
      GTEST_SKIP() << "the malloc counter and python3 are needed";
    }
    std::string name = testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '-');
    name += "-" + Net() + (Local() ? "-local" : "-core");
    // Each server process counts into its own file (read when it starts); nothing else
    // (the origin, curl) is preloaded.
    count_dir_ = fmt::format("{}/hotpath-{}-{}", test::TmpDir(), getpid(), name);
    fs::remove_all(count_dir_);
    fs::create_directories(count_dir_);
    core_count_ = count_dir_ + "/core.count";
    gateway_count_ = count_dir_ + "/gateway.count";
    const std::string preload = std::string("LD_PRELOAD=") + GOBLIN_MALLOC_COUNT_LIB;
    core_env_ = {preload, "GOBLIN_MALLOC_COUNT_FILE=" + core_count_};
    gateway_env_ = {preload, "GOBLIN_MALLOC_COUNT_FILE=" + gateway_count_};
    ASSERT_TRUE(StartCoreAndOrigin(name)) << (core_ ? core_->Output() : std::string());
    MirrorHarness::StartGateway(Net(), {"--local-hits", Local() ? "true" : "false"});
    ASSERT_FALSE(port_.empty()) << gateway_->Output();
  }
  void TearDown() override {
    StopAll();
    fs::remove_all(count_dir_);
  }
  const std::string& Net() const { return std::get<0>(GetParam()); }
  bool Local() const { return std::get<1>(GetParam()); }
  std::string count_dir_, core_count_, gateway_count_;
};

TEST_P(HotPath, AWarmKeepAliveHitStaysWithinItsAllocationBudget) {
  ASSERT_GT(ReadCount(core_count_), 0u) << "the counter was not preloaded into goblin-core";
  ASSERT_GT(ReadCount(gateway_count_), 0u) << "the counter was not preloaded into goblin-gateway";
  test::KeepAliveClient client(port_);
  ASSERT_TRUE(client.ok());
  const std::string path = "/gen/4K/hot";
  const std::string want = Origin(path);
  ASSERT_EQ(want.size(), 4096u);
  const int asked = OriginHits(path);  // (the test's own fetch of the object)
  test::KeepAliveClient::Answer a;
  // Warm up: the miss, then enough hits that every pool, map and buffer has grown.
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(client.Get(path, &a)) << i;
    ASSERT_EQ(a.status, 200) << a.headers;
    ASSERT_EQ(a.body, want);
  }
  EXPECT_NE(a.headers.find("X-Cache: HIT"), std::string::npos) << a.headers;
  // What the processes allocate with no traffic, for the log (timers, idle threads).
  const uint64_t core_idle0 = ReadCount(core_count_), gw_idle0 = ReadCount(gateway_count_);
  std::this_thread::sleep_for(500ms);
  std::printf("allocations in 0.5 s without traffic: gateway %llu, core %llu\n",
              static_cast<unsigned long long>(ReadCount(gateway_count_) - gw_idle0),
              static_cast<unsigned long long>(ReadCount(core_count_) - core_idle0));
  constexpr int kHits = 1000;
  const uint64_t core0 = ReadCount(core_count_), gw0 = ReadCount(gateway_count_);
  for (int i = 0; i < kHits; ++i) {
    ASSERT_TRUE(client.Get(path, &a)) << i;
    ASSERT_EQ(a.status, 200);
    ASSERT_EQ(a.body.size(), want.size());
  }
  const double core = double(ReadCount(core_count_) - core0) / kHits;
  const double gateway = double(ReadCount(gateway_count_) - gw0) / kHits;
  EXPECT_EQ(a.body, want);
  EXPECT_EQ(OriginHits(path), asked + 1);  // one fill; every other request a hit
  std::printf("allocations per warm keep-alive 4 KiB hit (--net %s, %s): gateway %.2f, core %.2f\n",
              Net().c_str(), Local() ? "served by the gateway" : "through the core", gateway, core);
  EXPECT_LE(gateway, Local() ? kLocalGatewayBudget : kCoreGatewayBudget);
  EXPECT_LE(core, Local() ? kLocalCoreBudget : kCoreCoreBudget);
}

// A hit on a connection of its own (Connection: close): the gateway keeps closed
// connections whole (buffers, output queue, last exchange) for the next accepts, so once
// warm an accept-hit-close costs it nothing either.
TEST_P(HotPath, AWarmHitOnAConnectionOfItsOwnStaysWithinItsAllocationBudget) {
  const std::string path = "/gen/4K/hot-per-connection";
  const std::string want = Origin(path);
  const std::string request =
      "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  auto hit = [&] {
    std::string r = test::RawExchange(port_, request);
    return r.starts_with("HTTP/1.1 200") && r.size() > want.size() &&
           r.compare(r.size() - want.size(), want.size(), want) == 0;
  };
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(hit()) << i;
  constexpr int kHits = 500;
  const uint64_t core0 = ReadCount(core_count_), gw0 = ReadCount(gateway_count_);
  for (int i = 0; i < kHits; ++i) ASSERT_TRUE(hit()) << i;
  const double core = double(ReadCount(core_count_) - core0) / kHits;
  const double gateway = double(ReadCount(gateway_count_) - gw0) / kHits;
  std::printf(
      "allocations per warm 4 KiB hit on a connection of its own (--net %s, %s): gateway %.2f, "
      "core %.2f\n",
      Net().c_str(), Local() ? "served by the gateway" : "through the core", gateway, core);
  EXPECT_LE(gateway, kConnectionGatewayBudget);
  EXPECT_LE(core, Local() ? kLocalCoreBudget : kCoreCoreBudget);
}

// The native plane's hot paths, counted in goblin-core alone (the clients are this test
// process, not counted): a warm 4 KiB GetInto over the ring, and a 16-byte PUBLISH to one
// subscriber (its delivery included).
class NativeHotPath : public testing::Test, public test::MirrorHarness {
 protected:
  void SetUp() override {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    GTEST_SKIP() << "a sanitizer build replaces malloc";
#endif
    if (!fs::exists(GOBLIN_MALLOC_COUNT_LIB) || !fs::exists("/usr/bin/python3")) {
      GTEST_SKIP() << "the malloc counter and python3 are needed";
    }
    count_dir_ = fmt::format("{}/hotpath-native-{}", test::TmpDir(), getpid());
    fs::remove_all(count_dir_);
    fs::create_directories(count_dir_);
    core_count_ = count_dir_ + "/core.count";
    core_env_ = {std::string("LD_PRELOAD=") + GOBLIN_MALLOC_COUNT_LIB,
                 "GOBLIN_MALLOC_COUNT_FILE=" + core_count_};
    ASSERT_TRUE(StartCoreAndOrigin("native")) << (core_ ? core_->Output() : std::string());
  }
  void TearDown() override {
    StopAll();
    fs::remove_all(count_dir_);
  }
  std::string count_dir_, core_count_;
};

// Allocations in the core per warm native GET (4 KiB, lent, a key longer than a short
// string's inline buffer: 0) and per PUBLISH delivered to one subscriber (0), with a little
// room for idle threads (docs/hot-path.md).
constexpr double kNativeGetBudget = 0.02, kPublishBudget = 0.02;

TEST_F(NativeHotPath, AWarmGetAndAPublishStayWithinTheirBudgets) {
  ASSERT_GT(ReadCount(core_count_), 0u) << "the counter was not preloaded into goblin-core";
  auto c = client::Connection::Open("unix:" + core_sock_);
  ASSERT_TRUE(c) << c.error().ToString();
  const std::string kKey = "native/a-hot-object-with-a-long-key";
  std::vector<uint8_t> data(4096);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  ASSERT_TRUE((*c)->Put(kKey, data));
  std::vector<uint8_t> buf(4096);
  auto get = [&] {
    uint64_t got = 0;
    auto m = (*c)->GetInto(kKey, buf, 0, &got);
    return m && m->found && got == data.size() && buf == data;
  };
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(get()) << i;
  constexpr int kOps = 1000;
  uint64_t c0 = ReadCount(core_count_);
  for (int i = 0; i < kOps; ++i) ASSERT_TRUE(get()) << i;
  const double per_get = double(ReadCount(core_count_) - c0) / kOps;

  auto sub = client::Connection::Open("unix:" + core_sock_);
  ASSERT_TRUE(sub) << sub.error().ToString();
  std::vector<std::string> channels{"hot-channel"};
  ASSERT_TRUE((*sub)->Subscribe(client::Connection::SubKind::kChannel, channels));
  auto publish = [&] {
    auto n = (*c)->Publish("hot-channel", "0123456789abcdef");
    if (!n || *n != 1) return false;
    auto m = (*sub)->NextMessage(std::chrono::seconds(5));
    return m && m->has_value() && (*m)->payload == "0123456789abcdef";
  };
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(publish()) << i;
  c0 = ReadCount(core_count_);
  for (int i = 0; i < kOps; ++i) ASSERT_TRUE(publish()) << i;
  const double per_publish = double(ReadCount(core_count_) - c0) / kOps;
  std::printf(
      "allocations in goblin-core per warm native 4 KiB GET %.2f, per PUBLISH to one "
      "subscriber %.2f\n",
      per_get, per_publish);
  EXPECT_LE(per_get, kNativeGetBudget);
  EXPECT_LE(per_publish, kPublishBudget);
}

INSTANTIATE_TEST_SUITE_P(Net, HotPath,
                         testing::Combine(testing::Values("sync", "async"), testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) ? "_local" : "_core");
                         });

}  // namespace
}  // namespace goblin
