// When a busy-poller should stop spinning because its CPU is oversubscribed. Spinning (with
// pauses or sched_yield between polls) saves a wake-up only while nobody else wants the CPU:
// when other threads do (two CPUs running goblin-core, a client and a build), the kernel
// runs a spinner in turns of a time slice (~4 ms on this 2-CPU VM: strace had the core's
// yields come back 4 ms apart beside two CPU hogs), so each hand-over between a
// spinning core and a spinning client costs a slice, where a sleeper woken by its peer's
// doorbell preempts at once. Measured on 2 CPUs with two CPU hogs: an 8 MiB put over the
// 4 KiB ring took 8-9 s with both sides spinning, one slice per 4 KiB record.
//
// A poller tells it how long each stretch of idle polling took (polls that found nothing
// and the pauses or yields between them: microseconds when the CPU is its own). A stretch
// longer than kPreemptedNs means it was descheduled for someone else's slice; it then
// sleeps instead of spinning for the next kBackoffNs, and tries spinning again after that.
// Threading: one per polling thread (plain fields, no synchronisation).
#pragma once

#include <cstdint>

namespace goblin {

class SpinBackoff {
 public:
  // Longer than any idle poll round (well under 100 us), shorter than a scheduler's slice.
  static constexpr uint64_t kPreemptedNs = 500'000;
  static constexpr uint64_t kBackoffNs = 100'000'000;

  // An idle stretch of polling from `from` to `to` (MonotonicNanos). True if it shows that
  // the thread was preempted (and so spinning is off until to + kBackoffNs).
  bool Idle(uint64_t from, uint64_t to) {
    if (to - from <= kPreemptedNs) return false;
    until_ = to + kBackoffNs;
    ++preemptions_;
    return true;
  }
  // Whether spinning is worth it at `now`.
  bool may_spin(uint64_t now) const { return now >= until_; }
  // Times an idle stretch showed a preemption.
  uint64_t preemptions() const { return preemptions_; }

 private:
  uint64_t until_ = 0;
  uint64_t preemptions_ = 0;
};

}  // namespace goblin
