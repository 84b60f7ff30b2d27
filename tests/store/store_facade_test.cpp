#include "goblin/store/store.h"
#include "tests/support/scratch.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <thread>

namespace goblin::store {
namespace {

namespace fs = std::filesystem;
constexpr uint32_t kExtent = 64 << 10;
constexpr uint64_t kHead = 64 << 10;

class StoreTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::ScratchDir("store", /*create=*/false).string();
    ASSERT_TRUE(PrepareTier(dir_));
    opts_.pool.memory = 8 << 20;
    opts_.pool.block = 64 << 10;
    opts_.pool.hugepages = HugePages::kOff;
    opts_.pool.lock = false;
    opts_.ram_head = kHead;
    opts_.tier_dirs = {dir_};
    opts_.tier.extent_bytes = kExtent;
    opts_.tier.file_bytes = 4 << 20;
    opts_.tier.max_files = 8;
    opts_.io_buffers = 8;
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(dir_);
  }
  void OpenStore() {
    store_.reset();
    auto s = Store::Open(opts_);
    ASSERT_TRUE(s) << s.error().ToString();
    store_ = std::move(*s);
  }
  static std::vector<uint8_t> Data(size_t n, uint32_t seed) {
    std::vector<uint8_t> v(n);
    std::mt19937 rng(seed);
    for (auto& b : v) b = static_cast<uint8_t>(rng());
    return v;
  }
  Result<uint64_t> Put(const std::string& key, const std::vector<uint8_t>& data, uint64_t ttl = 0) {
    GOBLIN_ASSIGN_OR_RETURN(auto start, store_->BeginFill(key, ttl, "etag: \"" + key + "\""));
    if (start.first != Store::FillStart::kGranted)
      return Err(StatusCode::kAlreadyExists, "in progress");
    for (size_t off = 0; off < data.size(); off += 10000) {
      GOBLIN_RETURN_IF_ERROR(store_->Append(
          start.second, {data.data() + off, std::min<size_t>(10000, data.size() - off)}));
    }
    return store_->Commit(start.second, data.size());
  }
  Result<std::vector<uint8_t>> GetAll(const std::string& key) {
    GOBLIN_ASSIGN_OR_RETURN(auto loan, store_->Get(key));
    if (!loan) return Err(StatusCode::kNotFound, "miss");
    std::vector<uint8_t> out(loan->info.size);
    auto r = store_->Read(*loan, 0, out);
    store_->Release(*loan);
    if (!r) return Err(r.error());
    return out;
  }
  std::string dir_;
  StoreOptions opts_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreTest, EverySizeClassRoundTripsWithItsHeadInRam) {
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  uint32_t seed = 1;
  for (size_t size : {size_t{1}, size_t{4096}, size_t{kHead - 1}, size_t{kHead}, size_t{kHead + 1},
                      size_t{1 << 20}, size_t{(3 << 20) + 7}}) {
    std::string key = "/obj/" + std::to_string(size);
    auto data = Data(size, seed++);
    ASSERT_TRUE(Put(key, data)) << size;
    auto loan = store_->Get(key);
    ASSERT_TRUE(loan && *loan);
    EXPECT_EQ((*loan)->info.size, size);
    EXPECT_EQ((*loan)->info.metadata, "etag: \"" + key + "\"");
    ASSERT_TRUE((*loan)->head.has_value()) << size;
    EXPECT_EQ((*loan)->head_bytes, std::min<uint64_t>(size, kHead));
    // The head really is in the pool.
    EXPECT_EQ(
        std::memcmp(store_->pool().At((*loan)->head->offset), data.data(), (*loan)->head_bytes), 0);
    // Whole object and ranges across the head/tail boundary.
    std::vector<uint8_t> all(size);
    ASSERT_TRUE(store_->Read(**loan, 0, all));
    EXPECT_EQ(all, data) << size;
    std::mt19937 rng(seed);
    for (int i = 0; i < 10; ++i) {
      uint64_t off = rng() % size, len = 1 + rng() % (size - off);
      std::vector<uint8_t> part(len);
      ASSERT_TRUE(store_->Read(**loan, off, part));
      ASSERT_EQ(std::memcmp(part.data(), data.data() + off, len), 0) << size << " @" << off;
    }
    std::vector<uint8_t> past(2);
    EXPECT_FALSE(store_->Read(**loan, size - 1, past));
    store_->Release(**loan);
  }
  EXPECT_EQ(store_->stats().objects, 7u);
  EXPECT_EQ(store_->stats().loans_out, 0u);
  // Small objects took small slots, not 64 KiB ones.
  EXPECT_LT(store_->pool().stats().bytes_reserved, 7 * kHead);
}

TEST_F(StoreTest, RestartKeepsObjectsAndRefillsHeadsOnFirstRead) {
  auto a = Data(200000, 7), b = Data(100, 8);
  {
    ASSERT_NO_FATAL_FAILURE(OpenStore());
    ASSERT_TRUE(Put("/a", a));
    ASSERT_TRUE(Put("/b", b));
    ASSERT_TRUE(store_->Delete("/b").value());
    ASSERT_TRUE(Put("/b", b));
  }
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  EXPECT_EQ(store_->stats().objects, 2u);
  EXPECT_EQ(store_->stats().heads_in_ram, 0u);
  EXPECT_EQ(GetAll("/a").value(), a);
  EXPECT_EQ(GetAll("/b").value(), b);
  EXPECT_EQ(store_->stats().head_refills, 2u);
  EXPECT_EQ(GetAll("/a").value(), a);
  EXPECT_EQ(store_->stats().head_refills, 2u);  // once only
  // The tier's free space was rebuilt: new objects do not overwrite old ones.
  ASSERT_TRUE(Put("/c", Data(500000, 9)));
  EXPECT_EQ(GetAll("/a").value(), a);
}

TEST_F(StoreTest, OneFillPerKeyAndAbortLeavesNothing) {
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto f1 = store_->BeginFill("/k", 0, "");
  ASSERT_TRUE(f1);
  EXPECT_EQ(f1->first, Store::FillStart::kGranted);
  auto f2 = store_->BeginFill("/k", 0, "");
  ASSERT_TRUE(f2);
  EXPECT_EQ(f2->first, Store::FillStart::kInProgress);
  auto data = Data(300000, 1);
  ASSERT_TRUE(store_->Append(f1->second, data));
  EXPECT_FALSE(store_->Head("/k").value());  // not visible before commit
  store_->Abort(f1->second);
  EXPECT_FALSE(store_->Head("/k").value());
  EXPECT_EQ(store_->tier().stats().slots_used, 0u);
  EXPECT_EQ(store_->pool().stats().slots_used, 0u);
  // Announced size must match.
  auto f3 = store_->BeginFill("/k", 0, "");
  ASSERT_TRUE(store_->Append(f3->second, data));
  EXPECT_FALSE(store_->Commit(f3->second, data.size() + 1));
  EXPECT_FALSE(store_->Head("/k").value());
  EXPECT_EQ(store_->tier().stats().slots_used, 0u);
}

TEST_F(StoreTest, ReplacedObjectStaysReadableThroughItsLoan) {
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto v1 = Data(400000, 1), v2 = Data(300000, 2);
  ASSERT_TRUE(Put("/x", v1));
  auto loan = store_->Get("/x");
  ASSERT_TRUE(loan && *loan);
  uint64_t used_v1 = store_->tier().stats().slots_used;
  ASSERT_TRUE(Put("/x", v2));
  ASSERT_TRUE(Put("/y", Data(400000, 3)));  // would reuse v1's space if it were freed
  std::vector<uint8_t> old(v1.size());
  ASSERT_TRUE(store_->Read(**loan, 0, old));
  EXPECT_EQ(old, v1);
  EXPECT_EQ(GetAll("/x").value(), v2);
  uint64_t before = store_->tier().stats().slots_used;
  store_->Release(**loan);
  EXPECT_EQ(store_->tier().stats().slots_used, before - used_v1);
  store_->Release(**loan);  // a second release is ignored
}

TEST_F(StoreTest, DamagedDiskDataIsDetectedAndTheObjectDropped) {
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto data = Data(300000, 4);
  ASSERT_TRUE(Put("/bad", data));
  auto loan = store_->Get("/bad");
  ASSERT_TRUE(loan && *loan);
  const Extent& e = (*loan)->extents[2];  // beyond the RAM head
  int fd = open(fmt::format("{}/extent-{:06}.dat", dir_, e.file).c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  uint8_t b = 0;
  ASSERT_EQ(pread(fd, &b, 1, static_cast<off_t>(e.offset + 5)), 1);
  b ^= 1;
  ASSERT_EQ(pwrite(fd, &b, 1, static_cast<off_t>(e.offset + 5)), 1);
  close(fd);
  std::vector<uint8_t> head(kHead);
  EXPECT_TRUE(store_->Read(**loan, 0, head));  // the head comes from RAM
  std::vector<uint8_t> all(data.size());
  auto r = store_->Read(**loan, 0, all);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), StatusCode::kCorruption);
  store_->Release(**loan);
  EXPECT_FALSE(store_->Head("/bad").value());
  EXPECT_EQ(store_->stats().corrupt_dropped, 1u);
}

TEST_F(StoreTest, FullTierRefusesTheFillAndKeepsWhatIsStored) {
  opts_.tier.max_files = 1;
  opts_.tier.file_bytes = 16 * kExtent;
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto keep = Data(10 * kExtent, 5);
  ASSERT_TRUE(Put("/keep", keep));
  auto r = Put("/big", Data(10 * kExtent, 6));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(store_->Head("/big").value());
  EXPECT_EQ(GetAll("/keep").value(), keep);
  EXPECT_TRUE(Put("/small", Data(3 * kExtent, 7)));  // what fits still goes in
}

TEST_F(StoreTest, ExpiredObjectsAreMisses) {
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  ASSERT_TRUE(Put("/short", Data(10, 1), /*ttl=*/1));
  ASSERT_TRUE(Put("/long", Data(10, 2), /*ttl=*/3600ull * 1'000'000'000));
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_FALSE(store_->Head("/short").value());
  EXPECT_TRUE(store_->Head("/long").value());
  EXPECT_EQ(store_->stats().expired, 1u);
}

// kill -9 in the middle of a large fill: after a restart the object does not exist, the
// committed ones do, and the space the dead fill took is usable again.
TEST_F(StoreTest, CrashMidFillLeavesNoVisibleObject) {
  auto kept = Data(150000, 1);
  {
    ASSERT_NO_FATAL_FAILURE(OpenStore());
    ASSERT_TRUE(Put("/kept", kept));
  }
  store_.reset();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto s = Store::Open(opts_);
    if (!s) _exit(1);
    auto f = (*s)->BeginFill("/torn", 0, "");
    auto d = Data(2 << 20, 2);
    (void)(*s)->Append(f->second, d);
    raise(SIGKILL);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  EXPECT_FALSE(store_->Head("/torn").value());
  EXPECT_EQ(GetAll("/kept").value(), kept);
  EXPECT_EQ(store_->tier().stats().slots_used, 3u);  // only /kept's extents
  ASSERT_TRUE(Put("/torn", Data(2 << 20, 3)));
}

TEST_F(StoreTest, SecondTierIsRefusedForNow) {
  opts_.tier_dirs.push_back(dir_ + "-hdd");
  auto s = Store::Open(opts_);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace goblin::store
