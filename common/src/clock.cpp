#include "goblin/common/clock.h"

#include <cpuid.h>

#include <thread>

namespace goblin {

bool TscIsInvariant() {
  unsigned eax, ebx, ecx, edx;
  if (__get_cpuid_max(0x80000000, nullptr) < 0x80000007) return false;
  __cpuid(0x80000007, eax, ebx, ecx, edx);
  return (edx & (1u << 8)) != 0;
}

Result<TscClock> TscClock::Calibrate(std::chrono::milliseconds window, bool allow_variant) {
  if (!allow_variant && !TscIsInvariant()) {
    return Err(StatusCode::kFailedPrecondition,
               "the CPU does not advertise an invariant TSC; use the monotonic clock");
  }
  if (window.count() <= 0) return Err(StatusCode::kInvalidArgument, "empty calibration window");
  // Bracket each clock_gettime with TSC reads and keep the tightest pair, at both ends.
  auto sample = [](uint64_t& tsc, uint64_t& ns) {
    uint64_t best = ~0ULL;
    for (int i = 0; i < 16; ++i) {
      uint64_t t0 = ReadTsc();
      uint64_t n = MonotonicNanos();
      uint64_t t1 = ReadTsc();
      if (t1 - t0 < best) {
        best = t1 - t0;
        tsc = t0 + (t1 - t0) / 2;
        ns = n;
      }
    }
  };
  uint64_t tsc0, ns0, tsc1, ns1;
  sample(tsc0, ns0);
  std::this_thread::sleep_for(window);
  sample(tsc1, ns1);
  if (ns1 <= ns0 || tsc1 <= tsc0) {
    return Err(StatusCode::kInternal, "TSC or monotonic clock did not advance");
  }
  double tpn = static_cast<double>(tsc1 - tsc0) / static_cast<double>(ns1 - ns0);
  return TscClock(tpn, tsc1, ns1);
}

}  // namespace goblin
