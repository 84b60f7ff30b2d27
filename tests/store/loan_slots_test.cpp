// LoanSlots (IdSlab<uint64_t>): ids find their value until removed; a removed, repeated or
// made-up id finds nothing, also after its slot was reused; ids are never 0.
// VersionLoans: a handle finds its version while it has loans out and never after, also
// when its slot is reused; counts match a model.
#include "goblin/store/loan_slots.h"

#include "goblin/store/version_loans.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
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
  EXPECT_EQ(v.Find(0, 0), nullptr);
  uint64_t a = 0, b = 0;
  const uint64_t ha = v.Lend(&a, 5);
  EXPECT_NE(a, 0u);
  EXPECT_EQ(ha, a);
  EXPECT_EQ(v.Lend(&a, 5), ha);  // (the same version: the same slot and handle)
  EXPECT_EQ(a, ha);
  const uint64_t hb = v.Lend(&b, 6);
  EXPECT_NE(hb, ha);
  v.LendAgain(hb);  // (a pin through a loan's handle)
  ASSERT_NE(v.Find(a, 5), nullptr);
  EXPECT_EQ(v.Find(a, 5)->count, 2u);
  EXPECT_EQ(v.Find(b, 6)->count, 2u);
  EXPECT_EQ(v.Find(b), v.Find(b, 6));
  EXPECT_EQ(v.size(), 2u);
  v.Find(a, 5)->retired = std::make_unique<VersionLoans::Retired>();
  v.Find(a, 5)->retired->tail_bytes = 7;
  v.Find(a, 5)->retired->extents.push_back(Extent{});
  int freed = 0;
  auto count_freed = [&](VersionLoans::Retired& last) {
    ++freed;
    EXPECT_EQ(last.tail_bytes, 7u);
    EXPECT_EQ(last.extents.size(), 1u);
  };
  v.Return(a, count_freed);
  EXPECT_EQ(freed, 0);
  v.Return(a, count_freed);  // the last one of a retired version: what it held, to free
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(v.Find(a, 5), nullptr);  // gone, though its record may keep the handle
  v.Return(b, count_freed);
  v.Return(b, count_freed);  // the last one of a live version: nothing to free
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(v.Find(b, 6), nullptr);
  uint64_t c = 0;
  v.Lend(&c, 8);  // (a's slot again, under another handle, fresh)
  EXPECT_NE(c, a);
  EXPECT_EQ(v.Find(a, 5), nullptr);
  EXPECT_EQ(v.Find(c, 8)->retired, nullptr);  // (fresh: nothing held for it)
  EXPECT_EQ(v.Find(c, 8)->count, 1u);
  uint64_t stale = a;  // a record whose handle went stale lends on a new slot
  v.Lend(&stale, 5);
  EXPECT_NE(stale, a);
  EXPECT_NE(stale, c);
  EXPECT_EQ(v.size(), 2u);
}

// A record's handle that names a live slot of another version (what a slot's use wrapping
// around 2^32 would make of an old handle) finds nothing and lends on a slot of its own.
TEST(VersionLoans, AHandleOfAnotherVersionIsNotItsSlot) {
  VersionLoans v;
  uint64_t x = 0;
  v.Lend(&x, 10);
  uint64_t r = x;  // (the same slot and use, version 11)
  EXPECT_EQ(v.Find(r, 11), nullptr);
  v.Lend(&r, 11);
  EXPECT_NE(r, x);
  EXPECT_EQ(v.Find(x, 10)->count, 1u);
  EXPECT_EQ(v.Find(r, 11)->count, 1u);
  // Reissued in place: the slot follows the version's new generation.
  v.Reissue(x, 10, 12);
  EXPECT_EQ(v.Find(x, 10), nullptr);
  ASSERT_NE(v.Find(x, 12), nullptr);
  EXPECT_EQ(v.Find(x, 12)->count, 1u);
  v.Reissue(r, 10, 13);  // (not r's version: nothing changes)
  EXPECT_NE(v.Find(r, 11), nullptr);
}

TEST(VersionLoans, MatchesAModelThroughRandomUse) {
  VersionLoans v;
  constexpr int kVersions = 64;
  std::vector<uint64_t> handle(kVersions, 0);
  std::vector<uint64_t> generation(kVersions);
  uint64_t next_generation = 1;
  for (uint64_t& g : generation) g = next_generation++;
  // Versions 0..63 are current ones; kVersions + k, k's retired predecessor (one at a time).
  std::vector<uint32_t> count(2 * kVersions, 0);
  std::vector<bool> retired(2 * kVersions, false);
  std::vector<std::pair<int, uint64_t>> loans;  // (version, the handle its loan id holds)
  std::mt19937_64 rng(11);
  for (int step = 0; step < 200000; ++step) {
    const int k = static_cast<int>(rng() % kVersions);
    const uint64_t r = rng() % 8;
    if (r == 0 && count[k] > 0 && count[kVersions + k] == 0) {
      // The version leaves the index (replaced): retired; the key's next version starts.
      auto& held = v.Find(handle[k], generation[k])->retired;
      held = std::make_unique<VersionLoans::Retired>();
      held->tail_bytes = static_cast<uint64_t>(k) + 1;
      retired[k] = true;
      handle[k] = 0;
      generation[k] = next_generation++;
      for (auto& l : loans) {
        if (l.first == k) l.first = kVersions + k;
      }
      count[kVersions + k] = count[k];
      retired[kVersions + k] = true;
      count[k] = 0;
      retired[k] = false;
    } else if (loans.empty() || r < 4) {
      uint64_t h;
      if (count[k] > 0 && r == 1) {  // (a pin through a loan's handle)
        h = handle[k];
        v.LendAgain(h);
      } else {
        h = v.Lend(&handle[k], generation[k]);
      }
      ++count[k];
      loans.emplace_back(k, h);
    } else {
      const size_t i = rng() % loans.size();
      auto [version, h] = loans[i];
      loans[i] = loans.back();
      loans.pop_back();
      bool freed = false;
      uint64_t freed_tail = 0;
      v.Return(h, [&](VersionLoans::Retired& last) {
        freed = true;
        freed_tail = last.tail_bytes;
      });
      --count[version];
      ASSERT_EQ(freed, count[version] == 0 && retired[version]) << "step " << step;
      if (freed) {
        ASSERT_EQ(freed_tail, static_cast<uint64_t>(version - kVersions) + 1);
        retired[version] = false;
      }
      if (count[version] == 0) {
        ASSERT_EQ(v.Find(h), nullptr) << "step " << step;
      }
    }
    for (int j = 0; j < kVersions; ++j) {
      VersionLoans::Version* found = v.Find(handle[j], generation[j]);
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
