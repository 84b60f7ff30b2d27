// The object store end to end: goblin-core with a prepared disk tier, the goblin CLI putting
// and getting files byte-exactly; restart, kill -9 mid-put, on-disk corruption and a full
// disk behave as documented.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "tests/system/process.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;
using test::Process;
using test::RunCommand;
namespace fs = std::filesystem;

class StoreSystem : public testing::Test {
 protected:
  void SetUp() override {
    base_ = fmt::format("{}/storesys-{}-{}", test::TmpDir(), getpid(),
                        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    fs::create_directories(base_);
    tier_ = base_ + "/tier";
    sock_ = test::SocketPath("store");
  }
  void TearDown() override {
    core_.reset();
    fs::remove(sock_);
    umount(tier_.c_str());  // if a test mounted one
    fs::remove_all(base_);
  }
  void Prepare() {
    auto [rc, out] = RunCommand({GOBLIN_CORE_BIN, "--prepare", tier_}, base_ + "/prepare.log");
    ASSERT_EQ(rc, 0) << out;
  }
  void StartCore(std::vector<std::string> extra = {}) {
    core_.reset();
    fs::remove(sock_);
    std::vector<std::string> argv{GOBLIN_CORE_BIN,
                                  "--listen-unix",
                                  sock_,
                                  "--ssd-dir",
                                  tier_,
                                  "--memory",
                                  "32M",
                                  "--block",
                                  "256K",
                                  "--ram-head",
                                  "256K",
                                  "--extent-size",
                                  "1M",
                                  "--tier-file-size",
                                  "64M"};
    if (std::find(extra.begin(), extra.end(), "--cores") == extra.end()) {
      argv.insert(argv.end(), {"--cores", "1"});
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    core_ = std::make_unique<Process>(argv, base_ + "/core.log");
    ASSERT_TRUE(test::WaitForPath(sock_, 20s)) << core_->Output();
  }
  std::pair<int, std::string> Cli(std::vector<std::string> args) {
    std::vector<std::string> argv{GOBLIN_CLI_BIN, "--target", "unix:" + sock_};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, base_ + "/cli.log", 300s);
  }
  std::string MakeFile(const std::string& name, uint64_t size, uint32_t seed) {
    std::string path = base_ + "/" + name;
    std::ofstream out(path, std::ios::binary);
    std::mt19937_64 rng(seed);
    std::vector<uint64_t> block(1 << 16);
    for (uint64_t left = size; left > 0;) {
      for (auto& w : block) w = rng();
      uint64_t n = std::min<uint64_t>(left, block.size() * 8);
      out.write(reinterpret_cast<const char*>(block.data()), static_cast<std::streamsize>(n));
      left -= n;
    }
    return path;
  }
  static bool SameFiles(const std::string& a, const std::string& b) {
    std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
    std::vector<char> x(1 << 20), y(1 << 20);
    while (fa && fb) {
      fa.read(x.data(), static_cast<std::streamsize>(x.size()));
      fb.read(y.data(), static_cast<std::streamsize>(y.size()));
      if (fa.gcount() != fb.gcount() ||
          std::memcmp(x.data(), y.data(), static_cast<size_t>(fa.gcount())) != 0) {
        return false;
      }
    }
    return fa.eof() && fb.eof();
  }
  void PutGetExact(uint64_t size, uint32_t seed) {
    std::string in = MakeFile("in-" + std::to_string(size), size, seed);
    std::string key = "/objects/" + std::to_string(size);
    auto [rc, out] = Cli({"put", key, in});
    ASSERT_EQ(rc, 0) << out;
    std::string back = in + ".back";
    auto [rc2, out2] = Cli({"get", key, "-o", back});
    ASSERT_EQ(rc2, 0) << out2;
    EXPECT_TRUE(SameFiles(in, back)) << size;
    fs::remove(back);
  }
  std::string base_, tier_, sock_;
  std::unique_ptr<Process> core_;
};

TEST_F(StoreSystem, PutAndGetObjectsByteExact) {
  ASSERT_NO_FATAL_FAILURE(Prepare());
  ASSERT_NO_FATAL_FAILURE(StartCore());
  for (uint64_t size : {uint64_t{1}, uint64_t{4096}, uint64_t{1} << 20, uint64_t{300} << 20}) {
    ASSERT_NO_FATAL_FAILURE(PutGetExact(size, static_cast<uint32_t>(size)));
  }
  auto [rc, out] = Cli({"head", "/objects/4096"});
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("size: 4096"), std::string::npos) << out;
  auto [rc2, out2] = Cli({"get", "/missing", "-o", base_ + "/missing"});
  EXPECT_EQ(rc2, 2);
  EXPECT_NE(out2.find("not found"), std::string::npos) << out2;
  EXPECT_FALSE(fs::exists(base_ + "/missing"));
  auto [rc3, out3] = Cli({"del", "/objects/1"});
  EXPECT_EQ(rc3, 0) << out3;
  EXPECT_EQ(Cli({"head", "/objects/1"}).first, 2);
}

// The largest size: 2 GiB through the CLI, byte-exact (label "slow").
TEST_F(StoreSystem, TwoGibObject) {
  ASSERT_NO_FATAL_FAILURE(Prepare());
  ASSERT_NO_FATAL_FAILURE(StartCore());
  ASSERT_NO_FATAL_FAILURE(PutGetExact(2ull << 30, 2));
}

TEST_F(StoreSystem, RestartKeepsEveryCommittedObject) {
  ASSERT_NO_FATAL_FAILURE(Prepare());
  ASSERT_NO_FATAL_FAILURE(StartCore());
  std::string a = MakeFile("a", 3 << 20, 1), b = MakeFile("b", 100, 2);
  ASSERT_EQ(Cli({"put", "/a", a}).first, 0);
  ASSERT_EQ(Cli({"put", "/b", b}).first, 0);
  core_->Signal(SIGTERM);
  ASSERT_EQ(core_->Wait(20s), 0) << core_->Output();
  ASSERT_NO_FATAL_FAILURE(StartCore());
  EXPECT_NE(core_->Output().find("2 objects"), std::string::npos) << core_->Output();
  ASSERT_EQ(Cli({"get", "/a", "-o", a + ".back"}).first, 0);
  ASSERT_EQ(Cli({"get", "/b", "-o", b + ".back"}).first, 0);
  EXPECT_TRUE(SameFiles(a, a + ".back"));
  EXPECT_TRUE(SameFiles(b, b + ".back"));
}

TEST_F(StoreSystem, KillDuringALargePutLeavesNoObject) {
  ASSERT_NO_FATAL_FAILURE(Prepare());
  ASSERT_NO_FATAL_FAILURE(StartCore());
  std::string kept = MakeFile("kept", 1 << 20, 3);
  ASSERT_EQ(Cli({"put", "/kept", kept}).first, 0);
  // The put reads from a pipe the test feeds, so the core dies mid-fill for certain (and the
  // size is unknown to the client, the streaming case).
  std::string fifo = base_ + "/feed";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  Process put({GOBLIN_CLI_BIN, "--target", "unix:" + sock_, "put", "/big", fifo},
              base_ + "/put.log");
  {
    std::ofstream feed(fifo, std::ios::binary);
    std::vector<char> chunk(1 << 20, 'x');
    for (int i = 0; i < 64; ++i)
      feed.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    feed.flush();
    std::this_thread::sleep_for(100ms);  // let the core take in what is buffered
    core_->Signal(SIGKILL);
    EXPECT_EQ(core_->Wait(10s), 128 + SIGKILL);
  }                             // the writer closes: the client sees end of input or the dead core
  EXPECT_NE(put.Wait(30s), 0);  // the client reports the loss
  ASSERT_NO_FATAL_FAILURE(StartCore());
  EXPECT_EQ(Cli({"head", "/big"}).first, 2);  // never visible
  ASSERT_EQ(Cli({"get", "/kept", "-o", kept + ".back"}).first, 0);
  EXPECT_TRUE(SameFiles(kept, kept + ".back"));
  ASSERT_NO_FATAL_FAILURE(PutGetExact(300 << 20, 4));  // and the next put succeeds
}

TEST_F(StoreSystem, CorruptedExtentIsNotServed) {
  ASSERT_NO_FATAL_FAILURE(Prepare());
  ASSERT_NO_FATAL_FAILURE(StartCore());
  std::string in = MakeFile("in", 3 << 20, 5);
  ASSERT_EQ(Cli({"put", "/victim", in}).first, 0);
  core_->Signal(SIGTERM);
  ASSERT_EQ(core_->Wait(20s), 0);
  // Damage every extent slot of the (only) object beyond its RAM head.
  {
    std::fstream f(tier_ + "/extent-000000.dat", std::ios::in | std::ios::out | std::ios::binary);
    for (uint64_t off :
         {uint64_t{300} << 10, uint64_t{1} << 20, uint64_t{2} << 20, (uint64_t{63} << 20) + 5}) {
      f.seekg(static_cast<long>(off));
      char c = 0;
      f.get(c);
      f.seekp(static_cast<long>(off));
      f.put(static_cast<char>(c ^ 0x20));
    }
  }
  ASSERT_NO_FATAL_FAILURE(StartCore());
  auto [rc, out] = Cli({"get", "/victim", "-o", in + ".back"});
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("checksum mismatch"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(in + ".back"));        // nothing half-written left for the user
  EXPECT_EQ(Cli({"head", "/victim"}).first, 2);  // dropped, never served
}

// A tier of two drives (--ssd-dir A,B) under a goblin-core of two shards: objects are
// striped over both; restarted with one drive gone, the core serves every object that had
// no byte on it, says what it dropped (log, goblinctl tiers), and takes new objects.
TEST_F(StoreSystem, ATierOfTwoDrivesLosesOnlyTheObjectsOnTheDriveThatIsGone) {
  const std::string first = base_ + "/drive-a", second = base_ + "/drive-b";
  tier_ = first + "," + second;
  ASSERT_NO_FATAL_FAILURE(Prepare());
  ASSERT_NO_FATAL_FAILURE(StartCore({"--cores", "2"}));
  std::vector<std::pair<std::string, std::string>> objects;  // key, file
  for (int i = 0; i < 16; ++i) {
    const uint64_t size = i % 4 == 0 ? (3 << 20) + 17 : 2000 + 40000 * static_cast<uint64_t>(i);
    objects.emplace_back("/o" + std::to_string(i), MakeFile("o" + std::to_string(i), size, 40 + i));
    ASSERT_EQ(Cli({"put", objects.back().first, objects.back().second}).first, 0);
  }
  const std::string admin = "unix:" + sock_ + ".admin";
  auto [rc, tiers] = RunCommand({GOBLIN_CTL_BIN, "--target", admin, "tiers"}, base_ + "/ctl.log");
  ASSERT_EQ(rc, 0) << tiers;
  EXPECT_NE(tiers.find(first), std::string::npos) << tiers;  // a line per drive
  EXPECT_NE(tiers.find(second), std::string::npos) << tiers;
  core_->Signal(SIGTERM);
  ASSERT_EQ(core_->Wait(20s), 0) << core_->Output();

  fs::remove_all(second);
  ASSERT_NO_FATAL_FAILURE(StartCore({"--cores", "2"}));
  EXPECT_NE(core_->Output().find("drive 1 is gone"), std::string::npos) << core_->Output();
  int kept = 0, dropped = 0;
  for (const auto& [key, file] : objects) {
    auto [get_rc, out] = Cli({"get", key, "-o", file + ".back"});
    if (get_rc == 0) {
      ++kept;
      EXPECT_TRUE(SameFiles(file, file + ".back")) << key;
    } else {
      ++dropped;
      EXPECT_EQ(get_rc, 2) << key << ": " << out;  // not found: never a damaged answer
      EXPECT_EQ(Cli({"head", key}).first, 2) << key;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GE(dropped, 4);  // (every multi-extent object had an extent on each drive)
  auto [rc2, after] = RunCommand({GOBLIN_CTL_BIN, "--target", admin, "tiers"}, base_ + "/ctl.log");
  ASSERT_EQ(rc2, 0) << after;
  EXPECT_NE(after.find(fmt::format("gone: {} objects dropped", dropped)), std::string::npos)
      << after;
  ASSERT_NO_FATAL_FAILURE(PutGetExact(5 << 20, 99));  // and the next put succeeds
}

// A disk tier on a 200 MiB file system: an object larger than the tier is refused before
// anything is evicted, and a file system filled by someone else is a clear error; what was
// stored stays readable in both cases.
TEST_F(StoreSystem, FullDiskIsAClearErrorAndLosesNothing) {
  fs::create_directories(tier_);
  if (mount("goblin-test", tier_.c_str(), "tmpfs", 0, "size=200m") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs for the tier here (needs root)";
  }
  ASSERT_NO_FATAL_FAILURE(Prepare());
  ASSERT_NO_FATAL_FAILURE(StartCore());
  std::string small = MakeFile("small", 20 << 20, 6);
  ASSERT_EQ(Cli({"put", "/small", small}).first, 0);
  std::string big = MakeFile("big", 300 << 20, 7);
  auto [rc, out] = Cli({"put", "/big", big});
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("does not fit"), std::string::npos) << out;
  EXPECT_EQ(Cli({"head", "/big"}).first, 2);
  // Someone else fills the file system: the tier cannot grow to its capacity.
  {
    std::ofstream ballast(tier_ + "/../tier/ballast", std::ios::binary);
    std::vector<char> mb(1 << 20, 'b');
    for (int i = 0; i < 120; ++i) ballast.write(mb.data(), static_cast<std::streamsize>(mb.size()));
  }
  std::string mid = MakeFile("mid", 80 << 20, 8);
  auto [rc2, out2] = Cli({"put", "/mid", mid});
  EXPECT_EQ(rc2, 1);
  EXPECT_NE(out2.find("resource exhausted"), std::string::npos) << out2;
  EXPECT_EQ(Cli({"head", "/mid"}).first, 2);
  ASSERT_EQ(Cli({"get", "/small", "-o", small + ".back"}).first, 0);
  EXPECT_TRUE(SameFiles(small, small + ".back"));
  core_.reset();
}

// A tier with a capacity: old objects make room for new ones, and every get is either a
// miss or the exact bytes.
TEST_F(StoreSystem, AFullTierEvictsOldObjects) {
  ASSERT_NO_FATAL_FAILURE(Prepare());
  ASSERT_NO_FATAL_FAILURE(StartCore({"--ssd-size", "64M"}));
  std::vector<std::string> files;
  for (int i = 0; i < 5; ++i) {
    files.push_back(MakeFile("e" + std::to_string(i), 20 << 20, 20 + i));
    auto [rc, out] = Cli({"put", "/e" + std::to_string(i), files.back()});
    ASSERT_EQ(rc, 0) << out;
  }
  int present = 0;
  for (int i = 0; i < 5; ++i) {
    std::string back = files[i] + ".back";
    auto [rc, out] = Cli({"get", "/e" + std::to_string(i), "-o", back});
    ASSERT_TRUE(rc == 0 || rc == 2) << out;
    if (rc == 0) {
      ++present;
      EXPECT_TRUE(SameFiles(files[i], back)) << i;
    }
  }
  EXPECT_EQ(Cli({"head", "/e0"}).first, 2);  // the oldest went first
  EXPECT_EQ(Cli({"head", "/e4"}).first, 0);  // the newest is there
  EXPECT_GE(present, 2);
  EXPECT_LE(present, 3);
}

// A reader that asks for a key while it is being stored streams the fill as it arrives
// (the mirror's request coalescing) and gets the whole object byte-exactly.
TEST_F(StoreSystem, AGetFollowsAPutInProgress) {
  ASSERT_NO_FATAL_FAILURE(Prepare());
  ASSERT_NO_FATAL_FAILURE(StartCore());
  std::string data = MakeFile("live", 40 << 20, 9);
  std::string fifo = base_ + "/live-feed";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  Process put({GOBLIN_CLI_BIN, "--target", "unix:" + sock_, "put", "/live", fifo},
              base_ + "/put.log");
  std::string back = base_ + "/live.back";
  std::unique_ptr<Process> get;
  {
    std::ofstream feed(fifo, std::ios::binary);
    std::ifstream src(data, std::ios::binary);
    std::vector<char> chunk(1 << 20);
    for (int i = 0; i < 40; ++i) {
      src.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      feed.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      feed.flush();  // a pipe write returns once the put client has taken most of it
      if (i == 10) {
        get = std::make_unique<Process>(
            std::vector<std::string>{GOBLIN_CLI_BIN, "--target", "unix:" + sock_, "get", "/live",
                                     "--follow", "-o", back},
            base_ + "/get.log");
        std::this_thread::sleep_for(200ms);
      }
    }
  }
  EXPECT_EQ(put.Wait(60s), 0) << put.Output();
  ASSERT_TRUE(get);
  EXPECT_EQ(get->Wait(60s), 0) << get->Output();
  EXPECT_NE(get->Output().find("fill in progress"), std::string::npos) << get->Output();
  EXPECT_TRUE(SameFiles(data, back));
}

}  // namespace
}  // namespace goblin
