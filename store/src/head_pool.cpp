#include "goblin/store/head_pool.h"

#include <fcntl.h>
#include <linux/mempolicy.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <map>

#include "goblin/common/file.h"
#include "goblin/common/log.h"
#include "goblin/common/topology.h"
#include "goblin/common/units.h"

namespace goblin::store {
namespace {

constexpr std::string_view kLog = "pool";
constexpr uint64_t kHuge = 2ull << 20;
constexpr uint64_t kSmall = 4096;
constexpr uint32_t kMinClass = 64;

// "always within_size advise [never] deny force" -> "never".
std::string Bracketed(const std::string& line) {
  size_t a = line.find('['), b = line.find(']');
  if (a == std::string::npos || b == std::string::npos || b < a) return line;
  return line.substr(a + 1, b - a - 1);
}

}  // namespace

Result<HugePages> ParseHugePages(std::string_view text) {
  if (text == "auto") return HugePages::kAuto;
  if (text == "on") return HugePages::kOn;
  if (text == "off") return HugePages::kOff;
  return Err(StatusCode::kInvalidArgument, "--hugepages '{}': use auto, on or off", text);
}

std::string_view BackingName(Backing b) {
  switch (b) {
    case Backing::kHugeTlb2M:
      return "HugeTLB 2 MiB pages";
    case Backing::kTransparentHuge:
      return "transparent huge pages";
    case Backing::kSmallPages:
      return "4 KiB pages";
  }
  return "unknown";
}

Result<Backing> ChooseBacking(HugePages request, uint64_t bytes, uint64_t free_hugepages_2m,
                              std::string_view shmem_thp_mode) {
  uint64_t need = (bytes + kHuge - 1) / kHuge;
  bool hugetlb_ok = free_hugepages_2m >= need;
  if (request == HugePages::kOn) {
    if (!hugetlb_ok) {
      return Err(StatusCode::kResourceExhausted,
                 "--hugepages on needs {} free 2 MiB HugeTLB pages but only {} are free "
                 "(reserve them: echo N > /sys/devices/system/node/nodeK/hugepages/"
                 "hugepages-2048kB/nr_hugepages)",
                 need, free_hugepages_2m);
    }
    return Backing::kHugeTlb2M;
  }
  if (request == HugePages::kOff) return Backing::kSmallPages;
  if (hugetlb_ok) return Backing::kHugeTlb2M;
  if (shmem_thp_mode == "always" || shmem_thp_mode == "within_size" || shmem_thp_mode == "advise" ||
      shmem_thp_mode == "force") {
    return Backing::kTransparentHuge;
  }
  return Backing::kSmallPages;
}

double PoolStats::Fragmentation() const {
  if (bytes_in_class_blocks == 0) return 0.0;
  return 1.0 - static_cast<double>(bytes_requested) / static_cast<double>(bytes_in_class_blocks);
}

Result<std::unique_ptr<HeadPool>> HeadPool::Create(const PoolOptions& o) {
  if (!std::has_single_bit(o.block) || o.block < (64u << 10) || o.block > (1ull << 30)) {
    return Err(StatusCode::kInvalidArgument, "--block {} must be a power of two between 64K and 1G",
               FormatSize(o.block));
  }
  if (o.memory < o.block || o.memory % o.block != 0) {
    return Err(StatusCode::kInvalidArgument,
               "--memory {} must be a positive multiple of --block {}", FormatSize(o.memory),
               FormatSize(o.block));
  }
  if (o.memory / o.block >= UINT32_MAX) {
    return Err(StatusCode::kInvalidArgument, "--memory / --block gives too many blocks");
  }
  GOBLIN_ASSIGN_OR_RETURN(Topology topo, ProbeTopology(o.sysfs_root));
  uint64_t free_huge = 0;
  if (o.numa_node >= 0) {
    const NumaNode* n = topo.Node(o.numa_node);
    if (n == nullptr) {
      return Err(StatusCode::kInvalidArgument, "--numa {}: no such node ({})", o.numa_node,
                 topo.Describe());
    }
    free_huge = n->hugepages_2m_free;
  } else {
    for (const auto& n : topo.nodes) free_huge += n.hugepages_2m_free;
  }
  std::string thp =
      Bracketed(ReadFirstLine(o.sysfs_root + "/kernel/mm/transparent_hugepage/shmem_enabled"));
  GOBLIN_ASSIGN_OR_RETURN(Backing backing, ChooseBacking(o.hugepages, o.memory, free_huge, thp));

  std::unique_ptr<HeadPool> p(new HeadPool());
  p->backing_ = backing;
  p->block_ = o.block;
  p->node_ = o.numa_node;
  uint64_t page = backing == Backing::kHugeTlb2M ? kHuge : kSmall;
  p->size_ = (o.memory + page - 1) / page * page;
  unsigned mfd_flags = MFD_CLOEXEC;
  if (backing == Backing::kHugeTlb2M) mfd_flags |= MFD_HUGETLB | (21u << 26);  // MFD_HUGE_2MB
  p->fd_ = UniqueFd(memfd_create("goblin-head-pool", mfd_flags));
  if (!p->fd_) return ErrnoErr("memfd_create(head pool)", errno);
  if (ftruncate(p->fd_.get(), static_cast<off_t>(p->size_)) != 0) {
    return ErrnoErr(fmt::format("ftruncate(head pool, {})", FormatSize(p->size_)), errno);
  }
  void* addr = mmap(nullptr, p->size_, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd_.get(), 0);
  if (addr == MAP_FAILED) {
    return ErrnoErr(
        fmt::format("mmap(head pool, {}, {})", FormatSize(p->size_), BackingName(backing)), errno);
  }
  p->base_ = static_cast<uint8_t*>(addr);
  if (backing == Backing::kTransparentHuge) madvise(p->base_, p->size_, MADV_HUGEPAGE);
  // Bind before the first touch so every page is allocated on the node.
  if (o.numa_node >= 0 && topo.numa_available) {
    if (auto r = BindMemoryToNode(p->base_, p->size_, o.numa_node, !o.allow_promotion); !r) {
      return Err(r.error().WithContext("head pool"));
    }
  }
  // Populate now: first-byte latency must never pay a page fault. HugeTLB pages were
  // reserved at mmap, so this cannot SIGBUS for lack of pages.
  if (madvise(p->base_, p->size_, MADV_POPULATE_WRITE) != 0) {
    if (errno != EINVAL) return ErrnoErr("madvise(MADV_POPULATE_WRITE, head pool)", errno);
    for (uint64_t off = 0; off < p->size_; off += page) p->base_[off] = 0;  // older kernels
  }
  if (o.lock) {
    if (mlock(p->base_, p->size_) == 0) {
      p->locked_ = true;
    } else {
      GOBLIN_LOG_WARN(kLog, "head pool not locked in memory ({}): raise RLIMIT_MEMLOCK",
                      ErrnoStatus("mlock", errno).message());
    }
  }

  for (uint64_t c = kMinClass; c <= o.block; c *= 2) {
    p->class_size_.push_back(static_cast<uint32_t>(c));
    uint64_t mid = c + c / 2;
    if (mid < o.block && mid < 2 * c) p->class_size_.push_back(static_cast<uint32_t>(mid));
  }
  std::sort(p->class_size_.begin(), p->class_size_.end());
  p->stable_ = o.stable_blocks && o.block % page == 0 &&
               (backing == Backing::kSmallPages || o.block % kHuge == 0);
  p->partial_head_.assign(p->class_size_.size(), kNone);
  uint64_t nblocks = o.memory / o.block;
  p->blocks_.resize(nblocks);
  p->free_blocks_.reserve(nblocks);
  for (uint64_t b = nblocks; b-- > 0;) p->free_blocks_.push_back(static_cast<uint32_t>(b));
  p->stats_.pool_bytes = o.memory;
  p->stats_.block_bytes = o.block;
  p->stats_.blocks_total = nblocks;
  p->stats_.blocks_free = nblocks;
  GOBLIN_LOG_INFO(kLog, "head pool: {} in {} blocks of {}, {}, node {}, {}", FormatSize(o.memory),
                  nblocks, FormatSize(o.block), BackingName(backing),
                  o.numa_node >= 0 ? std::to_string(o.numa_node) : std::string("any"),
                  p->locked_ ? "locked" : "not locked");
  return p;
}

HeadPool::~HeadPool() {
  if (base_ != nullptr) munmap(base_, size_);
}

uint16_t HeadPool::ClassFor(uint64_t length) const {
  auto it = std::lower_bound(class_size_.begin(), class_size_.end(), length);
  return static_cast<uint16_t>(it - class_size_.begin());
}

void HeadPool::LinkPartial(uint32_t b) {
  Block& blk = blocks_[b];
  uint16_t cls = static_cast<uint16_t>(blk.cls - 1);
  blk.prev = kNone;
  blk.next = partial_head_[cls];
  if (blk.next != kNone) blocks_[blk.next].prev = b;
  partial_head_[cls] = b;
}

void HeadPool::UnlinkPartial(uint32_t b) {
  Block& blk = blocks_[b];
  uint16_t cls = static_cast<uint16_t>(blk.cls - 1);
  if (blk.prev != kNone) {
    blocks_[blk.prev].next = blk.next;
  } else {
    partial_head_[cls] = blk.next;
  }
  if (blk.next != kNone) blocks_[blk.next].prev = blk.prev;
  blk.prev = blk.next = kNone;
}

std::optional<PoolSlot> HeadPool::Allocate(uint64_t length) {
  if (length == 0 || length > block_) {
    ++stats_.allocation_failures;
    return std::nullopt;
  }
  uint16_t cls = ClassFor(length);
  uint32_t csize = class_size_[cls];
  uint32_t per_block = static_cast<uint32_t>(block_ / csize);
  uint32_t b = partial_head_[cls];
  if (b == kNone) {
    if (free_blocks_.empty()) {
      ++stats_.allocation_failures;
      return std::nullopt;
    }
    b = free_blocks_.back();
    free_blocks_.pop_back();
    blocks_[b] = Block{.cls = static_cast<uint16_t>(cls + 1)};
    LinkPartial(b);
    --stats_.blocks_free;
    stats_.bytes_in_class_blocks += block_;
  }
  Block& blk = blocks_[b];
  uint32_t index;
  if (blk.free_head != kNone) {
    index = blk.free_head;
    std::memcpy(&blk.free_head, base_ + b * block_ + static_cast<uint64_t>(index) * csize, 4);
  } else {
    index = blk.carved++;
  }
  ++blk.live;
  if (blk.free_head == kNone && blk.carved == per_block) UnlinkPartial(b);  // now full
  ++stats_.slots_used;
  stats_.bytes_requested += length;
  stats_.bytes_reserved += csize;
  return PoolSlot{b * block_ + static_cast<uint64_t>(index) * csize, csize, cls};
}

void HeadPool::Free(const PoolSlot& slot, uint64_t length) {
  uint32_t b = static_cast<uint32_t>(slot.offset / block_);
  Block& blk = blocks_[b];
  uint32_t csize = class_size_[slot.size_class];
  uint32_t per_block = static_cast<uint32_t>(block_ / csize);
  bool was_full = blk.free_head == kNone && blk.carved == per_block;
  uint32_t index = static_cast<uint32_t>((slot.offset - b * block_) / csize);
  // (A block whose last slot this is starts afresh below: no link to keep. A stable slot's
  // bytes must not be written at all: a socket may still be sending them.)
  if (blk.live > 1) std::memcpy(base_ + slot.offset, &blk.free_head, 4);
  blk.free_head = index;
  --blk.live;
  --stats_.slots_used;
  stats_.bytes_requested -= length;
  stats_.bytes_reserved -= csize;
  if (was_full) LinkPartial(b);
  if (blk.live == 0) {
    UnlinkPartial(b);
    if (stable_ && csize * 2 > block_) {
      // Readers' sockets may still reference these pages (Stable): they keep them, the
      // block gets new ones. (Best effort: a failure leaves the pages in place and is
      // logged once; PUNCH_HOLE on shmem fails only for a bad range.)
      if (fallocate(fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    static_cast<off_t>(uint64_t{b} * block_), static_cast<off_t>(block_)) != 0) {
        GOBLIN_LOG_ERROR(kLog, "head pool: punching block {} out: {}", b,
                         ErrnoStatus("fallocate", errno).message());
        stable_ = false;  // never again claim what we cannot keep
      }
      ++stats_.blocks_punched;
    }
    blk = Block{};
    free_blocks_.push_back(b);
    ++stats_.blocks_free;
    stats_.bytes_in_class_blocks -= block_;
  }
}

Result<std::vector<std::pair<int, uint64_t>>> HeadPool::PageNodes() const {
  std::vector<void*> pages;
  for (uint64_t off = 0; off < size_; off += block_) pages.push_back(base_ + off);
  std::vector<int> status(pages.size(), -1);
  long rc = syscall(SYS_move_pages, 0, pages.size(), pages.data(), nullptr, status.data(), 0);
  if (rc != 0) return ErrnoErr("move_pages(query)", errno);
  std::map<int, uint64_t> count;
  for (int s : status) ++count[s];
  return std::vector<std::pair<int, uint64_t>>(count.begin(), count.end());
}

}  // namespace goblin::store
