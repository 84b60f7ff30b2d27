#include "goblin/common/recycling_map.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

namespace goblin {
namespace {

TEST(RecyclingMap, BehavesAsAMapAndReusesErasedNodes) {
  RecyclingMap<uint64_t, std::string> m;
  m[1] = "one";
  m[2] = "two";
  EXPECT_EQ(m.size(), 2u);
  EXPECT_EQ(m.find(1)->second, "one");
  EXPECT_TRUE(m.contains(2));
  EXPECT_EQ(m.erase(1), 1u);
  EXPECT_EQ(m.erase(1), 0u);
  EXPECT_EQ(m.spare(), 1u);
  EXPECT_FALSE(m.contains(1));
  // The next insertion takes the spare node, with a fresh value (not the erased one's).
  auto [it, inserted] = m.try_emplace(3);
  EXPECT_TRUE(inserted);
  EXPECT_EQ(it->first, 3u);
  EXPECT_EQ(it->second, "");
  EXPECT_EQ(m.spare(), 0u);
  // emplace/try_emplace of a present key changes nothing.
  EXPECT_FALSE(m.emplace(2, "deux").second);
  EXPECT_EQ(m[2], "two");
  m.clear();
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(m.spare(), 2u);
}

TEST(RecyclingMap, ErasingWhileIteratingVisitsEveryEntryOnce) {
  RecyclingMap<int, int> m;
  for (int i = 0; i < 100; ++i) m[i] = i * 2;
  int seen = 0;
  for (auto it = m.begin(); it != m.end();) {
    EXPECT_EQ(it->second, it->first * 2);
    ++seen;
    it = it->first % 2 == 0 ? m.erase(it) : std::next(it);
  }
  EXPECT_EQ(seen, 100);
  EXPECT_EQ(m.size(), 50u);
  for (const auto& [k, v] : m) EXPECT_EQ(k % 2, 1);
}

TEST(RecyclingMap, KeepsAtMostItsBoundOfSpareNodes) {
  RecyclingMap<int, int> m(/*max_spare=*/3);
  for (int i = 0; i < 10; ++i) m[i] = i;
  for (int i = 0; i < 10; ++i) m.erase(i);
  EXPECT_EQ(m.spare(), 3u);
}

// Random churn against std::map as the model.
TEST(RecyclingMap, MatchesAModelUnderChurn) {
  RecyclingMap<uint32_t, uint64_t> m(16);
  std::map<uint32_t, uint64_t> model;
  std::mt19937 rng(7);
  for (int step = 0; step < 20000; ++step) {
    uint32_t k = rng() % 64;
    switch (rng() % 3) {
      case 0:
        m[k] = step;
        model[k] = step;
        break;
      case 1:
        EXPECT_EQ(m.erase(k), model.erase(k));
        break;
      default: {
        auto it = m.find(k);
        auto mt = model.find(k);
        ASSERT_EQ(it == m.end(), mt == model.end());
        if (mt != model.end()) {
          EXPECT_EQ(it->second, mt->second);
        }
      }
    }
    ASSERT_EQ(m.size(), model.size());
  }
}

}  // namespace
}  // namespace goblin
