// Clocks: CLOCK_MONOTONIC nanoseconds for everything, and the TSC (rdtscp) calibrated
// against it for benchmark timestamps where a vDSO call is too coarse. Reading a clock is
// lock-free and syscall-free; calibration is a slow start-up call. Thread-safe.
#pragma once

#include <time.h>
#include <x86intrin.h>

#include <chrono>
#include <cstdint>

#include "goblin/common/status.h"

namespace goblin {

inline uint64_t MonotonicNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

// rdtscp waits for earlier instructions to retire, so it brackets the timed region properly.
inline uint64_t ReadTsc() {
  unsigned aux;
  return __rdtscp(&aux);
}

// True when the CPU advertises an invariant TSC (constant rate, runs in deep C-states).
bool TscIsInvariant();

// Converts TSC ticks to nanoseconds with a rate measured against CLOCK_MONOTONIC.
class TscClock {
 public:
  // Measures the TSC rate over `window` (>= 10 ms recommended). Fails if the TSC is not
  // invariant unless `allow_variant` (results are then only as good as the CPU's TSC).
  static Result<TscClock> Calibrate(
      std::chrono::milliseconds window = std::chrono::milliseconds(50), bool allow_variant = false);

  double ticks_per_ns() const { return ticks_per_ns_; }
  double ToNanos(uint64_t ticks) const { return static_cast<double>(ticks) / ticks_per_ns_; }
  // Nanoseconds on the CLOCK_MONOTONIC timeline for a TSC reading.
  uint64_t ToMonotonic(uint64_t tsc) const {
    return base_ns_ + static_cast<uint64_t>(static_cast<double>(tsc - base_tsc_) / ticks_per_ns_);
  }

 private:
  TscClock(double tpn, uint64_t base_tsc, uint64_t base_ns)
      : ticks_per_ns_(tpn), base_tsc_(base_tsc), base_ns_(base_ns) {}
  double ticks_per_ns_;
  uint64_t base_tsc_;
  uint64_t base_ns_;
};

}  // namespace goblin
