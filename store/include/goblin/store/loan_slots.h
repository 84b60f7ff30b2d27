// LoanSlots: the store's loan ids and what each one holds (the VersionLoans slot of its
// object version), in a slab: an id names its slot and that slot's use, so finding, adding
// and removing one is an index into a vector, with no hashing per get (this replaced a hash
// map, id -> generation, updated twice per get). A released id, or one repeated or made up,
// finds nothing: the slot's use count no longer matches (unless that slot was used 2^32
// times in between; the store's callers release each id once, this only guards against a
// bug). Ids are never 0 (a Loan's "holds nothing").
// Threading: the owning store's loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace goblin::store {

class LoanSlots {
 public:
  // A new id holding `value`.
  uint64_t Add(uint64_t value) {
    uint32_t i;
    if (!free_.empty()) {
      i = free_.back();
      free_.pop_back();
    } else {
      i = static_cast<uint32_t>(slots_.size());
      slots_.emplace_back();
    }
    Slot& s = slots_[i];
    s.value = value;
    s.live = true;
    ++size_;
    return (uint64_t{s.use} << 32) | (uint64_t{i} + 1);
  }
  // The value `id` holds, or nullptr.
  uint64_t* Find(uint64_t id) {
    const uint64_t i = (id & 0xffff'ffffULL) - 1;
    if (i >= slots_.size()) return nullptr;  // (id 0 too: i wraps)
    Slot& s = slots_[i];
    return s.live && s.use == static_cast<uint32_t>(id >> 32) ? &s.value : nullptr;
  }
  // Gives `id` up (one Find returned non-null for); its slot's next use has another id.
  void Remove(uint64_t id) {
    const auto i = static_cast<uint32_t>((id & 0xffff'ffffULL) - 1);
    Slot& s = slots_[i];
    s.live = false;
    ++s.use;
    free_.push_back(i);
    --size_;
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t value = 0;
    uint32_t use = 0;
    bool live = false;
  };
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  size_t size_ = 0;
};

}  // namespace goblin::store
