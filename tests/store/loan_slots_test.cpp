// LoanSlots: ids find their generation until removed; a removed, repeated or made-up id
// finds nothing, also after its slot was reused; ids are never 0.
#include "goblin/store/loan_slots.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

namespace goblin::store {
namespace {

TEST(LoanSlots, AnIdFindsItsGenerationUntilRemoved) {
  LoanSlots s;
  EXPECT_EQ(s.Find(0), nullptr);
  EXPECT_EQ(s.Find(1), nullptr);
  const uint64_t a = s.Add(7), b = s.Add(9);
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  ASSERT_NE(s.Find(a), nullptr);
  EXPECT_EQ(*s.Find(a), 7u);
  EXPECT_EQ(*s.Find(b), 9u);
  EXPECT_EQ(s.size(), 2u);
  s.Remove(a);
  EXPECT_EQ(s.Find(a), nullptr);  // (released twice: the caller finds nothing to release)
  const uint64_t c = s.Add(11);   // (a's slot again, under another id)
  EXPECT_NE(c, a);
  EXPECT_EQ(s.Find(a), nullptr);
  EXPECT_EQ(*s.Find(c), 11u);
  EXPECT_EQ(s.Find(c + (uint64_t{1} << 32)), nullptr);  // (a use not made yet)
  EXPECT_EQ(s.Find(c + 100), nullptr);                  // (no such slot)
  s.ForEachGeneration([](uint64_t& g) {
    if (g == 9) g = 10;
  });
  EXPECT_EQ(*s.Find(b), 10u);
  EXPECT_EQ(*s.Find(c), 11u);
  EXPECT_EQ(s.size(), 2u);
}

TEST(LoanSlots, MatchesAModelThroughRandomUse) {
  LoanSlots s;
  std::vector<std::pair<uint64_t, uint64_t>> live;  // (id, generation)
  std::set<uint64_t> given;
  std::vector<uint64_t> gone;
  std::mt19937_64 rng(5);
  for (int step = 0; step < 200000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const uint64_t gen = rng() % 1000;
      const uint64_t id = s.Add(gen);
      ASSERT_NE(id, 0u);
      ASSERT_TRUE(given.insert(id).second) << "id " << id << " given twice";
      live.emplace_back(id, gen);
    } else {
      const size_t i = rng() % live.size();
      auto [id, gen] = live[i];
      ASSERT_NE(s.Find(id), nullptr);
      ASSERT_EQ(*s.Find(id), gen);
      s.Remove(id);
      gone.push_back(id);
      live[i] = live.back();
      live.pop_back();
    }
    if (step % 1000 == 0) {
      for (uint64_t id : gone) ASSERT_EQ(s.Find(id), nullptr);
      gone.clear();
    }
  }
  EXPECT_EQ(s.size(), live.size());
  for (auto [id, gen] : live) EXPECT_EQ(*s.Find(id), gen);
}

}  // namespace
}  // namespace goblin::store
