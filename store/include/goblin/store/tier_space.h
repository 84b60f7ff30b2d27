// TierSpace: one disk tier (`--ssd-dir`, `--hdd-dir`) as the drives it is made of
// (`--ssd-dir A,B,...`), each a DriveSpace with its own directory, identity, lock, extent
// files, free space and counters. Extents are striped over the drives round-robin (each
// allocation goes to the next drive with room), so a large object's extents are read from
// every drive at once and small objects spread evenly; an extent carries its drive's
// number. Drive numbers are stable across restarts whatever order the directories are
// listed in: each drive keeps its number in a label of its own (tier_dir.h, DRIVE). A drive
// that is gone at start (missing, unreadable, not the drive it was) leaves a hole in the
// numbering; the store drops the objects that had bytes on it (Store::Open).
// Also: Place(), the arithmetic that splits an object between the RAM head and the tiers.
// Threading: one owner thread (a core shard).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "goblin/common/status.h"
#include "goblin/store/drive_space.h"
#include "goblin/store/index.h"
#include "goblin/store/tier_dir.h"

namespace goblin::store {

// At most this many drives per tier.
inline constexpr uint16_t kMaxTierDrives = 256;

// A configured drive directory that could not be used at start, and why.
struct LostDrive {
  std::string dir;    // as configured ("" when only the index knew it: its label went away)
  int number = -1;    // its number when known (the index had extents on it)
  std::string error;  // what opening it said
  uint64_t objects_dropped = 0;
};

class TierSpace {
 public:
  // One drive of a tier as opened: its number and its directory.
  struct Drive {
    uint16_t number = 0;
    TierDir dir;
  };
  // `drives` need not be contiguous: a missing number is a drive that is gone. The
  // capacity (options.capacity_bytes, when set) is shared equally by the drives; with 0
  // each takes its part of its own file system (drives on one file system share it).
  static Result<std::unique_ptr<TierSpace>> Open(std::vector<Drive> drives, uint16_t tier_no,
                                                 const TierOptions& options);
  // A tier of one drive, number 0 (tools and tests).
  static Result<std::unique_ptr<TierSpace>> Open(TierDir dir, uint16_t tier_no,
                                                 const TierOptions& options);

  uint16_t tier_no() const { return tier_no_; }
  uint32_t extent_bytes() const { return options_.extent_bytes; }
  // The drives' counters summed.
  TierStats stats() const;
  // Drive `number`, null if the tier has none by that number (gone, or never was).
  DriveSpace* drive(uint16_t number) const {
    return number < by_number_.size() ? by_number_[number] : nullptr;
  }
  // The drives present, in number order.
  const std::vector<std::unique_ptr<DriveSpace>>& drives() const { return drives_; }
  // The drives' directories, comma-separated (for messages).
  const std::string& path() const { return path_; }
  std::vector<LostDrive>& lost() { return lost_; }
  const std::vector<LostDrive>& lost() const { return lost_; }

  void NoteIo(const Extent& e, bool write, int32_t result, uint32_t want) {
    if (DriveSpace* d = drive(e.drive)) d->NoteIo(write, result, want);
  }
  // The O_DIRECT fd of the file extent `e` lies in; -1 if there is none.
  int FileFd(const Extent& e) const {
    DriveSpace* d = drive(e.drive);
    return d ? d->FileFd(e.file) : -1;
  }
  // The directory of the drive extent `e` lies on (for messages).
  const std::string& DrivePath(const Extent& e) const;

  uint64_t capacity_bytes() const;
  uint64_t nominal_bytes() const;  // (DriveSpace::nominal_bytes over the drives)
  uint64_t used_bytes() const;
  uint64_t capacity_slots() const;
  // No drive has a free slot or may add a file within its capacity: evict.
  bool at_capacity() const;
  uint64_t SlotsFor(uint64_t bytes) const {
    return (bytes + options_.extent_bytes - 1) / options_.extent_bytes;
  }
  uint64_t FootprintOf(uint64_t length) const { return drives_.front()->FootprintOf(length); }

  // One extent of `length` (<= extent_bytes) bytes on the next drive (round-robin) that has
  // room; ResourceExhausted when none has.
  Result<Extent> AllocateOne(uint64_t length);
  // Space for `bytes` of object data, in extents of at most extent_bytes, each from
  // AllocateOne. ResourceExhausted (nothing kept) when the tier has no room.
  Result<std::vector<Extent>> Allocate(uint64_t bytes);
  void Free(const Extent& e) {
    if (DriveSpace* d = drive(e.drive)) d->Free(e);
  }
  // A recovered extent is in use; false when it does not fit its drive (damage) or its
  // drive is not here.
  bool MarkUsed(const Extent& e) {
    DriveSpace* d = drive(e.drive);
    return d != nullptr && e.tier == tier_no_ && d->MarkUsed(e);
  }

 private:
  TierSpace() = default;
  template <typename F>
  uint64_t SumOverDrives(F of) const {
    uint64_t n = 0;
    for (const auto& d : drives_) n += of(*d);
    return n;
  }

  uint16_t tier_no_ = 0;
  TierOptions options_;
  std::vector<std::unique_ptr<DriveSpace>> drives_;  // present, by number
  std::vector<DriveSpace*> by_number_;               // number -> drive (null: none)
  std::vector<LostDrive> lost_;
  std::string path_;
  size_t next_ = 0;  // the drive the next extent goes to (index into drives_)
};

// Where an object's bytes live: [0, head) in RAM, then [head, head + first) on tier 0, the
// rest on tier 1 (when a second tier exists; otherwise all on tier 0). Every byte is also
// on disk: disk_first_offset is 0 (the disk holds the whole object, head included).
struct Placement {
  uint64_t head_bytes = 0;   // bytes served from the RAM pool
  uint64_t tier0_bytes = 0;  // object bytes [0, tier0_bytes) on the first tier
  uint64_t tier1_bytes = 0;  // object bytes [tier0_bytes, size) on the second tier
};
Placement Place(uint64_t size, uint64_t ram_head, uint64_t ssd_prefix, bool has_second_tier);

}  // namespace goblin::store
