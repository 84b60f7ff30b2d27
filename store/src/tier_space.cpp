#include "goblin/store/tier_space.h"

#include <sys/stat.h>

#include <algorithm>
#include <map>

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
                                                   const TierOptions& options) {
  std::vector<Drive> one;
  one.push_back({0, std::move(dir)});
  return Open(std::move(one), tier_no, options);
}

Result<std::unique_ptr<TierSpace>> TierSpace::Open(std::vector<Drive> drives, uint16_t tier_no,
                                                   const TierOptions& options) {
  if (drives.empty()) return Err(StatusCode::kInvalidArgument, "tier {} has no drive", tier_no);
  if (drives.size() > kMaxTierDrives) {
    return Err(StatusCode::kInvalidArgument, "tier {} has {} drives; at most {}", tier_no,
               drives.size(), kMaxTierDrives);
  }
  std::sort(drives.begin(), drives.end(),
            [](const Drive& a, const Drive& b) { return a.number < b.number; });
  // Drives on one file system share its free space (each takes its part, as shards do).
  std::map<dev_t, uint32_t> per_fs;
  std::vector<dev_t> dev(drives.size(), 0);
  for (size_t i = 0; i < drives.size(); ++i) {
    if (i > 0 && drives[i].number == drives[i - 1].number) {
      return Err(StatusCode::kFailedPrecondition, "{} and {} are both drive {} of tier {}",
                 drives[i - 1].dir.path(), drives[i].dir.path(), drives[i].number, tier_no);
    }
    struct stat st {};
    if (stat(drives[i].dir.path().c_str(), &st) != 0)
      return ErrnoErr(fmt::format("stat({})", drives[i].dir.path()), errno);
    dev[i] = st.st_dev;
    ++per_fs[st.st_dev];
  }
  std::unique_ptr<TierSpace> t(new TierSpace());
  t->tier_no_ = tier_no;
  t->options_ = options;
  for (size_t i = 0; i < drives.size(); ++i) {
    TierOptions o = options;
    if (o.capacity_bytes > 0) {
      o.capacity_bytes = options.capacity_bytes / drives.size();
    } else {
      o.free_space_share = std::max<uint32_t>(options.free_space_share, 1) * per_fs[dev[i]];
    }
    const uint16_t number = drives[i].number;
    GOBLIN_ASSIGN_OR_RETURN(auto d, DriveSpace::Open(std::move(drives[i].dir), tier_no, number, o));
    if (t->by_number_.size() <= number) t->by_number_.resize(number + 1u, nullptr);
    t->by_number_[number] = d.get();
    t->path_ += (t->path_.empty() ? "" : ",") + d->dir().path();
    t->drives_.push_back(std::move(d));
  }
  return t;
}

TierStats TierSpace::stats() const {
  TierStats s;
  for (const auto& d : drives_) {
    const TierStats& x = d->stats();
    s.files += x.files;
    s.slots_total += x.slots_total;
    s.slots_used += x.slots_used;
    s.packed_slots += x.packed_slots;
    s.packed_extents += x.packed_extents;
    s.allocated_bytes += x.allocated_bytes;
    s.allocation_failures += x.allocation_failures;
    s.reads += x.reads;
    s.writes += x.writes;
    s.read_bytes += x.read_bytes;
    s.write_bytes += x.write_bytes;
    s.io_errors += x.io_errors;
  }
  return s;
}

const std::string& TierSpace::DrivePath(const Extent& e) const {
  DriveSpace* d = drive(e.drive);
  return d ? d->dir().path() : path_;
}

uint64_t TierSpace::capacity_bytes() const {
  return SumOverDrives([](const DriveSpace& d) { return d.capacity_bytes(); });
}

uint64_t TierSpace::used_bytes() const {
  return SumOverDrives([](const DriveSpace& d) { return d.used_bytes(); });
}

uint64_t TierSpace::nominal_bytes() const {
  return SumOverDrives([](const DriveSpace& d) { return d.nominal_bytes(); });
}

uint64_t TierSpace::capacity_slots() const {
  return SumOverDrives([](const DriveSpace& d) { return d.capacity_slots(); });
}

bool TierSpace::at_capacity() const {
  return std::all_of(drives_.begin(), drives_.end(),
                     [](const auto& d) { return d->at_capacity(); });
}

Result<Extent> TierSpace::AllocateOne(uint64_t length) {
  // The next drive in turn; one that is full (or whose file system is) passes its turn.
  Status first_error;
  for (size_t tried = 0; tried < drives_.size(); ++tried) {
    DriveSpace& d = *drives_[next_];
    next_ = (next_ + 1) % drives_.size();
    auto e = d.AllocateOne(length);
    if (e) return e;
    if (e.error().code() != StatusCode::kResourceExhausted) return Err(e.error());
    if (first_error.ok()) first_error = e.error();
  }
  drives_[next_]->NoteAllocationFailure();  // (one failure: no drive had room)
  return Err(StatusCode::kResourceExhausted, "disk tier {} ({}) has no room for {}: {}", tier_no_,
             path_, FormatSize(length), first_error.message());
}

Result<std::vector<Extent>> TierSpace::Allocate(uint64_t bytes) {
  std::vector<Extent> out;
  out.reserve(SlotsFor(bytes));
  for (uint64_t left = bytes; left > 0;) {
    const uint64_t len = std::min<uint64_t>(left, options_.extent_bytes);
    auto e = AllocateOne(len);
    if (!e) {
      for (const Extent& x : out) Free(x);  // (nothing kept)
      return Err(e.error());
    }
    out.push_back(*e);
    left -= len;
  }
  return out;
}

}  // namespace goblin::store
