// BusyWatch: when a UCX worker that says busy is dozed or checked for a stuck FIFO, with
// synthetic times (no UCX).
#include "goblin/verbs/busy_watch.h"

#include <gtest/gtest.h>

namespace goblin::verbs {
namespace {

using V = BusyWatch::Verdict;
constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kT0 = 1'000 * kMs;

BusyWatch Watch() { return BusyWatch(2 * kMs, 1'000 * kMs); }

TEST(BusyWatch, BusyWithoutProgressForTheStuckTimeIsCheckedNotBefore) {
  BusyWatch w = Watch();
  EXPECT_EQ(w.OnBusy(kT0, false), V::kSpin);
  EXPECT_EQ(w.OnBusy(kT0 + 500 * kMs, false), V::kSpin);
  EXPECT_EQ(w.OnBusy(kT0 + 1'000 * kMs, false), V::kSpin);  // (more than the stuck time)
  EXPECT_EQ(w.OnBusy(kT0 + 1'000 * kMs + 1, false), V::kCheckPeers);
  EXPECT_EQ(w.OnBusy(kT0 + 3'000 * kMs, false), V::kCheckPeers);  // (every peer alive: again)
}

// The bug this class was made for: the loop asks only after its busy-poll time without
// work, so a busy client's steady traffic meets the watch rarely. Two busy moments a second
// apart with progress between them are not a second of being stuck.
TEST(BusyWatch, ProgressBetweenTwoBusyMomentsStartsTheCountAgain) {
  BusyWatch w = Watch();
  EXPECT_EQ(w.OnBusy(kT0, false), V::kSpin);
  w.Progressed();
  EXPECT_EQ(w.OnBusy(kT0 + 1'500 * kMs, false), V::kSpin);
  EXPECT_EQ(w.OnBusy(kT0 + 2'000 * kMs, false), V::kSpin);
  EXPECT_EQ(w.OnBusy(kT0 + 2'600 * kMs, false), V::kCheckPeers);
  w.Progressed();
  EXPECT_EQ(w.OnBusy(kT0 + 5'000 * kMs, true), V::kSpin);  // (sending: the doze's own count)
  w.Progressed();
  EXPECT_EQ(w.OnBusy(kT0 + 9'000 * kMs, true), V::kSpin);
}

TEST(BusyWatch, ArmingStartsTheCountAgain) {
  BusyWatch w = Watch();
  EXPECT_EQ(w.OnBusy(kT0, false), V::kSpin);
  w.Armed();
  EXPECT_EQ(w.OnBusy(kT0 + 1'500 * kMs, false), V::kSpin);
  EXPECT_EQ(w.OnBusy(kT0 + 2'501 * kMs, false), V::kCheckPeers);
}

// A send of ours waiting for room is a reason to be busy: never stuck, but dozed after a
// while rather than spun on; the doze's count also starts again with progress.
TEST(BusyWatch, AWaitingSendDozesAndIsNeverStuck) {
  BusyWatch w = Watch();
  EXPECT_EQ(w.OnBusy(kT0, true), V::kSpin);
  EXPECT_EQ(w.OnBusy(kT0 + 1 * kMs, true), V::kSpin);
  EXPECT_EQ(w.OnBusy(kT0 + 3 * kMs, true), V::kDoze);
  EXPECT_EQ(w.OnBusy(kT0 + 5'000 * kMs, true), V::kDoze);
  w.Progressed();
  EXPECT_EQ(w.OnBusy(kT0 + 5'001 * kMs, true), V::kSpin);
  // The send completes; busy goes on without progress: the stuck count starts then.
  EXPECT_EQ(w.OnBusy(kT0 + 5'002 * kMs, false), V::kSpin);
  EXPECT_EQ(w.OnBusy(kT0 + 6'001 * kMs, false), V::kSpin);
  EXPECT_EQ(w.OnBusy(kT0 + 6'003 * kMs, false), V::kCheckPeers);
}

}  // namespace
}  // namespace goblin::verbs
