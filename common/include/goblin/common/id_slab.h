// IdSlab<T>: values kept under ids the slab mints itself, for maps whose keys we choose (the
// store's loan ids, the core's loans to a session): an id names its slot and that slot's
// use, so adding, finding and removing one is an index into a vector, with no hashing (these
// replaced hash maps updated twice per get). A removed id, or one repeated or made up, finds
// nothing: the slot's use no longer matches (unless that slot was used 2^32 times in
// between; callers remove each id once, this guards against a bug or a peer that repeats a
// release). Ids are never 0 ("holds nothing"). A removed value is destroyed at once (what
// it owns is released then, not when the slot is reused).
// Threading: none; one owner at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace goblin {

template <class T>
class IdSlab {
 public:
  // A new id holding `value`.
  uint64_t Add(T value) {
    uint32_t i;
    if (!free_.empty()) {
      i = free_.back();
      free_.pop_back();
    } else {
      i = static_cast<uint32_t>(slots_.size());
      slots_.emplace_back();
    }
    Slot& s = slots_[i];
    s.value.emplace(std::move(value));
    ++size_;
    return (uint64_t{s.use} << 32) | (uint64_t{i} + 1);
  }
  // The value `id` holds, or nullptr.
  T* Find(uint64_t id) {
    const uint64_t i = (id & 0xffff'ffffULL) - 1;
    if (i >= slots_.size()) return nullptr;  // (id 0 too: i wraps)
    Slot& s = slots_[i];
    return s.value && s.use == static_cast<uint32_t>(id >> 32) ? &*s.value : nullptr;
  }
  // Gives `id` up (one Find returned non-null for): its value is destroyed; its slot's next
  // use has another id.
  void Remove(uint64_t id) {
    const auto i = static_cast<uint32_t>((id & 0xffff'ffffULL) - 1);
    Slot& s = slots_[i];
    s.value.reset();
    ++s.use;
    free_.push_back(i);
    --size_;
  }
  // f(value) for every live value.
  template <class F>
  void ForEach(F&& f) {
    for (Slot& s : slots_) {
      if (s.value) f(*s.value);
    }
  }
  // Removes every live value for which f(value) returns true (f may give back what the
  // value holds first); returns how many went. Their ids find nothing afterwards.
  template <class F>
  size_t RemoveIf(F&& f) {
    size_t n = 0;
    for (uint32_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].value && f(*slots_[i].value)) {
        Remove((uint64_t{slots_[i].use} << 32) | (uint64_t{i} + 1));
        ++n;
      }
    }
    return n;
  }
  // Removes every id (each slot's next use has another id).
  void Clear() {
    for (uint32_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].value) Remove((uint64_t{slots_[i].use} << 32) | (uint64_t{i} + 1));
    }
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    std::optional<T> value;
    uint32_t use = 0;
  };
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  size_t size_ = 0;
};

}  // namespace goblin
