// Store: positional caching for one core shard. An object is stored whole on the disk tier
// (checksummed extents, recorded in the durable Index) and its first `ram_head` bytes are
// also kept in the HeadPool, so a read starts from RAM while the tail is read from disk.
// Fills are exclusive per key (a second writer is told a fill is in progress) and become
// visible only at Commit. After a restart every committed object is still there; its head
// is copied back into RAM on its first read. Reads are loans: descriptors of the head slot
// in the pool and of the tail extents; every loan is released.
// Limits of this version: one disk tier (a second one is refused at Open), no eviction yet
// (a full pool means heads are served from disk; a full tier is a ResourceExhausted fill),
// no readers attached to in-progress fills.
// Threading: one owner thread (a core shard).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "goblin/common/status.h"
#include "goblin/store/disk_io.h"
#include "goblin/store/head_pool.h"
#include "goblin/store/index.h"
#include "goblin/store/object_io.h"
#include "goblin/store/tier_space.h"

namespace goblin::store {

struct StoreOptions {
  PoolOptions pool;
  uint64_t ram_head = 256 << 10;
  std::vector<std::string> tier_dirs;  // prepared directories; the index lives in the first
  uint64_t ssd_prefix = 0;
  TierOptions tier;
  IoChoice io = IoChoice::kAuto;
  uint32_t io_depth = 16;
  uint32_t io_buffers = 32;  // each tier.extent_bytes large
};

struct StoreStats {
  uint64_t objects = 0;
  uint64_t fills_started = 0, fills_committed = 0, fills_aborted = 0, fills_refused = 0;
  uint64_t hits = 0, misses = 0, expired = 0;
  uint64_t heads_in_ram = 0, head_refills = 0, heads_not_cached = 0;
  uint64_t corrupt_dropped = 0;
  uint64_t loans_out = 0;
};

// What a lookup returns: enough to answer HEAD and to plan a read.
struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
  uint64_t generation = 0;
  uint64_t created_unix_ns = 0;
  uint64_t expires_unix_ns = 0;
  std::string metadata;
};

// A read of one object: the head in the pool (if cached) and the extents behind it.
struct Loan {
  uint64_t id = 0;
  ObjectInfo info;
  std::optional<PoolSlot> head;  // pool slot holding object bytes [0, head_bytes)
  uint64_t head_bytes = 0;
  std::vector<Extent> extents;  // the whole object on disk (head included)
};

class Store {
 public:
  static Result<std::unique_ptr<Store>> Open(const StoreOptions& options);
  ~Store();

  using FillId = uint64_t;
  enum class FillStart { kGranted, kInProgress };
  // Starts a fill of `key`. kInProgress: another fill of the key runs (try again later or
  // read the committed version). ttl_ns 0: no expiry.
  Result<std::pair<FillStart, FillId>> BeginFill(std::string_view key, uint64_t ttl_ns,
                                                 std::string_view metadata);
  VoidResult Append(FillId fill, std::span<const uint8_t> data);
  // Makes the object durable and visible (replacing an older version); returns its generation.
  // `expected_size` (if not UINT64_MAX) must equal what was appended.
  Result<uint64_t> Commit(FillId fill, uint64_t expected_size = UINT64_MAX);
  void Abort(FillId fill);

  // nullopt: not stored (or expired, which also removes it).
  Result<std::optional<ObjectInfo>> Head(std::string_view key);
  // A loan on the object, its head in RAM when possible (refilled from disk if needed).
  Result<std::optional<Loan>> Get(std::string_view key);
  void Release(const Loan& loan);
  // Copies object bytes [offset, offset + out.size()) through a loan: head bytes from the
  // pool, the rest from disk with checksums verified. A damaged extent drops the object
  // and returns Corruption.
  VoidResult Read(const Loan& loan, uint64_t offset, std::span<uint8_t> out);
  Result<bool> Delete(std::string_view key);

  const StoreStats& stats() const { return stats_; }
  const HeadPool& pool() const { return *pool_; }
  const TierSpace& tier() const { return *tier_; }
  VoidResult Checkpoint() { return index_->Checkpoint(); }

 private:
  struct Fill {
    std::string key;
    uint64_t ttl_ns = 0;
    std::string metadata;
    std::unique_ptr<ObjectWriter> writer;
    std::optional<PoolSlot> head;
    uint64_t head_len = 0;  // bytes copied into the head slot so far
  };
  struct Resident {  // in-memory only: the head slot of the current version of a key
    uint64_t generation = 0;
    PoolSlot slot;
    uint64_t length = 0;     // object bytes in the slot
    uint64_t alloc_len = 0;  // the length the slot was allocated for (pool accounting)
  };
  struct Loaned {  // per generation with loans out
    uint32_t count = 0;
    bool retired = false;          // replaced or deleted: free what it held at the last release
    std::vector<Extent> extents;   // (when retired)
    std::optional<PoolSlot> head;  // (when retired)
    uint64_t head_len = 0;
  };
  Store() = default;
  // A version of `key` left the index (replaced or deleted): free its extents and head now,
  // or at the last release of its loans.
  void Retire(const std::string& key, uint64_t generation, std::vector<Extent> extents);
  void FreeHead(const PoolSlot& slot, uint64_t len) {
    pool_->Free(slot, len);
    --stats_.heads_in_ram;
  }
  Result<Resident> RefillHead(const ObjectRecord& rec);
  VoidResult ReadRange(const std::vector<Extent>& extents, uint64_t offset, std::span<uint8_t> out);
  uint64_t NowNs() const;

  StoreOptions options_;
  std::unique_ptr<HeadPool> pool_;
  std::unique_ptr<TierSpace> tier_;
  std::unique_ptr<Index> index_;
  std::unique_ptr<IoEngine> engine_;
  std::unique_ptr<IoBufferPool> buffers_;
  std::unordered_map<FillId, Fill> fills_;
  std::unordered_map<std::string, FillId> filling_;  // key -> fill
  std::unordered_map<std::string, Resident> heads_;
  std::unordered_map<uint64_t, Loaned> loaned_;             // generation -> loans
  std::unordered_map<uint64_t, uint64_t> loan_generation_;  // loan id -> generation
  uint64_t next_fill_ = 1, next_loan_ = 1;
  StoreStats stats_;
};

}  // namespace goblin::store
