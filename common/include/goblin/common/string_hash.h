// Transparent string hashing: unordered containers keyed by std::string that are looked up
// with a std::string_view without building a std::string (no allocation per lookup).
//   std::unordered_map<std::string, V, StringHash, std::equal_to<>> m;  m.find(view);
// A HashedKey carries its hash, computed once, for a key looked up in several such maps
// (a shard's hit finds its key among fills, in the eviction policy and among the heads).
// Threading: stateless.
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>

namespace goblin {

struct StringHash;

struct HashedKey {
  explicit HashedKey(std::string_view k);
  std::string_view key;
  size_t hash;
  friend bool operator==(const HashedKey& a, std::string_view b) { return a.key == b; }
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  size_t operator()(const HashedKey& k) const { return k.hash; }
};

inline HashedKey::HashedKey(std::string_view k) : key(k), hash(StringHash{}(k)) {}

}  // namespace goblin
