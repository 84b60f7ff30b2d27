// The clock a benchmark times short intervals with: the CPU's time stamp counter where the
// kernel reports it constant and never stopping (/proc/cpuinfo: constant_tsc, nonstop_tsc),
// as ucx_perftest times its iterations (ucs_get_time is rdtsc on x86-64), else
// CLOCK_MONOTONIC. Why: a clock_gettime through the vDSO costs 34 ns in this KVM guest (rdtsc
// 14 ns), and a sample of a sub-microsecond exchange pays for the reads inside its window
// (docs/benchmarks/native.md). Ticks are converted with a rate measured against
// CLOCK_MONOTONIC at start (~0.1 s). Intervals are read on one thread (start and end on the
// same CPU when pinned); a TSC is not assumed in step across CPUs. Threading: Calibrate once
// before any thread reads; Now() and Nanos() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <fmt/format.h>

#include "goblin/common/clock.h"

namespace goblin::bench {

class BenchClock {
 public:
  // want_tsc false: CLOCK_MONOTONIC whatever the CPU offers (for comparisons).
  void Calibrate(bool want_tsc) {
    tsc_ = want_tsc && TscUsable();
    if (!tsc_) return;
#if defined(__x86_64__)
    const uint64_t n0 = MonotonicNanos(), t0 = __rdtsc();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const uint64_t n1 = MonotonicNanos(), t1 = __rdtsc();
    if (t1 <= t0 || n1 <= n0) {
      tsc_ = false;
      return;
    }
    ns_per_tick_ = static_cast<double>(n1 - n0) / static_cast<double>(t1 - t0);
#endif
  }
  uint64_t Now() const {
#if defined(__x86_64__)
    if (tsc_) return __rdtsc();
#endif
    return MonotonicNanos();
  }
  // An interval between two Now() readings, in nanoseconds.
  double Nanos(uint64_t ticks) const {
    return tsc_ ? static_cast<double>(ticks) * ns_per_tick_ : static_cast<double>(ticks);
  }
  std::string Describe() const {
    return tsc_ ? fmt::format("TSC (constant, nonstop), {:.1f} MHz", 1e3 / ns_per_tick_)
                : std::string("CLOCK_MONOTONIC");
  }

 private:
  static bool TscUsable() {
#if defined(__x86_64__)
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("flags", 0) != 0) continue;
      auto has = [&](const char* f) { return (" " + line + " ").find(fmt::format(" {} ", f)); };
      return has("constant_tsc") != std::string::npos && has("nonstop_tsc") != std::string::npos;
    }
#endif
    return false;
  }

  bool tsc_ = false;
  double ns_per_tick_ = 1.0;
};

}  // namespace goblin::bench
