// KeyspaceEvents: Redis's notify-keyspace-events strings both ways, the class filter, the
// channel and message of each event, and events posted from other threads reaching the
// publisher on the EventSource's thread.
#include "goblin/core/keyspace_events.h"

#include <gtest/gtest.h>

#include <thread>

namespace goblin::core {
namespace {

using store::ObjectEvent;

TEST(KeyspaceEvents, ClassStringsAreRedissBothWays) {
  // (the canonical forms as redis-server 7.0's CONFIG GET shows them)
  for (auto [in, out] :
       {std::pair{"KEA", "AKE"}, std::pair{"Kgn$xm", "g$xnKm"}, std::pair{"E", "E"},
        std::pair{"", ""}, std::pair{"g$lshzxetdKE", "AKE"}, std::pair{"Ex", "xE"}}) {
    auto c = KeyspaceEvents::ParseClasses(in);
    ASSERT_TRUE(c) << in;
    EXPECT_EQ(KeyspaceEvents::ClassesString(*c), out) << in;
  }
  EXPECT_FALSE(KeyspaceEvents::ParseClasses("KQ"));
  EXPECT_FALSE(KeyspaceEvents::ParseClasses(" "));
}

TEST(KeyspaceEvents, OnlySelectedClassesArePublishedOnBothChannels) {
  auto k = KeyspaceEvents::Create();
  ASSERT_TRUE(k);
  KeyspaceEvents& ke = **k;
  std::vector<std::string> got;
  ke.set_publisher([&](std::string_view ch, std::string_view msg) {
    got.push_back(std::string(ch) + " " + std::string(msg));
  });
  ke.Post(ObjectEvent::kSet, "off");  // (nothing while off)
  EXPECT_EQ(ke.Poll(), 0u);
  ke.set_classes(*KeyspaceEvents::ParseClasses("Kg"));  // keyspace channel, generic only
  ke.Post(ObjectEvent::kSet, "a");
  ke.Post(ObjectEvent::kDel, "a");
  ke.Post(ObjectEvent::kExpired, "a");
  EXPECT_FALSE(ke.PrepareSleep());  // (something waits)
  EXPECT_EQ(ke.Poll(), 1u);
  EXPECT_TRUE(ke.PrepareSleep());
  ke.set_classes(*KeyspaceEvents::ParseClasses("KEA"));
  ke.Post(ObjectEvent::kEvicted, "b");
  ke.Post(ObjectEvent::kPersist, "c");
  ke.Poll();
  EXPECT_EQ(got, (std::vector<std::string>{"__keyspace@0__:a del", "__keyspace@0__:b evicted",
                                           "__keyevent@0__:evicted b", "__keyspace@0__:c persist",
                                           "__keyevent@0__:persist c"}));
  ke.set_classes(*KeyspaceEvents::ParseClasses("A"));  // no channel: nothing
  ke.Post(ObjectEvent::kSet, "d");
  EXPECT_EQ(ke.Poll(), 0u);
}

TEST(KeyspaceEvents, EventsOfOtherThreadsAllArrive) {
  auto k = KeyspaceEvents::Create();
  ASSERT_TRUE(k);
  KeyspaceEvents& ke = **k;
  ke.set_classes(*KeyspaceEvents::ParseClasses("E$"));
  size_t n = 0;
  ke.set_publisher([&](std::string_view, std::string_view) { ++n; });
  constexpr int kThreads = 3, kEach = 5000;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&ke, t] {
      for (int i = 0; i < kEach; ++i) ke.Post(ObjectEvent::kSet, "k" + std::to_string(t));
    });
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (n < size_t{kThreads} * kEach && std::chrono::steady_clock::now() < deadline) {
    if (ke.Poll() == 0) std::this_thread::yield();
  }
  for (auto& t : ts) t.join();
  ke.Poll();
  EXPECT_EQ(n, size_t{kThreads} * kEach);
}

}  // namespace
}  // namespace goblin::core
