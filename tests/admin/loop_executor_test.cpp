#include "goblin/admin/loop_executor.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <thread>

namespace goblin::admin {
namespace {

using namespace std::chrono_literals;

// A loop like the core's: sleeps on the executor's fd, runs what was posted.
TEST(LoopExecutor, RunsCallsOnTheLoopThreadAndWakesIt) {
  auto ex = LoopExecutor::Create();
  ASSERT_TRUE(ex);
  LoopExecutor& e = **ex;
  std::atomic<bool> stop{false};
  std::thread::id loop_id;
  std::thread loop([&] {
    loop_id = std::this_thread::get_id();
    while (!stop) {
      if (e.PrepareSleep()) {
        pollfd p{e.event_fd(), POLLIN, 0};
        poll(&p, 1, 50);
      }
      e.Poll();
    }
  });
  EXPECT_EQ(e.Poll(), 0u) << "nothing posted: no work";
  int value = 0;
  std::thread::id ran_on;
  for (int i = 0; i < 100; ++i) {
    auto r = e.Call(
        [&] {
          ++value;
          ran_on = std::this_thread::get_id();
        },
        5s);
    ASSERT_TRUE(r) << r.error().ToString();
  }
  EXPECT_EQ(value, 100);
  EXPECT_EQ(ran_on, loop_id);
  stop = true;
  loop.join();
}

TEST(LoopExecutor, ACallTheLoopNeverTakesTimesOutAndNeverRuns) {
  auto ex = LoopExecutor::Create();
  ASSERT_TRUE(ex);
  bool ran = false;
  auto r = (*ex)->Call([&] { ran = true; }, 50ms);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), StatusCode::kUnavailable);
  EXPECT_FALSE((*ex)->PrepareSleep()) << "the abandoned call still rang the loop";
  (*ex)->Poll();  // the loop comes back later: the abandoned call is skipped
  EXPECT_FALSE(ran);
  EXPECT_TRUE((*ex)->PrepareSleep());
}

TEST(LoopExecutor, ClosedMeansUnavailableAtOnce) {
  auto ex = LoopExecutor::Create();
  ASSERT_TRUE(ex);
  (*ex)->Close();
  auto t0 = std::chrono::steady_clock::now();
  auto r = (*ex)->Call([] {}, 5s);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
}

}  // namespace
}  // namespace goblin::admin
