// PublishedStats<T>: a loop's counters as another thread (the metrics endpoint) may read them.
// The loop hands over a copy under a mutex every 200 ms and before it sleeps (so what it
// did before an idle spell is seen); a reader takes the last copy and never touches the
// live counters. On the loop's path: one clock compare per round.
// Threading: Offer from the owning loop thread only; Get from any thread.
#pragma once

#include <cstdint>
#include <mutex>

namespace goblin::gateway {

template <typename T>
class PublishedStats {
 public:
  static constexpr uint64_t kPeriodNs = 200'000'000;
  // From the loop, each round: `fill(T*)` writes the copy when `now_ns` is a period past
  // the last one, or when the loop is about to `sleep` with work done (`last_work_ns`)
  // since the last copy. `Force`: now (the loop ends).
  template <typename Fill>
  void Offer(uint64_t now_ns, uint64_t last_work_ns, bool sleep, Fill&& fill) {
    if (now_ns - last_ns_ > kPeriodNs || (sleep && last_ns_ < last_work_ns)) {
      last_ns_ = now_ns;
      Force(fill);
    }
  }
  template <typename Fill>
  void Force(Fill&& fill) {
    std::lock_guard<std::mutex> lock(mu_);
    fill(&copy_);
  }
  T Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return copy_;
  }

 private:
  mutable std::mutex mu_;
  T copy_{};
  uint64_t last_ns_ = 0;  // (the loop's own)
};

}  // namespace goblin::gateway
