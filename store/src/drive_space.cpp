#include "goblin/store/drive_space.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <bit>

#include "goblin/common/units.h"

namespace goblin::store {

Result<std::unique_ptr<DriveSpace>> DriveSpace::Open(TierDir dir, uint16_t tier_no,
                                                     uint16_t drive_no, const TierOptions& o) {
  if (o.extent_bytes == 0 || o.extent_bytes % kDirectAlignment != 0) {
    return Err(StatusCode::kInvalidArgument, "extent size {} is not a multiple of 4K",
               o.extent_bytes);
  }
  if (o.file_bytes < o.extent_bytes || o.file_bytes % o.extent_bytes != 0) {
    return Err(StatusCode::kInvalidArgument,
               "tier file size {} is not a multiple of the extent size {}",
               FormatSize(o.file_bytes), FormatSize(o.extent_bytes));
  }
  std::unique_ptr<DriveSpace> t(new DriveSpace(std::move(dir)));
  t->tier_no_ = tier_no;
  t->drive_no_ = drive_no;
  t->options_ = o;
  t->slots_per_file_ = static_cast<uint32_t>(o.file_bytes / o.extent_bytes);
  t->pages_per_slot_ = o.extent_bytes / kDirectAlignment;
  t->buckets_.resize(std::bit_width(t->pages_per_slot_));
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
    const uint32_t share = std::max<uint32_t>(o.free_space_share, 1);
    uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    capacity = uint64_t{existing} * o.file_bytes + free_bytes / 100 * 95 / share;
    t->nominal_bytes_ = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize / 100 * 95 / share /
                        o.file_bytes * o.file_bytes;
  } else if (capacity < o.file_bytes) {
    return Err(StatusCode::kInvalidArgument, "tier {}: capacity {} is less than one {} file",
               t->dir_.path(), FormatSize(capacity), FormatSize(o.file_bytes));
  } else {
    t->nominal_bytes_ = capacity / o.file_bytes * o.file_bytes;
  }
  // Extent files are numbered 0..65535 per drive (kMaxDriveFiles: the journal's extent
  // encoding keeps the drive number above them).
  t->max_files_ = static_cast<uint32_t>(std::clamp<uint64_t>(
      capacity / o.file_bytes, 1, std::min<uint64_t>(o.max_files, kMaxDriveFiles)));
  for (uint32_t f = 0; f < existing; ++f) GOBLIN_RETURN_IF_ERROR(t->AddFile(/*reopen=*/true));
  return t;
}

VoidResult DriveSpace::AddFile(bool reopen) {
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
  packed_.resize(used_.size());
  for (uint64_t s = first + slots_per_file_; s-- > first;) free_.push_back(s);
  ++stats_.files;
  stats_.slots_total += slots_per_file_;
  return {};
}

uint64_t DriveSpace::SlotOf(const Extent& e) const {
  return static_cast<uint64_t>(e.file) * slots_per_file_ + e.offset / options_.extent_bytes;
}

Result<uint64_t> DriveSpace::TakeSlot() {
  if (free_dirty_) RebuildFree();
  if (free_.empty()) GOBLIN_RETURN_IF_ERROR(AddFile());
  uint64_t slot = free_.back();
  free_.pop_back();
  used_[slot] = 1;
  ++stats_.slots_used;
  return slot;
}

void DriveSpace::GiveSlot(uint64_t slot) {
  used_[slot] = 0;
  if (!free_dirty_) free_.push_back(slot);
  --stats_.slots_used;
}

namespace {

bool PageUsed(const std::vector<uint64_t>& pages, uint32_t i) {
  return (pages[i / 64] >> (i % 64)) & 1;
}

// The first run of `n` free pages (UINT32_MAX: none), and the longest free run.
std::pair<uint32_t, uint32_t> ScanPages(const std::vector<uint64_t>& pages, uint32_t count,
                                        uint32_t n) {
  uint32_t first = UINT32_MAX, longest = 0, run = 0;
  for (uint32_t i = 0; i < count; ++i) {
    if (PageUsed(pages, i)) {
      run = 0;
      continue;
    }
    if (++run > longest) longest = run;
    if (run == n && first == UINT32_MAX) first = i + 1 - n;
  }
  return {first, longest};
}

void SetPages(std::vector<uint64_t>& pages, uint32_t from, uint32_t n, bool used) {
  for (uint32_t i = from; i < from + n; ++i) {
    if (used) {
      pages[i / 64] |= uint64_t{1} << (i % 64);
    } else {
      pages[i / 64] &= ~(uint64_t{1} << (i % 64));
    }
  }
}

}  // namespace

DriveSpace::Packed& DriveSpace::MakePacked(uint64_t slot) {
  packed_[slot] = std::make_unique<Packed>();
  Packed& p = *packed_[slot];
  p.pages.assign((pages_per_slot_ + 63) / 64, 0);
  ++stats_.packed_slots;
  return p;
}

void DriveSpace::Unbucket(Packed& p) {
  if (p.bucket < 0) return;
  std::vector<uint64_t>& list = buckets_[static_cast<size_t>(p.bucket)];
  const uint64_t last = list.back();
  list[p.bucket_at] = last;
  packed_[last]->bucket_at = p.bucket_at;
  list.pop_back();
  p.bucket = -1;
  p.bucket_at = SIZE_MAX;
}

void DriveSpace::Rebucket(uint64_t slot, Packed& p) {
  p.largest = ScanPages(p.pages, pages_per_slot_, pages_per_slot_ + 1).second;
  const int want = p.largest == 0 ? -1 : std::bit_width(p.largest) - 1;
  if (want == p.bucket) return;
  Unbucket(p);
  if (want < 0 || buckets_dirty_) return;
  p.bucket = want;
  p.bucket_at = buckets_[static_cast<size_t>(want)].size();
  buckets_[static_cast<size_t>(want)].push_back(slot);
}

void DriveSpace::RebuildBuckets() {
  buckets_dirty_ = false;
  for (auto& b : buckets_) b.clear();
  for (uint64_t s = 0; s < packed_.size(); ++s) {
    if (!packed_[s]) continue;
    packed_[s]->bucket = -1;
    packed_[s]->bucket_at = SIZE_MAX;
    Rebucket(s, *packed_[s]);
  }
}

Result<Extent> DriveSpace::AllocatePacked(uint64_t length) {
  if (buckets_dirty_) RebuildBuckets();
  const uint32_t n = PagesOf(length);
  // A slot whose longest free run surely holds n pages (bucket >= ceil(log2 n)), else one
  // in the bucket below whose run happens to, else a new slot.
  uint64_t slot = UINT64_MAX;
  const int sure = std::bit_width(n - 1);  // ceil(log2 n)
  for (size_t b = static_cast<size_t>(sure); b < buckets_.size() && slot == UINT64_MAX; ++b) {
    if (!buckets_[b].empty()) slot = buckets_[b].back();
  }
  if (slot == UINT64_MAX && sure > 0) {
    const auto& below = buckets_[static_cast<size_t>(sure - 1)];
    for (size_t i = below.size(); i-- > 0 && below.size() - i <= 4;) {
      if (packed_[below[i]]->largest >= n) {
        slot = below[i];
        break;
      }
    }
  }
  if (slot == UINT64_MAX) {
    GOBLIN_ASSIGN_OR_RETURN(slot, TakeSlot());
    MakePacked(slot);
  }
  Packed& p = *packed_[slot];
  const uint32_t first = ScanPages(p.pages, pages_per_slot_, n).first;
  if (first == UINT32_MAX) return Err(StatusCode::kInternal, "packed slot {} lost its room", slot);
  SetPages(p.pages, first, n, true);
  p.used += n;
  Rebucket(slot, p);
  ++stats_.packed_extents;
  stats_.allocated_bytes += uint64_t{n} * kDirectAlignment;
  Extent e;
  e.tier = tier_no_;
  e.drive = drive_no_;
  e.file = static_cast<uint32_t>(slot / slots_per_file_);
  e.offset = (slot % slots_per_file_) * options_.extent_bytes + uint64_t{first} * kDirectAlignment;
  e.length = length;
  return e;
}

Result<Extent> DriveSpace::AllocateOne(uint64_t length) {
  if (IsPacked(length)) return AllocatePacked(length);
  GOBLIN_ASSIGN_OR_RETURN(uint64_t slot, TakeSlot());
  Extent whole;
  whole.tier = tier_no_;
  whole.drive = drive_no_;
  whole.file = static_cast<uint32_t>(slot / slots_per_file_);
  whole.offset = (slot % slots_per_file_) * options_.extent_bytes;
  whole.length = length;
  stats_.allocated_bytes += options_.extent_bytes;
  return whole;
}

void DriveSpace::Free(const Extent& e) {
  uint64_t s = SlotOf(e);
  if (s >= used_.size() || !used_[s]) return;  // never double-count
  const uint64_t within = e.offset % options_.extent_bytes;
  if (Packed* p = packed_[s].get()) {
    const uint32_t n = PagesOf(e.length);
    const uint32_t first = static_cast<uint32_t>(within / kDirectAlignment);
    if (!IsPacked(e.length) || within % kDirectAlignment != 0 || first + n > pages_per_slot_) {
      return;  // not an extent of this slot
    }
    for (uint32_t i = first; i < first + n; ++i) {
      if (!PageUsed(p->pages, i)) return;  // never double-count
    }
    SetPages(p->pages, first, n, false);
    p->used -= n;
    --stats_.packed_extents;
    stats_.allocated_bytes -= uint64_t{n} * kDirectAlignment;
    if (p->used > 0) {
      Rebucket(s, *p);
      return;
    }
    Unbucket(*p);
    packed_[s].reset();
    --stats_.packed_slots;
    GiveSlot(s);
    return;
  }
  if (within != 0) return;
  stats_.allocated_bytes -= options_.extent_bytes;
  GiveSlot(s);
}

bool DriveSpace::MarkUsed(const Extent& e) {
  if (e.tier != tier_no_ || e.drive != drive_no_ || e.file >= files_.size() ||
      e.offset >= options_.file_bytes || e.length > options_.extent_bytes) {
    return false;
  }
  const uint64_t s = SlotOf(e);
  const uint64_t within = e.offset % options_.extent_bytes;
  if (!IsPacked(e.length)) {
    if (within != 0 || used_[s]) return false;
    used_[s] = 1;
    ++stats_.slots_used;
    stats_.allocated_bytes += options_.extent_bytes;
    free_dirty_ = true;  // the free stack is rebuilt once, at the next allocation
    return true;
  }
  // A packed extent (or, from an older store, a short extent alone at the start of its
  // slot: the slot becomes a packed one others share).
  const uint32_t n = PagesOf(e.length);
  const uint32_t first = static_cast<uint32_t>(within / kDirectAlignment);
  if (within % kDirectAlignment != 0 || first + n > pages_per_slot_) return false;
  Packed* p = packed_[s].get();
  if (p == nullptr) {
    if (used_[s]) return false;  // a whole extent's slot
    used_[s] = 1;
    ++stats_.slots_used;
    free_dirty_ = true;
    p = &MakePacked(s);
  }
  for (uint32_t i = first; i < first + n; ++i) {
    if (PageUsed(p->pages, i)) return false;  // overlaps another extent
  }
  SetPages(p->pages, first, n, true);
  p->used += n;
  ++stats_.packed_extents;
  stats_.allocated_bytes += uint64_t{n} * kDirectAlignment;
  buckets_dirty_ = true;  // rebuilt once, at the next packed allocation
  return true;
}

void DriveSpace::RebuildFree() {
  free_.clear();
  for (uint64_t s = used_.size(); s-- > 0;) {
    if (!used_[s]) free_.push_back(s);
  }
  free_dirty_ = false;
}

int DriveSpace::FileFd(uint32_t file) const {
  return file < files_.size() ? files_[file].fd() : -1;
}

}  // namespace goblin::store
