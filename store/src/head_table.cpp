#include "goblin/store/head_table.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>

#include "goblin/common/topology.h"

namespace goblin::store {

Result<std::unique_ptr<HeadTable>> HeadTable::Create(uint32_t entries, int numa_node, bool strict) {
  if (entries == 0 || entries == sbe::kNoHeadEntry) {
    return Err(StatusCode::kInvalidArgument, "a head table of {} entries", entries);
  }
  std::unique_ptr<HeadTable> t(new HeadTable());
  uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  t->capacity_ = entries;
  t->bytes_ = (uint64_t{entries} * sizeof(sbe::HeadTableEntry) + page - 1) / page * page;
  t->fd_ = UniqueFd(memfd_create("goblin-head-table", MFD_CLOEXEC));
  if (!t->fd_) return Err(ErrnoStatus("memfd_create(head table)", errno));
  if (ftruncate(t->fd_.get(), static_cast<off_t>(t->bytes_)) != 0) {
    return Err(ErrnoStatus("ftruncate(head table)", errno));
  }
  void* a = mmap(nullptr, t->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, t->fd_.get(), 0);
  if (a == MAP_FAILED) return Err(ErrnoStatus("mmap(head table)", errno));
  t->base_ = static_cast<uint8_t*>(a);  // zero-filled: every entry free
  // On the pool's node, bound before the first touch; then every page populated.
  if (auto r = BindMemoryToNode(t->base_, t->bytes_, numa_node, strict); !r) {
    return Err(r.error().WithContext("head table"));
  }
  if (madvise(t->base_, t->bytes_, MADV_POPULATE_WRITE) != 0) {
    for (uint64_t off = 0; off < t->bytes_; off += page) t->base_[off] = 0;  // older kernels
  }
  t->touch_bytes_ = (uint64_t{entries} + page - 1) / page * page;
  t->touch_fd_ = UniqueFd(memfd_create("goblin-touch-table", MFD_CLOEXEC));
  if (!t->touch_fd_) return Err(ErrnoStatus("memfd_create(touch table)", errno));
  if (ftruncate(t->touch_fd_.get(), static_cast<off_t>(t->touch_bytes_)) != 0) {
    return Err(ErrnoStatus("ftruncate(touch table)", errno));
  }
  a = mmap(nullptr, t->touch_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, t->touch_fd_.get(), 0);
  if (a == MAP_FAILED) return Err(ErrnoStatus("mmap(touch table)", errno));
  t->touch_ = static_cast<uint8_t*>(a);
  if (auto r = BindMemoryToNode(t->touch_, t->touch_bytes_, numa_node, strict); !r) {
    return Err(r.error().WithContext("touch table"));
  }
  t->free_.reserve(entries);
  for (uint32_t i = entries; i-- > 0;) t->free_.push_back(i);
  return t;
}

HeadTable::~HeadTable() {
  if (base_ != nullptr) munmap(base_, bytes_);
  if (touch_ != nullptr) munmap(touch_, touch_bytes_);
}

std::optional<uint32_t> HeadTable::Publish(const sbe::HeadTableEntry& entry) {
  if (free_.empty()) {
    ++publish_failures_;
    return std::nullopt;
  }
  uint32_t i = free_.back();
  free_.pop_back();
  sbe::HeadTableEntry& e = entries()[i];
  e.offset = entry.offset;
  e.length = entry.length;
  e.checksum = entry.checksum;
  std::atomic_ref<uint8_t>(touch_[i]).store(0, std::memory_order_relaxed);
  // A local reader that sees the stamp sees the fields (remote readers compare all four).
  std::atomic_ref<uint64_t>(e.stamp).store(next_stamp_++, std::memory_order_release);
  return i;
}

void HeadTable::Withdraw(uint32_t index) {
  if (index >= capacity_) return;
  sbe::HeadTableEntry& e = entries()[index];
  // Before the slot is freed: the fence keeps every later write (the slot's next contents,
  // the entry's next publication) behind this store, for readers that check the stamp last.
  std::atomic_ref<uint64_t>(e.stamp).store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  e.offset = e.length = e.checksum = 0;
  free_.push_back(index);
}

sbe::HeadTableEntry HeadTable::Read(uint32_t index) const {
  if (index >= capacity_) return {};
  return entries()[index];
}

}  // namespace goblin::store
