#include "goblin/store/eviction.h"

#include <xxhash.h>

#include <algorithm>

namespace goblin::store {

uint64_t S3Fifo::Hash(std::string_view key) { return XXH3_64bits(key.data(), key.size()); }

void S3Fifo::RememberGhost(std::string_view key) {
  uint64_t h = Hash(key);
  ghost_.push_back(h);
  ghost_set_.insert(h);
  // The ghost remembers about as many objects as the main FIFO holds (at least 1,024).
  size_t cap = std::max<size_t>(1024, main_.size());
  while (ghost_.size() > cap) {
    // (an entry consumed by a ghost hit is no longer in the set)
    if (auto it = ghost_set_.find(ghost_.front()); it != ghost_set_.end()) ghost_set_.erase(it);
    ghost_.pop_front();
  }
}

void S3Fifo::Insert(std::string_view key) {
  Remove(key);
  ++stats_.inserted;
  std::string k(key);
  Entry e;
  if (auto g = ghost_set_.find(Hash(key)); g != ghost_set_.end()) {
    ++stats_.ghost_hits;
    ghost_set_.erase(g);  // the ghost deque entry ages out on its own
    e.queue = Queue::kMain;
    main_.push_front(k);
    e.pos = main_.begin();
  } else {
    small_.push_front(k);
    e.pos = small_.begin();
  }
  entries_.emplace(std::move(k), e);
}

void S3Fifo::Touch(std::string_view key) { Touch(HashedKey(key)); }

void S3Fifo::Touch(const HashedKey& key) {
  auto it = entries_.find(key);
  if (it != entries_.end() && it->second.freq < 3) ++it->second.freq;
}

void S3Fifo::Remove(std::string_view key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  (it->second.queue == Queue::kSmall ? small_ : main_).erase(it->second.pos);
  entries_.erase(it);
}

std::optional<std::string> S3Fifo::Evict(const std::function<bool(const std::string&)>& can_evict) {
  return Evict(can_evict, nullptr);
}

std::optional<std::string> S3Fifo::Evict(
    const std::function<bool(const std::string&)>& can_evict,
    const std::function<uint8_t(const std::string&)>& take_reads) {
  // Each object is looked at a bounded number of times: at most 4 rounds (freq <= 3) + veto.
  size_t budget = 5 * entries_.size() + 1;
  while (!entries_.empty() && budget-- > 0) {
    bool from_small = !small_.empty() &&
                      (main_.empty() || small_.size() * 100 >= entries_.size() * small_percent_);
    std::list<std::string>& q = from_small ? small_ : main_;
    auto node = std::prev(q.end());
    Entry& e = entries_.at(*node);
    if (take_reads) {  // (as many Touches: the count saturates the same way)
      e.freq = static_cast<uint8_t>(std::min<unsigned>(3, e.freq + take_reads(*node)));
    }
    if (from_small) {
      if (e.freq >= 1 || !can_evict(*node)) {
        if (e.freq >= 1)
          ++stats_.promoted;
        else
          ++stats_.vetoed;
        e.freq = 0;
        e.queue = Queue::kMain;
        main_.splice(main_.begin(), small_, node);
        e.pos = main_.begin();
        continue;
      }
      ++stats_.evicted_small;
      std::string victim = std::move(*node);
      small_.erase(node);
      entries_.erase(victim);
      RememberGhost(victim);
      return victim;
    }
    if (e.freq > 0 || !can_evict(*node)) {
      if (e.freq > 0)
        --e.freq;
      else
        ++stats_.vetoed;
      main_.splice(main_.begin(), main_, node);
      e.pos = main_.begin();
      continue;
    }
    ++stats_.evicted_main;
    std::string victim = std::move(*node);
    main_.erase(node);
    entries_.erase(victim);
    return victim;
  }
  return std::nullopt;
}

}  // namespace goblin::store
