// Fuzz target: the glob matcher against the Redis reference walk. Input: pattern, a NUL,
// then the string (both bounded so the reference stays fast). Any disagreement aborts.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "goblin/pubsub/glob.h"
#include "tests/support/redis_glob_reference.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t cut = in.find('\0');
  std::string_view pattern = in.substr(0, cut);
  std::string_view s = cut == std::string_view::npos ? std::string_view() : in.substr(cut + 1);
  if (pattern.size() > 64 || s.size() > 64) return 0;
  goblin::pubsub::Glob g(pattern);
  if (g.Match(s) != goblin::test::RedisGlobReference::Match(pattern, s)) std::abort();
  // The literal prefix is a prefix of every match.
  if (g.Match(s) && !s.starts_with(g.literal_prefix())) std::abort();
  return 0;
}
