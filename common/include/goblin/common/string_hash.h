// Transparent string hashing: unordered containers keyed by std::string that are looked up
// with a std::string_view without building a std::string (no allocation per lookup).
//   std::unordered_map<std::string, V, StringHash, std::equal_to<>> m;  m.find(view);
// Threading: stateless.
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>

namespace goblin {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace goblin
