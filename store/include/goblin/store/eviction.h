// S3-FIFO (Yang et al., SOSP '23) over whole objects: new objects enter a small FIFO (about
// 10% of the cached objects); an object read again while there (frequency >= 1) moves to the
// main FIFO when it reaches the small queue's end, the others are evicted and remembered in
// a ghost FIFO of digests; an object whose digest is in the ghost goes straight to the main
// FIFO when it comes back. The main FIFO is a CLOCK: an object read since it was last
// passed gets another round (frequency decremented, capped at 3), else it is evicted.
// The policy only orders keys; the store decides when to evict (a full tier, too many
// objects) and may veto a victim (an object with readers), which then gets another round.
// No allocation per Touch; Insert allocates one queue node. Reads may also be counted by
// the caller and handed over when an object is judged (Evict's take_reads).
// Threading: one owner thread (a core shard).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "goblin/common/string_hash.h"

namespace goblin::store {

struct EvictionStats {
  uint64_t inserted = 0;
  uint64_t ghost_hits = 0;     // inserts that went straight to main
  uint64_t promoted = 0;       // small -> main
  uint64_t evicted_small = 0;  // evicted from the small FIFO (one-hit wonders)
  uint64_t evicted_main = 0;
  uint64_t vetoed = 0;
};

class S3Fifo {
 public:
  // `small_percent` of the tracked objects form the small FIFO's target size.
  explicit S3Fifo(uint32_t small_percent = 10) : small_percent_(small_percent) {}

  void Insert(std::string_view key);  // a newly committed object (replaces a tracked one)
  void Touch(std::string_view key);   // a read
  void Touch(const HashedKey& key);   // (the same, its hash computed already)
  void Remove(std::string_view key);  // deleted or expired (not an eviction)
  // Chooses and forgets the next victim. `can_evict(key)` false keeps it for another round.
  // nullopt when nothing is tracked or every tracked object was vetoed.
  std::optional<std::string> Evict(const std::function<bool(const std::string&)>& can_evict);
  // The same, with reads counted outside the policy: before an object is judged,
  // `take_reads(key)` returns the reads of it counted elsewhere since it was last asked (and
  // forgets them); each counts as a Touch. (A store counts a hit in the record it found
  // anyway: no lookup here per hit.)
  std::optional<std::string> Evict(const std::function<bool(const std::string&)>& can_evict,
                                   const std::function<uint8_t(const std::string&)>& take_reads);

  size_t size() const { return entries_.size(); }
  size_t small_size() const { return small_.size(); }
  size_t main_size() const { return main_.size(); }
  size_t ghost_size() const { return ghost_.size(); }
  bool InGhost(std::string_view key) const { return ghost_set_.count(Hash(key)) != 0; }
  const EvictionStats& stats() const { return stats_; }

 private:
  enum class Queue : uint8_t { kSmall, kMain };
  struct Entry {
    uint8_t freq = 0;
    Queue queue = Queue::kSmall;
    std::list<std::string>::iterator pos;
  };
  static uint64_t Hash(std::string_view key);
  void RememberGhost(std::string_view key);

  uint32_t small_percent_;
  std::list<std::string> small_, main_;  // front = newest, back = next to consider
  std::unordered_map<std::string, Entry, StringHash, std::equal_to<>> entries_;
  std::deque<uint64_t> ghost_;  // digests, oldest first
  std::unordered_multiset<uint64_t> ghost_set_;
  EvictionStats stats_;
};

}  // namespace goblin::store
