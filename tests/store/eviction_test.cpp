#include "goblin/store/eviction.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace goblin::store {
namespace {

auto Always = [](const std::string&) { return true; };

TEST(S3Fifo, OneHitWondersLeaveFirstAndInInsertionOrder) {
  S3Fifo p;
  for (int i = 0; i < 10; ++i) p.Insert("k" + std::to_string(i));
  p.Touch("k0");                             // read again while in the small queue
  EXPECT_EQ(p.Evict(Always).value(), "k1");  // k0 moves to main instead
  EXPECT_EQ(p.Evict(Always).value(), "k2");
  EXPECT_EQ(p.stats().promoted, 1u);
  EXPECT_EQ(p.main_size(), 1u);
  EXPECT_TRUE(p.InGhost("k1"));
}

TEST(S3Fifo, GhostHitsGoStraightToMain) {
  S3Fifo p;
  p.Insert("a");
  p.Insert("b");
  EXPECT_EQ(p.Evict(Always).value(), "a");
  p.Insert("a");  // back soon after eviction
  EXPECT_EQ(p.stats().ghost_hits, 1u);
  EXPECT_EQ(p.main_size(), 1u);
  EXPECT_EQ(p.Evict(Always).value(), "b");  // small first while it is over its share
}

TEST(S3Fifo, MainIsAClockThatGivesReadObjectsAnotherRound) {
  S3Fifo p(/*small_percent=*/0);  // everything through main as soon as it is promoted
  for (const char* k : {"x", "y", "z"}) {
    p.Insert(k);
    p.Touch(k);
  }
  // Promotion of all three (each read once), then main: x was read (freq 0 after promotion).
  std::string first = p.Evict(Always).value();
  EXPECT_EQ(first, "x");
  p.Touch("y");
  EXPECT_EQ(p.Evict(Always).value(), "z");  // y gets another round
  EXPECT_EQ(p.Evict(Always).value(), "y");
  EXPECT_FALSE(p.Evict(Always));
}

TEST(S3Fifo, VetoedObjectsAreKeptAndAllVetoedMeansNone) {
  S3Fifo p;
  p.Insert("busy");
  p.Insert("idle");
  EXPECT_EQ(p.Evict([](const std::string& k) { return k != "busy"; }).value(), "idle");
  EXPECT_FALSE(p.Evict([](const std::string&) { return false; }));
  EXPECT_EQ(p.size(), 1u);
  EXPECT_GT(p.stats().vetoed, 0u);
}

TEST(S3Fifo, RemoveAndReinsertKeepOneEntryPerKey) {
  S3Fifo p;
  p.Insert("a");
  p.Insert("a");  // replaced object
  EXPECT_EQ(p.size(), 1u);
  p.Remove("a");
  p.Remove("a");
  EXPECT_EQ(p.size(), 0u);
  EXPECT_FALSE(p.Evict(Always));
}

// A skewed workload: a small hot set read often, a long tail read once. With room for 100
// objects, S3-FIFO keeps nearly all of the hot set where FIFO would not.
TEST(S3Fifo, KeepsTheHotSetUnderScanPressure) {
  S3Fifo p;
  std::unordered_set<std::string> cached;
  std::mt19937 rng(7);
  uint64_t hits = 0, hot_requests = 0;
  for (int i = 0; i < 20000; ++i) {
    bool hot = rng() % 2 == 0;
    std::string key = hot ? "hot" + std::to_string(rng() % 50) : "cold" + std::to_string(i);
    if (cached.count(key)) {
      p.Touch(key);
      if (hot) ++hits;
    } else {
      if (cached.size() >= 100) cached.erase(p.Evict(Always).value());
      p.Insert(key);
      cached.insert(key);
    }
    if (hot) ++hot_requests;
  }
  EXPECT_GT(static_cast<double>(hits) / static_cast<double>(hot_requests), 0.9);
}

// Reads counted by the caller (a store counts a hit in the record it found) and handed over
// when an object is judged (Evict's take_reads) evict exactly what the same reads as Touches
// would: one policy fed each way, the same random inserts, reads, removes and evictions.
TEST(S3Fifo, ReadsHandedOverWhenJudgedEvictExactlyAsTouchesWould) {
  for (uint32_t small_percent : {0u, 10u, 50u}) {
    S3Fifo eager(small_percent), lazy(small_percent);
    std::unordered_map<std::string, uint8_t>
        counted;  // the caller's count (capped like a record's)
    auto take = [&](const std::string& k) -> uint8_t {
      auto it = counted.find(k);
      if (it == counted.end()) return 0;
      const uint8_t n = it->second;
      counted.erase(it);
      return n;
    };
    std::mt19937_64 rng(1234 + small_percent);
    std::unordered_set<std::string> live;
    std::vector<std::string> keys;
    for (int i = 0; i < 300; ++i) keys.push_back("k" + std::to_string(i));
    size_t evictions = 0, took = 0;
    for (int step = 0; step < 200'000; ++step) {
      const std::string& k = keys[rng() % keys.size()];
      switch (rng() % 8) {
        case 0:
        case 1:  // a (re)put: a new version has no reads yet
          eager.Insert(k);
          lazy.Insert(k);
          counted.erase(k);
          live.insert(k);
          break;
        case 2:
          eager.Remove(k);
          lazy.Remove(k);
          counted.erase(k);
          live.erase(k);
          break;
        case 3:
        case 4:
        case 5:
          if (live.count(k) == 0) break;
          eager.Touch(k);
          if (uint8_t& n = counted[k]; n < 3) ++n;
          break;
        default: {
          // (a veto for some keys, the same in both)
          auto veto = [&](const std::string& key) { return key.back() != '7'; };
          auto a = eager.Evict(veto);
          auto b = lazy.Evict(veto, [&](const std::string& key) {
            ++took;
            return take(key);
          });
          ASSERT_EQ(a, b) << "step " << step;
          if (a) {
            live.erase(*a);
            counted.erase(*a);
            ++evictions;
          }
        }
      }
      ASSERT_EQ(eager.size(), lazy.size());
    }
    EXPECT_GT(evictions, 10'000u);
    EXPECT_GT(took, evictions);
    EXPECT_EQ(eager.stats().promoted, lazy.stats().promoted);
    EXPECT_EQ(eager.stats().vetoed, lazy.stats().vetoed);
  }
}

}  // namespace
}  // namespace goblin::store
