// Glob patterns with exactly the semantics of Redis's stringmatchlen (nocase = 0), the
// matcher behind PSUBSCRIBE, PUBSUB CHANNELS and KEYS: `*` (any run, never matching an empty
// string as a whole), `?`, `[set]`, `[^set]`, ranges `[a-z]` (swapped ends accepted, ends
// compared as signed chars like Redis does), `\` escapes inside and outside sets, an
// unterminated set taking the rest of the pattern, `[]` as an empty set, a trailing `\`
// matching itself.
// A pattern is compiled once into tokens (sets become 256-bit membership maps) and matched
// iteratively with one backtrack point, so `a*a*a*...b` costs O(pattern x channel) at
// worst, with no recursion.
// Threading: a compiled Glob is immutable; Match is safe from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace goblin::pubsub {

class Glob {
 public:
  explicit Glob(std::string_view pattern);

  bool Match(std::string_view s) const;

  const std::string& pattern() const { return pattern_; }
  // The literal bytes every match starts with (escapes resolved): the pattern index's key.
  const std::string& literal_prefix() const { return prefix_; }
  // True when the pattern has no wildcard at all (it matches exactly one string).
  bool is_literal() const { return literal_; }

 private:
  enum class Op : uint8_t { kLiteral, kAny, kStar, kSet };
  struct Token {
    Op op;
    uint8_t byte = 0;  // kLiteral
    uint16_t set = 0;  // kSet: index into sets_
  };
  bool InSet(uint16_t set, uint8_t c) const { return (sets_[set][c >> 6] >> (c & 63)) & 1; }

  std::string pattern_;
  std::vector<Token> tokens_;
  std::vector<std::array<uint64_t, 4>> sets_;
  std::string prefix_;
  bool literal_ = true;
};

// One-shot convenience (compiles every call).
inline bool GlobMatch(std::string_view pattern, std::string_view s) {
  return Glob(pattern).Match(s);
}

}  // namespace goblin::pubsub
