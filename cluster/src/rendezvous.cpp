#include "goblin/cluster/rendezvous.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>

namespace goblin::cluster {
namespace {

std::string_view RoutingPart(std::string_view key) {
  size_t nul = key.find('\0');
  return nul == std::string_view::npos ? key : key.substr(0, nul);
}

double ScoreOf(const RendezvousNode& node, std::string_view part) {
  uint64_t h = XXH3_64bits_withSeed(part.data(), part.size(), node.seed);
  // u in (0,1): the top 53 bits, centred in their interval so neither 0 nor 1 occurs.
  double u = (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;
  return -node.weight / std::log(u);
}

}  // namespace

uint64_t RendezvousSeed(std::string_view name) {
  return XXH3_64bits_withSeed(name.data(), name.size(), 0x676f626c696e);  // "goblin"
}

double RendezvousScore(const RendezvousNode& node, std::string_view key) {
  return ScoreOf(node, RoutingPart(key));
}

size_t RendezvousOwner(std::span<const RendezvousNode> nodes, std::string_view key) {
  std::string_view part = RoutingPart(key);
  size_t best = 0;
  double best_score = -1;
  for (size_t i = 0; i < nodes.size(); ++i) {
    double s = ScoreOf(nodes[i], part);
    if (s > best_score) {
      best_score = s;
      best = i;
    }
  }
  return best;
}

void RendezvousRank(std::span<const RendezvousNode> nodes, std::string_view key,
                    std::vector<size_t>& out) {
  std::string_view part = RoutingPart(key);
  std::vector<std::pair<double, size_t>> scored;
  scored.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) scored.emplace_back(ScoreOf(nodes[i], part), i);
  std::sort(scored.begin(), scored.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  out.clear();
  for (const auto& [s, i] : scored) out.push_back(i);
}

}  // namespace goblin::cluster
