// Transparent string hashing: unordered containers keyed by std::string that are looked up
// with a std::string_view without building a std::string (no allocation per lookup).
//   std::unordered_map<std::string, V, StringHash, std::equal_to<>> m;  m.find(view);
// A HashedKey carries its hash, computed once, for a key looked up in several such maps
// (a shard's hit finds its key among fills, in the index and among the heads). The hash is
// XXH3-128, the function of the store index's key digest (store::KeyDigest), so the index
// takes a HashedKey's digest as it is: one hash of the key per hit.
// Threading: stateless.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace goblin {

struct KeyHash128 {
  uint64_t hi = 0, lo = 0;
};
KeyHash128 HashKey128(std::string_view k);  // XXH3-128

struct HashedKey {
  explicit HashedKey(std::string_view k) : key(k), digest(HashKey128(k)) {}
  std::string_view key;
  KeyHash128 digest;
  size_t hash() const { return static_cast<size_t>(digest.lo); }
  friend bool operator==(const HashedKey& a, std::string_view b) { return a.key == b; }
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return static_cast<size_t>(HashKey128(s).lo); }
  size_t operator()(const HashedKey& k) const { return k.hash(); }
};

}  // namespace goblin
