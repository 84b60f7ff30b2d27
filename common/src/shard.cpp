#include "goblin/common/shard.h"

#define XXH_INLINE_ALL  // (as string_hash.cpp: the same XXH3, no library call)
#include <xxhash.h>

namespace goblin {

uint16_t ShardOf(std::string_view key, uint16_t shard_count) {
  if (shard_count <= 1) return 0;
  key = key.substr(0, key.find('\0'));
  const uint64_t h = XXH3_64bits(key.data(), key.size());
  return static_cast<uint16_t>((static_cast<unsigned __int128>(h) * shard_count) >> 64);
}

}  // namespace goblin
