#include "goblin/store/store.h"
#include "tests/support/scratch.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <set>
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
    opts_.tier_dirs = {{dir_}};
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
  // Drains a stream (polling the store while it waits, for at most 10 s).
  Result<std::vector<uint8_t>> Drain(Store::Stream& st, const std::function<void()>& on_wait = {}) {
    std::vector<uint8_t> out;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      std::span<const uint8_t> bytes;
      GOBLIN_ASSIGN_OR_RETURN(auto step, st.Peek(&bytes));
      if (step == Store::Stream::Step::kEnd) return out;
      if (step == Store::Stream::Step::kData) {
        EXPECT_EQ(st.position(), out.size() + first_offset_);
        size_t n = std::min<size_t>(bytes.size(), 3000);  // consume in odd pieces
        out.insert(out.end(), bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
        st.Consume(n);
        continue;
      }
      if (on_wait) on_wait();
      GOBLIN_RETURN_IF_ERROR(store_->Poll());
      if (std::chrono::steady_clock::now() > deadline)
        return Err(StatusCode::kTimeout, "stream stuck at {}", st.position());
    }
  }
  std::string dir_;
  StoreOptions opts_;
  std::unique_ptr<Store> store_;
  uint64_t first_offset_ = 0;
};

TEST_F(StoreTest, EverySizeClassRoundTripsWithItsHeadInRam) {
  opts_.ram_tails = false;  // (heads alone: the pool's bytes below are theirs)
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

// ---- RAM tails: idle pool blocks hold bytes past the heads ----

TEST_F(StoreTest, AFillKeepsItsTailInIdleRamAndStreamsServeItWithoutTheDisk) {
  ASSERT_NO_FATAL_FAILURE(OpenStore());  // 8 MiB pool: 128 blocks of 64 KiB
  auto data = Data(20 * kHead + 123, 1);
  ASSERT_TRUE(Put("/t", data));
  EXPECT_EQ(store_->stats().tail_bytes_in_ram, data.size() - kHead);
  EXPECT_EQ(store_->stats().tail_blocks_filled, 20u);
  // The last 123 bytes moved from their block to a slot of their size at commit.
  EXPECT_EQ(store_->pool().stats().bytes_requested, data.size());
  EXPECT_EQ(store_->pool().stats().bytes_reserved, 20 * kHead + 128);
  const uint64_t disk0 = store_->tier().stats().read_bytes;
  for (uint64_t from : {uint64_t{0}, kHead, kHead + 5, uint64_t{7 * kHead + 9}}) {
    first_offset_ = from;
    auto o = store_->OpenStream("/t", from);
    ASSERT_TRUE(o && o->stream);
    auto got = Drain(*o->stream);
    ASSERT_TRUE(got) << got.error().ToString();
    EXPECT_EQ(*got, std::vector<uint8_t>(data.begin() + static_cast<ptrdiff_t>(from), data.end()));
  }
  EXPECT_EQ(store_->tier().stats().read_bytes, disk0);  // every byte from RAM
  EXPECT_GT(store_->stats().tail_bytes_served, 3 * (data.size() - kHead) - kHead);
  // Gone with the object: the pool holds nothing once it is deleted.
  ASSERT_TRUE(store_->Delete("/t").value());
  EXPECT_EQ(store_->stats().tail_bytes_in_ram, 0u);
  EXPECT_EQ(store_->pool().stats().slots_used, 0u);
}

TEST_F(StoreTest, WithoutRamTailsOnlyHeadsAreKept) {
  opts_.ram_tails = false;
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto data = Data(20 * kHead, 2);
  ASSERT_TRUE(Put("/t", data));
  EXPECT_EQ(store_->stats().tail_bytes_in_ram, 0u);
  EXPECT_EQ(store_->pool().stats().slots_used, 1u);
  first_offset_ = kHead;
  auto o = store_->OpenStream("/t", kHead);
  ASSERT_TRUE(o && o->stream);
  auto got = Drain(*o->stream);
  ASSERT_TRUE(got) << got.error().ToString();
  EXPECT_EQ(got->size(), data.size() - kHead);
  EXPECT_GE(store_->tier().stats().read_bytes, data.size() - kHead);
}

TEST_F(StoreTest, TailsLeaveAReserveToHeadsAndGiveWayToThem) {
  opts_.pool.memory = 2 << 20;  // 32 blocks; tails leave 2 free
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto big = Data(40 * kHead, 3);
  ASSERT_TRUE(Put("/big", big));  // head + 29 tail blocks: the pool is full but the reserve
  EXPECT_EQ(store_->pool().stats().blocks_free, 2u);
  EXPECT_EQ(store_->stats().tail_bytes_in_ram, 29 * kHead);
  // New heads take the reserve, then the tail's blocks: no head is demoted for a tail.
  std::vector<std::vector<uint8_t>> smalls;
  for (int i = 0; i < 20; ++i) {
    smalls.push_back(Data(2 * kHead, 100 + i));
    ASSERT_TRUE(Put("/s" + std::to_string(i), smalls.back()));
  }
  EXPECT_EQ(store_->stats().heads_demoted, 0u);
  EXPECT_GE(store_->stats().tails_dropped, 1u);
  EXPECT_EQ(store_->stats().heads_in_ram, 21u);
  // The tail that went is read from disk again, byte for byte.
  EXPECT_EQ(GetAll("/big").value(), big);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(GetAll("/s" + std::to_string(i)).value(), smalls[i]);
}

TEST_F(StoreTest, AReadBringsATailBackFromDiskWhileThePoolHasRoom) {
  auto data = Data(12 * kHead + 77, 4);
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  ASSERT_TRUE(Put("/r", data));
  ASSERT_NO_FATAL_FAILURE(OpenStore());  // a restart: nothing in RAM
  EXPECT_EQ(store_->stats().tail_bytes_in_ram, 0u);
  auto read = [&](uint64_t from) {
    first_offset_ = from;
    auto o = store_->OpenStream("/r", from);
    EXPECT_TRUE(o && o->stream);
    auto got = Drain(*o->stream);
    EXPECT_TRUE(got) << got.error().ToString();
    EXPECT_EQ(*got, std::vector<uint8_t>(data.begin() + static_cast<ptrdiff_t>(from), data.end()));
  };
  read(0);  // from disk: head and tail stay
  EXPECT_EQ(store_->stats().tail_bytes_in_ram, data.size() - kHead);
  EXPECT_EQ(store_->stats().tail_blocks_adopted, 12u);
  const uint64_t disk0 = store_->tier().stats().read_bytes;
  read(0);
  read(3 * kHead + 1);
  EXPECT_EQ(store_->tier().stats().read_bytes, disk0);
}

// An extent ends at the RAM head's end: reading what follows a resident head reads only
// those bytes from disk (an extent is read whole, its checksum covers it), and a read of the
// whole object from disk still gets every byte.
TEST_F(StoreTest, TheTailIsReadFromDiskWithoutTheHeadsBytes) {
  constexpr uint64_t kSmallHead = 16 << 10;  // (extents are 64 KiB)
  opts_.ram_head = kSmallHead;
  opts_.ram_tails = false;  // (the tail always from disk)
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  for (uint64_t size : {kSmallHead + 1, uint64_t{kExtent}, 3 * uint64_t{kExtent} + 5}) {
    SCOPED_TRACE(size);
    const std::string key = "/cut/" + std::to_string(size);
    auto data = Data(size, static_cast<uint32_t>(size));
    ASSERT_TRUE(Put(key, data));
    {
      auto loan = store_->Get(key);
      ASSERT_TRUE(loan && *loan);
      ASSERT_FALSE((*loan)->extents.empty());
      EXPECT_EQ((*loan)->extents[0].length, kSmallHead);
      ASSERT_TRUE((*loan)->head.has_value());
      store_->Release(**loan);
    }
    auto read = [&](uint64_t from) {
      first_offset_ = from;
      auto o = store_->OpenStream(key, from);
      EXPECT_TRUE(o && o->stream);
      auto got = Drain(*o->stream);
      EXPECT_TRUE(got) << got.error().ToString();
      EXPECT_EQ(*got,
                std::vector<uint8_t>(data.begin() + static_cast<ptrdiff_t>(from), data.end()));
    };
    const uint64_t disk0 = store_->tier().stats().read_bytes;
    read(0);  // the head from RAM, the tail from disk
    const uint64_t tail = size - kSmallHead, tail_padded = (tail + 4095) / 4096 * 4096;
    EXPECT_GE(store_->tier().stats().read_bytes - disk0, tail);
    EXPECT_LE(store_->tier().stats().read_bytes - disk0, tail_padded + 4096 * 3);
    read(std::min<uint64_t>(kSmallHead + 3, size - 1));
  }
  ASSERT_NO_FATAL_FAILURE(OpenStore());  // a restart: heads come back from disk, whole
  for (uint64_t size : {kSmallHead + 1, 3 * uint64_t{kExtent} + 5}) {
    auto got = GetAll("/cut/" + std::to_string(size));
    ASSERT_TRUE(got) << got.error().ToString();
    EXPECT_EQ(*got, Data(size, static_cast<uint32_t>(size)));
  }
}

// A range that ends inside an extent leaves the extent's chunk parked, and the next range
// reads on from it instead of reading the extent again: whether the stream still held the
// chunk when it closed, or had given it away (a loan of the I/O buffer) first.
TEST_F(StoreTest, ARangeEndingInsideAnExtentLeavesItsChunkToTheNextRange) {
  opts_.ram_tails = false;  // (the tail always from disk)
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto data = Data(kHead + 4 * kExtent + 100, 9);
  ASSERT_TRUE(Put("/p", data));
  const uint64_t tail_bytes = (data.size() - kHead + 4095) / 4096 * 4096;
  auto read_bytes = [&] { return store_->tier().stats().read_bytes; };
  const uint64_t disk0 = read_bytes();
  constexpr uint64_t kPiece = 40 << 10;                     // (extents are 64 KiB)
  auto in_pieces = [&](const std::vector<uint8_t>& want) {  // the object, a range at a time
    std::vector<uint8_t> got;
    for (uint64_t off = 0; off < want.size(); off += kPiece) {
      first_offset_ = off;
      auto o = store_->OpenStream("/p", off, kPiece);
      ASSERT_TRUE(o && o->stream);
      auto part = Drain(*o->stream);
      ASSERT_TRUE(part) << part.error().ToString();
      got.insert(got.end(), part->begin(), part->end());
    }
    EXPECT_EQ(got, want);
  };
  in_pieces(data);
  EXPECT_EQ(read_bytes() - disk0, tail_bytes);  // every extent read once
  EXPECT_GT(store_->stats().chunks_unparked, 0u);

  // The chunk lent away: the loan and the parked entry each hold the buffer.
  auto lent = store_->OpenStream("/p", kHead, 10 << 10);
  ASSERT_TRUE(lent && lent->stream);
  std::span<const uint8_t> bytes;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {  // (until the read lands)
    auto step = lent->stream->Peek(&bytes);
    ASSERT_TRUE(step);
    if (*step == Store::Stream::Step::kData) break;
    ASSERT_TRUE(store_->Poll());
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the read never landed";
  }
  ASSERT_EQ(lent->stream->where(), Store::Stream::Where::kIoBuffer);
  ASSERT_EQ(bytes.size(), 10u << 10);
  EXPECT_EQ(std::memcmp(bytes.data(), data.data() + kHead, bytes.size()), 0);
  const uint64_t disk1 = read_bytes();
  const uint32_t buffer = lent->stream->DetachChunk();
  lent->stream->Consume(bytes.size());
  lent->stream.reset();
  first_offset_ = kHead + (10 << 10);
  auto next = store_->OpenStream("/p", first_offset_, kExtent);
  ASSERT_TRUE(next && next->stream);
  auto rest = Drain(*next->stream);
  ASSERT_TRUE(rest) << rest.error().ToString();
  EXPECT_EQ(*rest,
            std::vector<uint8_t>(data.begin() + static_cast<ptrdiff_t>(first_offset_),
                                 data.begin() + static_cast<ptrdiff_t>(first_offset_ + kExtent)));
  // (the first extent from the lent buffer; the second read for the rest of the range)
  EXPECT_EQ(read_bytes() - disk1, uint64_t{kExtent});
  EXPECT_EQ(std::memcmp(store_->buffers().Buffer(buffer), data.data() + kHead, 10 << 10), 0);
  store_->ReleaseBuffer(buffer);  // the loan comes back
  next->stream.reset();

  // A replaced object's parked chunks are not the new version's bytes.
  auto other = Data(data.size(), 10);
  ASSERT_TRUE(Put("/p", other));
  in_pieces(other);

  // Parked chunks age out: every buffer comes back.
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  for (int i = 0; i < 128; ++i) ASSERT_TRUE(store_->Poll());
  EXPECT_EQ(store_->buffers().free_count(), store_->buffers().count());
}

// With the pool full of tails, a read from disk takes a tail's place only from an object
// read less often than the reader (counting the reader's reads before this one): a sweep
// over more objects than RAM holds keeps the tails it has instead of copying every disk
// byte into the pool to drop it again, and an object read more often gets in.
TEST_F(StoreTest, AReadDisplacesOnlyATailReadLessOftenThanItself) {
  opts_.pool.memory = 2 << 20;  // 32 blocks: tails may take 29 (a head, and 2 for heads)
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto a = Data(31 * kHead, 1), b = Data(20 * kHead, 2);
  ASSERT_TRUE(Put("/a", a));  // its head and 29 tail blocks: every block tails may have
  ASSERT_TRUE(Put("/b", b));  // its head only (fills never displace)
  EXPECT_EQ(store_->stats().tail_bytes_in_ram, 29 * kHead);
  auto disk = [&] { return store_->tier().stats().read_bytes; };
  auto read = [&](const std::string& key) {  // a stream (as the planes read; it adopts tails)
    auto o = store_->OpenStream(key);
    EXPECT_TRUE(o && o->stream) << key;
    auto got = Drain(*o->stream);
    EXPECT_TRUE(got) << got.error().ToString();
    return got ? *got : std::vector<uint8_t>();
  };
  // /b's first read comes from disk and takes nothing: it has no reads before this one.
  EXPECT_EQ(read("/b"), b);
  EXPECT_EQ(store_->stats().tails_dropped, 0u);
  EXPECT_EQ(store_->stats().tail_bytes_in_ram, 29 * kHead);
  // Its second read: one read before, /a none: /a's tail goes, /b's comes into RAM.
  EXPECT_EQ(read("/b"), b);
  EXPECT_EQ(store_->stats().tails_dropped, 1u);
  EXPECT_EQ(store_->stats().tail_bytes_in_ram, 19 * kHead);
  uint64_t before = disk();
  EXPECT_EQ(read("/b"), b);
  EXPECT_EQ(disk(), before) << "/b is served from RAM";
  // Reading both in turn: /a never gets more reads than /b, so /b keeps its place.
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(read("/a"), a);
    EXPECT_EQ(read("/b"), b);
  }
  EXPECT_EQ(store_->stats().tails_dropped, 1u);
  before = disk();
  EXPECT_EQ(read("/b"), b);
  EXPECT_EQ(disk(), before);
  // /a read more often than /b from here on: it takes the place.
  for (int i = 0; i < 8 && store_->stats().tails_dropped == 1; ++i) {
    EXPECT_EQ(read("/a"), a);
  }
  EXPECT_EQ(store_->stats().tails_dropped, 2u);
  before = disk();
  EXPECT_EQ(read("/a"), a);
  EXPECT_LT(disk() - before, a.size() / 2) << "most of /a from RAM";
}

TEST_F(StoreTest, AReplacedVersionsTailStaysReadableForItsStreamThenIsFreed) {
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto v1 = Data(10 * kHead, 5), v2 = Data(10 * kHead, 6);
  ASSERT_TRUE(Put("/v", v1));
  const uint64_t used1 = store_->pool().stats().slots_used;
  first_offset_ = kHead;
  auto o = store_->OpenStream("/v", kHead);
  ASSERT_TRUE(o && o->stream);
  ASSERT_TRUE(Put("/v", v2));  // the old version's head and tail wait for the stream
  EXPECT_EQ(store_->pool().stats().slots_used, 2 * used1);
  auto got = Drain(*o->stream);
  ASSERT_TRUE(got) << got.error().ToString();
  EXPECT_EQ(*got, std::vector<uint8_t>(v1.begin() + kHead, v1.end()));
  o->stream.reset();
  EXPECT_EQ(store_->pool().stats().slots_used, used1);
  EXPECT_EQ(store_->stats().tail_bytes_in_ram, v2.size() - kHead);
  first_offset_ = 0;
  EXPECT_EQ(GetAll("/v").value(), v2);
}

// Loans are counted per version in the record's slot (VersionLoans): a version given a new
// generation in place (Invalidate) keeps the loans made before it, and its head and tail
// stay, once it is replaced and once deleted, until the last of its loans, pins and the
// pins of released loans (Pin on a loan whose id is gone) comes back, in any order.
TEST_F(StoreTest, LoansOnAReissuedVersionHoldItUntilTheLastOneComesBack) {
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto v1 = Data(10 * kHead, 5), v2 = Data(10 * kHead, 6);
  auto g1 = Put("/v", v1);
  ASSERT_TRUE(g1);
  const uint64_t used1 = store_->pool().stats().slots_used;
  auto before = store_->Get("/v").value();
  ASSERT_TRUE(before.has_value());
  auto g2 = store_->Invalidate("/v", *g1, false, 0);
  ASSERT_TRUE(g2);
  auto after = store_->Get("/v").value();
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->info.generation, *g2);
  const uint64_t pin = store_->Pin(*before);
  EXPECT_EQ(store_->stats().loans_out, 3u);
  ASSERT_TRUE(Put("/v", v2));  // v1 (now g2) retired: its head and tail wait for the loans
  EXPECT_EQ(store_->pool().stats().slots_used, 2 * used1);
  store_->Release(*before);
  EXPECT_EQ(store_->pool().stats().slots_used, 2 * used1);
  // A pin made from a loan already released: the version by its record, here a new one
  // (v2 is current; the loan named v1's generation).
  Loan gone = *before;
  const uint64_t stray = store_->Pin(gone);
  EXPECT_NE(stray, 0u);
  store_->ReleasePin(stray);
  EXPECT_EQ(store_->pool().stats().slots_used, 2 * used1);
  ASSERT_EQ(store_->pool().stats().slots_used, 2 * used1);
  EXPECT_EQ(std::memcmp(store_->pool().At(after->head->offset), v1.data(), after->head_bytes), 0);
  // The loan made after the reissue goes before the pin made from the one before it: both
  // count on the one version.
  store_->Release(*after);
  EXPECT_EQ(store_->pool().stats().slots_used, 2 * used1);
  EXPECT_EQ(std::memcmp(store_->pool().At(after->head->offset), v1.data(), after->head_bytes), 0);
  store_->ReleasePin(pin);  // the last one: v1's head and tail go
  EXPECT_EQ(store_->pool().stats().slots_used, used1);
  EXPECT_EQ(store_->stats().loans_out, 0u);

  // Deleted with a loan out and a pin of a released stream's loan on it.
  auto d = store_->Get("/v").value();
  ASSERT_TRUE(d.has_value());
  auto o = store_->OpenStream("/v");
  ASSERT_TRUE(o && o->stream);
  Loan held = o->stream->loan();
  o->stream.reset();  // (its id given back: Pin finds the version by its record)
  const uint64_t late = store_->Pin(held);
  ASSERT_TRUE(store_->Delete("/v").value());
  EXPECT_EQ(store_->pool().stats().slots_used, used1);
  store_->Release(*d);
  EXPECT_EQ(store_->pool().stats().slots_used, used1);
  store_->ReleasePin(late);
  EXPECT_EQ(store_->pool().stats().slots_used, 0u);
  EXPECT_EQ(store_->stats().loans_out, 0u);
  // The key again, new loans on a new version.
  ASSERT_TRUE(Put("/v", v1));
  EXPECT_EQ(GetAll("/v").value(), v1);
  EXPECT_EQ(store_->stats().loans_out, 0u);
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
  // (bytes, not slots: the last extent of each version is packed into a shared slab)
  uint64_t used_v1 = store_->tier().stats().allocated_bytes;
  ASSERT_TRUE(Put("/x", v2));
  ASSERT_TRUE(Put("/y", Data(400000, 3)));  // would reuse v1's space if it were freed
  std::vector<uint8_t> old(v1.size());
  ASSERT_TRUE(store_->Read(**loan, 0, old));
  EXPECT_EQ(old, v1);
  EXPECT_EQ(GetAll("/x").value(), v2);
  uint64_t before = store_->tier().stats().allocated_bytes;
  store_->Release(**loan);
  EXPECT_EQ(store_->tier().stats().allocated_bytes, before - used_v1);
  store_->Release(**loan);  // a second release is ignored
}

// A loan points at its version's extent list (no copy): the list outlives a delete and a
// replacement while the loan is out, and a stream reads the tail through it.
TEST_F(StoreTest, ADeletedObjectStaysReadableThroughItsLoanAndStream) {
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto v1 = Data(900000, 5);
  ASSERT_TRUE(Put("/d", v1));
  auto loan = store_->Get("/d");
  ASSERT_TRUE(loan && *loan);
  auto opened = store_->OpenStream("/d", kHead + 10);
  ASSERT_TRUE(opened && opened->stream);
  ASSERT_GT((*loan)->extents.size(), 1u);
  ASSERT_TRUE(store_->Delete("/d").value());
  ASSERT_TRUE(Put("/d", Data(700000, 6)));  // a new version with a list of its own
  ASSERT_TRUE(Put("/e", Data(900000, 7)));  // would reuse v1's space if it were freed
  std::vector<uint8_t> old(v1.size());
  ASSERT_TRUE(store_->Read(**loan, 0, old));
  EXPECT_EQ(old, v1);
  first_offset_ = kHead + 10;
  auto tail = Drain(*opened->stream);
  ASSERT_TRUE(tail) << tail.error().ToString();
  EXPECT_EQ(*tail, std::vector<uint8_t>(v1.begin() + kHead + 10, v1.end()));
  store_->Release(**loan);
}

// OpenStream's lend_head: a hit whose range lies whole in its RAM head comes lent from the
// lookup (no stream), counted as a stream's hit would be, and pinned: a replacement, a delete
// and other objects' heads leave its bytes alone until the pin goes back.
TEST_F(StoreTest, AHitWholeInItsHeadIsLentWithoutAStream) {
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto small = Data(5000, 11), big = Data(kHead + 5000, 12);
  ASSERT_TRUE(Put("/h", small));
  ASSERT_TRUE(Put("/big", big));
  auto lend = [&](const std::string& key, uint64_t off, uint64_t len, bool follow = false) {
    return store_->OpenStream(key, off, len, follow, nullptr, nullptr, /*lend_head=*/true);
  };
  const StoreStats before = store_->stats();
  auto o = lend("/h", 0, UINT64_MAX);
  ASSERT_TRUE(o) << o.error().ToString();
  ASSERT_TRUE(o->lent.has_value());
  EXPECT_EQ(o->status, Store::Lookup::kHit);
  EXPECT_FALSE(o->stream);
  EXPECT_EQ(o->lent->record->size, small.size());
  EXPECT_EQ(o->lent->record->metadata, "etag: \"/h\"");
  EXPECT_EQ(std::vector<uint8_t>(o->lent->bytes.begin(), o->lent->bytes.end()), small);
  EXPECT_EQ(store_->stats().hits, before.hits + 1);
  EXPECT_EQ(store_->stats().head_bytes_served, before.head_bytes_served + small.size());
  EXPECT_EQ(store_->stats().loans_out, before.loans_out + 1);
  EXPECT_EQ(store_->stats().streams_open, before.streams_open);

  // A range inside the head; one past it, an empty one, a miss: the stream (or nothing).
  auto part = lend("/big", 10, kHead - 10);
  ASSERT_TRUE(part && part->lent);
  EXPECT_TRUE(std::equal(part->lent->bytes.begin(), part->lent->bytes.end(), big.begin() + 10,
                         big.begin() + static_cast<ptrdiff_t>(kHead)));
  store_->ReleasePin(part->lent->pin);
  auto whole = lend("/big", 0, UINT64_MAX);
  ASSERT_TRUE(whole && whole->stream && !whole->lent);
  whole->stream.reset();
  auto empty = lend("/h", small.size(), 10);
  ASSERT_TRUE(empty && empty->stream && !empty->lent);
  empty->stream.reset();
  auto miss = lend("/none", 0, UINT64_MAX);
  ASSERT_TRUE(miss && !miss->stream && !miss->lent);
  EXPECT_EQ(miss->status, Store::Lookup::kMiss);

  // A key being filled, followed: its fill's stream, never the committed head.
  auto fill = store_->BeginFill("/h", 0, "");
  ASSERT_TRUE(fill && fill->first == Store::FillStart::kGranted);
  auto following = lend("/h", 0, UINT64_MAX, /*follow=*/true);
  ASSERT_TRUE(following && following->stream && !following->lent);
  EXPECT_EQ(following->status, Store::Lookup::kFilling);
  following->stream.reset();
  store_->Abort(fill->second);

  // The lent bytes outlive a replacement, a delete and new heads until the pin goes back.
  ASSERT_TRUE(Put("/h", Data(5000, 13)));
  ASSERT_TRUE(store_->Delete("/h").value());
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(Put("/other" + std::to_string(i), Data(40000, 20 + i)));
  EXPECT_EQ(std::vector<uint8_t>(o->lent->bytes.begin(), o->lent->bytes.end()), small);
  store_->ReleasePin(o->lent->pin);
  EXPECT_EQ(store_->stats().loans_out, before.loans_out);
  store_->ReleasePin(o->lent->pin);  // (a second release is ignored)
  EXPECT_EQ(store_->stats().loans_out, before.loans_out);
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

// Objects shorter than an extent share slots (runs of 4 KiB pages): the disk holds about
// their payload, not a slot per object; after a restart every one reads back exactly, and
// one damaged on disk is dropped alone while the neighbours in its slot are served.
// Packed objects share slots, and the pages an evicted or deleted one leaves are taken by
// the next small fills (first fit; there is no compaction that moves objects). A reader of a
// packed object keeps its bytes while everything around it, and the object itself, is
// deleted and its slot refilled: its loan pins the extent until the last release.
TEST_F(StoreTest, ReadersOfPackedObjectsKeepTheirBytesWhileTheirSlotsAreRefilled) {
  opts_.ram_head = 4096;    // (so streams read the rest from disk)
  opts_.ram_tails = false;  // (and not from RAM tails)
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  std::map<std::string, std::vector<uint8_t>> objects;
  for (int i = 0; i < 40; ++i) {
    const std::string key = fmt::format("/p/{}", i);
    objects[key] = Data(9000 + 997 * static_cast<size_t>(i % 7), static_cast<uint32_t>(i));
    ASSERT_TRUE(Put(key, objects[key])) << key;
  }
  ASSERT_GT(store_->tier().stats().packed_extents, 30u);
  // Streams open on every third object, each a piece into its bytes.
  struct Reader {
    std::string key;
    Store::StreamPtr stream;
    std::vector<uint8_t> got;
  };
  std::vector<Reader> readers;
  for (int i = 0; i < 40; i += 3) {
    Reader r;
    r.key = fmt::format("/p/{}", i);
    auto st = store_->OpenStream(r.key);
    ASSERT_TRUE(st && st->stream) << r.key;
    r.stream = std::move(st->stream);
    readers.push_back(std::move(r));
  }
  auto step = [&](Reader& r) -> bool {  // one piece; false at the end
    std::span<const uint8_t> bytes;
    auto s = r.stream->Peek(&bytes);
    EXPECT_TRUE(s) << r.key;
    if (!s || *s == Store::Stream::Step::kEnd) return false;
    if (*s == Store::Stream::Step::kData) {
      const size_t n = std::min<size_t>(bytes.size(), 1500);
      r.got.insert(r.got.end(), bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
      r.stream->Consume(n);
    } else {
      EXPECT_TRUE(store_->Poll());
    }
    return true;
  };
  for (auto& r : readers) step(r);
  std::set<std::pair<uint32_t, uint64_t>> reader_slots;  // (file, slot) the readers read from
  for (const auto& r : readers) {
    auto loan = store_->Get(r.key);
    ASSERT_TRUE(loan && *loan);
    for (const Extent& e : (*loan)->extents) reader_slots.insert({e.file, e.offset / kExtent});
    store_->Release(**loan);
  }
  // Everything deleted (the streamed objects too), and new small objects written into the
  // pages that frees, while the readers go on a piece at a time.
  std::map<std::string, std::vector<uint8_t>> fresh;
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(store_->Delete(fmt::format("/p/{}", i)));
    const std::string key = fmt::format("/n/{}", i);
    fresh[key] = Data(9000 + 1013 * static_cast<size_t>(i % 5), static_cast<uint32_t>(500 + i));
    ASSERT_TRUE(Put(key, fresh[key])) << key;
    for (auto& r : readers) step(r);
  }
  for (auto& r : readers) {
    // (bounded by time, not rounds: a loaded disk outlasts any number of empty polls)
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (step(r) && std::chrono::steady_clock::now() < until) {
    }
    EXPECT_EQ(r.got, objects[r.key]) << r.key << " changed under its reader";
    r.stream.reset();
  }
  int beside_a_reader = 0;  // fresh objects written into a slot a reader was reading
  for (const auto& [key, data] : fresh) {
    EXPECT_EQ(GetAll(key).value(), data) << key;
    auto loan = store_->Get(key);
    ASSERT_TRUE(loan && *loan);
    for (const Extent& e : (*loan)->extents) {
      beside_a_reader += reader_slots.count({e.file, e.offset / kExtent}) ? 1 : 0;
    }
    store_->Release(**loan);
  }
  EXPECT_GT(beside_a_reader, 5) << "the readers' slots were not refilled: the test tests nothing";
  // The deleted objects' pages are all free again; only the fresh ones hold any.
  uint64_t want = 0;
  for (const auto& [key, data] : fresh) want += (data.size() + 4095) / 4096 * 4096;
  EXPECT_EQ(store_->tier().stats().allocated_bytes, want);
}

TEST_F(StoreTest, SmallObjectsArePackedSurviveARestartAndADamagedOneGoesAlone) {
  opts_.tier.extent_bytes = 256 << 10;
  opts_.tier.file_bytes = 4 << 20;
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  std::map<std::string, std::vector<uint8_t>> objects;
  std::mt19937 rng(7);
  uint64_t payload = 0, rounded = 0;
  for (int i = 0; i < 300; ++i) {
    const size_t size = 1 + rng() % (40 << 10);
    const std::string key = fmt::format("/small/{}", i);
    objects[key] = Data(size, static_cast<uint32_t>(100 + i));
    ASSERT_TRUE(Put(key, objects[key])) << key;
    payload += size;
    rounded += (size + 4095) / 4096 * 4096;
  }
  const TierStats& ts = store_->tier().stats();
  EXPECT_EQ(ts.packed_extents, 300u);
  EXPECT_EQ(ts.allocated_bytes, rounded) << "4 KiB pages, nothing more";
  // Slots taken: about the packed bytes (the last of every slot's runs may not fit).
  const uint64_t slot = opts_.tier.extent_bytes;
  EXPECT_LE(ts.slots_used * slot, ts.allocated_bytes / 10 * 12 + slot)
      << ts.slots_used << " slots, " << ts.packed_slots << " packed, for " << payload << " bytes";
  // Damage one object on disk, in a slab it shares, while the store is closed.
  auto loan = store_->Get("/small/17");
  ASSERT_TRUE(loan && *loan);
  const Extent victim = (*loan)->extents[0];
  store_->Release(**loan);
  store_.reset();
  int fd = open(fmt::format("{}/extent-{:06}.dat", dir_, victim.file).c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  uint8_t b = 0;
  ASSERT_EQ(pread(fd, &b, 1, static_cast<off_t>(victim.offset)), 1);
  b ^= 0x20;
  ASSERT_EQ(pwrite(fd, &b, 1, static_cast<off_t>(victim.offset)), 1);
  close(fd);
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  EXPECT_EQ(store_->tier().stats().packed_extents, 300u) << "rebuilt from the index";
  size_t neighbours = 0;
  for (const auto& [key, want] : objects) {
    auto got = GetAll(key);
    if (key == "/small/17") {
      ASSERT_FALSE(got);
      EXPECT_EQ(got.error().code(), StatusCode::kCorruption);
      continue;
    }
    ASSERT_TRUE(got) << key << ": " << got.error().ToString();
    EXPECT_EQ(*got, want) << key;
    auto l = store_->Get(key);
    ASSERT_TRUE(l && *l);
    const Extent& e = (*l)->extents[0];
    if (e.file == victim.file && e.offset / slot == victim.offset / slot) ++neighbours;
    store_->Release(**l);
  }
  EXPECT_GT(neighbours, 0u) << "the damaged object shared its slot with nobody";
  (void)payload;
  EXPECT_FALSE(store_->Head("/small/17").value());
  EXPECT_EQ(store_->tier().stats().packed_extents, 299u);
  // New objects take the freed sub-slot and others; nothing overlaps what is stored.
  for (int i = 0; i < 50; ++i) {
    const std::string key = fmt::format("/more/{}", i);
    objects[key] = Data(1 + rng() % (40 << 10), static_cast<uint32_t>(900 + i));
    ASSERT_TRUE(Put(key, objects[key]));
  }
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  for (const auto& [key, want] : objects) {
    if (key == "/small/17") continue;
    auto got = GetAll(key);
    ASSERT_TRUE(got) << key << ": " << got.error().ToString();
    EXPECT_EQ(*got, want) << key;
  }
}

TEST_F(StoreTest, ConditionalPutsHoldAtBeginAndAtCommit) {
  OpenStore();
  using Kind = PutCondition::Kind;
  auto begin = [&](const std::string& key, PutCondition c) {
    return store_->BeginFill(key, 0, "", UINT64_MAX, false, c);
  };
  auto commit = [&](Store::FillId id, const std::vector<uint8_t>& data) {
    EXPECT_TRUE(store_->Append(id, data));
    return store_->Commit(id, data.size());
  };
  const auto a = Data(100, 1), b = Data(200, 2), c = Data(300, 3);
  // Present / a generation on nothing: NotFound. Absent on nothing: granted.
  auto r = begin("k", {Kind::kPresent, 0});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), StatusCode::kNotFound);
  r = begin("k", {Kind::kGeneration, 1});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), StatusCode::kNotFound);
  r = begin("k", {Kind::kAbsent, 0});
  ASSERT_TRUE(r);
  auto g1 = commit(r->second, a);
  ASSERT_TRUE(g1) << g1.error().ToString();
  // Now stored: absent fails, present and the right generation succeed, a wrong one fails.
  r = begin("k", {Kind::kAbsent, 0});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), StatusCode::kAlreadyExists);
  r = begin("k", {Kind::kGeneration, *g1 + 100});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), StatusCode::kFailedPrecondition);
  r = begin("k", {Kind::kGeneration, *g1});
  ASSERT_TRUE(r);
  auto g2 = commit(r->second, b);
  ASSERT_TRUE(g2);
  EXPECT_GT(*g2, *g1);
  EXPECT_EQ(*GetAll("k"), b);
  // Checked again at commit: a delete between begin and commit fails a kPresent put, and
  // the stored state is what the delete left (nothing).
  r = begin("k", {Kind::kPresent, 0});
  ASSERT_TRUE(r);
  ASSERT_TRUE(store_->Append(r->second, c));
  ASSERT_TRUE(*store_->Delete("k"));
  auto late = store_->Commit(r->second, c.size());
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().code(), StatusCode::kNotFound);
  EXPECT_FALSE(store_->Committed("k"));
  EXPECT_FALSE(store_->Filling("k"));
  EXPECT_EQ(store_->stats().puts_refused_by_condition, 5u);
  // An expired version counts as absent.
  ASSERT_TRUE(Put("e", a, 1));  // 1 ns: expired at once
  r = begin("e", {Kind::kAbsent, 0});
  ASSERT_TRUE(r) << r.error().ToString();
  ASSERT_TRUE(commit(r->second, b));
  EXPECT_EQ(*GetAll("e"), b);
}

TEST_F(StoreTest, TouchSetsANewExpiryKeepsTheGenerationAndSurvivesARestart) {
  OpenStore();
  const auto a = Data(5000, 4);
  auto g = Put("t", a, 3600ull * 1'000'000'000);
  ASSERT_TRUE(g);
  auto t = store_->Touch("t", 0);  // no expiry any more
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->has_value());
  EXPECT_EQ((*t)->generation, *g);
  EXPECT_EQ((*t)->expires_unix_ns, 0u);
  auto none = store_->Touch("absent", 0);
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_value());
  auto info = store_->Head("t");
  ASSERT_TRUE(info && info->has_value());
  EXPECT_EQ((*info)->expires_unix_ns, 0u);
  EXPECT_EQ((*info)->generation, *g);
  // A short one: the object expires, and a touch then finds nothing.
  t = store_->Touch("t", 1);
  ASSERT_TRUE(t && t->has_value());
  EXPECT_FALSE(store_->Committed("t"));
  t = store_->Touch("t", 0);
  ASSERT_TRUE(t);
  EXPECT_FALSE(t->has_value());
  // A touch is journaled: after a restart the new expiry holds.
  ASSERT_TRUE(Put("u", a, 1'000'000'000));  // 1 s
  ASSERT_TRUE(store_->Touch("u", 3600ull * 1'000'000'000));
  OpenStore();
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  info = store_->Head("u");
  ASSERT_TRUE(info && info->has_value());
  EXPECT_GT((*info)->expires_unix_ns, 0u);
  EXPECT_EQ(*GetAll("u"), a);
}

TEST_F(StoreTest, TouchConditionsFollowRedisExpireOptions) {
  OpenStore();
  const auto a = Data(3000, 5);
  constexpr uint64_t kHour = 3600ull * 1'000'000'000;
  ASSERT_TRUE(Put("p", a));         // no expiry
  ASSERT_TRUE(Put("v", a, kHour));  // expires in an hour
  auto touch = [&](const std::string& k, uint64_t ttl, TouchCondition c) {
    auto t = store_->Touch(k, ttl, c);
    EXPECT_TRUE(t);
    return t && t->has_value();
  };
  auto expires = [&](const std::string& k) { return store_->Head(k).value()->expires_unix_ns; };
  // NX / XX
  EXPECT_FALSE(touch("v", kHour, {.if_no_expiry = true}));
  EXPECT_FALSE(touch("p", kHour, {.if_expiry = true}));
  EXPECT_EQ(expires("p"), 0u);
  // GT: no expiry counts as never, so nothing is later; LT: anything is sooner than never.
  EXPECT_FALSE(touch("p", kHour, {.if_later = true}));
  EXPECT_EQ(expires("p"), 0u);
  const uint64_t v0 = expires("v");
  EXPECT_FALSE(touch("v", kHour / 2, {.if_later = true}));
  EXPECT_EQ(expires("v"), v0);
  EXPECT_TRUE(touch("v", 2 * kHour, {.if_later = true}));
  EXPECT_GT(expires("v"), v0);
  EXPECT_FALSE(touch("v", 0, {.if_sooner = true}));  // (persist: never is not sooner)
  EXPECT_TRUE(touch("v", kHour / 2, {.if_sooner = true}));
  EXPECT_TRUE(touch("p", kHour, {.if_sooner = true}));
  EXPECT_GT(expires("p"), 0u);
  // PERSIST: XX with no expiry.
  EXPECT_TRUE(touch("p", 0, {.if_expiry = true}));
  EXPECT_EQ(expires("p"), 0u);
  EXPECT_FALSE(touch("p", 0, {.if_expiry = true}));
  // A time in the past deletes, when the condition holds.
  EXPECT_FALSE(touch("p", 1, {.if_later = true, .delete_now = true}));
  EXPECT_TRUE(store_->Committed("p"));
  EXPECT_TRUE(touch("p", 1, {.delete_now = true}));
  EXPECT_FALSE(store_->Committed("p"));
  EXPECT_FALSE(touch("p", 1, {.delete_now = true}));
  // ... durably.
  OpenStore();
  EXPECT_FALSE(store_->Committed("p"));
  EXPECT_TRUE(store_->Committed("v"));
}

TEST_F(StoreTest, KeepExpiryAndDeleteIfGeneration) {
  OpenStore();
  const auto a = Data(3000, 6), b = Data(4000, 7);
  constexpr uint64_t kHour = 3600ull * 1'000'000'000;
  auto g1 = Put("k", a, kHour);
  ASSERT_TRUE(g1);
  const uint64_t e1 = store_->Head("k").value()->expires_unix_ns;
  PutCondition keep;
  keep.keep_expiry = true;
  auto f = store_->BeginFill("k", 0, "", UINT64_MAX, false, keep);
  ASSERT_TRUE(f);
  ASSERT_TRUE(store_->Append(f->second, b));
  auto g2 = store_->Commit(f->second, b.size());
  ASSERT_TRUE(g2);
  EXPECT_EQ(store_->Head("k").value()->expires_unix_ns, e1);
  EXPECT_EQ(*GetAll("k"), b);
  // Nothing to keep: the fill's own ttl (none here).
  f = store_->BeginFill("fresh", 0, "", UINT64_MAX, false, keep);
  ASSERT_TRUE(f);
  ASSERT_TRUE(store_->Append(f->second, b));
  ASSERT_TRUE(store_->Commit(f->second, b.size()));
  EXPECT_EQ(store_->Head("fresh").value()->expires_unix_ns, 0u);
  // Conditional delete.
  auto d = store_->DeleteIfGeneration("k", *g1);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(store_->Committed("k"));
  d = store_->DeleteIfGeneration("k", *g2);
  ASSERT_TRUE(d);
  EXPECT_TRUE(*d);
  EXPECT_FALSE(store_->Committed("k"));
  d = store_->DeleteIfGeneration("k", *g2);
  ASSERT_TRUE(d);
  EXPECT_FALSE(*d);
}

// memcache meta leases: a read's bookkeeping (fetched, last access), vivify and recache wins,
// one winner per version, stale versions (invalidated in place or stored with an older CAS).
TEST_F(StoreTest, ReadsWinRecachesOnceAndTheirMarksFollowTheVersion) {
  OpenStore();
  constexpr uint64_t kSec = 1'000'000'000;
  auto read = [&](const std::string& k, AccessRequest a) {
    AccessMarks m;
    auto r = store_->Head(k, &a, &m);
    EXPECT_TRUE(r);
    return std::pair{r && r->has_value(), m.marks};
  };
  AccessRequest plain;
  plain.meta = true;
  // A miss with vivify: an empty version, won by this reader; the next one sees Z.
  AccessRequest viv = plain;
  viv.vivify = true;
  viv.vivify_ttl_ns = 30 * kSec;
  auto [hit, m] = read("v", viv);
  EXPECT_TRUE(hit);
  EXPECT_EQ(m, kAccessWon);
  auto info = store_->Head("v", &plain, nullptr);
  ASSERT_TRUE(info && info->has_value());
  EXPECT_EQ((*info)->size, 0u);
  EXPECT_GT((*info)->expires_unix_ns, 0u);
  std::tie(hit, m) = read("v", viv);
  EXPECT_EQ(m, kAccessFetched | kAccessTokenSent);  // (not won again, not created again)
  EXPECT_EQ(store_->stats().vivified, 1u);
  // A write replaces the version: no marks; reads without u set "fetched" only.
  ASSERT_TRUE(Put("v", Data(100, 1), 100 * kSec));
  AccessRequest u = plain;
  u.bump = false;
  EXPECT_EQ(read("v", u).second, 0);
  EXPECT_EQ(read("v", plain).second, 0);
  EXPECT_EQ(read("v", plain).second, kAccessFetched);
  // Recache: won when the time left (whole seconds) is below R, once.
  AccessRequest r30 = plain, r200 = plain;
  r30.recache_ns = 30 * kSec;
  r200.recache_ns = 200 * kSec;
  EXPECT_EQ(read("v", r30).second, kAccessFetched);
  EXPECT_EQ(read("v", r200).second, kAccessFetched | kAccessWon);
  EXPECT_EQ(read("v", r200).second, kAccessFetched | kAccessTokenSent);
  // Without an expiry nothing is below R; a vivify of a present key creates nothing.
  ASSERT_TRUE(Put("n", Data(10, 2)));
  EXPECT_EQ(read("n", r200).second, 0);
  EXPECT_EQ(read("n", viv).second, kAccessFetched);
  EXPECT_EQ(store_->stats().vivified, 1u);
  // Plain reads (a classic get) never win.
  EXPECT_EQ(read("absent", plain).first, false);
}

TEST_F(StoreTest, RefreshGivesNewMetadataAndTtlToTheSameBytesAndSurvivesARestart) {
  OpenStore();
  constexpr uint64_t kSec = 1'000'000'000;
  const auto a = Data(300'000, 5);  // (a head and a tail on disk)
  auto g1 = Put("r", a, 2 * kSec);
  ASSERT_TRUE(g1);
  const uint64_t created = store_->Head("r").value()->created_unix_ns;
  // A stream opened before the refresh reads to its end.
  auto o = store_->OpenStream("r");
  ASSERT_TRUE(o && o->stream);
  auto t = store_->Refresh("r", *g1 + 1000, "etag: \"b\"\r\n", 60 * kSec);  // not its version
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code(), StatusCode::kFailedPrecondition);
  t = store_->Refresh("r", *g1, "etag: \"b\"\r\n", 60 * kSec);
  ASSERT_TRUE(t && t->has_value());
  EXPECT_GT((*t)->generation, *g1);
  EXPECT_EQ(*Drain(*o->stream), a);
  o->stream.reset();
  auto info = store_->Head("r");
  ASSERT_TRUE(info && info->has_value());
  EXPECT_EQ((*info)->generation, (*t)->generation);
  EXPECT_EQ((*info)->metadata, "etag: \"b\"\r\n");
  EXPECT_EQ((*info)->expires_unix_ns, (*t)->expires_unix_ns);
  EXPECT_GE((*info)->created_unix_ns, created);
  EXPECT_GT((*info)->expires_unix_ns, (*info)->created_unix_ns + 59 * kSec);
  EXPECT_EQ(*GetAll("r"), a);
  EXPECT_EQ(store_->stats().refreshed, 1u);
  EXPECT_FALSE(store_->Refresh("absent", 0, "", kSec).value().has_value());
  // A soft purge (InvalidatePrefix) marks it stale; a refresh clears the mark.
  ASSERT_TRUE(Put("r2", Data(10, 6)));
  ASSERT_TRUE(Put("q", Data(10, 7)));
  EXPECT_EQ(store_->InvalidatePrefix("r").value(), 2u);
  EXPECT_EQ(store_->InvalidatePrefix("r").value(), 0u);  // (stale already)
  AccessMarks m;
  ASSERT_TRUE(store_->Head("r", nullptr, &m));
  EXPECT_EQ(m.marks & kAccessStale, kAccessStale);
  ASSERT_TRUE(store_->Head("q", nullptr, &m));
  EXPECT_EQ(m.marks & kAccessStale, 0);
  const uint64_t g = store_->Head("r").value()->generation;
  ASSERT_TRUE(store_->Refresh("r", g, "etag: \"b\"\r\n", 60 * kSec).value());
  t = store_->Refresh("r", 0, "etag: \"b\"\r\n", 60 * kSec);
  ASSERT_TRUE(t && t->has_value());
  ASSERT_TRUE(store_->Head("r", nullptr, &m));
  EXPECT_EQ(m.marks & kAccessStale, 0);
  // Durable: after a restart the new head and expiry are there, the bytes the same.
  ASSERT_TRUE(store_->SyncNow());
  OpenStore();
  info = store_->Head("r");
  ASSERT_TRUE(info && info->has_value());
  EXPECT_EQ((*info)->generation, (*t)->generation);
  EXPECT_EQ((*info)->metadata, "etag: \"b\"\r\n");
  EXPECT_EQ((*info)->expires_unix_ns, (*t)->expires_unix_ns);
  EXPECT_EQ(*GetAll("r"), a);
}

TEST_F(StoreTest, InvalidationKeepsTheBytesUnderANewGenerationAndSurvivesARestart) {
  OpenStore();
  constexpr uint64_t kSec = 1'000'000'000;
  const auto a = Data(300'000, 3);  // (a head and a tail on disk)
  auto g1 = Put("s", a, 100 * kSec);
  ASSERT_TRUE(g1);
  AccessRequest meta;
  meta.meta = true;
  AccessRequest r200 = meta;
  r200.recache_ns = 200 * kSec;
  AccessMarks m;
  ASSERT_TRUE(store_->Head("s", &r200, &m));
  EXPECT_EQ(m.marks, kAccessWon);
  // A stream opened before the invalidation reads to its end, its space kept.
  auto o = store_->OpenStream("s");
  ASSERT_TRUE(o && o->stream);
  auto g2 = store_->Invalidate("s", *g1 + 1000, false, 0);  // (C: not its version)
  ASSERT_FALSE(g2);
  EXPECT_EQ(g2.error().code(), StatusCode::kFailedPrecondition);
  g2 = store_->Invalidate("s", *g1, true, 30 * kSec);
  ASSERT_TRUE(g2);
  EXPECT_GT(*g2, *g1);
  EXPECT_EQ(*Drain(*o->stream), a);
  o->stream.reset();
  // Stale: the first meta reader wins again (the win was cleared), then Z X; a classic read
  // wins nothing; the bytes are the same; the expiry is the new one.
  EXPECT_EQ(store_->Invalidate("absent", 0, false, 0).value(), 0u);
  ASSERT_TRUE(store_->Head("s", nullptr, &m));
  EXPECT_EQ(m.marks, kAccessFetched | kAccessStale);
  ASSERT_TRUE(store_->Head("s", &meta, &m));
  EXPECT_EQ(m.marks, kAccessFetched | kAccessStale | kAccessWon);
  ASSERT_TRUE(store_->Head("s", &meta, &m));
  EXPECT_EQ(m.marks, kAccessFetched | kAccessStale | kAccessTokenSent);
  auto info = store_->Head("s");
  ASSERT_TRUE(info && info->has_value());
  EXPECT_EQ((*info)->generation, *g2);
  const auto now_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count());
  EXPECT_LE((*info)->expires_unix_ns, now_ns + 30 * kSec);
  EXPECT_EQ(*GetAll("s"), a);
  // The old CAS no longer matches.
  EXPECT_FALSE(store_->DeleteIfGeneration("s", *g1));
  // Durable: after a restart it is still stale (its won mark, RAM-only, is gone).
  ASSERT_TRUE(store_->SyncNow());
  OpenStore();
  ASSERT_TRUE(store_->Head("s", &meta, &m));
  EXPECT_EQ(m.marks, kAccessStale | kAccessWon);
  EXPECT_EQ(*GetAll("s"), a);
  EXPECT_EQ(store_->Head("s").value()->generation, *g2);
  // A new version replaces it: not stale.
  ASSERT_TRUE(Put("s", Data(10, 4)));
  ASSERT_TRUE(store_->Head("s", &meta, &m));
  EXPECT_EQ(m.marks, 0);
}

TEST_F(StoreTest, AnOlderCasStoresAStaleVersionAndAnIncrKeepsItsMarks) {
  OpenStore();
  constexpr uint64_t kSec = 1'000'000'000;
  const auto a = Data(100, 5), b = Data(120, 6);
  auto g1 = Put("c", a, 100 * kSec);
  ASSERT_TRUE(g1);
  auto g2 = Put("c", a, 100 * kSec);
  ASSERT_TRUE(g2);
  const uint64_t e2 = store_->Head("c").value()->expires_unix_ns;
  AccessRequest meta;
  meta.meta = true;
  meta.recache_ns = 200 * kSec;
  AccessMarks m;
  ASSERT_TRUE(store_->Head("c", &meta, &m));
  ASSERT_EQ(m.marks, kAccessFetched | kAccessWon);  // (read for its expiry above)
  auto put = [&](PutCondition c, const std::vector<uint8_t>& v, uint64_t ttl) {
    auto f = store_->BeginFill("c", ttl, "", UINT64_MAX, false, c);
    if (!f) return Result<uint64_t>(Err(f.error()));
    EXPECT_TRUE(store_->Append(f->second, v));
    return store_->Commit(f->second, v.size());
  };
  PutCondition older{PutCondition::Kind::kGeneration, *g1};
  older.stale_if_older = true;
  PutCondition newer = older;
  newer.generation = *g2 + 1000;
  PutCondition zero = older;
  zero.generation = 0;
  EXPECT_EQ(put(newer, b, 0).error().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(put(zero, b, 0).error().code(), StatusCode::kFailedPrecondition);
  auto g3 = put(older, b, 0);  // stored, stale, with the replaced version's expiry and won mark
  ASSERT_TRUE(g3);
  EXPECT_EQ(*GetAll("c"), b);
  EXPECT_EQ(store_->Head("c").value()->expires_unix_ns, e2);
  meta.recache_ns = 0;
  ASSERT_TRUE(store_->Head("c", &meta, &m));
  EXPECT_EQ(m.marks, kAccessFetched | kAccessStale | kAccessTokenSent);  // (GetAll read it)
  // A read-modify-write keeping the marks (an incr in place), then a plain put clears them.
  PutCondition keep{PutCondition::Kind::kGeneration, *g3};
  keep.keep_marks = true;
  ASSERT_TRUE(put(keep, a, 0));
  ASSERT_TRUE(store_->Head("c", &meta, &m));
  EXPECT_EQ(m.marks, kAccessFetched | kAccessStale | kAccessTokenSent);
  ASSERT_TRUE(put({}, a, 0));
  ASSERT_TRUE(store_->Head("c", &meta, &m));
  EXPECT_EQ(m.marks, 0);
}

TEST_F(StoreTest, ScanWalksEveryKeyWhileTheIndexGrowsAndShrinks) {
  OpenStore();
  const auto v = Data(10, 8);
  std::set<std::string> stable;
  for (int i = 0; i < 300; ++i) {
    std::string k = "s" + std::to_string(i);
    ASSERT_TRUE(Put(k, v));
    stable.insert(k);
  }
  ASSERT_TRUE(Put("short", v, 1));  // expired at once: never listed
  std::set<std::string> seen;
  uint64_t cursor = 0;
  int pages = 0, added = 0;
  do {
    auto page = store_->Scan(cursor, 7, 1 << 20);
    for (auto& k : page.keys) seen.insert(k);
    EXPECT_LE(page.keys.size(), 7u * 10);
    cursor = page.next_cursor;
    // Meanwhile the table grows (it doubles several times) and keys come and go.
    for (int j = 0; j < 20; ++j) ASSERT_TRUE(Put("n" + std::to_string(added++), v));
    if (pages % 3 == 0) {
      ASSERT_TRUE(store_->Delete("n" + std::to_string(added / 2)));
    }
    ++pages;
  } while (cursor != 0 && pages < 100000);
  EXPECT_EQ(cursor, 0u);
  for (const auto& k : stable) EXPECT_TRUE(seen.count(k)) << k;
  EXPECT_FALSE(seen.count("short"));
  EXPECT_GT(pages, 10);
  // A page never exceeds its byte budget (but always moves on).
  auto small = store_->Scan(0, 1000, 40);
  size_t bytes = 0;
  for (auto& k : small.keys) bytes += k.size() + 2;
  EXPECT_LE(bytes, 40u);
  EXPECT_FALSE(small.keys.empty());
  // An empty store: one page, cursor 0.
  ASSERT_TRUE(store_->DeletePrefix(""));
  auto none = store_->Scan(0, 10, 1 << 20);
  EXPECT_TRUE(none.keys.empty());
  EXPECT_EQ(none.next_cursor, 0u);
}

TEST_F(StoreTest, RewritingTheSameKeysKeepsTheHeadClockBounded) {
  OpenStore();
  const auto v = Data(500, 9);
  for (int round = 0; round < 40; ++round) {
    for (int k = 0; k < 100; ++k) ASSERT_TRUE(Put("re" + std::to_string(k), v));
  }
  // (every occurrence of a rewritten key counted once: 4,000 commits, 100 heads)
  EXPECT_LE(store_->head_clock_entries(), 2u * 100 + 64 + 1);
  EXPECT_EQ(*GetAll("re7"), v);
}

TEST_F(StoreTest, AFullTierEvictsTheColdestObjects) {
  opts_.tier.max_files = 1;
  opts_.tier.file_bytes = 16 * kExtent;
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto cold = Data(6 * kExtent, 5), hot = Data(6 * kExtent, 6);
  ASSERT_TRUE(Put("/cold", cold));
  ASSERT_TRUE(Put("/hot", hot));
  ASSERT_TRUE(GetAll("/hot"));  // read again: S3-FIFO keeps it over the one-hit wonder
  auto next = Data(6 * kExtent, 7);
  ASSERT_TRUE(Put("/next", next));  // 18 extents > 16: something must go
  EXPECT_FALSE(store_->Head("/cold").value());
  EXPECT_EQ(GetAll("/hot").value(), hot);
  EXPECT_EQ(GetAll("/next").value(), next);
  EXPECT_EQ(store_->stats().evicted, 1u);
  EXPECT_EQ(store_->eviction().stats().evicted_small, 1u);
}

// The same through streams, as goblin-core reads: a hit counts its read in the object's
// record, and eviction takes it from there when it judges the object.
TEST_F(StoreTest, ObjectsReadThroughStreamsAreKeptOverTheColdOnes) {
  opts_.tier.max_files = 1;
  opts_.tier.file_bytes = 16 * kExtent;
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto read = [&](const std::string& key) {
    auto o = store_->OpenStream(key);
    EXPECT_TRUE(o && o->stream) << key;
    auto got =
        o && o->stream ? Drain(*o->stream) : Result<std::vector<uint8_t>>(std::vector<uint8_t>());
    EXPECT_TRUE(got) << got.error().ToString();
    return got ? *got : std::vector<uint8_t>();
  };
  auto cold = Data(5 * kExtent, 5), hot = Data(5 * kExtent, 6);
  ASSERT_TRUE(Put("/cold", cold));
  ASSERT_TRUE(Put("/hot", hot));
  EXPECT_EQ(read("/hot"), hot);
  EXPECT_EQ(read("/hot"), hot);
  auto next = Data(5 * kExtent, 7);
  ASSERT_TRUE(Put("/next", next));  // 15 of 16 extents
  auto last = Data(10 * kExtent, 8);
  // 25 > 16: the small queue's oldest go: /cold, then /hot is judged (read: promoted, on
  // the reads its record counted), then /next.
  ASSERT_TRUE(Put("/last", last));
  EXPECT_FALSE(store_->Head("/cold").value());
  EXPECT_FALSE(store_->Head("/next").value());
  EXPECT_EQ(read("/hot"), hot);
  EXPECT_EQ(read("/last"), last);
  EXPECT_EQ(store_->stats().evicted, 2u);
  EXPECT_EQ(store_->eviction().stats().evicted_small, 2u);
  EXPECT_EQ(store_->eviction().stats().promoted, 1u);
}

// ---- group commit (goblin-core's mode) ----

TEST_F(StoreTest, GroupCommitAcknowledgesOnceTheSyncIsDone) {
  opts_.group_commit = true;
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  ASSERT_TRUE(Put("/a", Data(3 * kExtent, 1)));
  ASSERT_TRUE(Put("/b", Data(1000, 2)));
  ASSERT_TRUE(store_->Delete("/b"));
  EXPECT_TRUE(store_->Head("/a").value());  // visible before it is durable
  std::vector<int> acks;
  store_->WhenDurable([&](const Status& s) { acks.push_back(s.ok() ? 1 : -1); });
  store_->WhenDurable([&](const Status& s) { acks.push_back(s.ok() ? 2 : -2); });
  EXPECT_TRUE(acks.empty()) << "acknowledged before any sync ran";
  for (int i = 0; i < 5000 && acks.size() < 2; ++i) {
    ASSERT_TRUE(store_->Poll());
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  EXPECT_EQ(acks, (std::vector<int>{1, 2}));  // in order
  // Nothing more to wait for: at once.
  bool now = false;
  store_->WhenDurable([&](const Status&) { now = true; });
  EXPECT_TRUE(now);
  EXPECT_LE(store_->index().stats().group_syncs, 2u);
  OpenStore();  // (a clean reopen)
  EXPECT_TRUE(store_->Head("/a").value());
  EXPECT_FALSE(store_->Head("/b").value());
}

TEST_F(StoreTest, TheSpaceOfADeleteIsReusedOnlyOnceTheDeleteIsDurable) {
  opts_.group_commit = true;
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  ASSERT_TRUE(Put("/x", Data(4 * kExtent, 3)));
  ASSERT_TRUE(store_->SyncNow());
  const uint64_t used = store_->tier().stats().slots_used;
  EXPECT_EQ(used, 4u);
  ASSERT_TRUE(store_->Delete("/x"));
  // A crash now would replay /x: its extents must still hold its bytes.
  EXPECT_EQ(store_->tier().stats().slots_used, used);
  ASSERT_TRUE(store_->SyncNow());
  EXPECT_EQ(store_->tier().stats().slots_used, 0u);
}

TEST_F(StoreTest, AFullTierUnderGroupCommitEvictsAndSyncsToMakeRoom) {
  opts_.group_commit = true;
  opts_.tier.max_files = 1;
  opts_.tier.file_bytes = 16 * kExtent;
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  for (int i = 0; i < 12; ++i) {  // 12 x 6 extents through a 16-extent tier
    auto data = Data(6 * kExtent, 10 + i);
    ASSERT_TRUE(Put("/o" + std::to_string(i), data)) << i;
    EXPECT_EQ(GetAll("/o" + std::to_string(i)).value(), data);
    ASSERT_TRUE(store_->Poll());
  }
  EXPECT_GE(store_->stats().evicted, 9u);
  EXPECT_GE(store_->stats().inline_syncs, 1u);
  EXPECT_LE(store_->tier().stats().slots_used, 16u);
}

// CommitAsync: every byte is in once it is called, so a new reader is a hit (it follows
// the fill to its record); a purge in that window wins over the commit on its way.
TEST_F(StoreTest, AReservedFillIsFollowedOnlyOnceItsHeadIsKnown) {
  opts_.tier.max_files = 1;
  opts_.tier.file_bytes = 16 * kExtent;
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto r = store_->BeginFill("/r", 77, "ignored", 5, /*head_pending=*/true);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->first, Store::FillStart::kGranted);
  EXPECT_TRUE(store_->FillAwaitingHead("/r"));
  EXPECT_FALSE(store_->FillAwaitingHead("/other"));
  // Nobody can follow it yet: readers read past it (a miss here), a second fill waits.
  auto early = store_->OpenStream("/r", 0, UINT64_MAX, /*follow_fill=*/true);
  ASSERT_TRUE(early);
  EXPECT_EQ(early->status, Store::Lookup::kMiss);
  auto second = store_->BeginFill("/r", 0, "");
  ASSERT_TRUE(second);
  EXPECT_EQ(second->first, Store::FillStart::kInProgress);
  // A head that could never be stored is refused; the fill stays reserved.
  auto big = store_->SetFillHead(r->second, 17 * kExtent, 0, "m");
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(store_->FillAwaitingHead("/r"));
  auto data = Data(2 * kExtent + 9, 31);
  ASSERT_TRUE(store_->SetFillHead(r->second, data.size(), 3600'000'000'000ULL, "meta"));
  EXPECT_FALSE(store_->FillAwaitingHead("/r"));
  EXPECT_FALSE(store_->SetFillHead(r->second, data.size(), 0, "again"));
  auto o = store_->OpenStream("/r", 0, UINT64_MAX, true);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->status, Store::Lookup::kFilling);
  EXPECT_EQ(o->info->size, data.size());
  EXPECT_EQ(o->info->metadata, "meta");
  ASSERT_TRUE(store_->Append(r->second, data));
  ASSERT_TRUE(store_->Commit(r->second, data.size()));
  auto got = Drain(*o->stream, [&] { ASSERT_TRUE(store_->Poll()); });
  ASSERT_TRUE(got) << got.error().ToString();
  EXPECT_EQ(*got, data);
  auto head = store_->Head("/r").value();
  ASSERT_TRUE(head);
  EXPECT_EQ(head->metadata, "meta");
  EXPECT_NE(head->expires_unix_ns, 0u);  // the head's TTL, not the reservation's
}

TEST_F(StoreTest, ACommittingFillIsAHitAndAPurgeOfItWins) {
  opts_.group_commit = true;
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto data = Data(3 * kExtent + 5, 21);
  auto start = store_->BeginFill("/c", 0, "m");
  ASSERT_TRUE(start);
  ASSERT_TRUE(store_->Append(start->second, data));
  std::optional<Result<uint64_t>> committed;
  ASSERT_TRUE(store_->CommitAsync(start->second, data.size(),
                                  [&](Result<uint64_t> g) { committed = std::move(g); }));
  auto o = store_->OpenStream("/c", 0, UINT64_MAX, /*follow_fill=*/true);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->status, Store::Lookup::kHit);
  EXPECT_EQ(o->info->size, data.size());
  auto got = Drain(*o->stream, [&] { ASSERT_TRUE(store_->Poll()); });
  ASSERT_TRUE(got) << got.error().ToString();
  EXPECT_EQ(*got, data);
  for (int i = 0; i < 5000 && !committed; ++i) {
    ASSERT_TRUE(store_->Poll());
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ASSERT_TRUE(committed && *committed);
  EXPECT_TRUE(store_->Head("/c").value());
  // Again, purged while committing: new readers miss at once, and it never appears.
  auto s2 = store_->BeginFill("/p", 0, "");
  ASSERT_TRUE(s2);
  ASSERT_TRUE(store_->Append(s2->second, data));
  std::optional<Result<uint64_t>> c2;
  ASSERT_TRUE(
      store_->CommitAsync(s2->second, data.size(), [&](Result<uint64_t> g) { c2 = std::move(g); }));
  EXPECT_TRUE(store_->Delete("/p").value());  // something was there to purge
  auto miss = store_->OpenStream("/p", 0, UINT64_MAX, true);
  ASSERT_TRUE(miss);
  EXPECT_EQ(miss->status, Store::Lookup::kMiss);
  for (int i = 0; i < 5000 && !c2; ++i) {
    ASSERT_TRUE(store_->Poll());
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ASSERT_TRUE(c2);
  EXPECT_FALSE(store_->Head("/p").value());
  ASSERT_TRUE(store_->SyncNow());
  o->stream.reset();  // (streams never outlive their store)
  OpenStore();
  EXPECT_FALSE(store_->Head("/p").value());
  EXPECT_TRUE(store_->Head("/c").value());
}

TEST_F(StoreTest, ASoftPurgeOfACommittingFillMarksItStaleWhenItsRecordIsWritten) {
  // A response delivered whole, its record still on the way, then a soft purge (PURGE with
  // X-Purge-Soft): the version must come out stale, not fresh after the purge.
  opts_.group_commit = true;
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto data = Data(2 * kExtent + 3, 8);
  auto commit = [&](const std::string& key, std::optional<Result<uint64_t>>* done) {
    auto start = store_->BeginFill(key, 0, "m");
    ASSERT_TRUE(start);
    ASSERT_TRUE(store_->Append(start->second, data));
    ASSERT_TRUE(store_->CommitAsync(start->second, data.size(),
                                    [done](Result<uint64_t> g) { *done = std::move(g); }));
  };
  auto wait = [&](std::optional<Result<uint64_t>>* done) {
    for (int i = 0; i < 5000 && !*done; ++i) {
      ASSERT_TRUE(store_->Poll());
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    ASSERT_TRUE(*done && **done);
  };
  auto stale = [&](const std::string& key) {
    AccessMarks m;
    auto h = store_->Head(key, nullptr, &m);
    return h && *h && (m.marks & kAccessStale) != 0;
  };
  std::optional<Result<uint64_t>> a;
  ASSERT_NO_FATAL_FAILURE(commit("/s/a", &a));
  auto marked = store_->Invalidate("/s/a", 0, false, 0);
  ASSERT_TRUE(marked);
  EXPECT_EQ(*marked, Store::kStalePending);  // nothing committed yet: the fill is marked
  AccessMarks fm;                            // a reader following the fill meanwhile reads it stale
  auto o = store_->OpenStream("/s/a", 0, UINT64_MAX, /*follow_fill=*/true, nullptr, &fm);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->status, Store::Lookup::kHit);
  EXPECT_NE(fm.marks & kAccessStale, 0);
  o->stream.reset();
  ASSERT_NO_FATAL_FAILURE(wait(&a));
  EXPECT_TRUE(stale("/s/a"));
  EXPECT_EQ(**a, store_->Head("/s/a").value()->generation);  // (the version as it is now)
  // By prefix: the committing one counted (the committed one is stale already).
  std::optional<Result<uint64_t>> b;
  ASSERT_NO_FATAL_FAILURE(commit("/s/b", &b));
  auto n = store_->InvalidatePrefix("/s/");
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 1u);
  ASSERT_NO_FATAL_FAILURE(wait(&b));
  EXPECT_TRUE(stale("/s/b"));
  // A fill not soft-purged comes out fresh, and a conditional invalidation (if_generation)
  // does not reach a fill (it names a committed version).
  std::optional<Result<uint64_t>> c;
  ASSERT_NO_FATAL_FAILURE(commit("/s/c", &c));
  auto cond = store_->Invalidate("/s/c", 12345, false, 0);
  ASSERT_TRUE(cond);
  EXPECT_EQ(*cond, 0u);
  ASSERT_NO_FATAL_FAILURE(wait(&c));
  EXPECT_FALSE(stale("/s/c"));
  EXPECT_TRUE(store_->Head("/s/c").value());
}

TEST_F(StoreTest, DescribeCanLeaveTheDiskReadToAStream) {
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto data = Data(3 * kExtent, 4);
  ASSERT_TRUE(Put("/d", data));
  OpenStore();  // restart: the head is on disk only
  Store::StreamPtr refill;
  auto d = store_->Describe("/d", Store::DiskRead::kAsync, &refill);
  ASSERT_TRUE(d && *d);
  EXPECT_EQ((*d)->entry, sbe::kNoHeadEntry);  // not yet
  ASSERT_NE(refill, nullptr);
  std::span<const uint8_t> bytes;
  for (int i = 0; i < 5000; ++i) {
    auto step = refill->Peek(&bytes);
    ASSERT_TRUE(step);
    if (*step != Store::Stream::Step::kWait) break;
    ASSERT_TRUE(store_->Poll());
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  refill.reset();
  auto d2 = store_->Describe("/d", Store::DiskRead::kNever);
  ASSERT_TRUE(d2 && *d2);
  EXPECT_NE((*d2)->entry, sbe::kNoHeadEntry);  // the stream's first chunk brought it in
  EXPECT_EQ((*d2)->head.length, kHead);
  // kNever on a head that is not in RAM: no entry, and no disk read.
  OpenStore();
  auto d3 = store_->Describe("/d", Store::DiskRead::kNever);
  ASSERT_TRUE(d3 && *d3);
  EXPECT_EQ((*d3)->entry, sbe::kNoHeadEntry);
  EXPECT_EQ(store_->stats().head_refills, 0u);
}

TEST_F(StoreTest, MoreFillsAtOnceThanIoBuffersStageTheirBytesUpToALimit) {
  opts_.io_buffers = 8;
  opts_.fill_staging_bytes = 40 * (16 << 10);  // 40 small staging buffers
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  std::vector<std::pair<Store::FillId, std::vector<uint8_t>>> fills;
  for (int i = 0; i < 48; ++i) {  // 8 take an I/O buffer each, 40 stage
    auto start = store_->BeginFill("/many" + std::to_string(i), 0, "");
    ASSERT_TRUE(start);
    auto data = Data(5000 + static_cast<size_t>(i) * 100, 100 + i);
    ASSERT_TRUE(store_->Append(start->second, data)) << i;
    fills.emplace_back(start->second, std::move(data));
  }
  // One more: neither an I/O buffer nor staging left.
  auto extra = store_->BeginFill("/one-too-many", 0, "");
  ASSERT_TRUE(extra);
  auto refused = store_->Append(extra->second, Data(5000, 1));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.error().message().find("too many fills at once"), std::string::npos);
  for (size_t i = 0; i < fills.size(); ++i) {
    ASSERT_TRUE(store_->Commit(fills[i].first, fills[i].second.size())) << i;
  }
  for (size_t i = 0; i < fills.size(); ++i) {
    EXPECT_EQ(GetAll("/many" + std::to_string(i)).value(), fills[i].second) << i;
  }
  // Everything given back: a new fill takes an I/O buffer again.
  EXPECT_TRUE(Put("/after", Data(3 * kExtent, 9)));
  OpenStore();  // and it all survives a restart (read back from the extents)
  EXPECT_EQ(GetAll("/many47").value(), fills[47].second);
}

TEST_F(StoreTest, AFillThatOutrunsTheDiskWaitsForItInsteadOfFailing) {
  // A sender faster than the disk (a 2 GiB object on a busy disk): the writer's buffers are
  // all on their way and staging is small. It waits for its writes; it is never aborted.
  opts_.io_buffers = 4;
  opts_.fill_staging_bytes = 2 * kExtent;
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto small = store_->BeginFill("/small", 0, "");  // another fill holds a buffer meanwhile
  ASSERT_TRUE(small);
  auto small_data = Data(5000, 3);
  ASSERT_TRUE(store_->Append(small->second, small_data));
  auto big = store_->BeginFill("/big", 0, "");
  ASSERT_TRUE(big);
  auto data = Data(40 * kExtent + 123, 4);
  for (size_t off = 0; off < data.size(); off += kExtent / 3) {
    size_t n = std::min<size_t>(kExtent / 3, data.size() - off);
    ASSERT_TRUE(store_->Append(big->second, std::span(data).subspan(off, n))) << off;
  }
  ASSERT_TRUE(store_->Commit(big->second, data.size()));
  ASSERT_TRUE(store_->Commit(small->second, small_data.size()));
  EXPECT_GT(store_->stats().fill_disk_waits, 0u);
  EXPECT_EQ(store_->stats().fills_aborted, 0u);
  EXPECT_EQ(GetAll("/big").value(), data);
  EXPECT_EQ(GetAll("/small").value(), small_data);
}

TEST_F(StoreTest, AnObjectLargerThanTheTierIsRefusedAndEvictsNothing) {
  opts_.tier.max_files = 1;
  opts_.tier.file_bytes = 16 * kExtent;
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto keep = Data(10 * kExtent, 5);
  ASSERT_TRUE(Put("/keep", keep));
  auto r = store_->BeginFill("/big", 0, "", 17 * kExtent);  // announced size: refused at once
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.error().message().find("does not fit"), std::string::npos) << r.error().ToString();
  EXPECT_EQ(GetAll("/keep").value(), keep);
  // Unknown size: the fill evicts as it goes and fails once nothing more can go; the space
  // comes back and what fits still goes in.
  auto big = Data(17 * kExtent, 6);
  auto start = store_->BeginFill("/big", 0, "");
  ASSERT_TRUE(start);
  auto a = store_->Append(start->second, big);
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(store_->Head("/big").value());
  EXPECT_EQ(store_->tier().stats().slots_used, 0u);
  EXPECT_TRUE(Put("/small", Data(3 * kExtent, 7)));
}

TEST_F(StoreTest, MaxObjectsEvictsInFifoOrderForObjectsReadOnce) {
  opts_.max_objects = 3;
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(Put("/o" + std::to_string(i), Data(100, i)));
  EXPECT_EQ(store_->stats().objects, 3u);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(store_->Head("/o" + std::to_string(i)).value()) << i;
  for (int i = 3; i < 6; ++i) EXPECT_TRUE(store_->Head("/o" + std::to_string(i)).value()) << i;
  // An evicted key that comes back goes to the main queue (its digest is in the ghost).
  ASSERT_TRUE(Put("/o0", Data(100, 0)));
  EXPECT_EQ(store_->eviction().stats().ghost_hits, 1u);
}

// --max-variants: a variant that commits beyond the bound drops the least recently used of
// its object's others (last read, then creation); other objects and plain keys are not
// counted; the bound holds after a restart (the mark is journaled).
TEST_F(StoreTest, MaxVariantsDropsTheLeastRecentlyUsedVariantOfTheObject) {
  using namespace std::string_literals;
  opts_.max_variants = 2;
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto put_variant = [&](const std::string& key, uint32_t seed) -> Result<uint64_t> {
    GOBLIN_ASSIGN_OR_RETURN(auto start, store_->BeginFill(key, 0, ""));
    GOBLIN_RETURN_IF_ERROR(store_->SetFillVariant(start.second));
    auto data = Data(100, seed);
    GOBLIN_RETURN_IF_ERROR(store_->Append(start.second, data));
    return store_->Commit(start.second, data.size());
  };
  auto has = [&](const std::string& key) { return store_->Head(key).value().has_value(); };
  const std::string a = "h/x\0#d=a"s, b = "h/x\0#d=b"s, c = "h/x\0#d=c"s, d = "h/x\0#d=d"s;
  ASSERT_TRUE(put_variant(a, 1));
  ASSERT_TRUE(put_variant(b, 2));
  ASSERT_TRUE(put_variant("h/y\0#d=a"s, 3));     // another object
  ASSERT_TRUE(Put("h/x", Data(100, 4)));         // the plain key: no variant
  ASSERT_TRUE(Put("h/x\0#d=z"s, Data(100, 5)));  // not filled as one
  // A read of `a` a second later makes `b` the least recently used.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  ASSERT_TRUE(GetAll(a));
  ASSERT_TRUE(put_variant(c, 6));
  EXPECT_TRUE(has(a));
  EXPECT_FALSE(has(b));
  EXPECT_TRUE(has(c));
  EXPECT_EQ(store_->stats().variants_evicted, 1u);
  // A new version of a kept variant is no new variant.
  ASSERT_TRUE(put_variant(c, 7));
  EXPECT_TRUE(has(a) && has(c));
  // After a restart the bound still holds (reads are forgotten: `a`, the oldest, goes).
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  ASSERT_TRUE(put_variant(d, 8));
  EXPECT_FALSE(has(a));
  EXPECT_TRUE(has(c) && has(d));
  EXPECT_TRUE(has("h/y\0#d=a"s) && has("h/x") && has("h/x\0#d=z"s));
  EXPECT_EQ(store_->stats().variants_evicted, 1u);  // (this store's own count)
  // A key without a NUL cannot be one.
  auto start = store_->BeginFill("h/plain", 0, "");
  ASSERT_TRUE(start);
  EXPECT_FALSE(store_->SetFillVariant(start->second));
  store_->Abort(start->second);
}

TEST_F(StoreTest, RamPressureDemotesColdHeadsAndKeepsTheObjects) {
  opts_.pool.memory = 1 << 20;  // 16 heads of 64 KiB
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  std::vector<std::vector<uint8_t>> data;
  for (int i = 0; i < 40; ++i) {
    data.push_back(Data(2 * kHead, i));
    ASSERT_TRUE(Put("/h" + std::to_string(i), data.back()));
  }
  EXPECT_GT(store_->stats().heads_demoted, 0u);
  EXPECT_EQ(store_->stats().objects, 40u);
  EXPECT_LE(store_->stats().heads_in_ram, 16u);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(GetAll("/h" + std::to_string(i)).value(), data[i]) << i;
}

// A one-sided read as a client does it (goblin/sbe/head_table.h), here in-process.
bool ReadOneSided(const Store& store, const HeadDescription& d, std::vector<uint8_t>* out) {
  sbe::HeadTableEntry before = store.head_table().Read(d.entry);
  out->assign(store.pool().At(d.head.offset), store.pool().At(d.head.offset) + d.head.length);
  sbe::HeadTableEntry after = store.head_table().Read(d.entry);
  return sbe::HeadReadIsCurrent(d.head, before, after, XXH3_64bits(out->data(), out->size()));
}

TEST_F(StoreTest, DescribedHeadsReadOneSidedUntilTheyLeaveRam) {
  opts_.pool.memory = 1 << 20;  // 16 heads of 64 KiB
  opts_.ram_tails = false;      // (which slot a head gets next, below, is the heads' alone)
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto a = Data(3 * kHead, 1), small = Data(100, 2);
  ASSERT_TRUE(Put("/a", a));
  ASSERT_TRUE(Put("/small", small));
  EXPECT_FALSE(store_->Describe("/none").value().has_value());

  auto d = store_->Describe("/a").value();
  ASSERT_TRUE(d.has_value());
  ASSERT_NE(d->entry, sbe::kNoHeadEntry);
  EXPECT_EQ(d->info.size, a.size());
  EXPECT_EQ(d->head.length, kHead);
  EXPECT_NE(d->head.stamp, 0u);
  std::vector<uint8_t> got;
  ASSERT_TRUE(ReadOneSided(*store_, *d, &got));
  EXPECT_EQ(got, std::vector<uint8_t>(a.begin(), a.begin() + kHead));
  // Described again: the same entry.
  EXPECT_EQ(store_->Describe("/a").value()->entry, d->entry);
  auto ds = store_->Describe("/small").value();
  ASSERT_TRUE(ReadOneSided(*store_, *ds, &got));
  EXPECT_EQ(got, small);
  EXPECT_EQ(store_->head_table().in_use(), 2u);

  // Replaced: the old descriptor is stale, even though its bytes are still in the pool
  // for a loan; the new version gets a new one.
  auto loan = store_->Get("/a").value();
  auto a2 = Data(3 * kHead, 3);
  ASSERT_TRUE(Put("/a", a2));
  EXPECT_FALSE(ReadOneSided(*store_, *d, &got));
  auto d2 = store_->Describe("/a").value();
  ASSERT_TRUE(ReadOneSided(*store_, *d2, &got));
  EXPECT_EQ(got, std::vector<uint8_t>(a2.begin(), a2.begin() + kHead));
  store_->Release(*loan);

  // Deleted, and its slot and entry reused by another object: still stale.
  ASSERT_TRUE(store_->Delete("/a").value());
  EXPECT_FALSE(ReadOneSided(*store_, *d2, &got));
  ASSERT_TRUE(Put("/b", Data(3 * kHead, 4)));
  auto db = store_->Describe("/b").value();
  ASSERT_TRUE(db.has_value());
  EXPECT_EQ(db->head.offset, d2->head.offset);  // the same slot...
  EXPECT_EQ(db->entry, d2->entry);              // ...and the same entry, a new stamp
  EXPECT_FALSE(ReadOneSided(*store_, *d2, &got));
  ASSERT_TRUE(ReadOneSided(*store_, *db, &got));

  // Demoted under RAM pressure: stale; described again, the head comes back.
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(Put("/p" + std::to_string(i), Data(2 * kHead, 10 + i)));
  EXPECT_GT(store_->stats().heads_demoted, 0u);
  EXPECT_FALSE(ReadOneSided(*store_, *db, &got));
  auto db2 = store_->Describe("/b").value();
  ASSERT_TRUE(ReadOneSided(*store_, *db2, &got));
  auto b = Data(3 * kHead, 4);
  EXPECT_EQ(got, std::vector<uint8_t>(b.begin(), b.begin() + kHead));
}

// A head demoted and brought back into the same slot under the same entry is the same bytes
// of the same version, but a reader that held the old descriptor across that cannot know its
// bytes were not overwritten in between: the new publication has a new stamp.
TEST_F(StoreTest, AHeadPublishedAgainGetsANewStamp) {
  opts_.pool.memory = 1 << 20;  // 16 heads of 64 KiB
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  ASSERT_TRUE(Put("/a", Data(kHead, 1)));
  auto d = store_->Describe("/a").value();
  ASSERT_TRUE(d && d->entry != sbe::kNoHeadEntry);
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(Put("/p" + std::to_string(i), Data(kHead, 10 + i)));
  EXPECT_GT(store_->stats().heads_demoted, 0u);
  auto d2 = store_->Describe("/a").value();
  ASSERT_TRUE(d2 && d2->entry != sbe::kNoHeadEntry);
  EXPECT_NE(d2->head.stamp, d->head.stamp);
  std::vector<uint8_t> got;
  EXPECT_FALSE(ReadOneSided(*store_, *d, &got));
  EXPECT_TRUE(ReadOneSided(*store_, *d2, &got));
  // Described again while it stays: the same publication.
  EXPECT_EQ(store_->Describe("/a").value()->head.stamp, d2->head.stamp);
}

// A reader that serves described heads itself marks them in the touch table; the store
// counts that as a read when it looks for a head to demote.
TEST_F(StoreTest, TouchedHeadsStayInRamUnderPressure) {
  opts_.pool.memory = 1 << 20;  // 16 heads of 64 KiB
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  const HeadTable& t = store_->head_table();
  void* m = mmap(nullptr, t.touch_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, t.touch_fd(), 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* touch = static_cast<uint8_t*>(m);
  // The pool full, its CLOCK turning: then one head read only here, one not read at all.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Put("/f" + std::to_string(i), Data(kHead, 50 + i)));
  ASSERT_TRUE(Put("/hot", Data(kHead, 1)));
  ASSERT_TRUE(Put("/cold", Data(kHead, 2)));
  auto hot = store_->Describe("/hot").value();
  auto cold = store_->Describe("/cold").value();
  ASSERT_TRUE(hot && hot->entry != sbe::kNoHeadEntry);
  ASSERT_TRUE(cold && cold->entry != sbe::kNoHeadEntry);
  std::vector<uint8_t> got;
  for (int i = 0; i < 60; ++i) {
    touch[hot->entry] = 1;  // read elsewhere, between every two writes
    ASSERT_TRUE(Put("/p" + std::to_string(i), Data(kHead, 10 + i)));
  }
  EXPECT_GT(store_->stats().heads_demoted, 60u);
  EXPECT_GT(store_->stats().heads_touched, 0u);
  EXPECT_TRUE(ReadOneSided(*store_, *hot, &got)) << "a head read all along was demoted";
  EXPECT_FALSE(ReadOneSided(*store_, *cold, &got)) << "a head nobody read stayed in RAM";
  munmap(m, t.touch_bytes());
}

TEST_F(StoreTest, AFullHeadTableLeavesHeadsToTwoSidedReads) {
  opts_.head_descriptors = 1;
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  ASSERT_TRUE(Put("/x", Data(1000, 1)));
  ASSERT_TRUE(Put("/y", Data(1000, 2)));
  EXPECT_NE(store_->Describe("/x").value()->entry, sbe::kNoHeadEntry);
  auto y = store_->Describe("/y").value();
  ASSERT_TRUE(y.has_value());
  EXPECT_EQ(y->entry, sbe::kNoHeadEntry);
  EXPECT_EQ(y->info.size, 1000u);
  EXPECT_EQ(store_->head_table().publish_failures(), 1u);
  ASSERT_TRUE(store_->Delete("/x").value());  // its entry is free again
  EXPECT_NE(store_->Describe("/y").value()->entry, sbe::kNoHeadEntry);
}

TEST_F(StoreTest, StreamsServeHeadAndTailWithoutCopiesAndRanges) {
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto data = Data(5 * kExtent + 77, 3);
  ASSERT_TRUE(Put("/s", data));
  auto whole = store_->OpenStream("/s");
  ASSERT_TRUE(whole && whole->status == Store::Lookup::kHit);
  EXPECT_EQ(Drain(*whole->stream).value(), data);
  for (auto [off, len] : {std::pair<uint64_t, uint64_t>{kHead - 5, 10},
                          {kExtent * 2 + 3, kExtent},
                          {data.size() - 1, 100},
                          {0, 1},
                          {data.size(), 5}}) {
    first_offset_ = off;
    auto part = store_->OpenStream("/s", off, len);
    ASSERT_TRUE(part && part->stream);
    auto got = Drain(*part->stream);
    ASSERT_TRUE(got) << got.error().ToString();
    uint64_t n = std::min<uint64_t>(len, data.size() - off);
    EXPECT_EQ(*got, std::vector<uint8_t>(data.begin() + static_cast<ptrdiff_t>(off),
                                         data.begin() + static_cast<ptrdiff_t>(off + n)))
        << off;
  }
  first_offset_ = 0;
  auto miss = store_->OpenStream("/nope");
  ASSERT_TRUE(miss);
  EXPECT_EQ(miss->status, Store::Lookup::kMiss);
  EXPECT_FALSE(miss->stream);
  whole->stream.reset();
  EXPECT_EQ(store_->stats().loans_out, 0u);
  EXPECT_EQ(store_->buffers().free_count(), store_->buffers().count());
}

// A reader lent a range's last piece takes the stream's own pin on the version
// (Stream::TakePin) instead of a second one: the bytes stay where they are, past the
// stream's end and past a replacement of the object, until ReleasePin; taken once only.
TEST_F(StoreTest, APinTakenFromAStreamHoldsTheVersionUntilReleased) {
  opts_.ram_tails = false;
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  const auto old_data = Data(kHead / 2, 21);
  ASSERT_TRUE(Put("/pin", old_data));
  auto o = store_->OpenStream("/pin");
  ASSERT_TRUE(o && o->stream);
  std::span<const uint8_t> bytes;
  auto step = o->stream->Peek(&bytes);
  ASSERT_TRUE(step && *step == Store::Stream::Step::kData);
  ASSERT_EQ(o->stream->where(), Store::Stream::Where::kHeadPool);
  ASSERT_EQ(bytes.size(), old_data.size());  // (the whole object: its last piece)
  const uint64_t pin = o->stream->TakePin();
  EXPECT_NE(pin, 0u);
  EXPECT_EQ(o->stream->TakePin(), 0u);  // once
  o->stream->Consume(bytes.size());
  o->stream.reset();
  EXPECT_EQ(store_->stats().loans_out, 1u);  // the pin, not the closed stream's loan
  // A new version and more objects take pool space; the pinned bytes stay.
  ASSERT_TRUE(Put("/pin", Data(kHead / 2, 22)));
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(Put("/more/" + std::to_string(i), Data(kHead, 30 + i)));
  EXPECT_EQ(std::memcmp(bytes.data(), old_data.data(), old_data.size()), 0);
  store_->ReleasePin(pin);
  EXPECT_EQ(store_->stats().loans_out, 0u);
  store_->ReleasePin(pin);  // (twice: ignored)
  EXPECT_EQ(store_->stats().loans_out, 0u);
  EXPECT_EQ(GetAll("/pin").value(), Data(kHead / 2, 22));
  // A stream following a fill holds no pin to take.
  auto start = store_->BeginFill("/filling", 0, "", 100);
  ASSERT_TRUE(start);
  auto f = store_->OpenStream("/filling", 0, UINT64_MAX, /*follow_fill=*/true);
  ASSERT_TRUE(f && f->stream);
  EXPECT_EQ(f->stream->TakePin(), 0u);
  f->stream.reset();
  store_->Abort(start->second);
  EXPECT_EQ(store_->stats().loans_out, 0u);
}

TEST_F(StoreTest, AReaderFollowsAFillToItsCommit) {
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto data = Data(6 * kExtent + 5, 4);
  auto start = store_->BeginFill("/f", 0, "meta", data.size());
  ASSERT_TRUE(start);
  Store::FillId id = start->second;
  auto opened = store_->OpenStream("/f", 0, UINT64_MAX, /*follow_fill=*/true);
  ASSERT_TRUE(opened);
  ASSERT_EQ(opened->status, Store::Lookup::kFilling);
  EXPECT_EQ(opened->info->size, data.size());
  EXPECT_EQ(opened->info->metadata, "meta");
  int woken = 0;
  opened->stream->SetReadyCallback([&] { ++woken; });
  // Feed the fill a piece each time the reader catches up, commit at the end.
  size_t fed = 0;
  auto feed = [&] {
    if (fed < data.size()) {
      size_t n = std::min<size_t>(data.size() - fed, 50000);
      ASSERT_TRUE(store_->Append(id, {data.data() + fed, n}));
      fed += n;
    } else if (store_->stats().fills_committed == 0) {
      ASSERT_TRUE(store_->Commit(id, data.size()));
    }
  };
  auto got = Drain(*opened->stream, feed);
  ASSERT_TRUE(got) << got.error().ToString();
  EXPECT_EQ(*got, data);  // the announced size ends the stream, even before the commit
  EXPECT_GT(woken, 0);
  if (store_->stats().fills_committed == 0) {
    ASSERT_TRUE(store_->Commit(id, data.size()));
  }
  EXPECT_FALSE(opened->stream->following_fill());
  opened->stream.reset();
  EXPECT_EQ(store_->stats().loans_out, 0u);
  EXPECT_EQ(GetAll("/f").value(), data);
}

TEST_F(StoreTest, AReaderOfAFillOfUnknownSizeEndsAtTheCommit) {
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto data = Data(3 * kExtent + 1, 8);
  auto start = store_->BeginFill("/u", 0, "");
  ASSERT_TRUE(start);
  // A late joiner: part of the fill is already on disk, the rest arrives while it reads.
  ASSERT_TRUE(store_->Append(start->second, {data.data(), 2 * kExtent}));
  auto opened = store_->OpenStream("/u", 0, UINT64_MAX, true);
  ASSERT_TRUE(opened && opened->stream);
  EXPECT_EQ(opened->stream->end(), UINT64_MAX);
  bool fed = false;
  auto got = Drain(*opened->stream, [&] {
    if (fed) return;
    fed = true;
    ASSERT_TRUE(
        store_->Append(start->second, {data.data() + 2 * kExtent, data.size() - 2 * kExtent}));
    ASSERT_TRUE(store_->Commit(start->second));
  });
  ASSERT_TRUE(got) << got.error().ToString();
  EXPECT_EQ(*got, data);
  EXPECT_EQ(opened->stream->end(), data.size());
}

TEST_F(StoreTest, AReaderOfAnAbandonedFillGetsAborted) {
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  auto start = store_->BeginFill("/gone", 0, "");
  ASSERT_TRUE(start);
  ASSERT_TRUE(store_->Append(start->second, Data(3 * kExtent, 1)));
  auto opened = store_->OpenStream("/gone", 0, UINT64_MAX, true);
  ASSERT_TRUE(opened && opened->stream);
  EXPECT_EQ(opened->info->size, UINT64_MAX);
  store_->Abort(start->second);
  auto got = Drain(*opened->stream);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code(), StatusCode::kAborted);
  // Without follow_fill an uncommitted key is a miss.
  auto again = store_->BeginFill("/gone", 0, "");
  ASSERT_TRUE(again);
  EXPECT_EQ(store_->OpenStream("/gone").value().status, Store::Lookup::kMiss);
  store_->Abort(again->second);
}

TEST_F(StoreTest, ExpiredObjectsAreRemovedInTheBackground) {
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  ASSERT_TRUE(Put("/short", Data(10, 1), /*ttl=*/1'000'000));  // 1 ms
  ASSERT_TRUE(Put("/long", Data(10, 2), /*ttl=*/3600ull * 1'000'000'000));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(store_->Poll());
  EXPECT_EQ(store_->stats().objects, 1u);  // gone without anyone asking for it
  EXPECT_EQ(store_->stats().expired, 1u);
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

// kill -9 while small fills write into slots that committed objects share: after a
// restart every committed object is exact, no torn one exists, and new objects packed into
// the same slots disturb none of them.
TEST_F(StoreTest, CrashAmongPackedFillsKeepsEveryCommittedObject) {
  std::map<std::string, std::vector<uint8_t>> committed;
  for (int i = 0; i < 40; ++i)
    committed[fmt::format("/before/{}", i)] = Data(1000 + 997 * i, static_cast<uint32_t>(i));
  {
    ASSERT_NO_FATAL_FAILURE(OpenStore());
    for (const auto& [key, data] : committed) ASSERT_TRUE(Put(key, data));
  }
  store_.reset();
  for (int i = 0; i < 40; ++i)
    committed[fmt::format("/child/{}", i)] = Data(500 + 1499 * i, static_cast<uint32_t>(100 + i));
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto s = Store::Open(opts_);
    if (!s) _exit(1);
    store_ = std::move(*s);
    for (int i = 0; i < 40; ++i) {
      const std::string key = fmt::format("/child/{}", i);
      if (!Put(key, committed[key])) _exit(2);
    }
    // Fills left open: their bytes written (Append submits whole extents) or staged.
    for (int i = 0; i < 20; ++i) {
      auto f = store_->BeginFill(fmt::format("/torn/{}", i), 0, "");
      if (!f) _exit(3);
      (void)store_->Append(f->second, Data(3000 + 5000 * i, static_cast<uint32_t>(200 + i)));
    }
    (void)store_->Poll();
    raise(SIGKILL);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(store_->Head(fmt::format("/torn/{}", i)).value());
  for (const auto& [key, data] : committed) EXPECT_EQ(GetAll(key).value(), data) << key;
  for (int i = 0; i < 60; ++i) {
    const std::string key = fmt::format("/after/{}", i);
    committed[key] = Data(2000 + 1003 * i, static_cast<uint32_t>(300 + i));
    ASSERT_TRUE(Put(key, committed[key]));
  }
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  for (const auto& [key, data] : committed) EXPECT_EQ(GetAll(key).value(), data) << key;
  EXPECT_EQ(store_->tier().stats().packed_extents, committed.size());
}

TEST_F(StoreTest, TwoTiersSplitObjectsAndSurviveARestart) {
  std::string hdd = dir_ + "-hdd";
  ASSERT_TRUE(PrepareTier(hdd));
  opts_.tier_dirs.push_back({hdd});
  opts_.ssd_prefix = 2 * kExtent;
  auto big = Data(10 * kExtent + 9, 1), small = Data(kHead + 10, 2);
  {
    ASSERT_NO_FATAL_FAILURE(OpenStore());
    ASSERT_EQ(store_->tier_count(), 2u);
    ASSERT_TRUE(Put("/big", big));
    ASSERT_TRUE(Put("/small", small));
    // Head + prefix (3 extents of /big, 2 of /small) on the first tier, the rest on the second.
    EXPECT_EQ(store_->tier(0).stats().slots_used, 3u + 2u);
    EXPECT_EQ(store_->tier(1).stats().slots_used, 8u);
    EXPECT_EQ(GetAll("/big").value(), big);
    auto st = store_->OpenStream("/big", kHead + 2 * kExtent - 100, 300);  // across the split
    ASSERT_TRUE(st && st->stream);
    first_offset_ = kHead + 2 * kExtent - 100;
    EXPECT_EQ(Drain(*st->stream).value(),
              std::vector<uint8_t>(big.begin() + static_cast<ptrdiff_t>(first_offset_),
                                   big.begin() + static_cast<ptrdiff_t>(first_offset_ + 300)));
    first_offset_ = 0;
  }
  store_.reset();
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  EXPECT_EQ(GetAll("/big").value(), big);
  EXPECT_EQ(GetAll("/small").value(), small);
  store_.reset();
  // Forgetting --hdd-dir is refused, not taken as damage.
  opts_.tier_dirs.pop_back();
  auto s = Store::Open(opts_);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code(), StatusCode::kFailedPrecondition);
  opts_.tier_dirs.push_back({hdd});
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  EXPECT_EQ(GetAll("/big").value(), big);
  store_.reset();
  fs::remove_all(hdd);
}

// Several drives per tier (--ssd-dir A,B): extents go round-robin over the drives, and the
// drives' numbers (kept in their labels) hold whatever order they are listed in.
class StoreDrivesTest : public StoreTest {
 protected:
  void SetUp() override {
    StoreTest::SetUp();
    second_ = dir_ + "-b";
    ASSERT_TRUE(PrepareTier(second_));
    opts_.tier_dirs = {{dir_, second_}};
  }
  void TearDown() override {
    StoreTest::TearDown();
    fs::remove_all(second_);
  }
  // The drives `key`'s extents lie on.
  std::set<uint16_t> DrivesOf(const std::string& key) {
    std::set<uint16_t> out;
    auto loan = store_->Get(key);
    EXPECT_TRUE(loan && *loan) << key;
    if (!loan || !*loan) return out;
    for (const Extent& e : (*loan)->extents) out.insert(e.drive);
    store_->Release(**loan);
    return out;
  }
  std::string second_;
};

TEST_F(StoreDrivesTest, ExtentsAreStripedAndDrivesKeepTheirNumbersInAnyOrder) {
  auto big = Data(6 * kExtent + 5, 1);
  std::map<std::string, std::vector<uint8_t>> small;
  for (int i = 0; i < 20; ++i) small["/s" + std::to_string(i)] = Data(1000 + i * 3001, 10 + i);
  {
    ASSERT_NO_FATAL_FAILURE(OpenStore());
    ASSERT_EQ(store_->tier().drives().size(), 2u);
    ASSERT_TRUE(Put("/big", big));
    for (const auto& [key, data] : small) ASSERT_TRUE(Put(key, data)) << key;
    auto loan = store_->Get("/big");
    ASSERT_TRUE(loan && *loan);
    const auto& ex = (*loan)->extents;
    ASSERT_EQ(ex.size(), 7u);
    for (size_t i = 1; i < ex.size(); ++i) EXPECT_NE(ex[i].drive, ex[i - 1].drive) << i;
    store_->Release(**loan);
    std::map<uint16_t, int> per_drive;
    for (const auto& [key, data] : small) ++per_drive[*DrivesOf(key).begin()];
    EXPECT_EQ(per_drive[0], 10);  // small objects alternate too
    EXPECT_EQ(per_drive[1], 10);
    EXPECT_GT(store_->tier().drive(0)->stats().write_bytes, 3 * kExtent);
    EXPECT_GT(store_->tier().drive(1)->stats().write_bytes, 3 * kExtent);
    EXPECT_EQ(store_->tier().capacity_bytes(), 2 * 8 * (4ull << 20));  // both drives' files
  }
  store_.reset();
  EXPECT_EQ(ReadDriveLabel(dir_).value()->number, 0);  // the index drive is drive 0
  EXPECT_EQ(ReadDriveLabel(second_).value()->number, 1);
  EXPECT_EQ(ReadDriveLabel(dir_).value()->store_id, ReadDriveLabel(second_).value()->store_id);
  opts_.tier_dirs = {{second_, dir_}};  // listed the other way round
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  EXPECT_EQ(store_->stats().drives_lost, 0u);
  EXPECT_EQ(store_->tier().drive(0)->dir().path(), dir_);
  EXPECT_EQ(GetAll("/big").value(), big);
  for (const auto& [key, data] : small) EXPECT_EQ(GetAll(key).value(), data) << key;
}

// Each drive's queue holds at most half the engine's depth (io_depth 4: 2 reads per drive);
// a stream whose read-ahead wants more waits for its drive's completions and is woken by
// them, never left waiting.
TEST_F(StoreDrivesTest, StreamsWaitForRoomInTheirDrivesQueueAndAreWoken) {
  opts_.io_depth = 4;
  opts_.read_ahead = 8;
  opts_.ram_tails = false;  // (every byte past the head from disk)
  auto big = Data(24 * kExtent + 3, 5);
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  ASSERT_TRUE(Put("/big", big));
  ASSERT_NO_FATAL_FAILURE(OpenStore());  // (a restart: nothing of it in RAM)
  for (int round = 0; round < 3; ++round) {
    auto o = store_->OpenStream("/big");
    ASSERT_TRUE(o && o->stream);
    uint32_t most = 0;
    auto got = Drain(*o->stream, [&] {
      most = std::max({most, store_->tier().drive(0)->io_in_flight_count(),
                       store_->tier().drive(1)->io_in_flight_count()});
    });
    ASSERT_TRUE(got) << got.error().ToString();
    EXPECT_EQ(*got, big);
    EXPECT_LE(most, 2u);
  }
  // Two streams at once: the second finds both drives' queues full with nothing of its own
  // in flight. Like a plane, it is only stepped again when its ready callback says so.
  struct Reader {
    Store::StreamPtr stream;
    std::vector<uint8_t> got;
    bool waiting = false, done = false;
  };
  Reader r[2];
  for (auto& x : r) {
    auto o = store_->OpenStream("/big");
    ASSERT_TRUE(o && o->stream);
    x.stream = std::move(o->stream);
    x.stream->SetReadyCallback([&x] { x.waiting = false; });
  }
  // (bounded by time, not by rounds: on a loaded machine the disk can take longer than any
  // number of empty polls - seen in CI, 55 ms after the start)
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!(r[0].done && r[1].done) && std::chrono::steady_clock::now() < deadline) {
    bool stepped = false;
    for (auto& x : r) {
      if (x.done || x.waiting) continue;
      stepped = true;
      std::span<const uint8_t> bytes;
      auto st = x.stream->Peek(&bytes);
      ASSERT_TRUE(st) << st.error().ToString();
      if (*st == Store::Stream::Step::kEnd) {
        x.done = true;
      } else if (*st == Store::Stream::Step::kWait) {
        x.waiting = true;
      } else {
        x.got.insert(x.got.end(), bytes.begin(), bytes.end());
        x.stream->Consume(bytes.size());
      }
    }
    if (!stepped) {
      ASSERT_TRUE(store_->Poll());
      if (r[0].waiting && r[1].waiting) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  for (auto& x : r) {
    EXPECT_TRUE(x.done) << "a stream waited and was never woken (20 s)";
    EXPECT_EQ(x.got, big);
  }
}

TEST_F(StoreDrivesTest, ALostDriveDropsOnlyTheObjectsThatHadBytesOnIt) {
  std::map<std::string, std::vector<uint8_t>> objects;
  for (int i = 0; i < 24; ++i) {
    objects["/o" + std::to_string(i)] = Data(i % 4 == 0 ? 3 * kExtent : 2000 + i * 1500, 100 + i);
  }
  std::set<std::string> on_second;
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  for (const auto& [key, data] : objects) {
    ASSERT_TRUE(Put(key, data)) << key;
    if (DrivesOf(key).count(1)) on_second.insert(key);
  }
  ASSERT_GT(on_second.size(), 6u);
  ASSERT_LT(on_second.size(), objects.size());
  store_.reset();
  fs::remove_all(second_);  // the drive is gone (its directory with it)

  ASSERT_NO_FATAL_FAILURE(OpenStore());
  EXPECT_EQ(store_->stats().drives_lost, 1u);
  EXPECT_EQ(store_->stats().lost_drive_objects, on_second.size());
  ASSERT_EQ(store_->tier().lost().size(), 1u);
  EXPECT_EQ(store_->tier().lost()[0].dir, second_);
  EXPECT_EQ(store_->tier().lost()[0].number, 1);
  EXPECT_EQ(store_->tier().lost()[0].objects_dropped, on_second.size());
  EXPECT_NE(store_->tier().lost()[0].error.find(second_), std::string::npos);
  for (const auto& [key, data] : objects) {
    if (on_second.count(key)) {
      EXPECT_EQ(GetAll(key).error().code(), StatusCode::kNotFound) << key;
    } else {
      EXPECT_EQ(GetAll(key).value(), data) << key;
    }
  }
  // The next fills go to the drive that is left; the space the dropped objects had on it
  // is free again.
  auto fresh = Data(5 * kExtent + 1, 7);
  ASSERT_TRUE(Put("/after", fresh));
  EXPECT_EQ(DrivesOf("/after"), std::set<uint16_t>{0});
  EXPECT_EQ(GetAll("/after").value(), fresh);
  uint64_t kept_bytes = 0;
  store_->ForEachObject([&](const ObjectRecord& r, uint64_t) {
    for (const Extent& e : r.extents) kept_bytes += store_->tier().FootprintOf(e.length);
  });
  EXPECT_EQ(store_->tier().stats().allocated_bytes, kept_bytes);

  // Restarted again, still without it: nothing more is dropped.
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  EXPECT_EQ(store_->stats().lost_drive_objects, 0u);
  EXPECT_EQ(GetAll("/after").value(), fresh);
  // A new drive in its place is numbered anew and takes extents again.
  ASSERT_TRUE(PrepareTier(second_));
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  EXPECT_EQ(store_->stats().drives_lost, 0u);
  ASSERT_TRUE(Put("/striped", fresh));
  EXPECT_EQ(DrivesOf("/striped").size(), 2u);
  EXPECT_EQ(GetAll("/after").value(), fresh);
  EXPECT_EQ(GetAll("/striped").value(), fresh);
  // And a drive dropped from the list is lost the same way.
  store_.reset();
  opts_.tier_dirs = {{dir_}};
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  EXPECT_EQ(store_->stats().lost_drive_objects, 1u);  // /striped
  EXPECT_EQ(GetAll("/after").value(), fresh);
  EXPECT_EQ(GetAll("/striped").error().code(), StatusCode::kNotFound);
}

TEST_F(StoreDrivesTest, ANewStoreRefusesADriveItCannotUse) {
  opts_.tier_dirs = {{dir_, dir_ + "-typo"}};
  auto s = Store::Open(opts_);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find(dir_ + "-typo"), std::string::npos) << s.error().ToString();
  // Two drives that each hold a store's index belong to two stores.
  opts_.tier_dirs = {{dir_}};
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  ASSERT_TRUE(Put("/a", Data(100, 1)));
  store_.reset();
  opts_.tier_dirs = {{second_}};
  ASSERT_NO_FATAL_FAILURE(OpenStore());
  ASSERT_TRUE(Put("/b", Data(100, 2)));
  store_.reset();
  opts_.tier_dirs = {{dir_, second_}};
  s = Store::Open(opts_);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("both hold a store index"), std::string::npos)
      << s.error().ToString();
  // A directory listed twice is refused by the list's parser.
  EXPECT_FALSE(ParseDriveList(dir_ + "," + dir_));
  EXPECT_FALSE(ParseDriveList(dir_ + ",,x"));
  EXPECT_EQ(ParseDriveList("a,b").value(), (std::vector<std::string>{"a", "b"}));
}

}  // namespace
}  // namespace goblin::store
