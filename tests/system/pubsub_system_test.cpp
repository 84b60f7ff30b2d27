// Pub/sub through goblin-core's ring plane with libgoblin: Redis's counts and deliveries,
// gateway-style fan-out (several subscribers behind one connection get one Delivery),
// PUBSUB queries, cleanup when a subscriber leaves, and slow subscribers dropped at their
// output limit while the publisher carries on.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "goblin/client/connection.h"
#include "tests/system/core_process.h"
#include "tests/system/process.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;
using client::Connection;
using Kind = Connection::SubKind;

struct Core : test::CoreProcess {
  using CoreProcess::CoreProcess;
  std::unique_ptr<Connection> Connect() {
    auto c = Connection::Open("unix:" + sock);
    EXPECT_TRUE(c) << c.error().ToString();
    return c ? std::move(*c) : nullptr;
  }
};

std::vector<std::string> V(std::initializer_list<const char*> l) { return {l.begin(), l.end()}; }

TEST(PubSubSystem, SubscribePublishAndDeliverWithRedisCounts) {
  Core core("ps1");
  auto sub = core.Connect(), pub = core.Connect();
  auto c = sub->Subscribe(Kind::kChannel, V({"news", "news", "sport"}));
  ASSERT_TRUE(c) << c.error().ToString();
  ASSERT_EQ(c->size(), 3u);  // one confirmation per argument, duplicates too
  EXPECT_EQ((*c)[0].count, 1u);
  EXPECT_EQ((*c)[1].count, 1u);
  EXPECT_EQ((*c)[2].count, 2u);
  auto p = sub->Subscribe(Kind::kPattern, V({"n*"}));
  ASSERT_TRUE(p);
  EXPECT_EQ((*p)[0].count, 3u);                          // channels + patterns
  EXPECT_EQ(pub->Publish("news", "hello").value(), 2u);  // the channel and the pattern
  EXPECT_EQ(pub->Publish("nothing-here", "x").value(), 1u);
  EXPECT_EQ(pub->Publish("weather", "x").value(), 0u);
  std::multiset<std::tuple<int, std::string, std::string, std::string>> got;
  for (int i = 0; i < 3; ++i) {
    auto m = sub->NextMessage(5s);
    ASSERT_TRUE(m && *m);
    got.emplace(static_cast<int>((*m)->kind), (*m)->pattern, (*m)->channel, (*m)->payload);
  }
  EXPECT_EQ(
      got,
      (std::multiset<std::tuple<int, std::string, std::string, std::string>>{
          {0, "", "news", "hello"}, {1, "n*", "news", "hello"}, {1, "n*", "nothing-here", "x"}}));
  EXPECT_FALSE(sub->NextMessage(50ms).value());
  // Unsubscribe everything: one confirmation per channel, then a nil one when none is left.
  auto u = sub->Subscribe(Kind::kChannel, {}, /*unsubscribe=*/true);
  ASSERT_TRUE(u);
  ASSERT_EQ(u->size(), 2u);
  EXPECT_EQ(u->back().count, 1u);  // the pattern remains
  auto none = sub->Subscribe(Kind::kChannel, {}, true);
  ASSERT_TRUE(none);
  ASSERT_EQ(none->size(), 1u);
  EXPECT_FALSE((*none)[0].name.has_value());
  EXPECT_EQ((*none)[0].count, 1u);
  // Shard channels are their own family with their own count.
  auto s = sub->Subscribe(Kind::kShard, V({"orders"}));
  ASSERT_TRUE(s);
  EXPECT_EQ((*s)[0].count, 1u);
  EXPECT_EQ(pub->Publish("orders", "o1", /*sharded=*/true).value(), 1u);
  EXPECT_EQ(pub->Publish("orders", "o2").value(), 0u);  // not sharded: "orders" !~ n*
}

TEST(PubSubSystem, OneDeliveryCarriesEverySubscriberBehindAConnection) {
  Core core("ps2");
  auto gw = core.Connect(), pub = core.Connect();
  for (uint64_t sid : {11, 12, 13})
    ASSERT_TRUE(gw->Subscribe(Kind::kChannel, V({"t"}), false, sid));
  ASSERT_TRUE(gw->Subscribe(Kind::kPattern, V({"t*"}), false, 12));
  EXPECT_EQ(pub->Publish("t", "payload").value(), 4u);
  auto a = gw->NextMessage(5s), b = gw->NextMessage(5s);
  ASSERT_TRUE(a && *a && b && *b);
  EXPECT_EQ((*a)->kind, Kind::kChannel);
  EXPECT_EQ((*a)->session_ids, (std::vector<uint64_t>{11, 12, 13}));
  EXPECT_EQ((*b)->kind, Kind::kPattern);
  EXPECT_EQ((*b)->session_ids, (std::vector<uint64_t>{12}));
  auto q = pub->PubsubQuery(Connection::Query::kNumSub, V({"t", "u"}));
  ASSERT_TRUE(q) << q.error().ToString();
  EXPECT_EQ(q->entries, (std::vector<std::pair<std::string, int64_t>>{{"t", 3}, {"u", 0}}));
  EXPECT_EQ(pub->PubsubQuery(Connection::Query::kNumPat).value().number, 1);
  gw.reset();  // the connection leaves: all of its subscribers go
  for (int i = 0; i < 100; ++i) {
    if (pub->Publish("t", "x").value() == 0) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(pub->PubsubQuery(Connection::Query::kNumSub, V({"t"})).value().entries[0].second, 0);
  EXPECT_EQ(pub->PubsubQuery(Connection::Query::kNumPat).value().number, 0);
}

// The non-blocking API: acks and deliveries come back as views, a delivery kept by a
// synchronous call comes first, errors reach the handler, a full ring says so.
struct Recorder : Connection::PubsubHandler {
  std::vector<std::pair<uint64_t, uint64_t>> acks;
  std::vector<std::string> messages;  // "kind|pattern|channel|payload|sessions"
  std::vector<uint64_t> errors;
  void OnPublishAck(uint64_t corr, uint64_t receivers) override {
    acks.emplace_back(corr, receivers);
  }
  void OnMessage(const Connection::MessageView& m) override {
    messages.push_back(std::to_string(static_cast<int>(m.kind)) + "|" + std::string(m.pattern) +
                       "|" + std::string(m.channel) + "|" + std::string(m.payload) + "|" +
                       std::to_string(m.sessions));
  }
  void OnError(uint64_t corr, const Status&) override { errors.push_back(corr); }
  // Polls (sleeping on the wake fd between polls) until `done` or 5 s.
  bool PollUntil(Connection& c, const std::function<bool()>& done) {
    for (int i = 0; i < 500 && !done(); ++i) {
      auto n = c.PollPubsub(*this);
      if (!n) return false;
      if (*n == 0 && c.PrepareSleep()) {
        pollfd p{c.wake_fd(), POLLIN, 0};
        poll(&p, 1, 10);
      }
      c.FinishSleep();
    }
    return done();
  }
};

TEST(PubSubSystem, NonBlockingPublishAndDeliveryViews) {
  Core core("ps-async");
  auto sub = core.Connect(), pub = core.Connect();
  ASSERT_TRUE(sub->Subscribe(Kind::kChannel, V({"a"})));
  ASSERT_TRUE(sub->Subscribe(Kind::kPattern, V({"a*"})));
  // A delivery that arrives while a synchronous call waits is kept, then handed out first.
  ASSERT_EQ(pub->Publish("a", "first").value(), 2u);
  ASSERT_TRUE(sub->Subscribe(Kind::kChannel, V({"b"})));
  Recorder r;
  auto c1 = pub->PublishAsync("a", "second");
  auto c2 = pub->PublishAsync("zzz", "nobody");
  ASSERT_TRUE(c1 && c2);
  EXPECT_NE(*c1, *c2);
  ASSERT_TRUE(r.PollUntil(*pub, [&] { return r.acks.size() == 2; }));
  EXPECT_EQ(r.acks, (std::vector<std::pair<uint64_t, uint64_t>>{{*c1, 2}, {*c2, 0}}));
  ASSERT_TRUE(r.PollUntil(*sub, [&] { return r.messages.size() == 4; }));
  EXPECT_EQ(r.messages, (std::vector<std::string>{"0||a|first|1", "1|a*|a|first|1", "0||a|second|1",
                                                  "1|a*|a|second|1"}));
  // Too large for any ring message: refused before anything is sent.
  std::string huge(8192, 'x');
  auto big = pub->PublishAsync("a", huge);
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code(), StatusCode::kInvalidArgument);
  // Filling the ring while the core is stopped: ResourceExhausted, never a block; once the
  // core runs again every ack comes.
  core.proc.Signal(SIGSTOP);
  size_t sent = 0;
  for (; sent < 10000; ++sent) {
    auto c = pub->PublishAsync("zzz", "p");
    if (!c) {
      EXPECT_EQ(c.error().code(), StatusCode::kResourceExhausted);
      break;
    }
  }
  EXPECT_GT(sent, 0u);
  EXPECT_LT(sent, 10000u);
  core.proc.Signal(SIGCONT);
  r.acks.clear();
  ASSERT_TRUE(r.PollUntil(*pub, [&] { return r.acks.size() == sent; }));
  EXPECT_TRUE(r.errors.empty());
}

TEST(PubSubSystem, ChannelListsSpanSeveralReplies) {
  Core core("ps3");
  auto sub = core.Connect();
  std::vector<std::string> names;
  for (int i = 0; i < 2000; ++i) names.push_back(fmt::format("channel:{:05}", i));
  for (size_t at = 0; at < names.size(); at += 200) {
    std::span<const std::string> part(names.data() + at, 200);
    auto c = sub->Subscribe(Kind::kChannel, part);
    ASSERT_TRUE(c) << c.error().ToString();
    ASSERT_EQ(c->size(), 200u);
    EXPECT_EQ(c->back().count, at + 200);
  }
  auto all = sub->PubsubQuery(Connection::Query::kChannels);
  ASSERT_TRUE(all) << all.error().ToString();
  EXPECT_EQ(all->entries.size(), 2000u);  // far more than one 4 KiB ring message holds
  auto some = sub->PubsubQuery(Connection::Query::kChannels, V({"channel:0001?"}));
  ASSERT_TRUE(some);
  EXPECT_EQ(some->entries.size(), 10u);
  auto u = sub->Subscribe(Kind::kChannel, {}, true);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->size(), 2000u);
  EXPECT_EQ(u->back().count, 0u);
}

TEST(PubSubSystem, ASlowSubscriberIsDroppedAndThePublisherCarriesOn) {
  Core core("ps4", {"--client-output-limit", "256K", "--client-output-soft-limit", "0"});
  auto slow = core.Connect(), fast = core.Connect(), pub = core.Connect();
  ASSERT_TRUE(slow->Subscribe(Kind::kChannel, V({"firehose"})));
  ASSERT_TRUE(fast->Subscribe(Kind::kChannel, V({"firehose"})));
  std::string payload(1000, 'p');
  int fast_got = 0;
  uint64_t last_receivers = 0;
  for (int i = 0; i < 2000; ++i) {
    auto r = pub->Publish("firehose", payload);
    ASSERT_TRUE(r) << r.error().ToString();
    last_receivers = *r;
    while (auto m = fast->NextMessage(0ns).value_or(std::nullopt)) ++fast_got;
  }
  while (auto m = fast->NextMessage(200ms).value_or(std::nullopt)) ++fast_got;
  EXPECT_EQ(fast_got, 2000);      // the reader that keeps up loses nothing
  EXPECT_EQ(last_receivers, 1u);  // the one that never read was dropped
  EXPECT_FALSE(slow->Ping());     // and told so: its connection is gone
  EXPECT_NE(core.proc.Output().find("fell behind its output limits"), std::string::npos)
      << core.proc.Output();
}

// Redis's soft limit: over it for longer than the soft time is as bad as over the hard one.
// The core's memory stays bounded however much is published at the stalled subscriber.
TEST(PubSubSystem, TheSoftLimitDropsASubscriberThatStaysBehind) {
  Core core("ps5", {"--client-output-limit", "32M", "--client-output-soft-limit", "64K",
                    "--client-output-soft-time", "200ms"});
  auto slow = core.Connect(), pub = core.Connect();
  ASSERT_TRUE(slow->Subscribe(Kind::kChannel, V({"c"})));
  [[maybe_unused]] uint64_t rss_before = test::RssKib(core.proc.pid());
  std::string payload(2000, 'q');
  bool dropped = false;
  auto t0 = std::chrono::steady_clock::now();
  while (!dropped && std::chrono::steady_clock::now() - t0 < 10s) {
    auto r = pub->Publish("c", payload);
    ASSERT_TRUE(r) << r.error().ToString();
    dropped = *r == 0;
    std::this_thread::sleep_for(1ms);  // ~2 MB/s: far from the hard limit within the soft time
  }
  EXPECT_TRUE(dropped);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 200ms);  // not before the soft time
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_LT(test::RssKib(core.proc.pid()), rss_before + 16 * 1024);  // nowhere near unbounded
#endif
  EXPECT_NE(core.proc.Output().find("fell behind its output limits"), std::string::npos);
}

}  // namespace
}  // namespace goblin
