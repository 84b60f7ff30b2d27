// LoanSlots: ids find their value until removed; a removed, repeated or made-up id
// finds nothing, also after its slot was reused; ids are never 0.
// VersionLoans: a handle finds its version while it has loans out and never after, also
// when its slot is reused; counts match a model.
#include "goblin/store/loan_slots.h"

#include "goblin/store/version_loans.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

namespace goblin::store {
namespace {

TEST(LoanSlots, AnIdFindsItsValueUntilRemoved) {
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
  EXPECT_EQ(*s.Find(b), 9u);
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

TEST(VersionLoans, AHandleFindsItsVersionWhileItHasLoansOut) {
  VersionLoans v;
  EXPECT_EQ(v.Find(0), nullptr);
  uint64_t a = 0, b = 0;
  const uint32_t sa = v.Lend(&a);
  EXPECT_NE(a, 0u);
  const uint64_t a_first = a;
  EXPECT_EQ(v.Lend(&a), sa);  // (the same version: the same slot and handle)
  EXPECT_EQ(a, a_first);
  const uint32_t sb = v.Lend(&b);
  EXPECT_NE(sb, sa);
  v.LendAgain(sb);
  ASSERT_NE(v.Find(a), nullptr);
  EXPECT_EQ(v.Find(a)->count, 2u);
  EXPECT_EQ(v.Find(b)->count, 2u);
  EXPECT_EQ(v.size(), 2u);
  v.Find(a)->retired = true;
  v.Find(a)->tail_bytes = 7;
  EXPECT_EQ(v.Return(sa), nullptr);
  VersionLoans::Version* last = v.Return(sa);
  ASSERT_NE(last, nullptr);  // the last one: what it held, to free
  EXPECT_TRUE(last->retired);
  EXPECT_EQ(last->tail_bytes, 7u);
  EXPECT_EQ(v.Find(a), nullptr);  // gone, though its record may keep the handle
  uint64_t c = 0;
  EXPECT_EQ(v.Lend(&c), sa);  // (its slot again, under another handle, fresh)
  EXPECT_NE(c, a);
  EXPECT_EQ(v.Find(a), nullptr);
  EXPECT_FALSE(v.Find(c)->retired);
  EXPECT_EQ(v.Find(c)->tail_bytes, 0u);
  EXPECT_EQ(v.Find(c)->count, 1u);
  uint64_t stale = a;  // a record whose handle went stale lends on a new slot
  EXPECT_NE(v.Lend(&stale), sa);
  EXPECT_NE(stale, a);
  EXPECT_EQ(v.size(), 3u);
}

TEST(VersionLoans, MatchesAModelThroughRandomUse) {
  VersionLoans v;
  constexpr int kVersions = 64;
  std::vector<uint64_t> handle(kVersions, 0);
  std::vector<uint32_t> count(kVersions, 0);
  std::vector<std::pair<int, uint32_t>> loans;  // (version, slot)
  std::mt19937_64 rng(11);
  for (int step = 0; step < 200000; ++step) {
    const int k = static_cast<int>(rng() % kVersions);
    if (loans.empty() || rng() % 2 == 0) {
      uint32_t slot;
      if (count[k] > 0 && rng() % 2 == 0) {  // (a pin through a loan's slot)
        slot = loans[std::find_if(loans.begin(), loans.end(),
                                  [&](const auto& l) { return l.first == k; }) -
                     loans.begin()]
                   .second;
        v.LendAgain(slot);
      } else {
        slot = v.Lend(&handle[k]);
      }
      ++count[k];
      loans.emplace_back(k, slot);
    } else {
      const size_t i = rng() % loans.size();
      auto [version, slot] = loans[i];
      loans[i] = loans.back();
      loans.pop_back();
      VersionLoans::Version* last = v.Return(slot);
      --count[version];
      ASSERT_EQ(last != nullptr, count[version] == 0) << "step " << step;
    }
    for (int j = 0; j < kVersions; ++j) {
      VersionLoans::Version* found = v.Find(handle[j]);
      ASSERT_EQ(found != nullptr, count[j] > 0) << "step " << step << " version " << j;
      if (found != nullptr) {
        ASSERT_EQ(found->count, count[j]);
      }
    }
  }
  size_t out = 0;
  for (uint32_t c : count) out += c > 0 ? 1 : 0;
  EXPECT_EQ(v.size(), out);
}

}  // namespace
}  // namespace goblin::store
