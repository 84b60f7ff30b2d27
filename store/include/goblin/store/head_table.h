// HeadTable: the core's table of head descriptors for one-sided readers (layout and read
// protocol: goblin/sbe/head_table.h). A fixed array of entries in one shared-memory file
// (memfd), mapped read-only by ring-plane clients and registered with UCX for remote reads.
// The Store publishes an entry when a client asks to describe a resident head and withdraws
// it (stamp 0) before that head's pool slot is freed; a full table only means heads are
// read two-sided. Publish/Withdraw are a free-list pop/push and four stores: no system call.
// Beside it, a touch table: one byte per entry that readers serving a head themselves set
// (a plain store: "read since you last looked"), so the core's eviction and demotion see
// reads it never handled; its own memfd, which those readers map writable.
// Threading: one owner thread writes (a core shard); readers in other processes only read.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "goblin/common/fd.h"
#include "goblin/common/status.h"
#include "goblin/sbe/head_table.h"

namespace goblin::store {

class HeadTable {
 public:
  // `entries` descriptors (at least 1); the file is rounded up to whole pages; its pages on
  // `numa_node` when >= 0 (strict: never elsewhere).
  static Result<std::unique_ptr<HeadTable>> Create(uint32_t entries, int numa_node = -1,
                                                   bool strict = false);
  ~HeadTable();
  HeadTable(const HeadTable&) = delete;
  HeadTable& operator=(const HeadTable&) = delete;

  // Describes a head under a new stamp (entry.stamp is ignored); nullopt when every entry
  // is in use. Its touch byte starts clear.
  std::optional<uint32_t> Publish(const sbe::HeadTableEntry& entry);
  // Marks entry `index` free; readers holding its old descriptor see it as stale.
  void Withdraw(uint32_t index);
  sbe::HeadTableEntry Read(uint32_t index) const;
  // Whether a reader touched entry `index` since the last call (clears it).
  bool TakeTouch(uint32_t index) {
    if (index >= capacity_) return false;
    auto t = std::atomic_ref<uint8_t>(touch_[index]);
    if (t.load(std::memory_order_relaxed) == 0) return false;
    t.store(0, std::memory_order_relaxed);
    return true;
  }

  uint8_t* data() const { return base_; }
  uint64_t bytes() const { return bytes_; }
  int fd() const { return fd_.get(); }
  int touch_fd() const { return touch_fd_.get(); }
  uint64_t touch_bytes() const { return touch_bytes_; }
  uint32_t capacity() const { return capacity_; }
  uint32_t in_use() const { return capacity_ - static_cast<uint32_t>(free_.size()); }
  uint64_t publish_failures() const { return publish_failures_; }

 private:
  HeadTable() = default;
  sbe::HeadTableEntry* entries() const { return reinterpret_cast<sbe::HeadTableEntry*>(base_); }

  UniqueFd fd_, touch_fd_;
  uint8_t* base_ = nullptr;
  uint8_t* touch_ = nullptr;
  uint64_t bytes_ = 0, touch_bytes_ = 0;
  uint64_t next_stamp_ = 1;
  uint32_t capacity_ = 0;
  std::vector<uint32_t> free_;  // a stack of free entry indices
  uint64_t publish_failures_ = 0;
};

}  // namespace goblin::store
