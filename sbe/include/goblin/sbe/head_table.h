// The head table's wire layout: descriptors of the heads resident in goblin-core's head
// pool, in memory that readers map read-only (ring plane) or read with one-sided gets (UCX
// plane: an RDMA READ on verbs), so a client reads a head without the core's loop.
//
// Entry i is 32 bytes at offset 32 * i, little-endian, written only by the core's loop:
// publishing writes offset, length and checksum, then the generation (release); withdrawing
// the head (evicted, demoted, replaced, deleted) sets the generation to 0 before its pool
// slot can be reused. Generations are the object's commit generation, unique per version,
// so an entry reused for another head never matches an older descriptor.
//
// Read protocol (HeadReadIsCurrent): read the entry, then the head bytes, then the entry
// again (each read completing before the next is issued). The bytes are the described head
// iff both entry reads equal the descriptor and the bytes' XXH3-64 equals its checksum: the
// generation catches a slot freed or reused between the reads, the checksum a torn read.
// Anything else is stale: ask for a new descriptor, or read two-sided (ObjectGet).
// Threading: plain data; the functions are pure.
#pragma once

#include <cstdint>

namespace goblin::sbe {

struct HeadTableEntry {
  uint64_t generation = 0;  // 0: free (no head described here)
  uint64_t offset = 0;      // of the head in the head pool
  uint64_t length = 0;      // head bytes (object bytes [0, length))
  uint64_t checksum = 0;    // XXH3-64 of those bytes
  friend bool operator==(const HeadTableEntry&, const HeadTableEntry&) = default;
};
static_assert(sizeof(HeadTableEntry) == 32);

inline constexpr uint32_t kNoHeadEntry = UINT32_MAX;

// `described`: the entry as the core described it (HeadDescriptor); `before`/`after`: the
// entry as read around the bytes; `bytes_checksum`: XXH3-64 of the bytes read.
constexpr bool HeadReadIsCurrent(const HeadTableEntry& described, const HeadTableEntry& before,
                                 const HeadTableEntry& after, uint64_t bytes_checksum) {
  return described.generation != 0 && before == described && after == described &&
         bytes_checksum == described.checksum;
}

}  // namespace goblin::sbe
