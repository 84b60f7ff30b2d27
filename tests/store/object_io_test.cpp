#include "goblin/store/object_io.h"
#include "tests/support/scratch.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <random>
#include <tuple>

namespace goblin::store {
namespace {

namespace fs = std::filesystem;
constexpr uint32_t kExtent = 64 << 10;

class ObjectIoTest : public testing::TestWithParam<IoChoice> {
 protected:
  void SetUp() override {
    dir_ = test::ScratchDir("objio", /*create=*/false).string();
    auto e = IoEngine::Create(GetParam(), 8);
    if (!e) GTEST_SKIP() << "engine unavailable: " << e.error().ToString();
    engine_ = std::move(*e);
    SetBuffers(6);
  }
  void SetBuffers(uint32_t n) {
    router_.reset();
    buffers_ = std::move(*IoBufferPool::Create(n, kExtent));
    router_ = std::make_unique<IoRouter>(engine_.get(), buffers_.get());
  }
  Tiers tiers() { return {tier_ptrs_.data(), tier_ptrs_.size()}; }
  void TearDown() override {
    tier_.reset();
    fs::remove_all(dir_);
  }
  void OpenTier(uint32_t max_files = 16, uint64_t file_bytes = 1 << 20) {
    auto prepared = PrepareTier(dir_);
    ASSERT_TRUE(prepared) << prepared.error().ToString();
    auto d = TierDir::Open(dir_);
    ASSERT_TRUE(d);
    TierOptions o;
    o.extent_bytes = kExtent;
    o.file_bytes = file_bytes;
    o.max_files = max_files;
    auto t = TierSpace::Open(std::move(*d), 0, o);
    ASSERT_TRUE(t) << t.error().ToString();
    tier_ = std::move(*t);
    tier_ptrs_ = {tier_.get()};
  }
  static std::vector<uint8_t> Random(size_t n, uint32_t seed) {
    std::vector<uint8_t> v(n);
    std::mt19937 rng(seed);
    for (auto& b : v) b = static_cast<uint8_t>(rng());
    return v;
  }
  Result<std::vector<Extent>> Write(const std::vector<uint8_t>& data, size_t piece) {
    ObjectWriter w(router_.get(), tiers());
    for (size_t off = 0; off < data.size(); off += piece) {
      GOBLIN_RETURN_IF_ERROR(w.Append({data.data() + off, std::min(piece, data.size() - off)}));
    }
    return w.Finish();
  }
  Result<std::vector<uint8_t>> Read(std::vector<Extent> extents) {
    ExtentReader r(router_.get(), tiers(), std::move(extents), 0, 4);
    std::vector<uint8_t> out;
    for (;;) {
      GOBLIN_ASSIGN_OR_RETURN(auto c, r.Next());
      if (!c) break;
      EXPECT_EQ(c->object_offset, out.size());
      const uint8_t* p = buffers_->Buffer(c->buffer);
      out.insert(out.end(), p, p + c->length);
      r.Release(*c);
    }
    return out;
  }
  std::string dir_;
  std::unique_ptr<IoEngine> engine_;
  std::unique_ptr<IoBufferPool> buffers_;
  std::unique_ptr<IoRouter> router_;
  std::unique_ptr<TierSpace> tier_;
  std::vector<TierSpace*> tier_ptrs_;
};

// A drive's own queue: a reader never has more reads in flight on a drive than the drive
// allows (the rest wait for its completions), and the count is kept by the router, so it
// comes back to zero even when a reader goes away with reads in flight.
TEST_P(ObjectIoTest, ReadsStayWithinTheirDrivesQueue) {
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  SetBuffers(12);
  auto data = Random(10 * kExtent + 5, 9);
  auto extents = Write(data, kExtent);
  ASSERT_TRUE(extents) << extents.error().ToString();
  DriveSpace* drive = tier_->drive(0);
  ASSERT_NE(drive, nullptr);
  EXPECT_EQ(drive->io_in_flight_count(), 0u);  // (the writes are done)
  drive->set_read_limit(2);
  {
    ExtentReader r(router_.get(), tiers(), *extents, 0, /*read_ahead=*/8);
    std::vector<uint8_t> out;
    uint32_t most = 0;
    for (int guard = 0; guard < 100000; ++guard) {
      ExtentReader::Chunk c;
      auto step = r.TryNext(&c);
      ASSERT_TRUE(step) << step.error().ToString();
      most = std::max(most, drive->io_in_flight_count());
      if (*step == ExtentReader::Step::kEnd) break;
      if (*step == ExtentReader::Step::kWait) {
        ASSERT_TRUE(router_->Poll(1));
        continue;
      }
      const uint8_t* p = buffers_->Buffer(c.buffer);
      out.insert(out.end(), p, p + c.length);
      r.Release(c);
    }
    EXPECT_EQ(out, data);
    EXPECT_EQ(most, 2u) << "the reader kept its drive's queue full, and no fuller";
  }
  {
    ExtentReader r(router_.get(), tiers(), *extents, 0, 8);
    ExtentReader::Chunk c;
    for (int i = 0; i < 1000; ++i) {  // the first extent, then reads ahead in flight
      auto step = r.TryNext(&c);
      ASSERT_TRUE(step);
      if (*step == ExtentReader::Step::kChunk) break;
      ASSERT_TRUE(router_->Poll(1));
    }
    r.Release(c);
    ExtentReader::Chunk next;
    auto step = r.TryNext(&next);  // (submits the read-ahead; nothing has been reaped)
    ASSERT_TRUE(step);
    EXPECT_EQ(*step, ExtentReader::Step::kWait);
    EXPECT_EQ(drive->io_in_flight_count(), 2u);
  }  // gone with its reads in flight
  for (int i = 0; i < 1000 && drive->io_in_flight_count() > 0; ++i) ASSERT_TRUE(router_->Poll(1));
  EXPECT_EQ(drive->io_in_flight_count(), 0u);
  EXPECT_EQ(buffers_->free_count(), buffers_->count());
}

TEST_P(ObjectIoTest, EverySizeClassRoundTrips) {
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  uint32_t seed = 1;
  for (size_t size : {size_t{1}, size_t{4095}, size_t{4096}, size_t{4097}, size_t{kExtent - 1},
                      size_t{kExtent}, size_t{kExtent + 1}, size_t{10 * kExtent + 123}}) {
    auto data = Random(size, seed++);
    for (size_t piece : {size_t{1000}, size_t{kExtent}, size}) {
      if (piece == 1000 && size > 4 * kExtent) continue;
      auto extents = Write(data, piece);
      ASSERT_TRUE(extents) << extents.error().ToString();
      EXPECT_EQ(extents->size(), (size + kExtent - 1) / kExtent);
      uint64_t total = 0;
      for (auto& e : *extents) total += e.length;
      EXPECT_EQ(total, size);
      auto back = Read(*extents);
      ASSERT_TRUE(back) << back.error().ToString();
      ASSERT_EQ(*back, data) << "size " << size << " piece " << piece;
      for (auto& e : *extents) tier_->Free(e);
    }
  }
  EXPECT_EQ(tier_->stats().slots_used, 0u);
  EXPECT_EQ(buffers_->free_count(), buffers_->count());
}

TEST_P(ObjectIoTest, DamagedExtentIsDetectedAndNotServed) {
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  auto data = Random(3 * kExtent, 9);
  auto extents = Write(data, kExtent);
  ASSERT_TRUE(extents);
  // Flip one byte inside the second extent, on disk.
  const Extent& e = (*extents)[1];
  std::string file = fmt::format("{}/extent-{:06}.dat", dir_, e.file);
  int fd = open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  uint8_t b;
  ASSERT_EQ(pread(fd, &b, 1, static_cast<off_t>(e.offset + 777)), 1);
  b ^= 0x40;
  ASSERT_EQ(pwrite(fd, &b, 1, static_cast<off_t>(e.offset + 777)), 1);
  fsync(fd);
  close(fd);
  ExtentReader r(router_.get(), tiers(), *extents, 0, 4);
  auto first = r.Next();
  ASSERT_TRUE(first && *first);
  r.Release(**first);
  auto second = r.Next();
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code(), StatusCode::kCorruption);
  EXPECT_NE(second.error().message().find("checksum mismatch"), std::string::npos);
}

TEST_P(ObjectIoTest, FullTierFailsCleanlyAndKeepsWhatWasStored) {
  ASSERT_NO_FATAL_FAILURE(OpenTier(/*max_files=*/1, /*file_bytes=*/8 * kExtent));
  auto small = Random(3 * kExtent, 1);
  auto kept = Write(small, kExtent);
  ASSERT_TRUE(kept);
  auto big = Random(6 * kExtent, 2);  // 3 + 6 > 8 slots
  auto r = Write(big, 5000);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.error().message().find("no room"), std::string::npos) << r.error().ToString();
  EXPECT_EQ(tier_->stats().slots_used, 3u);  // the failed write gave everything back
  EXPECT_EQ(buffers_->free_count(), buffers_->count());
  auto back = Read(*kept);  // and nothing stored before was touched
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, small);
}

TEST_P(ObjectIoTest, RecoveredExtentsAreNotHandedOutAgain) {
  ASSERT_NO_FATAL_FAILURE(OpenTier(/*max_files=*/1, /*file_bytes=*/4 * kExtent));
  auto data = Random(2 * kExtent, 5);
  auto extents = Write(data, kExtent);
  ASSERT_TRUE(extents);
  // "Restart": a fresh TierSpace on the same directory, told what the index holds.
  tier_.reset();
  auto d = TierDir::Open(dir_);
  ASSERT_TRUE(d);
  TierOptions o;
  o.extent_bytes = kExtent;
  o.file_bytes = 4 * kExtent;
  o.max_files = 1;
  tier_ = std::move(*TierSpace::Open(std::move(*d), 0, o));
  tier_ptrs_ = {tier_.get()};
  for (auto& e : *extents) ASSERT_TRUE(tier_->MarkUsed(e));
  EXPECT_FALSE(tier_->MarkUsed((*extents)[0]));  // overlapping records are damage
  auto more = tier_->Allocate(2 * kExtent);
  ASSERT_TRUE(more);
  for (auto& m : *more) {
    for (auto& e : *extents) EXPECT_FALSE(m.file == e.file && m.offset == e.offset);
  }
  EXPECT_EQ(tier_->stats().allocation_failures, 0u);
  EXPECT_FALSE(tier_->Allocate(1));  // full now
  EXPECT_EQ(tier_->stats().allocation_failures, 1u);
  auto back = Read(*extents);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, data);
}

TEST_P(ObjectIoTest, FewBuffersStillStreamLargeObjects) {
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  SetBuffers(2);
  auto data = Random(12 * kExtent + 5, 77);
  auto extents = Write(data, 3 * kExtent);
  ASSERT_TRUE(extents) << extents.error().ToString();
  auto back = Read(*extents);
  ASSERT_TRUE(back) << back.error().ToString();
  EXPECT_EQ(*back, data);
}

TEST_P(ObjectIoTest, ReadersShareTheEngineAndInterleave) {
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  auto a = Random(5 * kExtent + 3, 1), b = Random(4 * kExtent + 9, 2);
  auto ea = Write(a, kExtent), eb = Write(b, 7777);
  ASSERT_TRUE(ea && eb);
  // Two readers with reads in flight at once; each sees only its own completions.
  ExtentReader ra(router_.get(), tiers(), *ea, 0, 2), rb(router_.get(), tiers(), *eb, 0, 2);
  std::vector<uint8_t> got_a, got_b;
  bool end_a = false, end_b = false;
  for (int spins = 0; !(end_a && end_b) && spins < 100000; ++spins) {
    for (auto [r, out, end] : {std::tuple{&ra, &got_a, &end_a}, std::tuple{&rb, &got_b, &end_b}}) {
      ExtentReader::Chunk c;
      auto step = r->TryNext(&c);
      ASSERT_TRUE(step) << step.error().ToString();
      if (*step == ExtentReader::Step::kEnd) *end = true;
      if (*step != ExtentReader::Step::kChunk) continue;
      EXPECT_EQ(c.object_offset, out->size());
      const uint8_t* p = buffers_->Buffer(c.buffer);
      out->insert(out->end(), p, p + c.length);
      r->Release(c);
    }
    if (!(end_a && end_b)) {
      ASSERT_TRUE(router_->Poll(router_->in_flight() > 0 ? 1 : 0));
    }
  }
  EXPECT_EQ(got_a, a);
  EXPECT_EQ(got_b, b);
}

TEST_P(ObjectIoTest, AReaderLeavingWithReadsInFlightLosesNoBuffer) {
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  auto a = Random(4 * kExtent, 3);
  auto ea = Write(a, kExtent);
  ASSERT_TRUE(ea);
  {
    ExtentReader r(router_.get(), tiers(), *ea, 0, 4);
    r.Fill();  // four reads in flight, then the reader goes away
  }
  while (router_->in_flight() > 0) ASSERT_TRUE(router_->Poll(1));
  EXPECT_EQ(buffers_->free_count(), buffers_->count());
}

// A transport receives pieces where Place() says (out of order, like pulls completing),
// then appends them in order: the object arrives byte-exact and nothing is copied twice.
TEST_P(ObjectIoTest, PlacedPiecesLandInTheWriteBufferAndArriveExactly) {
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  constexpr uint32_t kPiece = 16 << 10;
  auto data = Random(3 * kExtent + 5000, 21);
  ObjectWriter w(router_.get(), tiers());
  EXPECT_FALSE(w.Place((ObjectWriter::kPlaceAhead + 1) * kExtent, 10)) << "out of reach";
  size_t placed = 0;
  for (size_t off = 0; off < data.size();) {
    // Place a window of up to five pieces ahead, fill them last-first, append in order.
    std::vector<std::pair<size_t, std::optional<ObjectWriter::Placed>>> window;
    for (size_t at = off; at < data.size() && window.size() < 5; at += kPiece) {
      uint32_t len = static_cast<uint32_t>(std::min<size_t>(kPiece, data.size() - at));
      window.emplace_back(at, w.Place(at, len));
    }
    for (auto it = window.rbegin(); it != window.rend(); ++it) {
      if (!it->second) continue;
      size_t len = std::min<size_t>(kPiece, data.size() - it->first);
      std::memcpy(it->second->at, data.data() + it->first, len);
    }
    for (auto& [at, p] : window) {
      size_t len = std::min<size_t>(kPiece, data.size() - at);
      ASSERT_EQ(w.bytes(), at);
      auto r = p ? w.Append({p->at, len}) : w.Append({data.data() + at, len});
      ASSERT_TRUE(r) << r.error().ToString();
      if (p) {
        buffers_->Unpin(p->buffer);
        ++placed;
      }
    }
    off = window.back().first + std::min<size_t>(kPiece, data.size() - window.back().first);
  }
  EXPECT_EQ(placed, 13u);  // (windows reach into the next extent's buffer)
  EXPECT_FALSE(w.Place(0, 10)) << "bytes already appended are not lent again";
  auto extents = w.Finish();
  ASSERT_TRUE(extents) << extents.error().ToString();
  EXPECT_FALSE(w.Place(w.bytes(), 10)) << "a finished writer lends nothing";
  auto back = Read(*extents);
  ASSERT_TRUE(back) << back.error().ToString();
  EXPECT_EQ(*back, data);
  for (auto& e : *extents) tier_->Free(e);
  EXPECT_EQ(buffers_->free_count(), buffers_->count());
}

// The fill is aborted while a transport still writes into a placed buffer (a client went
// away mid-put): the buffer is not handed to anyone else until the transport lets go.
TEST_P(ObjectIoTest, APlacedBufferIsNotReusedBeforeItIsReleased) {
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  SetBuffers(2);
  std::optional<ObjectWriter::Placed> p;
  {
    ObjectWriter w(router_.get(), tiers());
    auto head = Random(1000, 5);
    ASSERT_TRUE(w.Append(head));
    EXPECT_FALSE(w.Place(500, 10));           // behind what was appended
    EXPECT_FALSE(w.Place(kExtent - 10, 20));  // across the buffer's end
    EXPECT_FALSE(w.Place((ObjectWriter::kPlaceAhead + 1) * kExtent, 20));  // out of reach
    p = w.Place(4096, 8192);
    ASSERT_TRUE(p);
    EXPECT_EQ(buffers_->pins(p->buffer), 1u);
    EXPECT_EQ(buffers_->free_count(), 1u);
  }  // (destroyed unfinished: aborted)
  EXPECT_EQ(buffers_->free_count(), 1u) << "released while pinned";
  auto other = buffers_->Acquire();
  ASSERT_TRUE(other);
  EXPECT_NE(*other, p->buffer);
  EXPECT_FALSE(buffers_->Acquire());
  std::memset(p->at, 0xab, 8192);  // (the transport's late write lands harmlessly)
  buffers_->Unpin(p->buffer);
  EXPECT_EQ(buffers_->free_count(), 1u);
  buffers_->Release(*other);
  EXPECT_EQ(buffers_->free_count(), buffers_->count());
  // A buffer taken for a placement whose bytes never came goes back when the writer ends.
  {
    ObjectWriter w(router_.get(), tiers());
    auto q = w.Place(0, 100);
    ASSERT_TRUE(q);
    buffers_->Unpin(q->buffer);
    auto extents = w.Finish();
    ASSERT_TRUE(extents);
    EXPECT_TRUE(extents->empty());
  }
  EXPECT_EQ(buffers_->free_count(), buffers_->count());
}

// Extents shorter than a slot share slots (runs of 4 KiB pages), none overlapping another
// or crossing its slot; a packed slot emptied is a free slot again; a double free is
// ignored.
TEST_P(ObjectIoTest, ShortExtentsArePackedIntoSharedSlots) {
  ASSERT_NO_FATAL_FAILURE(OpenTier(16, 1 << 20));  // 64 KiB slots of 16 pages
  std::mt19937 rng(3);
  std::vector<Extent> all;
  auto no_overlaps = [&] {
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (const Extent& e : all) {
      const uint64_t at = uint64_t{e.file} * (1 << 20) + e.offset;
      const uint64_t size = tier_->FootprintOf(e.length);
      EXPECT_EQ(e.offset / kExtent, (e.offset + size - 1) / kExtent) << "crosses its slot";
      ranges.emplace_back(at, at + size);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) {
      if (ranges[i - 1].second > ranges[i].first) return false;
    }
    return true;
  };
  uint64_t pages = 0;
  for (int i = 0; i < 200; ++i) {
    uint64_t len = 1 + rng() % (kExtent - 4096);
    auto e = tier_->Allocate(len);
    ASSERT_TRUE(e) << e.error().ToString();
    ASSERT_EQ(e->size(), 1u);
    EXPECT_EQ((*e)[0].length, len);
    all.push_back((*e)[0]);
    pages += (len + 4095) / 4096;
  }
  ASSERT_TRUE(no_overlaps());
  EXPECT_EQ(tier_->stats().packed_extents, 200u);
  EXPECT_EQ(tier_->stats().allocated_bytes, pages * 4096);
  // Nearly full slots: at most 2 slots' worth of room left over per 3 slots used.
  EXPECT_LE(tier_->stats().slots_used * kExtent, pages * 4096 * 3 / 2 + kExtent);
  // Free every other one, then fill the holes: they are reused, still without overlap.
  const uint64_t slots_before = tier_->stats().slots_used;
  std::vector<Extent> kept;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i % 2 == 0) {
      tier_->Free(all[i]);
    } else {
      kept.push_back(all[i]);
    }
  }
  all = kept;
  for (int i = 0; i < 100; ++i) {
    auto e = tier_->Allocate(1 + rng() % (kExtent / 4));
    ASSERT_TRUE(e);
    all.push_back((*e)[0]);
  }
  ASSERT_TRUE(no_overlaps());
  EXPECT_LE(tier_->stats().slots_used, slots_before) << "holes were not reused";
  // A full-slot extent beside them.
  auto big = tier_->Allocate(kExtent);
  ASSERT_TRUE(big);
  EXPECT_EQ((*big)[0].offset % kExtent, 0u);
  for (const Extent& e : all) tier_->Free(e);
  tier_->Free(all[0]);  // ignored
  tier_->Free(all[1]);
  EXPECT_EQ(tier_->stats().packed_extents, 0u);
  EXPECT_EQ(tier_->stats().packed_slots, 0u);
  EXPECT_EQ(tier_->stats().slots_used, 1u);
  tier_->Free((*big)[0]);
  EXPECT_EQ(tier_->stats().slots_used, 0u);
  EXPECT_EQ(tier_->stats().allocated_bytes, 0u);
}

// Churn: objects of a web-like size mix (log-normal around 26 KiB, some larger than a
// slot) written and evicted oldest-first for 20,000 rounds at 80% of the tier: holes
// left by evictions are reused, so no allocation fails and the slots in use stay mostly
// full.
TEST_P(ObjectIoTest, PackedSlotsStayDenseUnderEvictionChurn) {
  // 256 KiB slots (64 pages), 16 files of 4 MiB: 64 MiB.
  auto prepared = PrepareTier(dir_);
  ASSERT_TRUE(prepared);
  auto d = TierDir::Open(dir_);
  ASSERT_TRUE(d);
  TierOptions o;
  o.extent_bytes = 256 << 10;
  o.file_bytes = 4 << 20;
  o.max_files = 16;
  o.capacity_bytes = 64 << 20;
  auto t = TierSpace::Open(std::move(*d), 0, o);
  ASSERT_TRUE(t) << t.error().ToString();
  TierSpace& tier = **t;
  const uint64_t capacity = 64 << 20;
  std::mt19937_64 rng(11);
  std::lognormal_distribution<double> size_of(std::log(26 << 10), 1.6);
  std::deque<std::vector<Extent>> live;
  uint64_t failures = 0, worst_density_pct = 100;
  for (int round = 0; round < 20000; ++round) {
    const uint64_t size = std::clamp<uint64_t>(static_cast<uint64_t>(size_of(rng)), 64, 4u << 20);
    while (!live.empty() && tier.stats().allocated_bytes + size > capacity / 10 * 8) {
      for (const Extent& e : live.front()) tier.Free(e);
      live.pop_front();
    }
    auto e = tier.Allocate(size);
    if (!e) {
      ++failures;
      continue;
    }
    live.push_back(std::move(*e));
    if (round > 2000) {
      const uint64_t slots = tier.stats().slots_used * o.extent_bytes;
      worst_density_pct = std::min(worst_density_pct, 100 * tier.stats().allocated_bytes / slots);
    }
  }
  EXPECT_EQ(failures, 0u);
  std::cout << "[ info ] worst density of the slots in use after warm-up: " << worst_density_pct
            << "%\n";
  EXPECT_GE(worst_density_pct, 80u);
  for (const auto& obj : live)
    for (const Extent& e : obj) tier.Free(e);
  EXPECT_EQ(tier.stats().slots_used, 0u);
  EXPECT_EQ(tier.stats().allocated_bytes, 0u);
}

// At start the packing is rebuilt from the index's extents: what overlaps, is misaligned or
// lies in a whole extent's slot is refused (a damaged record), and an extent alone at the
// start of its slot (an older store's layout) leaves the rest of the slot to new extents.
TEST_P(ObjectIoTest, PackingIsRebuiltFromRecoveredExtents) {
  ASSERT_NO_FATAL_FAILURE(OpenTier(16, 1 << 20));
  {
    auto first = tier_->Allocate(kExtent);  // (creates extent file 0, as a store had)
    ASSERT_TRUE(first);
    tier_->Free((*first)[0]);
  }
  std::vector<Extent> marked = {
      {0, 0, 0, 0, 10000, 0},                             // pages 0-2 of slot 0
      {0, 0, 0, 12288, 9000, 0},                          // pages 3-5
      {0, 0, 0, 36864, 5000, 0},                          // pages 9-10
      {0, 0, 0, 2 * kExtent, 20000, 0},                   // an older store's: pages 0-4 of slot 2
      {0, 0, 0, 3 * kExtent, kExtent, 0},                 // a whole slot
      {0, 0, 0, 4 * kExtent + 4096, kExtent - 4096, 0}};  // pages 1-15 of slot 4
  for (const Extent& e : marked) EXPECT_TRUE(tier_->MarkUsed(e)) << e.offset;
  EXPECT_FALSE(tier_->MarkUsed(marked[1])) << "twice";
  EXPECT_FALSE(tier_->MarkUsed(Extent{0, 0, 0, 12288, 12000, 0})) << "overlap";
  EXPECT_FALSE(tier_->MarkUsed(Extent{0, 0, 0, 4097, 100, 0})) << "misaligned";
  EXPECT_FALSE(tier_->MarkUsed(Extent{0, 0, 0, 3 * kExtent, 5000, 0})) << "in a whole extent";
  EXPECT_FALSE(tier_->MarkUsed(Extent{0, 0, 0, 5 * kExtent + 4096, kExtent, 0})) << "crosses";
  EXPECT_EQ(tier_->stats().slots_used, 4u);
  std::vector<Extent> all = marked;
  for (int i = 0; i < 6; ++i) {
    auto e = tier_->Allocate(19000);  // 5 pages
    ASSERT_TRUE(e);
    all.push_back((*e)[0]);
    if (i < 2) {
      EXPECT_EQ((*e)[0].offset / kExtent, 2u) << "the old extent's slot has room";
    } else if (i == 2) {
      EXPECT_EQ((*e)[0].offset / kExtent, 0u) << "slot 0 has 5 free pages in a row";
    }
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const Extent& e : all)
    ranges.emplace_back(e.offset, e.offset + tier_->FootprintOf(e.length));
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
}

TEST_P(ObjectIoTest, WriterSplitsAtTheTierBoundaryAndLocatesBytes) {
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  std::string second_dir = dir_ + "-hdd";
  ASSERT_TRUE(PrepareTier(second_dir));
  auto d = TierDir::Open(second_dir);
  ASSERT_TRUE(d);
  TierOptions o;
  o.extent_bytes = kExtent;
  o.file_bytes = 1 << 20;
  auto second = TierSpace::Open(std::move(*d), 1, o);
  ASSERT_TRUE(second);
  tier_ptrs_.push_back(second->get());
  const uint64_t boundary = kExtent + 5000;  // not extent-aligned on purpose
  auto data = Random(3 * kExtent, 4);
  std::vector<Extent> extents;
  {
    ObjectWriter w(router_.get(), tiers(), boundary);
    ASSERT_TRUE(w.Append({data.data(), 100}));
    // Not yet written: the bytes are in the writer's buffer.
    auto loc = w.Locate(10);
    ASSERT_EQ(loc.memory.size(), 90u);
    EXPECT_EQ(loc.memory[0], data[10]);
    ASSERT_TRUE(w.Append({data.data() + 100, data.size() - 100}));
    auto done = w.Finish();
    ASSERT_TRUE(done) << done.error().ToString();
    extents = *done;
  }
  uint64_t on0 = 0, on1 = 0;
  for (const Extent& e : extents) (e.tier == 0 ? on0 : on1) += e.length;
  EXPECT_EQ(on0, boundary);
  EXPECT_EQ(on1, data.size() - boundary);
  auto back = Read(extents);
  ASSERT_TRUE(back) << back.error().ToString();
  EXPECT_EQ(*back, data);
  tier_ptrs_.pop_back();
  second->reset();
  fs::remove_all(second_dir);
}

INSTANTIATE_TEST_SUITE_P(Engines, ObjectIoTest,
                         testing::Values(IoChoice::kIoUring, IoChoice::kSync),
                         [](const testing::TestParamInfo<IoChoice>& i) {
                           return std::string(i.param == IoChoice::kSync ? "Sync" : "IoUring");
                         });

// A tier's nominal size (a cluster member's routing weight) is its configured capacity, else
// its share of the file system's size: what the disk has free moves the capacity from one
// start to the next, not the nominal size (else a restarted core would take keys from others).
TEST(TierNominalSize, IsTheFileSystemsSizeNotItsFreeSpace) {
  const std::string dir = test::ScratchDir("nominal", /*create=*/false).string();
  ASSERT_TRUE(PrepareTier(dir));
  auto open = [&](uint64_t capacity, uint32_t share) {
    auto d = TierDir::Open(dir);
    EXPECT_TRUE(d);
    TierOptions o;
    o.extent_bytes = kExtent;
    o.file_bytes = 4 << 20;
    o.capacity_bytes = capacity;
    o.free_space_share = share;
    auto t = TierSpace::Open(std::move(*d), 0, o);
    EXPECT_TRUE(t) << t.error().ToString();
    return std::move(*t);
  };
  struct statvfs vfs {};
  ASSERT_EQ(statvfs(dir.c_str(), &vfs), 0);
  const uint64_t size = uint64_t{vfs.f_blocks} * vfs.f_frsize;
  const uint64_t first = open(0, 2)->nominal_bytes();
  EXPECT_EQ(first, size / 100 * 95 / 2 / (4 << 20) * (4 << 20));
  {
    // 64 MiB less free space: the same nominal size.
    const std::string filler = dir + "/filler";
    int fd = ::open(filler.c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0);
    std::vector<uint8_t> block(1 << 20, 0x5a);
    for (int i = 0; i < 64; ++i) ASSERT_EQ(::write(fd, block.data(), block.size()), 1 << 20);
    ASSERT_EQ(fsync(fd), 0);
    ::close(fd);
    auto again = open(0, 2);
    EXPECT_EQ(again->nominal_bytes(), first);
    EXPECT_LE(again->capacity_bytes(), first);
  }
  EXPECT_EQ(open(64 << 20, 1)->nominal_bytes(), 64u << 20);
  EXPECT_EQ(open((64 << 20) + 12345, 1)->nominal_bytes(), 64u << 20);  // (whole files)
  fs::remove_all(dir);
}

TEST(Placement, SplitsHeadAndTiersForEverySizeClass) {
  constexpr uint64_t kHead = 256 << 10, kPrefix = 1 << 20;
  struct Case {
    uint64_t size;
    bool two;
    Placement want;
  };
  for (const Case& c : std::vector<Case>{
           {0, false, {0, 0, 0}},
           {1, false, {1, 1, 0}},
           {kHead - 1, false, {kHead - 1, kHead - 1, 0}},
           {kHead, false, {kHead, kHead, 0}},
           {kHead + 1, false, {kHead, kHead + 1, 0}},
           {5ull << 30, false, {kHead, 5ull << 30, 0}},
           {1, true, {1, 1, 0}},
           {kHead + kPrefix, true, {kHead, kHead + kPrefix, 0}},
           {kHead + kPrefix + 1, true, {kHead, kHead + kPrefix, 1}},
           {5ull << 30, true, {kHead, kHead + kPrefix, (5ull << 30) - kHead - kPrefix}},
       }) {
    Placement p = Place(c.size, kHead, kPrefix, c.two);
    EXPECT_EQ(p.head_bytes, c.want.head_bytes) << c.size;
    EXPECT_EQ(p.tier0_bytes, c.want.tier0_bytes) << c.size;
    EXPECT_EQ(p.tier1_bytes, c.want.tier1_bytes) << c.size;
    EXPECT_EQ(p.tier0_bytes + p.tier1_bytes, c.size);
  }
  Placement huge = Place(UINT64_MAX, UINT64_MAX - 1, 10, true);  // no overflow
  EXPECT_EQ(huge.tier0_bytes + huge.tier1_bytes, UINT64_MAX);
}

}  // namespace
}  // namespace goblin::store
