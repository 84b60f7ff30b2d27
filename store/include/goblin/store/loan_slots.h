// LoanSlots: the store's loan ids and what each one holds (the VersionLoans slot of its
// object version), an IdSlab (goblin/common/id_slab.h): finding, adding and removing an id
// is an index into a vector, with no hashing per get, and a released, repeated or made-up id
// finds nothing.
// Threading: the owning store's loop thread only.
#pragma once

#include <cstdint>

#include "goblin/common/id_slab.h"

namespace goblin::store {

using LoanSlots = IdSlab<uint64_t>;

}  // namespace goblin::store
