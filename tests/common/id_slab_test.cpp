// IdSlab with values that own something: a removed value is destroyed at once (not when its
// slot is reused), Clear removes every id, RemoveIf the chosen ones, ForEach sees exactly the
// live values. (The ids'
// own rules - never 0, a removed, repeated or made-up id finds nothing - are tested with
// the store's LoanSlots, the same template, in tests/store/loan_slots_test.cpp.)
#include "goblin/common/id_slab.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace goblin {
namespace {

TEST(IdSlab, ARemovedValueIsDestroyedAtOnceAndClearRemovesEveryId) {
  IdSlab<std::shared_ptr<int>> s;
  auto a = std::make_shared<int>(1), b = std::make_shared<int>(2);
  const uint64_t ia = s.Add(a), ib = s.Add(b);
  EXPECT_EQ(a.use_count(), 2);
  s.Remove(ia);
  EXPECT_EQ(a.use_count(), 1);  // released now, its slot not yet reused
  EXPECT_EQ(s.Find(ia), nullptr);
  std::vector<int> seen;
  s.ForEach([&](std::shared_ptr<int>& p) { seen.push_back(*p); });
  EXPECT_EQ(seen, std::vector<int>{2});
  const uint64_t ic = s.Add(std::make_shared<int>(3));
  EXPECT_NE(ic, ia);
  EXPECT_EQ(s.size(), 2u);
  s.Clear();
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(b.use_count(), 1);
  EXPECT_EQ(s.Find(ib), nullptr);
  EXPECT_EQ(s.Find(ic), nullptr);
  seen.clear();
  s.ForEach([&](std::shared_ptr<int>& p) { seen.push_back(*p); });
  EXPECT_TRUE(seen.empty());
  const uint64_t id = s.Add(std::make_shared<int>(4));  // (usable after Clear, new ids)
  EXPECT_NE(id, ib);
  EXPECT_NE(id, ic);
  ASSERT_NE(s.Find(id), nullptr);
  EXPECT_EQ(**s.Find(id), 4);
}

TEST(IdSlab, RemoveIfTakesTheChosenValuesAndTheirIdsOnly) {
  IdSlab<std::shared_ptr<int>> s;
  std::vector<std::shared_ptr<int>> v;
  std::vector<uint64_t> ids;
  for (int i = 0; i < 6; ++i) {
    v.push_back(std::make_shared<int>(i));
    ids.push_back(s.Add(v.back()));
  }
  s.Remove(ids[1]);  // (a free slot in between)
  std::vector<int> asked;
  const size_t n = s.RemoveIf([&](std::shared_ptr<int>& p) {
    asked.push_back(*p);
    return *p % 2 == 0;
  });
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(asked, (std::vector<int>{0, 2, 3, 4, 5}));  // each live value once
  EXPECT_EQ(s.size(), 2u);
  for (int i : {0, 2, 4}) {
    EXPECT_EQ(s.Find(ids[i]), nullptr) << i;
    EXPECT_EQ(v[i].use_count(), 1) << i;  // destroyed at once
  }
  for (int i : {3, 5}) {
    ASSERT_NE(s.Find(ids[i]), nullptr) << i;
    EXPECT_EQ(**s.Find(ids[i]), i);
  }
  EXPECT_EQ(s.RemoveIf([](std::shared_ptr<int>&) { return false; }), 0u);
  EXPECT_EQ(s.size(), 2u);
}

}  // namespace
}  // namespace goblin
