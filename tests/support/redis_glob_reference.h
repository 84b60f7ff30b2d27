// A test oracle for pubsub::Glob: Redis's stringmatchlen (nocase = 0) re-derived from its
// documented behaviour as a direct recursive walk over the raw pattern bytes, including
// its reads of the NUL that follows a Redis string (modelled by At()). Slow on purpose and
// bounded by the caller (short patterns only).
#pragma once

#include <string_view>

namespace goblin::test {

class RedisGlobReference {
 public:
  static bool Match(std::string_view pattern, std::string_view s) {
    bool skip = false;
    return Walk(pattern, 0, s, 0, &skip);
  }

 private:
  static char At(std::string_view v, size_t i) { return i < v.size() ? v[i] : '\0'; }

  static bool Walk(std::string_view p, size_t pi, std::string_view s, size_t si, bool* skip) {
    while (pi < p.size() && si < s.size()) {
      char pc = p[pi];
      if (pc == '*') {
        while (pi + 1 < p.size() && p[pi + 1] == '*') ++pi;
        if (pi + 1 == p.size()) return true;
        while (si < s.size()) {
          if (Walk(p, pi + 1, s, si, skip)) return true;
          if (*skip) return false;
          ++si;
        }
        *skip = true;
        return false;
      } else if (pc == '?') {
        ++si;
      } else if (pc == '[') {
        ++pi;
        bool negate = At(p, pi) == '^';
        if (negate) ++pi;
        bool match = false;
        for (;;) {
          if (At(p, pi) == '\\' && p.size() - pi >= 2) {
            ++pi;
            if (p[pi] == s[si]) match = true;
          } else if (At(p, pi) == ']') {
            break;
          } else if (pi >= p.size()) {
            --pi;
            break;
          } else if (p.size() - pi >= 3 && p[pi + 1] == '-') {
            int lo = static_cast<signed char>(p[pi]), hi = static_cast<signed char>(p[pi + 2]);
            int c = static_cast<signed char>(s[si]);
            if (lo > hi) std::swap(lo, hi);
            pi += 2;
            if (c >= lo && c <= hi) match = true;
          } else if (p[pi] == s[si]) {
            match = true;
          }
          ++pi;
        }
        if (negate) match = !match;
        if (!match) return false;
        ++si;
      } else {
        if (pc == '\\' && p.size() - pi >= 2) ++pi;
        if (p[pi] != s[si]) return false;
        ++si;
      }
      ++pi;
      if (si == s.size()) {
        while (At(p, pi) == '*') ++pi;
        break;
      }
    }
    return pi >= p.size() && si == s.size();
  }
};

}  // namespace goblin::test
