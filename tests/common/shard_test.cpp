// goblin::ShardOf is part of the wire contract (the core, libgoblin and the gateway must
// agree, and a tier's objects stay on the shard that stored them): its values are pinned
// here, and it spreads keys evenly.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "goblin/common/shard.h"

namespace goblin {
namespace {

TEST(ShardOf, ValuesArePinned) {
  struct Case {
    const char* key;
    uint16_t shards, want;
  };
  for (const Case& c : std::vector<Case>{{"", 7, 1},
                                         {"", 48, 8},
                                         {"a", 2, 1},
                                         {"a", 3, 2},
                                         {"a", 7, 6},
                                         {"a", 48, 43},
                                         {"site.example/index.html", 48, 2},
                                         {"key/42", 48, 3}}) {
    EXPECT_EQ(ShardOf(c.key, c.shards), c.want) << c.key << " over " << c.shards;
  }
  EXPECT_EQ(ShardOf("anything", 1), 0);
  EXPECT_EQ(ShardOf("anything", 0), 0);
}

// An HTTP object's variants are "URL\0#header=value...": the part before the NUL decides.
TEST(ShardOf, KeysThatShareTheirPartBeforeANulShareAShard) {
  using namespace std::string_view_literals;
  for (uint16_t n : {2, 3, 12, 48}) {
    EXPECT_EQ(ShardOf("site.example/index.html\0#accept-encoding=gzip"sv, n),
              ShardOf("site.example/index.html", n));
    EXPECT_EQ(ShardOf("key/42\0"sv, n), ShardOf("key/42", n));
  }
  EXPECT_EQ(ShardOf("site.example/index.html\0#x"sv, 48), 2);  // (the pinned value above)
  EXPECT_EQ(ShardOf("\0a"sv, 48), 8);                          // (the empty key's)
  int differ = 0;                                              // and the part after it does not
  for (int i = 0; i < 64; ++i) {
    differ += ShardOf("k" + std::to_string(i) + std::string(1, '\0') + "v", 48) !=
              ShardOf("k0" + std::string(1, '\0') + "v", 48);
  }
  EXPECT_GT(differ, 48);
}

TEST(ShardOf, SpreadsKeysEvenly) {
  for (uint16_t n : {2, 3, 12, 48}) {
    std::vector<int> count(n, 0);
    const int keys = 48000;
    for (int i = 0; i < keys; ++i) {
      uint16_t s = ShardOf("example.com/assets/" + std::to_string(i) + ".js", n);
      ASSERT_LT(s, n);
      ++count[s];
    }
    for (int c : count) {
      EXPECT_GT(c, keys / n * 9 / 10) << n << " shards";
      EXPECT_LT(c, keys / n * 11 / 10) << n << " shards";
    }
  }
}

}  // namespace
}  // namespace goblin
