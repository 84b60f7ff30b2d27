#include "goblin/store/disk_io.h"
#include "tests/support/scratch.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>
#include <random>

namespace goblin::store {
namespace {

namespace fs = std::filesystem;

fs::path TestDir(const std::string& tag) { return test::ScratchDir("diskio-" + tag); }

// Every engine must pass the same tests.
class DiskIoTest : public testing::TestWithParam<IoChoice> {
 protected:
  void SetUp() override {
    auto e = IoEngine::Create(GetParam(), 8);
    if (!e && GetParam() == IoChoice::kIoUring) {
      GTEST_SKIP() << "io_uring is not available here: " << e.error().ToString();
    }
    ASSERT_TRUE(e) << e.error().ToString();
    engine_ = std::move(*e);
    dir_ = TestDir(testing::UnitTest::GetInstance()->current_test_info()->name() +
                   std::to_string(static_cast<int>(GetParam())));
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Submits, flushes and reaps everything; returns the completions.
  std::vector<IoCompletion> RunAll(const std::vector<IoRequest>& reqs) {
    std::vector<IoCompletion> done;
    size_t next = 0;
    while (done.size() < reqs.size()) {
      while (next < reqs.size() && engine_->Submit(reqs[next])) ++next;
      EXPECT_TRUE(engine_->Flush());
      IoCompletion c[16];
      auto n = engine_->Reap(c, 1);
      EXPECT_TRUE(n) << n.error().ToString();
      if (!n) break;
      done.insert(done.end(), c, c + *n);
    }
    return done;
  }

  std::unique_ptr<IoEngine> engine_;
  fs::path dir_;
};

TEST_P(DiskIoTest, WritesAndReadsBackManyInFlight) {
  auto file = ExtentFile::Open((dir_ / "extent-0").string(), 16 << 20);
  ASSERT_TRUE(file) << file.error().ToString();
  EXPECT_TRUE(file->direct());
  EXPECT_EQ(engine_->backend(),
            GetParam() == IoChoice::kSync ? IoBackend::kSync : IoBackend::kIoUring);
  auto pool = IoBufferPool::Create(32, 64 << 10);
  ASSERT_TRUE(pool);
  std::mt19937 rng(3);
  std::vector<uint64_t> offsets;
  for (int i = 0; i < 16; ++i) offsets.push_back((rng() % 250) * (64 << 10));
  std::sort(offsets.begin(), offsets.end());
  offsets.erase(std::unique(offsets.begin(), offsets.end()), offsets.end());
  std::vector<IoRequest> writes;
  for (size_t i = 0; i < offsets.size(); ++i) {
    uint32_t b = *(*pool)->Acquire();
    std::memset((*pool)->Buffer(b), static_cast<int>(i + 1), 64 << 10);
    writes.push_back({file->fd(), offsets[i], (*pool)->Buffer(b), 64 << 10, true, i});
  }
  for (auto& c : RunAll(writes)) EXPECT_EQ(c.result, 64 << 10) << "write " << c.user_data;
  std::vector<IoRequest> reads;
  std::vector<uint32_t> read_bufs;
  for (size_t i = 0; i < offsets.size(); ++i) {
    uint32_t b = *(*pool)->Acquire();
    std::memset((*pool)->Buffer(b), 0, 64 << 10);
    read_bufs.push_back(b);
    reads.push_back({file->fd(), offsets[i], (*pool)->Buffer(b), 64 << 10, false, 100 + i});
  }
  auto done = RunAll(reads);
  ASSERT_EQ(done.size(), offsets.size());
  for (auto& c : done) {
    ASSERT_EQ(c.result, 64 << 10);
    size_t i = c.user_data - 100;
    const uint8_t* p = (*pool)->Buffer(read_bufs[i]);
    EXPECT_EQ(p[0], i + 1);
    EXPECT_EQ(p[(64 << 10) - 1], i + 1);
  }
  EXPECT_EQ(engine_->in_flight(), 0u);
}

TEST_P(DiskIoTest, RegisteredBuffersAndOutsideBuffersBothWork) {
  auto file = ExtentFile::Open((dir_ / "e").string(), 4 << 20);
  ASSERT_TRUE(file);
  auto pool = IoBufferPool::Create(4, 1 << 20);
  ASSERT_TRUE(pool);
  auto reg = engine_->RegisterBuffers((*pool)->Buffer(0), 4ull << 20);
  ASSERT_TRUE(reg) << reg.error().ToString();
  // io_uring pins them (fixed buffers); the synchronous engine has nothing to register.
  EXPECT_EQ(engine_->buffers_registered(), GetParam() == IoChoice::kIoUring);
  if (engine_->buffers_registered()) {
    EXPECT_FALSE(engine_->RegisterBuffers((*pool)->Buffer(0), 4096));
  }
  for (uint32_t b = 0; b < 4; ++b)
    std::memset((*pool)->Buffer(b), 'a' + static_cast<int>(b), 1 << 20);
  auto* outside = static_cast<uint8_t*>(aligned_alloc(kDirectAlignment, 1 << 20));
  std::memset(outside, 'z', 1 << 20);
  std::vector<IoRequest> writes;
  for (uint32_t b = 0; b < 3; ++b) {
    writes.push_back({file->fd(), uint64_t{b} << 20, (*pool)->Buffer(b), 1 << 20, true, b});
  }
  writes.push_back({file->fd(), 3u << 20, outside, 1 << 20, true, 3});
  for (auto& c : RunAll(writes)) EXPECT_EQ(c.result, 1 << 20) << "write " << c.user_data;
  // Read back crosswise: pool buffers get what came from the outside buffer and vice versa.
  std::memset(outside, 0, 1 << 20);
  for (uint32_t b = 0; b < 4; ++b) std::memset((*pool)->Buffer(b), 0, 1 << 20);
  auto done = RunAll({{file->fd(), 3u << 20, (*pool)->Buffer(0), 1 << 20, false, 10},
                      {file->fd(), 1u << 20, outside, 1 << 20, false, 11},
                      {file->fd(), 2u << 20, (*pool)->Buffer(3) + 4096, 8192, false, 12}});
  for (auto& c : done) EXPECT_EQ(c.result, c.user_data == 12 ? 8192 : 1 << 20) << c.user_data;
  EXPECT_EQ((*pool)->Buffer(0)[0], 'z');
  EXPECT_EQ((*pool)->Buffer(0)[(1 << 20) - 1], 'z');
  EXPECT_EQ(outside[0], 'b');
  EXPECT_EQ(outside[(1 << 20) - 1], 'b');
  EXPECT_EQ((*pool)->Buffer(3)[4096], 'c');
  EXPECT_EQ((*pool)->Buffer(3)[4096 + 8191], 'c');
  EXPECT_EQ((*pool)->Buffer(3)[0], 0);
  free(outside);
}

TEST_P(DiskIoTest, DepthBoundsWhatIsInFlight) {
  auto file = ExtentFile::Open((dir_ / "e").string(), 1 << 20);
  ASSERT_TRUE(file);
  void* buf = aligned_alloc(kDirectAlignment, 4096);
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(engine_->Submit({file->fd(), 0, buf, 4096, false, 0}));
  EXPECT_FALSE(engine_->Submit({file->fd(), 0, buf, 4096, false, 0}));
  IoCompletion c[8];
  ASSERT_TRUE(engine_->Flush());
  size_t got = 0;
  while (got < 8) got += engine_->Reap({c + got, 8 - got}, 1).value_or(0);
  EXPECT_TRUE(engine_->Submit({file->fd(), 0, buf, 4096, false, 0}));
  ASSERT_TRUE(engine_->Reap(c, 1));
  free(buf);
}

TEST_P(DiskIoTest, MisalignedRequestsFailWithEinval) {
  auto file = ExtentFile::Open((dir_ / "e").string(), 1 << 20);
  ASSERT_TRUE(file);
  auto* buf = static_cast<uint8_t*>(aligned_alloc(kDirectAlignment, 8192));
  auto done = RunAll({{file->fd(), 0, buf + 1, 4096, false, 1},
                      {file->fd(), 100, buf, 4096, false, 2},
                      {file->fd(), 0, buf, 100, true, 3},
                      {file->fd(), 4096, buf, 4096, false, 4}});
  ASSERT_EQ(done.size(), 4u);
  for (auto& c : done) {
    if (c.user_data == 4) {
      EXPECT_EQ(c.result, 4096);
    } else {
      EXPECT_EQ(c.result, -EINVAL) << c.user_data;
    }
  }
  free(buf);
}

TEST_P(DiskIoTest, ReadingPastTheEndIsShort) {
  auto file = ExtentFile::Open((dir_ / "e").string(), 1 << 20);
  ASSERT_TRUE(file);
  void* buf = aligned_alloc(kDirectAlignment, 8192);
  auto done = RunAll({{file->fd(), (1 << 20) - 4096, buf, 8192, false, 1},
                      {file->fd(), 2 << 20, buf, 4096, false, 2}});
  for (auto& c : done) EXPECT_EQ(c.result, c.user_data == 1 ? 4096 : 0);
  free(buf);
}

INSTANTIATE_TEST_SUITE_P(Engines, DiskIoTest, testing::Values(IoChoice::kIoUring, IoChoice::kSync),
                         [](const testing::TestParamInfo<IoChoice>& i) {
                           return std::string(i.param == IoChoice::kSync ? "Sync" : "IoUring");
                         });

TEST(IoBufferPool, LendsABoundedSetAndIsMappable) {
  auto pool = IoBufferPool::Create(4, 8192);
  ASSERT_TRUE(pool);
  std::vector<uint32_t> got;
  while (auto b = (*pool)->Acquire()) got.push_back(*b);
  EXPECT_EQ(got.size(), 4u);
  EXPECT_EQ((*pool)->free_count(), 0u);
  std::memcpy((*pool)->Buffer(got[2]), "tail", 4);
  void* ro = mmap(nullptr, 4 * 8192, PROT_READ, MAP_SHARED, (*pool)->fd(), 0);
  ASSERT_NE(ro, MAP_FAILED);
  EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(ro) + (*pool)->OffsetOf(got[2]), "tail", 4), 0);
  munmap(ro, 4 * 8192);
  (*pool)->Release(got[1]);
  EXPECT_EQ((*pool)->Acquire().value(), got[1]);
  EXPECT_FALSE(IoBufferPool::Create(4, 1000));
}

// A shared buffer is free once every owner released it, pins or not.
TEST(IoBufferPool, ASharedBufferIsFreeAfterEveryOwnerReleasedIt) {
  auto pool = IoBufferPool::Create(2, 8192);
  ASSERT_TRUE(pool);
  IoBufferPool& p = **pool;
  const uint32_t b = p.Acquire().value();
  p.Share(b);
  p.Share(b);
  p.Release(b);
  p.Release(b);
  EXPECT_EQ(p.free_count(), 1u);  // (one owner left)
  p.Pin(b);
  p.Release(b);  // the last owner, while pinned
  EXPECT_EQ(p.free_count(), 1u);
  p.Unpin(b);
  EXPECT_EQ(p.free_count(), 2u);
  const uint32_t again = p.Acquire().value();  // (reused: one owner again)
  p.Release(again);
  EXPECT_EQ(p.free_count(), 2u);
}

TEST(ExtentFile, RefusesFileSystemsWithoutODirect) {
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  std::string path = "/dev/shm/goblin-extent-" + std::to_string(getpid());
  auto r = ExtentFile::Open(path, 1 << 20);
  if (r) {
    unlink(path.c_str());
    GTEST_SKIP() << "/dev/shm supports O_DIRECT on this kernel";
  }
  EXPECT_EQ(r.error().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.error().message().find("O_DIRECT"), std::string::npos);
  auto buffered = ExtentFile::Open(path, 1 << 20, /*allow_buffered=*/true);
  ASSERT_TRUE(buffered);
  EXPECT_FALSE(buffered->direct());
  unlink(path.c_str());
}

// A full file system: a private 8 MiB tmpfs (needs root); a 16 MiB extent does not fit,
// the error says so, and no half-allocated file is left behind.
TEST(ExtentFile, FullFileSystemIsAClearErrorAndLeavesNothing) {
  fs::path dir = TestDir("full");
  if (mount("goblin-test", dir.c_str(), "tmpfs", 0, "size=8m") != 0) {
    fs::remove_all(dir);
    GTEST_SKIP() << "cannot mount a small tmpfs here (needs root): " << strerror(errno);
  }
  Result<ExtentFile> r = Err(StatusCode::kInternal, "not run");
  bool exists = false, small_ok = false;
  {
    r = ExtentFile::Open((dir / "extent-0").string(), 16 << 20, /*allow_buffered=*/true);
    exists = fs::exists(dir / "extent-0");
    small_ok = ExtentFile::Open((dir / "extent-1").string(), 4 << 20, true).has_value();
  }
  if (r) r = Err(StatusCode::kInternal, "unexpectedly fit");  // closes the file before umount
  umount(dir.c_str());
  fs::remove_all(dir);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), StatusCode::kResourceExhausted) << r.error().ToString();
  EXPECT_FALSE(exists);
  EXPECT_TRUE(small_ok);  // what fits still works
}

}  // namespace
}  // namespace goblin::store
