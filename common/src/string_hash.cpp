#include "goblin/common/string_hash.h"

// Inlined here, not called through libxxhash.so: a key of a few dozen bytes hashes in a few
// ns, less than the PLT call and the library's dispatch cost (the same XXH3, stable since
// xxHash 0.8.0: digests the index keeps on disk do not change).
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace goblin {

KeyHash128 HashKey128(std::string_view k) {
  const XXH128_hash_t h = XXH3_128bits(k.data(), k.size());
  return {h.high64, h.low64};
}

}  // namespace goblin
