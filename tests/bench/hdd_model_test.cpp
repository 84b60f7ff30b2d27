// The modelled spinning disk behind bench/hdd_model's hdd_fuse: what an access costs.
#include "bench/hdd_model/hdd_model.h"

#include <gtest/gtest.h>

namespace goblin::bench {
namespace {

constexpr uint64_t kMiB = 1 << 20;

HddParams Params() {
  HddParams p;  // 7200 rpm (8.33 ms a turn), 200 MB/s, seeks 0.6-14 ms, 8 MiB units
  return p;
}
uint64_t Transfer(uint64_t bytes) { return bytes * 1000 / 200; }  // ns at 200 MB/s
constexpr uint64_t kTurnNs = 8'333'333;

TEST(HddModel, ASequentialReadPaysOnlyForTheTransfer) {
  HddModel m(Params());
  m.Access(1, 0, kMiB);
  HddAccess a = m.Access(1, kMiB, kMiB);
  EXPECT_EQ(a.seeks, 0u);
  EXPECT_NEAR(static_cast<double>(a.nanos), static_cast<double>(Transfer(kMiB)), 2);
}

TEST(HddModel, AFarAccessSeeksAndWaitsForThePlatter) {
  HddModel m(Params());
  m.Access(1, 0, 64 * kMiB);           // file 1: units 0-7
  m.Access(2, 0, 4096);                // file 2 after it
  HddAccess a = m.Access(1, 0, 4096);  // back to the start: a seek
  EXPECT_EQ(a.seeks, 1u);
  EXPECT_GE(a.nanos, 600'000u + Transfer(4096));               // at least the shortest seek
  EXPECT_LE(a.nanos, 14'000'000u + kTurnNs + Transfer(4096));  // at most a full stroke and a turn
}

TEST(HddModel, AShortGapAheadIsWaitedOutNotSought) {
  HddModel m(Params());
  m.Access(1, 0, 4096);
  HddAccess a = m.Access(1, 4096 + 256 * 1024, 4096);  // 256 KiB ahead, on the track
  EXPECT_EQ(a.seeks, 0u);
  EXPECT_NEAR(static_cast<double>(a.nanos), static_cast<double>(Transfer(256 * 1024 + 4096)), 2);
  a = m.Access(1, 4 * kMiB, 4096);  // beyond a track: sought
  EXPECT_EQ(a.seeks, 1u);
}

TEST(HddModel, FilesGrowingTogetherInterleaveTheirUnits) {
  HddParams p = Params();
  HddModel m(p);
  EXPECT_EQ(m.Place(1, 0), 0u);
  EXPECT_EQ(m.Place(2, 0), p.unit_bytes);
  EXPECT_EQ(m.Place(1, p.unit_bytes), 2 * p.unit_bytes);  // file 1's second unit after file 2's
  EXPECT_EQ(m.Place(1, 100), 100u);                       // (stable)
  // A read across file 1's unit boundary: contiguous up to it, then a seek over file 2's unit.
  m.Access(1, 0, 4096);
  HddAccess a = m.Access(1, 4096, p.unit_bytes);
  EXPECT_EQ(a.seeks, 1u);
  // A file laid out at once (fallocate) is contiguous.
  for (uint64_t at = 0; at < 4 * p.unit_bytes; at += p.unit_bytes) m.Place(3, at);
  m.Access(3, 0, 4096);
  a = m.Access(3, 4096, 3 * p.unit_bytes);
  EXPECT_EQ(a.seeks, 0u);
}

TEST(HddModel, AForgottenFileIsLaidOutAfresh) {
  HddParams p = Params();
  HddModel m(p);
  m.Place(1, 0);
  m.Forget(1);
  EXPECT_EQ(m.Place(1, 0), p.unit_bytes);  // (units are never reused)
}

TEST(HddModel, RandomAccessesWaitHalfATurnOnAverage) {
  HddParams p = Params();
  HddModel m(p);
  for (uint64_t f = 0; f < 64; ++f) m.Place(f, 0);  // 64 files, 512 MiB apart in all
  double rotation = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    const uint64_t f = (static_cast<uint64_t>(i) * 37) % 64;
    const uint64_t before = m.head();
    const uint64_t at = m.Place(f, 0);
    if (at >= before && at - before <= p.track_bytes) continue;  // (f == previous: no seek)
    const uint64_t seek_estimate = m.PositioningNanos(f, 0);
    HddAccess a = m.Access(f, 0, 512);
    ASSERT_EQ(a.seeks, 1u);
    rotation += static_cast<double>(a.nanos - seek_estimate - Transfer(512));
  }
  const double mean_turns = rotation / n / static_cast<double>(kTurnNs);
  EXPECT_GT(mean_turns, 0.45);
  EXPECT_LT(mean_turns, 0.55);
}

TEST(HddModel, TheNearerRequestIsCheaperToReach) {
  HddModel m(Params());
  m.Access(1, 0, 8 * kMiB);
  for (uint64_t f = 2; f < 200; ++f) m.Place(f, 0);              // ~1.6 GB of other files
  const uint64_t next = m.PositioningNanos(1, 8 * kMiB - 4096);  // behind the head: a seek
  const uint64_t ahead = m.PositioningNanos(2, 0);               // right ahead: waited out
  const uint64_t far = m.PositioningNanos(199, 0);
  EXPECT_LT(ahead, next);
  EXPECT_LT(next, far);
}

}  // namespace
}  // namespace goblin::bench
