// Weighted rendezvous (highest random weight) hashing: which member of a set owns a key.
// Each (member, key) pair gets a score from a hash seeded by the member's name, scaled by its
// weight (-w / ln u, u uniform in (0,1): each member's share of keys is its share of the total
// weight); the best score owns the key, the next ones are where it goes if the owner leaves.
// Only the keys of a member that leaves move (to their second choice), and a member that
// joins takes only keys it now wins: ~1/N of them, none between the others. The key is
// hashed up to its first NUL byte, as ShardOf (goblin/common/shard.h): an HTTP object's
// variants stay with their URL.
// Threading: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace goblin::cluster {

struct RendezvousNode {
  uint64_t seed = 0;    // RendezvousSeed(name)
  double weight = 1.0;  // > 0
};

uint64_t RendezvousSeed(std::string_view name);
double RendezvousScore(const RendezvousNode& node, std::string_view key);
// The index of the owner (nodes must not be empty).
size_t RendezvousOwner(std::span<const RendezvousNode> nodes, std::string_view key);
// All indices, best first (the failover order).
void RendezvousRank(std::span<const RendezvousNode> nodes, std::string_view key,
                    std::vector<size_t>& out);

}  // namespace goblin::cluster
