#include "tier_drives.h"

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <set>

#include "goblin/common/log.h"

namespace goblin::store {
namespace {

constexpr std::string_view kLog = "store";

struct Candidate {
  std::string path;
  std::optional<TierDir> dir;  // empty: could not be opened (error says why)
  Status error;
  std::optional<DriveLabel> label;
  bool has_index = false;
};

bool HoldsIndex(const std::string& dir) {
  return access((dir + "/index.journal").c_str(), F_OK) == 0 ||
         access((dir + "/index.checkpoint").c_str(), F_OK) == 0;
}

}  // namespace

Result<OpenedTiers> OpenTiersAndIndex(const std::vector<std::vector<std::string>>& tier_dirs,
                                      const std::vector<uint64_t>& tier_capacity,
                                      const TierOptions& options) {
  std::vector<std::vector<Candidate>> tiers(tier_dirs.size());
  for (size_t t = 0; t < tier_dirs.size(); ++t) {
    if (tier_dirs[t].empty()) return Err(StatusCode::kInvalidArgument, "tier {} has no drive", t);
    if (tier_dirs[t].size() > kMaxTierDrives) {
      return Err(StatusCode::kInvalidArgument, "tier {} lists {} drives; at most {}", t,
                 tier_dirs[t].size(), kMaxTierDrives);
    }
    for (const std::string& path : tier_dirs[t]) {
      Candidate c;
      c.path = path;
      auto d = TierDir::Open(path);
      if (!d) {
        if (d.error().code() == StatusCode::kUnavailable) return Err(d.error());
        c.error = d.error();
        tiers[t].push_back(std::move(c));
        continue;
      }
      c.dir = std::move(*d);
      auto label = ReadDriveLabel(path);
      if (label) {
        c.label = *label;
      } else {
        GOBLIN_LOG_WARN(kLog, "drive {}: {}; numbering it anew", path, label.error().ToString());
      }
      c.has_index = HoldsIndex(path);
      tiers[t].push_back(std::move(c));
    }
  }

  // The index: on the tier-0 drive that holds one; on a new store, the first listed.
  Candidate* index_drive = nullptr;
  for (Candidate& c : tiers[0]) {
    if (!c.dir || !c.has_index) continue;
    if (index_drive != nullptr) {
      return Err(StatusCode::kFailedPrecondition,
                 "{} and {} both hold a store index: they are drives of two different stores; "
                 "list the drives of one",
                 index_drive->path, c.path);
    }
    index_drive = &c;
  }
  if (index_drive == nullptr) {
    for (Candidate& c : tiers[0]) {
      if (c.dir) {
        index_drive = &c;
        break;
      }
    }
  }
  if (index_drive == nullptr) return Err(tiers[0].front().error);
  OpenedTiers out;
  out.index_dir = index_drive->path;
  GOBLIN_ASSIGN_OR_RETURN(out.index, Index::Open(out.index_dir));
  const std::string store_id = index_drive->dir->identity().IdString();

  // Has a store run on these drives before? Then a drive that cannot be opened is a lost
  // drive, reported, and the cache goes on with the others.
  bool known = out.index->size() > 0, ours = false;
  for (const auto& tier : tiers) {
    for (const Candidate& c : tier) {
      known |= c.label.has_value();
      ours |= c.label && c.label->store_id == store_id;
    }
  }
  if (known && !ours && out.index->size() == 0) {
    GOBLIN_LOG_ERROR(kLog,
                     "no drive of tier 0 holds this store's index (the drive that did is gone): "
                     "starting empty on {}",
                     out.index_dir);
  }
  for (const auto& tier : tiers) {
    for (const Candidate& c : tier) {
      if (!c.dir && !known) return Err(c.error);
    }
  }
  // Drive numbers the index refers to, per tier.
  std::vector<std::set<uint16_t>> referenced(tiers.size());
  out.index->ForEach([&](const ObjectRecord& r) {
    for (const Extent& e : r.extents) {
      if (e.tier < referenced.size()) referenced[e.tier].insert(e.drive);
    }
  });

  for (size_t t = 0; t < tiers.size(); ++t) {
    std::vector<Candidate>& cands = tiers[t];
    // Labelled drives keep their numbers; the index drive is numbered first, so a new
    // store's index is on drive 0.
    if (t == 0) {
      std::stable_partition(cands.begin(), cands.end(),
                            [&](const Candidate& c) { return c.path == out.index_dir; });
    }
    std::set<uint16_t> taken;
    std::vector<TierSpace::Drive> drives;
    std::vector<Candidate*> unnumbered;
    for (Candidate& c : cands) {
      if (!c.dir) continue;
      const bool ours = c.label && c.label->store_id == store_id && c.label->tier == t;
      if (!ours) {
        if (c.label) {
          GOBLIN_LOG_WARN(kLog,
                          "drive {} was drive {} of tier {} of store {}; it joins tier {} of "
                          "this store as a new drive (what it held is not reused)",
                          c.path, c.label->number, c.label->tier, c.label->store_id, t);
        }
        unnumbered.push_back(&c);
        continue;
      }
      if (!taken.insert(c.label->number).second) {
        return Err(StatusCode::kFailedPrecondition,
                   "two drives of tier {} are both labelled drive {} (one is {}): re-prepare "
                   "one of them in an empty directory",
                   t, c.label->number, c.path);
      }
      drives.push_back({c.label->number, std::move(*c.dir)});
    }
    uint16_t next = 0;
    for (Candidate* c : unnumbered) {
      while (taken.count(next) || referenced[t].count(next)) ++next;
      GOBLIN_RETURN_IF_ERROR_CTX(
          WriteDriveLabel(c->path, {store_id, static_cast<uint16_t>(t), next}),
          fmt::format("labelling drive {}", c->path));
      taken.insert(next);
      drives.push_back({next, std::move(*c->dir)});
    }
    if (drives.empty()) {
      return Err(StatusCode::kFailedPrecondition, "tier {} has no usable drive: {}", t,
                 cands.front().error.ToString());
    }
    // Lost: numbers the index refers to with no drive; configured directories that failed.
    std::vector<LostDrive> lost;
    for (uint16_t n : referenced[t]) {
      if (!taken.count(n)) lost.push_back({"", n, "", 0});
    }
    size_t next_lost = 0;
    for (const Candidate& c : cands) {
      if (c.dir) continue;
      if (next_lost < lost.size()) {  // (which failed directory was which number is unknown)
        lost[next_lost].dir = c.path;
        lost[next_lost++].error = c.error.ToString();
      } else {
        lost.push_back({c.path, -1, c.error.ToString(), 0});
      }
    }
    TierOptions to = options;
    if (t < tier_capacity.size()) to.capacity_bytes = tier_capacity[t];
    GOBLIN_ASSIGN_OR_RETURN(auto space,
                            TierSpace::Open(std::move(drives), static_cast<uint16_t>(t), to));
    space->lost() = std::move(lost);
    out.tiers.push_back(std::move(space));
  }
  return out;
}

}  // namespace goblin::store
