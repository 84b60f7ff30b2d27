// Which core shard owns a key. goblin-core runs N shared-nothing shards (one loop thread
// each, its own part of the index, journal and head pool); a key belongs to exactly one of
// them, and every party (the core, libgoblin, the gateway) computes it with this function,
// so a request goes straight to its shard's connection. Part of the wire contract: changing
// it moves keys between shards (the core refuses a tier laid out for another shard count).
// Threading: pure function.
#pragma once

#include <cstdint>
#include <string_view>

namespace goblin {

// XXH3-64 (seed 0) of the key up to its first NUL byte (all of it without one), reduced to
// [0, shard_count) by multiply-shift. Keys that share the part before a NUL share a shard,
// as Redis Cluster's {hash tags}: an HTTP object's variants ("URL\0#header=value") are on
// their URL's shard, which bounds their number (the core's --max-variants).
uint16_t ShardOf(std::string_view key, uint16_t shard_count);

}  // namespace goblin
