// Heap allocations on the hot path (issue #20, docs/hot-path.md): goblin-core and
// goblin-gateway run with tests/support/malloc_count.cpp preloaded, each counting into a
// file of its own; a keep-alive client warms a 4 KiB object up, then the test counts what
// 1,000 more hits cost each process, in both --net modes. The budgets below are today's
// (measured, rounded up); the goal is zero, and every change that removes an allocation
// lowers them. Release build only (a sanitizer replaces malloc).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "tests/system/mirror_harness.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// Allocations per warm keep-alive 4 KiB hit, gateway and core (see the header): today's
// counts (docs/hot-path.md lists them) and a tenth for what idle threads allocate meanwhile
// (the gateway's 1.28: its response head, and an output deque block every few responses).
constexpr double kGatewayBudget = 1.4;
constexpr double kCoreBudget = 4.1;

// The count a preloaded process keeps in `path` (0 before the file exists).
uint64_t ReadCount(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  uint64_t v = 0;
  if (pread(fd, &v, sizeof v, 0) != sizeof v) v = 0;
  close(fd);
  return v;
}

class HotPath : public testing::TestWithParam<std::string>, public test::MirrorHarness {
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
    name += "-" + GetParam();
    // Each server process counts into its own file (read when it starts); nothing else
    // (the origin, curl) is preloaded.
    count_dir_ = fmt::format("{}/hotpath-{}-{}", test::TmpDir(), getpid(), GetParam());
    fs::remove_all(count_dir_);
    fs::create_directories(count_dir_);
    core_count_ = count_dir_ + "/core.count";
    gateway_count_ = count_dir_ + "/gateway.count";
    const std::string preload = std::string("LD_PRELOAD=") + GOBLIN_MALLOC_COUNT_LIB;
    core_env_ = {preload, "GOBLIN_MALLOC_COUNT_FILE=" + core_count_};
    gateway_env_ = {preload, "GOBLIN_MALLOC_COUNT_FILE=" + gateway_count_};
    ASSERT_TRUE(StartCoreAndOrigin(name)) << (core_ ? core_->Output() : std::string());
    MirrorHarness::StartGateway(GetParam());
    ASSERT_FALSE(port_.empty()) << gateway_->Output();
  }
  void TearDown() override {
    StopAll();
    fs::remove_all(count_dir_);
  }
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
  std::printf("allocations per warm keep-alive 4 KiB hit (--net %s): gateway %.2f, core %.2f\n",
              GetParam().c_str(), gateway, core);
  EXPECT_LE(gateway, kGatewayBudget);
  EXPECT_LE(core, kCoreBudget);
}

INSTANTIATE_TEST_SUITE_P(Net, HotPath, testing::Values("sync", "async"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace goblin
