// Weighted rendezvous hashing and the member record: who owns a key, how many keys move when
// a member joins or leaves, shares by weight.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <map>
#include <string>
#include <vector>

#include "goblin/cluster/member.h"
#include "goblin/cluster/rendezvous.h"

namespace goblin::cluster {
namespace {

std::vector<RendezvousNode> Nodes(const std::vector<std::string>& names,
                                  const std::vector<double>& weights = {}) {
  std::vector<RendezvousNode> out;
  for (size_t i = 0; i < names.size(); ++i) {
    out.push_back({RendezvousSeed(names[i]), weights.empty() ? 1.0 : weights[i]});
  }
  return out;
}

constexpr int kKeys = 20000;
std::string Key(int i) { return fmt::format("host/objects/{}?v=1", i); }

TEST(Rendezvous, OwnerIsTheFirstOfTheRankAndDeterministic) {
  auto nodes = Nodes({"a", "b", "c", "d"});
  std::vector<size_t> rank;
  for (int i = 0; i < 1000; ++i) {
    RendezvousRank(nodes, Key(i), rank);
    ASSERT_EQ(rank.size(), 4u);
    EXPECT_EQ(rank[0], RendezvousOwner(nodes, Key(i)));
    EXPECT_EQ(RendezvousOwner(nodes, Key(i)), RendezvousOwner(Nodes({"a", "b", "c", "d"}), Key(i)));
  }
}

TEST(Rendezvous, AJoiningMemberTakesAboutItsShareAndNothingMovesBetweenOthers) {
  auto three = Nodes({"core-a", "core-b", "core-c"});
  auto four = Nodes({"core-a", "core-b", "core-c", "core-d"});
  int moved = 0;
  for (int i = 0; i < kKeys; ++i) {
    size_t before = RendezvousOwner(three, Key(i)), after = RendezvousOwner(four, Key(i));
    if (before != after) {
      ++moved;
      EXPECT_EQ(after, 3u) << Key(i) << " moved between old members";
    }
  }
  double fraction = static_cast<double>(moved) / kKeys;
  EXPECT_NEAR(fraction, 0.25, 0.02) << moved;
}

TEST(Rendezvous, ALeavingMembersKeysGoToTheirSecondChoiceOnly) {
  auto four = Nodes({"core-a", "core-b", "core-c", "core-d"});
  auto without_b = Nodes({"core-a", "core-c", "core-d"});  // indices shift: map by name
  const char* names4[] = {"core-a", "core-b", "core-c", "core-d"};
  const char* names3[] = {"core-a", "core-c", "core-d"};
  std::vector<size_t> rank;
  int moved = 0;
  for (int i = 0; i < kKeys; ++i) {
    RendezvousRank(four, Key(i), rank);
    std::string before = names4[rank[0]];
    std::string after = names3[RendezvousOwner(without_b, Key(i))];
    if (before == "core-b") {
      ++moved;
      EXPECT_EQ(after, names4[rank[1]]);
    } else {
      EXPECT_EQ(after, before);
    }
  }
  EXPECT_NEAR(static_cast<double>(moved) / kKeys, 0.25, 0.02);
}

TEST(Rendezvous, SharesFollowWeights) {
  auto nodes = Nodes({"big", "small-1", "small-2"}, {3.0, 1.0, 1.0});
  std::map<size_t, int> count;
  for (int i = 0; i < kKeys; ++i) ++count[RendezvousOwner(nodes, Key(i))];
  EXPECT_NEAR(count[0] / double(kKeys), 0.6, 0.02);
  EXPECT_NEAR(count[1] / double(kKeys), 0.2, 0.02);
  EXPECT_NEAR(count[2] / double(kKeys), 0.2, 0.02);
}

TEST(Rendezvous, VariantsOfAKeyShareItsOwner) {
  auto nodes = Nodes({"a", "b", "c", "d", "e"});
  for (int i = 0; i < 500; ++i) {
    std::string url = Key(i);
    std::string variant = url + std::string(1, '\0') + "#accept-encoding=gzip";
    EXPECT_EQ(RendezvousOwner(nodes, url), RendezvousOwner(nodes, variant));
  }
}

TEST(Member, EncodesAndDecodesEveryField) {
  Member m;
  m.name = "core-1";
  m.address = "ucx://10.0.0.5:7100";
  m.zone = "rack-2";
  m.shards = 4;
  m.capacity = 3ull << 40;
  m.pid = 4242;
  m.version = "0.9.0";
  m.started_unix_ms = 1796400000000;
  m.host = "store7";
  m.ring = "/run/goblin/core.sock";
  auto d = DecodeMember("core-1", EncodeMember(m));
  ASSERT_TRUE(d) << d.error().ToString();
  EXPECT_EQ(d->name, m.name);
  EXPECT_EQ(d->address, m.address);
  EXPECT_EQ(d->zone, m.zone);
  EXPECT_EQ(d->shards, 4u);
  EXPECT_EQ(d->capacity, m.capacity);
  EXPECT_EQ(d->pid, 4242u);
  EXPECT_EQ(d->version, "0.9.0");
  EXPECT_EQ(d->started_unix_ms, m.started_unix_ms);
  EXPECT_EQ(d->host, "store7");
  EXPECT_EQ(d->ring, "/run/goblin/core.sock");
  EXPECT_EQ(LocalRingPath(*d), "");  // another host's (or no such socket here)
  m.host = ThisHostName();
  m.ring = "/nonexistent/core.sock";
  EXPECT_EQ(LocalRingPath(m), "");  // this host, but no socket there
  EXPECT_DOUBLE_EQ(MemberWeight(*d), 3072.0);
}

TEST(Member, BadRecordsAreErrors) {
  EXPECT_FALSE(DecodeMember("x", "ucx://1.2.3.4:5"));  // the hand-written registration's form
  EXPECT_FALSE(DecodeMember("x", "{\"shards\":2}"));   // no address
  EXPECT_FALSE(DecodeMember("x", "[1,2]"));
  EXPECT_FALSE(DecodeMember("x", "{\"address\":"));
  auto ok = DecodeMember("x", "{\"address\":\"ucx://h:1\",\"shards\":\"many\"}");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->shards, 1u);  // a field of the wrong type reads as absent
}

TEST(Member, PrefixesAndKeys) {
  EXPECT_EQ(NormalizePrefix(""), "/goblin");
  EXPECT_EQ(NormalizePrefix("goblin/"), "/goblin");
  EXPECT_EQ(NormalizePrefix("/site/a//"), "/site/a");
  EXPECT_EQ(MemberKey("/goblin", "core-1"), "/goblin/cores/core-1");
  EXPECT_EQ(MembersPrefix("x"), "/x/cores/");
}

}  // namespace
}  // namespace goblin::cluster
