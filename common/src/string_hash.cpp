#include "goblin/common/string_hash.h"

#include <xxhash.h>

namespace goblin {

KeyHash128 HashKey128(std::string_view k) {
  const XXH128_hash_t h = XXH3_128bits(k.data(), k.size());
  return {h.high64, h.low64};
}

}  // namespace goblin
