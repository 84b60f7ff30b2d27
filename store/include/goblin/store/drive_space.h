// DriveSpace: the space of one drive of a disk tier (a tier is one or more drives, see
// tier_space.h), as fixed-size extent slots in preallocated extent
// files (`extent-NNNNNN.dat`, created and fallocated on demand up to a limit). An object's
// bytes on a tier are a list of extents of at most `extent_bytes` each; each extent is the
// unit of I/O buffers and of checksum verification, so a tail can be verified and served
// buffer by buffer while the next one is read. Free slots are a stack: allocation and free
// are O(1) with no system call except when a new extent file must be created.
// Extents shorter than a slot are packed: they take runs of 4 KiB pages in shared slots
// (first fit within a slot; slots with room found by the length of their longest free run,
// so allocation never scans more than one slot), so a 26 KiB object takes 28 KiB of disk,
// not a 4 MiB slot, and the last extent of a large object leaves the rest of its slot to
// others. A packed slot whose last extent is freed is a free slot again. Nothing about the
// packing is stored: it is rebuilt from the index's extents at start (MarkUsed), which also
// adopts older stores' layout (every extent at the start of a slot of its own).
// Threading: one owner thread (a core shard).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "goblin/common/status.h"
#include "goblin/store/disk_io.h"
#include "goblin/store/index.h"
#include "goblin/store/tier_dir.h"

namespace goblin::store {

struct TierOptions {
  uint64_t file_bytes = 1ull << 30;  // bytes per extent file (multiple of extent_bytes)
  uint32_t extent_bytes = 4u << 20;  // slot size: multiple of 4 KiB
  uint32_t max_files = 1u << 16;     // upper bound on extent files
  // The tier's capacity (rounded down to whole files): 0 = 95% of what the file system has
  // free at start plus the extent files already there. Reaching it is the store's signal to
  // evict; the file system running out before it is an error (someone else filled the disk).
  uint64_t capacity_bytes = 0;
  // With capacity_bytes 0: the file system is shared by this many tiers (the shards of one
  // goblin-core), each taking its part of the free space.
  uint32_t free_space_share = 1;
  bool allow_buffered = false;  // tests on file systems without O_DIRECT
};

struct TierStats {
  uint64_t files = 0;
  uint64_t slots_total = 0;     // in files created so far
  uint64_t slots_used = 0;      // whole extents and slabs
  uint64_t packed_slots = 0;    // (of them: slots shared by packed extents)
  uint64_t packed_extents = 0;  // extents shorter than a slot
  // Disk bytes extents take: a slot, or their length in 4 KiB pages.
  uint64_t allocated_bytes = 0;
  uint64_t allocation_failures = 0;
  // Extent I/O completed on this tier (counted by the readers and writers at completion).
  uint64_t reads = 0, writes = 0, read_bytes = 0, write_bytes = 0, io_errors = 0;
};

class DriveSpace {
 public:
  // Drive `drive_no` of tier `tier_no`: the numbers every extent allocated here carries.
  static Result<std::unique_ptr<DriveSpace>> Open(TierDir dir, uint16_t tier_no, uint16_t drive_no,
                                                  const TierOptions& options);

  uint16_t tier_no() const { return tier_no_; }
  uint16_t drive_no() const { return drive_no_; }
  uint32_t extent_bytes() const { return options_.extent_bytes; }
  const TierStats& stats() const { return stats_; }
  // One extent read or write finished with `result` (bytes, or -errno) of `want`.
  void NoteIo(bool write, int32_t result, uint32_t want) {
    if (result != static_cast<int32_t>(want)) ++stats_.io_errors;
    if (result <= 0) return;
    ++(write ? stats_.writes : stats_.reads);
    (write ? stats_.write_bytes : stats_.read_bytes) += static_cast<uint32_t>(result);
  }
  const TierDir& dir() const { return dir_; }
  uint64_t capacity_bytes() const { return uint64_t{max_files_} * options_.file_bytes; }
  // What the tier may hold regardless of how full the file system is now: the configured
  // capacity, else this tier's share of 95% of the file system's size. Stable from one start
  // to the next (capacity_bytes() follows the free space at start): a cluster member's weight.
  uint64_t nominal_bytes() const { return nominal_bytes_; }
  uint64_t used_bytes() const { return stats_.slots_used * options_.extent_bytes; }
  // No free slot and no file may be added within the capacity: make room by evicting.
  bool at_capacity() const { return files_.size() >= max_files_ && free_.empty() && !free_dirty_; }
  // Slots a `bytes`-long object needs (for "does it fit at all" checks).
  uint64_t SlotsFor(uint64_t bytes) const {
    return (bytes + options_.extent_bytes - 1) / options_.extent_bytes;
  }
  uint64_t capacity_slots() const { return uint64_t{max_files_} * slots_per_file_; }

  // Slots for `bytes` of object data starting at that object's `object_offset` on this
  // tier: extents of extent_bytes (the last one shorter), lengths set, checksums zero.
  // ResourceExhausted (nothing kept) when the tier or the file system is full.
  // One extent of `length` (<= extent_bytes) bytes: a slot, or a run of pages in a shared
  // one. ResourceExhausted when the drive (or its file system) has no room; the caller
  // (TierSpace, which may try another drive) counts the failure (NoteAllocationFailure).
  Result<Extent> AllocateOne(uint64_t length);
  void NoteAllocationFailure() { ++stats_.allocation_failures; }
  // Returns an extent's space (an extent from Allocate or from a recovered record).
  void Free(const Extent& e);
  // Disk bytes an extent of `length` bytes takes: its 4 KiB pages, or a whole slot.
  uint64_t FootprintOf(uint64_t length) const {
    return IsPacked(length) ? uint64_t{PagesOf(length)} * kDirectAlignment : options_.extent_bytes;
  }
  // Marks a recovered record's extent as in use (at start-up, from the index). False when
  // it lies outside the tier or overlaps another: the record is damaged.
  bool MarkUsed(const Extent& e);

  // The drive's own queue: extent I/O in flight on it (kept by the I/O router), and how
  // many reads it may have at once (readers leave the rest of the engine's depth to the
  // other drives: a slow or hung drive holds at most this much of it).
  uint32_t* io_in_flight() { return &io_in_flight_; }
  uint32_t io_in_flight_count() const { return io_in_flight_; }
  bool CanRead() const { return io_in_flight_ < read_limit_; }
  void set_read_limit(uint32_t n) { read_limit_ = n; }
  // The O_DIRECT fd of extent file `file` (of this drive); -1 if it does not exist.
  int FileFd(uint32_t file) const;

 private:
  DriveSpace(TierDir dir) : dir_(std::move(dir)) {}
  VoidResult AddFile(bool reopen = false);
  uint64_t SlotOf(const Extent& e) const;
  void RebuildFree();
  // A free slot (a new file if need be), marked used.
  Result<uint64_t> TakeSlot();
  void GiveSlot(uint64_t slot);

  // Packed slots: which 4 KiB pages are in use, and the longest free run, by which the
  // slot sits in buckets_[floor(log2(run))] while it has room.
  struct Packed {
    std::vector<uint64_t> pages;
    uint32_t used = 0;
    uint32_t largest = 0;
    size_t bucket_at = SIZE_MAX;
    int bucket = -1;
  };
  uint32_t PagesOf(uint64_t length) const {
    return static_cast<uint32_t>(
        std::max<uint64_t>(1, (length + kDirectAlignment - 1) / kDirectAlignment));
  }
  bool IsPacked(uint64_t length) const { return PagesOf(length) < pages_per_slot_; }
  Result<Extent> AllocatePacked(uint64_t length);
  Packed& MakePacked(uint64_t slot);
  void Rebucket(uint64_t slot, Packed& p);  // after its pages changed
  void Unbucket(Packed& p);
  void RebuildBuckets();
  uint32_t pages_per_slot_ = 0;
  std::vector<std::unique_ptr<Packed>> packed_;  // per slot (null: free or one extent)
  std::vector<std::vector<uint64_t>> buckets_;   // slots with room, by longest free run
  bool buckets_dirty_ = false;                   // MarkUsed() ran since they were built

  TierDir dir_;
  uint16_t tier_no_ = 0;
  uint16_t drive_no_ = 0;
  TierOptions options_;
  uint32_t slots_per_file_ = 0;
  uint32_t max_files_ = 0;  // from the capacity (files beyond it, from a larger past, stay)
  uint64_t nominal_bytes_ = 0;
  std::vector<ExtentFile> files_;
  std::vector<uint8_t> used_;   // per slot
  std::vector<uint64_t> free_;  // free slot numbers (a stack)
  bool free_dirty_ = false;     // MarkUsed() ran since the stack was built
  TierStats stats_;
  uint32_t io_in_flight_ = 0;
  uint32_t read_limit_ = UINT32_MAX;
};

}  // namespace goblin::store
