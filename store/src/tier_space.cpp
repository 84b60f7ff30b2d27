#include "goblin/store/tier_space.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>

#include "goblin/common/units.h"

namespace goblin::store {

Placement Place(uint64_t size, uint64_t ram_head, uint64_t ssd_prefix, bool has_second_tier) {
  Placement p;
  p.head_bytes = std::min(size, ram_head);
  if (!has_second_tier) {
    p.tier0_bytes = size;
    return p;
  }
  // The first tier covers the head (stored whole) and the prefix behind it.
  uint64_t first = ram_head > UINT64_MAX - ssd_prefix ? UINT64_MAX : ram_head + ssd_prefix;
  p.tier0_bytes = std::min(size, first);
  p.tier1_bytes = size - p.tier0_bytes;
  return p;
}

Result<std::unique_ptr<TierSpace>> TierSpace::Open(TierDir dir, uint16_t tier_no,
                                                   const TierOptions& o) {
  if (o.extent_bytes == 0 || o.extent_bytes % kDirectAlignment != 0) {
    return Err(StatusCode::kInvalidArgument, "extent size {} is not a multiple of 4K",
               o.extent_bytes);
  }
  if (o.file_bytes < o.extent_bytes || o.file_bytes % o.extent_bytes != 0) {
    return Err(StatusCode::kInvalidArgument,
               "tier file size {} is not a multiple of the extent size {}",
               FormatSize(o.file_bytes), FormatSize(o.extent_bytes));
  }
  std::unique_ptr<TierSpace> t(new TierSpace(std::move(dir)));
  t->tier_no_ = tier_no;
  t->options_ = o;
  t->slots_per_file_ = static_cast<uint32_t>(o.file_bytes / o.extent_bytes);
  // Reopen the extent files that exist, in order; stop at the first gap. Files beyond a
  // (now smaller) capacity are kept: objects in them are still served.
  uint32_t existing = 0;
  for (;; ++existing) {
    std::string path = fmt::format("{}/extent-{:06}.dat", t->dir_.path(), existing);
    if (access(path.c_str(), F_OK) != 0) break;
  }
  uint64_t capacity = o.capacity_bytes;
  if (capacity == 0) {
    struct statvfs vfs {};
    if (statvfs(t->dir_.path().c_str(), &vfs) != 0)
      return ErrnoErr(fmt::format("statvfs({})", t->dir_.path()), errno);
    uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    capacity = uint64_t{existing} * o.file_bytes +
               free_bytes / 100 * 95 / std::max<uint32_t>(o.free_space_share, 1);
  } else if (capacity < o.file_bytes) {
    return Err(StatusCode::kInvalidArgument, "tier {}: capacity {} is less than one {} file",
               t->dir_.path(), FormatSize(capacity), FormatSize(o.file_bytes));
  }
  t->max_files_ =
      static_cast<uint32_t>(std::clamp<uint64_t>(capacity / o.file_bytes, 1, o.max_files));
  for (uint32_t f = 0; f < existing; ++f) GOBLIN_RETURN_IF_ERROR(t->AddFile(/*reopen=*/true));
  return t;
}

VoidResult TierSpace::AddFile(bool reopen) {
  uint32_t f = static_cast<uint32_t>(files_.size());
  if (f >= max_files_ && !reopen) {
    return Err(StatusCode::kResourceExhausted, "tier {} is full ({} files of {})", dir_.path(),
               max_files_, FormatSize(options_.file_bytes));
  }
  std::string path = fmt::format("{}/extent-{:06}.dat", dir_.path(), f);
  GOBLIN_ASSIGN_OR_RETURN(ExtentFile file,
                          ExtentFile::Open(path, options_.file_bytes, options_.allow_buffered));
  files_.push_back(std::move(file));
  uint64_t first = static_cast<uint64_t>(f) * slots_per_file_;
  used_.resize(first + slots_per_file_, 0);
  for (uint64_t s = first + slots_per_file_; s-- > first;) free_.push_back(s);
  ++stats_.files;
  stats_.slots_total += slots_per_file_;
  return {};
}

uint64_t TierSpace::SlotOf(const Extent& e) const {
  return static_cast<uint64_t>(e.file) * slots_per_file_ + e.offset / options_.extent_bytes;
}

Result<std::vector<Extent>> TierSpace::Allocate(uint64_t bytes) {
  if (free_dirty_) RebuildFree();
  uint64_t need = (bytes + options_.extent_bytes - 1) / options_.extent_bytes;
  while (free_.size() < need) {
    if (auto r = AddFile(); !r) {
      ++stats_.allocation_failures;
      return Err(r.error().code() == StatusCode::kResourceExhausted
                     ? Status(StatusCode::kResourceExhausted,
                              fmt::format("disk tier {} has no room for {}: {}", dir_.path(),
                                          FormatSize(bytes), r.error().message()))
                     : r.error());
    }
  }
  std::vector<Extent> out;
  out.reserve(need);
  uint64_t left = bytes;
  for (uint64_t i = 0; i < need; ++i) {
    uint64_t slot = free_.back();
    free_.pop_back();
    used_[slot] = 1;
    Extent e;
    e.tier = tier_no_;
    e.file = static_cast<uint32_t>(slot / slots_per_file_);
    e.offset = (slot % slots_per_file_) * options_.extent_bytes;
    e.length = std::min<uint64_t>(left, options_.extent_bytes);
    left -= e.length;
    out.push_back(e);
  }
  stats_.slots_used += need;
  return out;
}

void TierSpace::Free(const Extent& e) {
  uint64_t s = SlotOf(e);
  if (s >= used_.size() || !used_[s]) return;  // never double-count
  used_[s] = 0;
  if (!free_dirty_) free_.push_back(s);
  --stats_.slots_used;
}

bool TierSpace::MarkUsed(const Extent& e) {
  if (e.tier != tier_no_ || e.file >= files_.size() || e.offset % options_.extent_bytes != 0 ||
      e.offset >= options_.file_bytes || e.length > options_.extent_bytes) {
    return false;
  }
  uint64_t s = SlotOf(e);
  if (used_[s]) return false;
  used_[s] = 1;
  ++stats_.slots_used;
  free_dirty_ = true;  // the free stack is rebuilt once, at the next allocation
  return true;
}

void TierSpace::RebuildFree() {
  free_.clear();
  for (uint64_t s = used_.size(); s-- > 0;) {
    if (!used_[s]) free_.push_back(s);
  }
  free_dirty_ = false;
}

int TierSpace::FileFd(uint32_t file) const { return file < files_.size() ? files_[file].fd() : -1; }

}  // namespace goblin::store
