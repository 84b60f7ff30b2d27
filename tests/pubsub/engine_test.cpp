#include "goblin/pubsub/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "tests/support/redis_glob_reference.h"

namespace goblin::pubsub {
namespace {

using Got = std::multiset<std::tuple<Kind, std::string, SubscriberId>>;

Got Deliver(Engine& e, std::string_view channel, bool sharded, uint64_t* receivers = nullptr) {
  Got got;
  uint64_t n = e.Publish(channel, sharded, [&](Kind k, std::string_view p, auto subs) {
    for (SubscriberId s : subs) got.emplace(k, std::string(p), s);
  });
  if (receivers) *receivers = n;
  EXPECT_EQ(n, got.size());
  return got;
}

TEST(Engine, CountsFollowRedis) {
  Engine e;
  EXPECT_EQ(e.Subscribe(1, Kind::kChannel, "a").count, 1u);
  EXPECT_EQ(e.Subscribe(1, Kind::kChannel, "b").count, 2u);
  auto dup = e.Subscribe(1, Kind::kChannel, "a");  // duplicates confirm with the same count
  EXPECT_FALSE(dup.changed);
  EXPECT_EQ(dup.count, 2u);
  EXPECT_EQ(e.Subscribe(1, Kind::kPattern, "a*").count, 3u);  // channels + patterns together
  EXPECT_EQ(e.Subscribe(1, Kind::kShard, "s").count, 1u);     // shard channels apart
  EXPECT_EQ(e.Unsubscribe(1, Kind::kChannel, "zzz").count, 3u);
  EXPECT_FALSE(e.Unsubscribe(1, Kind::kChannel, "zzz").changed);
  EXPECT_EQ(e.Unsubscribe(1, Kind::kPattern, "a*").count, 2u);
  EXPECT_EQ(e.Count(1, Kind::kShard), 1u);
  auto names = e.Names(1, Kind::kChannel);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b"}));
  e.Remove(1);
  EXPECT_EQ(e.Count(1, Kind::kChannel), 0u);
  EXPECT_EQ(e.subscribers(), 0u);
  EXPECT_EQ(e.NumSub("a", false), 0u);
}

TEST(Engine, PublishCountsChannelAndEveryMatchingPatternPerClient) {
  Engine e;
  e.Subscribe(1, Kind::kChannel, "news.tech");
  e.Subscribe(2, Kind::kChannel, "news.tech");
  e.Subscribe(1, Kind::kPattern, "news.*");  // client 1 gets it twice
  e.Subscribe(3, Kind::kPattern, "news.*");
  e.Subscribe(3, Kind::kPattern, "*tech");
  e.Subscribe(4, Kind::kPattern, "sport.*");
  e.Subscribe(5, Kind::kShard, "news.tech");  // shard channels are another namespace
  uint64_t n = 0;
  Got got = Deliver(e, "news.tech", false, &n);
  EXPECT_EQ(n, 5u);
  EXPECT_EQ(got, (Got{{Kind::kChannel, "", 1},
                      {Kind::kChannel, "", 2},
                      {Kind::kPattern, "news.*", 1},
                      {Kind::kPattern, "news.*", 3},
                      {Kind::kPattern, "*tech", 3}}));
  EXPECT_EQ(Deliver(e, "news.tech", true), (Got{{Kind::kShard, "", 5}}));
  EXPECT_EQ(Deliver(e, "weather", false).size(), 0u);
  EXPECT_EQ(e.NumPat(), 3u);
  EXPECT_EQ(e.NumSub("news.tech", false), 2u);
  EXPECT_EQ(e.NumSub("news.tech", true), 1u);
  auto chans = e.Channels("news*", false, true);
  EXPECT_EQ(chans, (std::vector<std::string>{"news.tech"}));
  EXPECT_TRUE(e.Channels("x*", false, true).empty());
  EXPECT_EQ(e.Channels("", true, false), (std::vector<std::string>{"news.tech"}));
}

TEST(Engine, PatternIndexChecksOnlyCandidates) {
  Engine e;
  for (int i = 0; i < 8192; ++i) e.Subscribe(i, Kind::kPattern, "feed." + std::to_string(i) + ".*");
  e.Subscribe(9000, Kind::kPattern, "*.7.*");  // a leading wildcard: checked always
  uint64_t before = e.stats().patterns_checked;
  Got got = Deliver(e, "feed.7.x", false);
  EXPECT_EQ(got, (Got{{Kind::kPattern, "feed.7.*", 7}, {Kind::kPattern, "*.7.*", 9000}}));
  // Candidates: the wildcard pattern and those whose prefix "feed.7.x" starts with.
  EXPECT_LE(e.stats().patterns_checked - before, 3u);
  // Pruned on unsubscribe: nothing is left behind.
  for (int i = 0; i < 8192; ++i)
    e.Unsubscribe(i, Kind::kPattern, "feed." + std::to_string(i) + ".*");
  EXPECT_EQ(e.NumPat(), 1u);
  EXPECT_EQ(Deliver(e, "feed.7.x", false).size(), 1u);
}

// Random churn of subscriptions and publishes against a brute-force model.
TEST(Engine, MatchesABruteForceModelUnderChurn) {
  Engine e;
  std::map<SubscriberId, std::set<std::string>> chans, pats;
  std::mt19937 rng(77);
  const std::vector<std::string> names = {"a", "ab", "abc", "b", "ba", "a.b", "", "[a]", "a\\*"};
  const std::vector<std::string> patterns = {"a*", "*",    "?",     "a?",   "[ab]*",
                                             "*b", "a\\*", "[^a]*", "ab*c", "\\a*"};
  for (int step = 0; step < 20000; ++step) {
    SubscriberId s = rng() % 6;
    switch (rng() % 5) {
      case 0: {
        auto& n = names[rng() % names.size()];
        e.Subscribe(s, Kind::kChannel, n);
        chans[s].insert(n);
        break;
      }
      case 1: {
        auto& n = names[rng() % names.size()];
        e.Unsubscribe(s, Kind::kChannel, n);
        chans[s].erase(n);
        break;
      }
      case 2: {
        auto& p = patterns[rng() % patterns.size()];
        e.Subscribe(s, Kind::kPattern, p);
        pats[s].insert(p);
        break;
      }
      case 3: {
        auto& p = patterns[rng() % patterns.size()];
        e.Unsubscribe(s, Kind::kPattern, p);
        pats[s].erase(p);
        break;
      }
      default: {
        auto& ch = names[rng() % names.size()];
        Got want;
        for (auto& [sub, set] : chans)
          if (set.count(ch)) want.emplace(Kind::kChannel, "", sub);
        for (auto& [sub, set] : pats)
          for (auto& p : set)
            if (test::RedisGlobReference::Match(p, ch)) want.emplace(Kind::kPattern, p, sub);
        ASSERT_EQ(Deliver(e, ch, false), want) << "step " << step << " channel '" << ch << "'";
      }
    }
    ASSERT_EQ(e.Count(s, Kind::kChannel), chans[s].size() + pats[s].size());
  }
}

}  // namespace
}  // namespace goblin::pubsub
