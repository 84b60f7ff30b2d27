// The head table's wire layout: descriptors of the heads resident in goblin-core's head
// pool, in memory that readers map read-only (ring plane) or read with one-sided gets (UCX
// plane: an RDMA READ on verbs), so a client reads a head without the core's loop.
//
// Entry i is 32 bytes at offset 32 * i, little-endian, written only by the core's loop:
// publishing writes offset, length and checksum, then the stamp (release); withdrawing the
// head (evicted, demoted, replaced, deleted) sets the stamp to 0, then a full fence, before
// its pool slot can be reused. A stamp is unique to one publication (a counter of the
// table's, never 0, never reused): a head withdrawn and published again, even the same
// version in the same slot of the same entry, gets a new stamp, so an old descriptor never
// matches an entry that was withdrawn in between (no ABA).
//
// Read protocol (HeadReadIsCurrent): read the entry, then the head bytes, then the entry
// again (each read completing before the next is issued). The bytes are the described head
// iff both entry reads equal the descriptor and the bytes' XXH3-64 equals its checksum: the
// stamp catches a slot freed or reused between the reads, the checksum a torn read by a
// reader whose reads are not ordered with the core's writes (one-sided RDMA). Anything else
// is stale: ask for a new descriptor, or read two-sided (ObjectGet).
// A reader in the same host whose reads are ordered (an acquire fence between the bytes and
// the second entry read; the kernel's copy of a socket write counts as reads done once the
// write returns or completes) may rely on the stamp alone: an unchanged stamp after the
// bytes means the slot was not withdrawn before they were read (goblin-gateway's local hits).
// Threading: plain data; the functions are pure.
#pragma once

#include <cstdint>

namespace goblin::sbe {

struct HeadTableEntry {
  uint64_t stamp = 0;     // 0: free (no head described here); else unique per publication
  uint64_t offset = 0;    // of the head in the head pool
  uint64_t length = 0;    // head bytes (object bytes [0, length))
  uint64_t checksum = 0;  // XXH3-64 of those bytes
  friend bool operator==(const HeadTableEntry&, const HeadTableEntry&) = default;
};
static_assert(sizeof(HeadTableEntry) == 32);

inline constexpr uint32_t kNoHeadEntry = UINT32_MAX;

// `described`: the entry as the core described it (HeadDescriptor); `before`/`after`: the
// entry as read around the bytes; `bytes_checksum`: XXH3-64 of the bytes read.
constexpr bool HeadReadIsCurrent(const HeadTableEntry& described, const HeadTableEntry& before,
                                 const HeadTableEntry& after, uint64_t bytes_checksum) {
  return described.stamp != 0 && before == described && after == described &&
         bytes_checksum == described.checksum;
}

}  // namespace goblin::sbe
