// Opening a store's disk tiers: every configured drive directory of every tier, the index
// on the tier-0 drive that holds it, drive numbers from the drives' labels (new drives get
// one), and the drives that are gone. Internal to goblin_store (Store::Open).
// Threading: called once, at open.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "goblin/common/status.h"
#include "goblin/store/index.h"
#include "goblin/store/tier_space.h"

namespace goblin::store {

struct OpenedTiers {
  std::vector<std::unique_ptr<TierSpace>> tiers;  // lost drives listed in each tier's lost()
  std::unique_ptr<Index> index;
  std::string index_dir;
};

// `tier_dirs`: per tier, its drives' directories as configured. Errors: a drive in use by
// another goblin-core; two drives holding an index, or claiming one number; a tier left
// with no usable drive; any drive that cannot be opened when the store has never run
// before (a mistyped directory on the first start is a mistake to fix, not a lost drive).
Result<OpenedTiers> OpenTiersAndIndex(const std::vector<std::vector<std::string>>& tier_dirs,
                                      const std::vector<uint64_t>& tier_capacity,
                                      const TierOptions& options);

}  // namespace goblin::store
