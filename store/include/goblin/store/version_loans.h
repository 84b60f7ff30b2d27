// VersionLoans: how many loans are out on each object version, and what a replaced or
// deleted version still holds for them, in a slab (an IdSlab). A version's record keeps the
// handle of its slot (ObjectRecord::loan_handle) and each loan id holds it (LoanSlots), so
// lending, pinning and releasing reach the count by index, with no lookup by generation per
// get (this replaced a hash map, generation -> loans, looked up three times per get). A
// slot is taken at a version's first loan and freed at its last release: the record's
// handle then names a slot whose use moved on and finds nothing, and the next loan takes a
// new slot. A record's handle stays behind long after (every version once lent keeps one),
// and a slot's use is 32 bits: one reused 2^32 times (an hour of gets at a million a second)
// matches an old handle again, so a record finds its slot only with its generation too
// (generations are unique per version). A version given a new generation in place
// (Invalidate, Refresh) keeps its record and so its slot (Reissue moves the slot's
// generation along); its loans are the new version's.
// Threading: the owning store's loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "goblin/common/id_slab.h"
#include "goblin/store/head_pool.h"
#include "goblin/store/index.h"

namespace goblin::store {

class VersionLoans {
 public:
  // What a replaced or deleted version still holds for its loans, freed at its last release.
  struct Retired {
    uint64_t lsn = 0;              // the record that retired it (its space waits for it)
    std::vector<Extent> extents;   // on disk
    std::optional<PoolSlot> head;  // its RAM head
    uint64_t head_len = 0;
    std::vector<PoolSlot> tail;               // its RAM tail, whose readers may still be on it
    uint64_t head_bytes = 0, tail_bytes = 0;  // where the tail starts, its length
  };
  struct Version {
    uint64_t generation = 0;  // the version's (a record's handle finds it only with this)
    uint32_t count = 0;
    // Set when the version is replaced or deleted (rare: only one with loans out then; a
    // slot of three words, taken and given back by every get that lends, otherwise).
    std::unique_ptr<Retired> retired;
  };

  // One loan more on version `generation`, whose record's handle is `*handle`: on its slot
  // while that has loans out, else on a new slot, whose handle is written to `*handle`.
  // Returns the handle.
  uint64_t Lend(uint64_t* handle, uint64_t generation) {
    if (Version* v = Find(*handle, generation)) {
      ++v->count;
    } else {
      *handle = slab_.Add(Version{generation, 1, nullptr});
    }
    return *handle;
  }
  // One loan more on the version a loan's id holds the handle of (which has loans out: that
  // loan's).
  void LendAgain(uint64_t handle) { ++slab_.Find(handle)->count; }
  // The version `generation` with loans out, found by its record's `handle`, else nullptr
  // (0, a stale handle, or one whose slot another version took).
  Version* Find(uint64_t handle, uint64_t generation) {
    Version* v = slab_.Find(handle);
    return v != nullptr && v->generation == generation ? v : nullptr;
  }
  // The version a loan's id holds the handle of (its slot is live while the id is), else
  // nullptr.
  Version* Find(uint64_t handle) { return slab_.Find(handle); }
  // The version `old` (record handle `handle`) is now `generation`, the same bytes.
  void Reissue(uint64_t handle, uint64_t old, uint64_t generation) {
    if (Version* v = Find(handle, old)) v->generation = generation;
  }
  // One loan fewer on the version `handle` names (one with loans out). At the last one its
  // slot is freed (the handle finds nothing from now on), after `free_retired(retired)` if
  // the version was retired, for the caller to free what it held.
  template <class F>
  void Return(uint64_t handle, F&& free_retired) {
    Version* v = slab_.Find(handle);
    if (--v->count > 0) return;
    if (v->retired) free_retired(*v->retired);
    slab_.Remove(handle);
  }
  size_t size() const { return slab_.size(); }  // versions with loans out

 private:
  IdSlab<Version> slab_;
};

}  // namespace goblin::store
