// HeadPool: the bounded RAM pool that holds the head of every object (and small objects
// whole). One shared-memory file (memfd; HugeTLB 2 MiB pages when reserved, else
// transparent huge pages, else 4 KiB pages) of --memory bytes, bound to one NUMA node,
// locked when permitted, carved into --block granules. Each block serves one size class of
// slots (64 B up to the block size, steps of 1x and 1.5x powers of two), so a head costs at
// most a third more than its length, and allocation is a free-list pop: no system call, no
// malloc. Local readers (the gateway) can map the memfd read-only.
// Threading: Allocate/Free/stats belong to the one thread that owns the pool (a core shard).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "goblin/common/fd.h"
#include "goblin/common/status.h"

namespace goblin::store {

enum class HugePages : uint8_t { kAuto, kOn, kOff };
Result<HugePages> ParseHugePages(std::string_view text);  // "auto" | "on" | "off"

enum class Backing : uint8_t { kHugeTlb2M, kTransparentHuge, kSmallPages };
std::string_view BackingName(Backing b);

// The backing the pool will use, decided from what the machine offers (pure, testable):
// `on` requires enough free 2 MiB HugeTLB pages on the node; `auto` takes them if there
// are enough, else THP if shmem THP is usable ("always", "within_size", "advise" or
// "force" in /sys/kernel/mm/transparent_hugepage/shmem_enabled), else 4 KiB pages.
Result<Backing> ChooseBacking(HugePages request, uint64_t bytes, uint64_t free_hugepages_2m,
                              std::string_view shmem_thp_mode);

struct PoolOptions {
  uint64_t memory = 64ull << 20;  // pool bytes: a multiple of `block`
  uint64_t block = 256 << 10;     // power of two, 64 KiB .. 1 GiB, <= memory
  int numa_node = -1;             // bind the pages to this node (-1: no binding)
  HugePages hugepages = HugePages::kAuto;
  bool lock = true;              // mlock when permitted (logged when not)
  bool allow_promotion = false;  // false: MPOL_BIND strict, pages never migrate
  // Stable blocks (see Stable()): a block that held a slot alone is punched out of the
  // memfd when that slot is freed, so pages a socket still references are never rewritten.
  // Off by default: on loopback with 4 KiB pages sending by reference measured slower than
  // a copy (docs/hot-path.md), and the punch costs the block's next owner a fault per page.
  bool stable_blocks = false;
  std::string sysfs_root = "/sys";
};

// One allocated slot. `offset` is from the pool base; `capacity` >= the requested length.
struct PoolSlot {
  uint64_t offset = 0;
  uint32_t capacity = 0;
  uint16_t size_class = 0;
  friend bool operator==(const PoolSlot&, const PoolSlot&) = default;
};

struct PoolStats {
  uint64_t pool_bytes = 0;
  uint64_t block_bytes = 0;
  uint64_t blocks_total = 0;
  uint64_t blocks_free = 0;  // blocks not assigned to any size class
  uint64_t slots_used = 0;
  uint64_t bytes_requested = 0;        // sum of lengths asked for by live slots
  uint64_t bytes_reserved = 0;         // sum of live slot capacities
  uint64_t bytes_in_class_blocks = 0;  // blocks assigned to classes (used or not)
  uint64_t allocation_failures = 0;
  uint64_t blocks_punched = 0;  // freed stable blocks given new pages (Stable)
  // 1 - requested / (bytes held by class blocks): memory not holding head bytes.
  double Fragmentation() const;
};

class HeadPool {
 public:
  // Reserves, binds, populates and (when permitted) locks the memory. Errors are clear:
  // "--hugepages on but only N of M 2 MiB pages are free on node K", bad sizes, etc.
  static Result<std::unique_ptr<HeadPool>> Create(const PoolOptions& options);
  ~HeadPool();
  HeadPool(const HeadPool&) = delete;
  HeadPool& operator=(const HeadPool&) = delete;

  // A slot of at least `length` bytes (1 .. block size); nullopt when the pool is full
  // (an expected condition: the caller evicts or demotes, then retries).
  std::optional<PoolSlot> Allocate(uint64_t length);
  // Returns a slot; `length` is what was asked for when it was allocated. Every slot
  // allocated is freed exactly once.
  void Free(const PoolSlot& slot, uint64_t length);

  // Whether `slot`'s bytes may be sent by reference (sendfile/splice from fd(): the socket
  // then holds the pages, not a copy, until the peer has them): true for a slot alone in
  // its block (more than half a block) when blocks are stable. Freeing such a slot punches
  // its block out of the memfd (fallocate PUNCH_HOLE) before the block can be reused: pages
  // still referenced keep the bytes they had, and the block's next owner writes to new
  // ones (faulted in on that first write). Stable only where a block is a whole number of
  // the backing's pages (any block with 4 KiB pages, 2 MiB multiples with huge pages): a
  // punch inside a huge page would zero it in place.
  bool Stable(const PoolSlot& slot) const {
    return stable_ && class_size_[slot.size_class] * 2 > block_;
  }
  bool stable_blocks() const { return stable_; }

  uint8_t* data() const { return base_; }
  uint8_t* At(uint64_t offset) const { return base_ + offset; }
  uint64_t size() const { return size_; }
  int fd() const { return fd_.get(); }  // map it read-only to read heads in place
  Backing backing() const { return backing_; }
  bool locked() const { return locked_; }
  int numa_node() const { return node_; }
  uint64_t block_size() const { return block_; }
  const PoolStats& stats() const { return stats_; }
  // Size classes in ascending order (for stats and tests).
  const std::vector<uint32_t>& size_classes() const { return class_size_; }

  // The NUMA nodes the pool's pages are on according to the kernel (move_pages, sampling
  // one page per block): {node, pages} pairs. Slow path (admin, audits, tests).
  Result<std::vector<std::pair<int, uint64_t>>> PageNodes() const;

 private:
  HeadPool() = default;
  uint16_t ClassFor(uint64_t length) const;

  UniqueFd fd_;
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t block_ = 0;
  Backing backing_ = Backing::kSmallPages;
  bool locked_ = false;
  bool stable_ = false;
  int node_ = -1;
  PoolStats stats_;
  std::vector<uint32_t> class_size_;
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Block {
    uint16_t cls = 0;            // size class + 1; 0 = unassigned
    uint32_t live = 0;           // slots handed out
    uint32_t carved = 0;         // slots ever handed out (the rest were never touched)
    uint32_t free_head = kNone;  // first free slot index; the next index is stored in the slot
    uint32_t prev = kNone;       // links in its class's list of blocks with room
    uint32_t next = kNone;
  };
  void LinkPartial(uint32_t b);
  void UnlinkPartial(uint32_t b);

  std::vector<Block> blocks_;
  std::vector<uint32_t> partial_head_;  // per class: first block with a free slot
  std::vector<uint32_t> free_blocks_;   // unassigned blocks (a stack)
};

}  // namespace goblin::store
