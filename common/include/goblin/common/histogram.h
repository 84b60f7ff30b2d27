// LatencyHistogram: fixed log-spaced buckets (1-2-5 steps from 1 us to 10 s) for service
// times, recorded on the hot path with one comparison loop and two adds (no allocation, no
// lock); read by the admin plane from the same thread.
// Threading: one owner thread.
#pragma once

#include <array>
#include <cstdint>

namespace goblin {

class LatencyHistogram {
 public:
  static constexpr std::array<uint64_t, 22> kUpperBoundsUs = {
      1,    2,     5,     10,    20,     50,     100,    200,     500,     1000,    2000,
      5000, 10000, 20000, 50000, 100000, 200000, 500000, 1000000, 2000000, 5000000, 10000000};
  void Record(uint64_t ns) {
    uint64_t us = ns / 1000;
    size_t i = 0;
    while (i < kUpperBoundsUs.size() && us > kUpperBoundsUs[i]) ++i;
    ++counts_[i];
    ++count_;
    sum_us_ += us;
  }
  // counts()[i] for i < kUpperBoundsUs.size(): values <= kUpperBoundsUs[i] (and above the
  // previous bound); the last: above every bound.
  const std::array<uint64_t, kUpperBoundsUs.size() + 1>& counts() const { return counts_; }
  uint64_t count() const { return count_; }
  uint64_t sum_us() const { return sum_us_; }
  // Adds another histogram's values (merging the shards' histograms for a report).
  LatencyHistogram& operator+=(const LatencyHistogram& o) {
    for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += o.counts_[i];
    count_ += o.count_;
    sum_us_ += o.sum_us_;
    return *this;
  }

 private:
  std::array<uint64_t, kUpperBoundsUs.size() + 1> counts_{};
  uint64_t count_ = 0, sum_us_ = 0;
};

}  // namespace goblin
