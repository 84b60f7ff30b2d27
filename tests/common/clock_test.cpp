#include "goblin/common/clock.h"

#include <gtest/gtest.h>

#include <thread>

namespace goblin {
namespace {

TEST(Clock, MonotonicAdvances) {
  uint64_t a = MonotonicNanos();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  uint64_t b = MonotonicNanos();
  EXPECT_GE(b - a, 2'000'000u);
}

// The calibrated TSC agrees with CLOCK_MONOTONIC over an interval it did not calibrate on.
// Tolerance is wide (10%) on purpose: this checks the conversion, not the machine's timing.
TEST(Clock, TscCalibrationAgreesWithMonotonic) {
  auto clock = TscClock::Calibrate(std::chrono::milliseconds(20), /*allow_variant=*/true);
  ASSERT_TRUE(clock) << clock.error().ToString();
  EXPECT_GT(clock->ticks_per_ns(), 0.05);
  EXPECT_LT(clock->ticks_per_ns(), 20.0);
  uint64_t t0 = ReadTsc(), n0 = MonotonicNanos();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  uint64_t t1 = ReadTsc(), n1 = MonotonicNanos();
  double tsc_ns = clock->ToNanos(t1 - t0);
  double mono_ns = static_cast<double>(n1 - n0);
  EXPECT_NEAR(tsc_ns / mono_ns, 1.0, 0.10);
  // Mapping back onto the monotonic timeline lands near the real reading.
  double err = static_cast<double>(clock->ToMonotonic(t1)) - static_cast<double>(n1);
  EXPECT_LT(std::abs(err), 0.1 * mono_ns);
}

TEST(Clock, RefusesVariantTscUnlessAllowed) {
  auto clock = TscClock::Calibrate(std::chrono::milliseconds(10), /*allow_variant=*/false);
  EXPECT_EQ(clock.has_value(), TscIsInvariant());
  EXPECT_FALSE(TscClock::Calibrate(std::chrono::milliseconds(0), true));
}

}  // namespace
}  // namespace goblin
