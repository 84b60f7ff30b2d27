// The benchmark clients' common input: the manifest ("PATH SIZE [XXH3-64 hex]" per line,
// '#' comments), the request order (shuffled passes from one seeded generator, the same
// for every server measured) and the http://HOST:PORT target. Benchmark code only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace goblin::bench {

// The seed's request-order seed.
inline constexpr uint64_t kOrderSeed = 0x243f6a8885a308d3ULL;

struct ManifestItem {
  std::string path;
  uint64_t size = 0;
  uint64_t xxh3 = 0;
  bool has_hash = false;
};

// Empty when the file cannot be read or names nothing.
inline std::vector<ManifestItem> ReadManifest(const std::string& file) {
  std::vector<ManifestItem> items;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    ManifestItem it;
    if (!(ls >> it.path >> it.size)) continue;
    if (std::string hex; ls >> hex) {
      it.has_hash = true;
      it.xxh3 = std::strtoull(hex.c_str(), nullptr, 16);
    }
    items.push_back(std::move(it));
  }
  return items;
}

// `passes` independent shuffles of 0..n-1 from one generator, concatenated (pass k is
// entries [k*n, (k+1)*n)).
inline std::vector<uint32_t> ShuffledPasses(size_t n, int passes, uint64_t seed = kOrderSeed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> order;
  order.reserve(n * static_cast<size_t>(std::max(passes, 0)));
  for (int p = 0; p < passes; ++p) {
    std::vector<uint32_t> pass(n);
    for (uint32_t i = 0; i < pass.size(); ++i) pass[i] = i;
    std::shuffle(pass.begin(), pass.end(), rng);
    order.insert(order.end(), pass.begin(), pass.end());
  }
  return order;
}

struct HttpTarget {
  std::string host;  // as given (an IPv4 address for the clients here)
  int port = 80;
  std::string host_header;  // HOST[:PORT]
};

// "http://HOST[:PORT][/...]"; nullopt without the scheme or with a bad port.
inline std::optional<HttpTarget> ParseHttpTarget(std::string_view url) {
  if (!url.starts_with("http://")) return std::nullopt;
  std::string hp(url.substr(7));
  if (auto slash = hp.find('/'); slash != std::string::npos) hp.resize(slash);
  HttpTarget t;
  t.host_header = hp;
  auto colon = hp.rfind(':');
  t.host = colon == std::string::npos ? hp : hp.substr(0, colon);
  if (colon != std::string::npos) {
    char* end = nullptr;
    long port = std::strtol(hp.c_str() + colon + 1, &end, 10);
    if (end == hp.c_str() + colon + 1 || *end != '\0' || port <= 0 || port > 65535)
      return std::nullopt;
    t.port = static_cast<int>(port);
  }
  if (t.host.empty()) return std::nullopt;
  return t;
}

}  // namespace goblin::bench
