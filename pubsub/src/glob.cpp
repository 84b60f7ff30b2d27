#include "goblin/pubsub/glob.h"

namespace goblin::pubsub {

Glob::Glob(std::string_view p) : pattern_(p) {
  // Tokenize as Redis's matcher walks the pattern; the structure never depends on the
  // string being matched, so it can be done once.
  size_t i = 0, n = p.size();
  bool in_prefix = true;
  auto literal = [&](uint8_t b) {
    tokens_.push_back({Op::kLiteral, b, 0});
    if (in_prefix) prefix_.push_back(static_cast<char>(b));
  };
  while (i < n) {
    char c = p[i];
    if (c == '*') {
      // Runs of stars are one star.
      while (i + 1 < n && p[i + 1] == '*') ++i;
      tokens_.push_back({Op::kStar, 0, 0});
      in_prefix = literal_ = false;
      ++i;
    } else if (c == '?') {
      tokens_.push_back({Op::kAny, 0, 0});
      in_prefix = literal_ = false;
      ++i;
    } else if (c == '[') {
      ++i;
      bool negate = i < n && p[i] == '^';
      if (negate) ++i;
      std::array<uint64_t, 4> bits{};
      auto add = [&](int lo, int hi) {  // signed-char range, like Redis
        for (int b = 0; b < 256; ++b) {
          int sc = static_cast<int8_t>(static_cast<uint8_t>(b));
          if (sc >= lo && sc <= hi) bits[b >> 6] |= uint64_t{1} << (b & 63);
        }
      };
      for (;;) {
        if (i >= n) break;  // unterminated: the set ends with the pattern
        if (p[i] == '\\' && n - i >= 2) {
          ++i;
          int sc = static_cast<int8_t>(p[i]);
          add(sc, sc);
        } else if (p[i] == ']') {
          break;
        } else if (n - i >= 3 && p[i + 1] == '-') {
          int lo = static_cast<int8_t>(p[i]), hi = static_cast<int8_t>(p[i + 2]);
          if (lo > hi) std::swap(lo, hi);
          add(lo, hi);
          i += 2;
        } else {
          int sc = static_cast<int8_t>(p[i]);
          add(sc, sc);
        }
        ++i;
      }
      ++i;  // past ']' (or past the end)
      if (negate)
        for (auto& w : bits) w = ~w;
      tokens_.push_back({Op::kSet, 0, static_cast<uint16_t>(sets_.size())});
      sets_.push_back(bits);
      in_prefix = literal_ = false;
    } else if (c == '\\' && n - i >= 2) {
      literal(static_cast<uint8_t>(p[i + 1]));
      i += 2;
    } else {
      literal(static_cast<uint8_t>(c));
      ++i;
    }
  }
}

bool Glob::Match(std::string_view s) const {
  // Redis compares nothing when the string is empty: only the empty pattern matches it.
  if (s.empty()) return pattern_.empty();
  size_t t = 0, i = 0;
  size_t star_t = SIZE_MAX, star_i = 0;
  const size_t nt = tokens_.size(), ns = s.size();
  while (i < ns) {
    if (t < nt) {
      const Token& k = tokens_[t];
      uint8_t c = static_cast<uint8_t>(s[i]);
      if (k.op == Op::kStar) {
        star_t = t++;
        star_i = i;
        continue;
      }
      if ((k.op == Op::kAny) || (k.op == Op::kLiteral && k.byte == c) ||
          (k.op == Op::kSet && InSet(k.set, c))) {
        ++t;
        ++i;
        continue;
      }
    }
    if (star_t == SIZE_MAX) return false;
    // Let the last star take one more byte and retry what follows it.
    t = star_t + 1;
    i = ++star_i;
  }
  while (t < nt && tokens_[t].op == Op::kStar) ++t;
  return t == nt;
}

}  // namespace goblin::pubsub
