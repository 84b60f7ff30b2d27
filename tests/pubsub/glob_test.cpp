#include "goblin/pubsub/glob.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>

#include "tests/support/redis_glob_reference.h"

namespace goblin::pubsub {
namespace {

struct Case {
  const char* pattern;
  const char* s;
  bool match;
};

TEST(Glob, RedisSemanticsCaseByCase) {
  const Case cases[] = {
      {"*", "", false},  // a star never matches the empty string as a whole
      {"", "", true},
      {"", "a", false},
      {"*", "anything", true},
      {"**", "x", true},
      {"a*", "a", true},
      {"*a", "a", true},
      {"a*b", "ab", true},
      {"a*b", "a", false},
      {"a*b*c", "axxbyyc", true},
      {"a*b*c", "axxbyy", false},
      {"h?llo", "hello", true},
      {"h?llo", "hllo", false},
      {"h[ae]llo", "hallo", true},
      {"h[ae]llo", "hillo", false},
      {"h[^e]llo", "hallo", true},
      {"h[^e]llo", "hello", false},
      {"h[a-b]llo", "hbllo", true},
      {"h[b-a]llo", "hallo", true},  // swapped range
      {"[]", "a", false},            // empty set
      {"[]a]", "a]", false},         // "[]" then "a]" literally
      {"[]a]", "aa]", false},
      {"[^]", "x", true},   // negated empty set: any byte
      {"[abc", "b", true},  // unterminated set takes the rest
      {"[abc", "bc", false},
      {"a[", "a", false},
      {"a[", "ab", false},
      {"[^", "q", true},
      {"[a-]", "]", true},  // the range ends at ']', which it consumes
      {"[a-]", "-", false},
      {"[\\]]", "]", true},  // escaped ']' inside a set
      {"[\\-a]", "-", true},
      {"\\*", "*", true},
      {"\\*", "a", false},
      {"a\\", "a\\", true},  // trailing backslash matches itself
      {"\\", "\\", true},
      {"\\?", "?", true},
      {"\\?", "x", false},
      {"news.*", "news.tech", true},
      {"news.*", "news.", true},  // the trailing star matches nothing
      {"news.*", "news", false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Glob(c.pattern).Match(c.s), c.match) << c.pattern << " vs " << c.s;
    EXPECT_EQ(test::RedisGlobReference::Match(c.pattern, c.s), c.match)
        << "reference: " << c.pattern << " vs " << c.s;
  }
}

TEST(Glob, SignedCharRangesLikeRedis) {
  // Redis compares range ends as (signed) chars: [a-\xff] is [\xff-a] = -1..97.
  Glob g("[a-\xff]");
  EXPECT_TRUE(g.Match("\xff"));
  EXPECT_TRUE(g.Match("\x01"));
  EXPECT_TRUE(g.Match("a"));
  EXPECT_FALSE(g.Match("b"));
  EXPECT_FALSE(g.Match("\x80"));
  EXPECT_TRUE(Glob("[\x80-\xff]").Match("\x90"));
  EXPECT_FALSE(Glob("[\x80-\xff]").Match("a"));
}

TEST(Glob, LiteralPrefixAndLiteralness) {
  EXPECT_EQ(Glob("news.*").literal_prefix(), "news.");
  EXPECT_EQ(Glob("a\\*b*").literal_prefix(), "a*b");
  EXPECT_EQ(Glob("*x").literal_prefix(), "");
  EXPECT_EQ(Glob("ab?c").literal_prefix(), "ab");
  EXPECT_TRUE(Glob("plain\\?").is_literal());
  EXPECT_FALSE(Glob("a[b]").is_literal());
}

TEST(Glob, NoExponentialBlowUp) {
  std::string pattern;
  for (int i = 0; i < 200; ++i) pattern += "a*";
  pattern += "b";
  std::string s(10000, 'a');
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(Glob(pattern).Match(s));
  // Quadratic at worst: 400 tokens x 10,000 bytes. (Not a timing assertion: a generous
  // bound that only an exponential matcher could exceed.)
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

// Random patterns and strings over an alphabet full of edge cases, against the oracle.
TEST(Glob, AgreesWithTheRedisReferenceOnRandomInputs) {
  const char alphabet[] = {'a', 'b', 'c', '*', '?', '[', ']', '^', '-', '\\', '\x80', '\xff', 'z'};
  std::mt19937 rng(20261130);
  auto gen = [&](size_t max, size_t alpha) {
    std::string s(rng() % (max + 1), ' ');
    for (char& c : s) c = alphabet[rng() % alpha];
    return s;
  };
  int matches = 0;
  for (int i = 0; i < 200000; ++i) {
    std::string p = gen(8, sizeof alphabet), s = gen(8, sizeof alphabet);
    bool want = test::RedisGlobReference::Match(p, s);
    ASSERT_EQ(Glob(p).Match(s), want) << "pattern '" << p << "' string '" << s << "'";
    matches += want;
  }
  EXPECT_GT(matches, 1000);  // the generator does reach matching pairs
}

}  // namespace
}  // namespace goblin::pubsub
