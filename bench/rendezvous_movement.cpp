// The key-movement fraction of goblin's routing (cluster/rendezvous.h) when a core joins or
// leaves a fabric of N, measured over KEYS keys like the mirror's, against the ideal (1/(N+1)
// of the keys move to a joining core, 1/N move away from a leaving one), and the spread of
// keys over equal cores (max/mean). For docs/benchmarks/cluster.md.
//   rendezvous_movement [--keys N] [--max-cores N]
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "goblin/cluster/rendezvous.h"
#include "goblin/common/cli.h"

int main(int argc, char** argv) {
  using namespace goblin::cluster;
  CLI::App app("rendezvous_movement: keys moved when a core joins or leaves",
               "rendezvous_movement");
  size_t keys = 200000, max_cores = 8;
  app.add_option("--keys", keys, "Keys")->capture_default_str();
  app.add_option("--max-cores", max_cores, "Largest fabric")->capture_default_str();
  if (int rc = goblin::ParseCommandLine(app, argc, argv); rc >= 0) return rc;
  std::vector<std::string> names;
  for (size_t i = 0; i <= max_cores; ++i) names.push_back(fmt::format("core-{}", i));
  auto nodes = [&](size_t n) {
    std::vector<RendezvousNode> v;
    for (size_t i = 0; i < n; ++i) v.push_back({RendezvousSeed(names[i]), 1.0});
    return v;
  };
  std::vector<std::string> ks;
  for (size_t i = 0; i < keys; ++i) ks.push_back(fmt::format("www.example.com/assets/{}.js", i));
  std::printf(
      "| cores N | core N+1 joins: keys moved | to others | ideal 1/(N+1) | core 1 leaves: keys "
      "moved | to others than its keys' next | ideal 1/N | keys per core max/mean |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::vector<size_t> rank;
  for (size_t n = 2; n <= max_cores; ++n) {
    auto set = nodes(n), joined = nodes(n + 1);
    std::vector<RendezvousNode> without_first(set.begin() + 1, set.end());
    size_t join_moved = 0, join_elsewhere = 0, leave_moved = 0, leave_wrong = 0;
    std::vector<size_t> per(n, 0);
    for (const auto& k : ks) {
      RendezvousRank(set, k, rank);
      size_t owner = rank[0];
      ++per[owner];
      size_t j = RendezvousOwner(joined, k);
      if (j != owner) {
        ++join_moved;
        if (j != n) ++join_elsewhere;  // moved, but not to the new core
      }
      size_t l = RendezvousOwner(without_first, k) + 1;
      if (l != owner) {
        ++leave_moved;
        if (owner != 0 || l != rank[1]) ++leave_wrong;
      }
    }
    double mean = static_cast<double>(keys) / static_cast<double>(n);
    double max = static_cast<double>(*std::max_element(per.begin(), per.end()));
    auto frac = [&](size_t x) { return static_cast<double>(x) / static_cast<double>(keys); };
    std::printf("| %zu | %.4f | %zu | %.4f | %.4f | %zu | %.4f | %.3f |\n", n, frac(join_moved),
                join_elsewhere, 1.0 / static_cast<double>(n + 1), frac(leave_moved), leave_wrong,
                1.0 / static_cast<double>(n), max / mean);
  }
  return 0;
}
