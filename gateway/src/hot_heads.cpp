#include "hot_heads.h"

namespace goblin::gateway {

HotHead& HotHeads::Slot(std::string_view key) {
  if (auto it = index_.find(key); it != index_.end()) return slots_[it->second];
  uint32_t i;
  if (!free_.empty()) {
    i = free_.back();
    free_.pop_back();
  } else if (slots_.size() < capacity_) {
    i = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  } else {
    // CLOCK: an entry used since the hand last passed gets another round.
    for (;;) {
      hand_ = (hand_ + 1) % slots_.size();
      HotHead& h = slots_[hand_];
      if (!h.referenced) break;  // (every slot is in use here: none is free)
      h.referenced = false;
    }
    i = static_cast<uint32_t>(hand_);
    index_.erase(std::string_view(slots_[i].key));
  }
  HotHead& h = slots_[i];
  h.key.assign(key);
  h.referenced = false;
  index_.emplace(std::string_view(h.key), i);
  return h;
}

void HotHeads::Erase(std::string_view key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  uint32_t i = it->second;
  index_.erase(it);
  slots_[i].key.clear();
  free_.push_back(i);
}

void HotHeads::Clear() {
  index_.clear();
  free_.clear();
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    slots_[i].key.clear();
    free_.push_back(i);
  }
}

}  // namespace goblin::gateway
