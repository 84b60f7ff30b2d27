// VersionLoans: how many loans are out on each object version, and what a replaced or
// deleted version still holds for them, in a slab. A version's record keeps the handle of
// its slot (ObjectRecord::loan_handle) and each loan id names the slot (LoanSlots), so
// lending, pinning and releasing reach the count by index, with no lookup by generation per
// get (this replaced a hash map, generation -> loans, looked up three times per get). A
// slot is taken at a version's first loan and freed at its last release: the record's
// handle then names a slot whose use moved on and finds nothing, and the next loan takes a
// new slot. A version given a new generation in place (Invalidate, Refresh) keeps its record
// and so its slot; its loans are the new version's.
// Threading: the owning store's loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "goblin/store/head_pool.h"
#include "goblin/store/index.h"

namespace goblin::store {

class VersionLoans {
 public:
  struct Version {
    uint32_t count = 0;
    bool retired = false;          // replaced or deleted: free what it held at the last release
    uint64_t retired_lsn = 0;      // the record that retired it (its space waits for it)
    std::vector<Extent> extents;   // (when retired)
    std::optional<PoolSlot> head;  // (when retired)
    uint64_t head_len = 0;
    std::vector<PoolSlot> tail;  // (when retired) its RAM tail, whose readers may still be on it
    uint64_t head_bytes = 0, tail_bytes = 0;  // (when retired) where the tail starts, its length
  };

  // One loan more on the version whose handle is `*handle`: on its slot while that has loans
  // out, else on a new slot, whose handle is written to `*handle`. Returns the slot.
  uint32_t Lend(uint64_t* handle) {
    if (Version* v = Find(*handle)) {
      ++v->count;
      return Index(*handle);
    }
    uint32_t i;
    if (!free_.empty()) {
      i = free_.back();
      free_.pop_back();
    } else {
      i = static_cast<uint32_t>(slots_.size());
      slots_.emplace_back();
    }
    Slot& s = slots_[i];
    s.live = true;
    s.version = Version{};
    s.version.count = 1;
    ++size_;
    *handle = (uint64_t{s.use} << 32) | (uint64_t{i} + 1);
    return i;
  }
  // One loan more on slot `i` (which has loans out: a loan id names it).
  void LendAgain(uint32_t i) { ++slots_[i].version.count; }
  // The version `handle` names while it has loans out, else nullptr (0, a stale or made-up
  // handle).
  Version* Find(uint64_t handle) {
    const uint64_t i = (handle & 0xffff'ffffULL) - 1;
    if (i >= slots_.size()) return nullptr;  // (handle 0 too: i wraps)
    Slot& s = slots_[i];
    return s.live && s.use == static_cast<uint32_t>(handle >> 32) ? &s.version : nullptr;
  }
  // Slot `i`'s version (one with loans out).
  Version& at(uint32_t i) { return slots_[i].version; }
  // One loan fewer on slot `i`. At the last one the slot is freed (the handle naming it finds
  // nothing from now on) and its version is returned, for the caller to free what it held if
  // it was retired (valid until the next Lend); otherwise nullptr.
  Version* Return(uint32_t i) {
    Slot& s = slots_[i];
    if (--s.version.count > 0) return nullptr;
    s.live = false;
    ++s.use;
    free_.push_back(i);
    --size_;
    return &s.version;
  }
  size_t size() const { return size_; }  // versions with loans out

 private:
  static uint32_t Index(uint64_t handle) {
    return static_cast<uint32_t>((handle & 0xffff'ffffULL) - 1);
  }
  struct Slot {
    Version version;
    uint32_t use = 0;
    bool live = false;
  };
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  size_t size_ = 0;
};

}  // namespace goblin::store
