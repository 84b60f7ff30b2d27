// reactor::Loop: work announced through a wake fd (an eventfd written after the work is
// queued, as the store's sync thread and io_uring completions do) is polled before the loop
// sleeps, whatever its polling options. A loop that drained the fd and then slept without
// another poll round lost the work until something else woke it (a put's answer, 5 s).
// And the round's cadence: transports every round, the rest every background_every-th. And a
// loop preempted while it spins (an oversubscribed CPU) sleeps instead.
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ostream>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "goblin/common/clock.h"
#include "goblin/common/fd.h"
#include "goblin/reactor/event_source.h"
#include "goblin/reactor/handler.h"
#include "goblin/reactor/loop.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;

// Takes what another thread posted, once per loop round (as CoreService::OnPoll takes the
// store's completions).
class PostedWork : public reactor::Handler {
 public:
  void OnMessage(reactor::Session&, std::span<const uint8_t>) override {}
  size_t OnPoll() override {
    const uint64_t p = posted.load(std::memory_order_acquire);
    if (p == taken_) return 0;
    taken_ = p;
    taken.store(p, std::memory_order_release);
    return 1;
  }
  std::atomic<uint64_t> posted{0}, taken{0};

 private:
  uint64_t taken_ = 0;
};

struct Options {
  const char* name;
  std::chrono::nanoseconds busy_poll, events_every;
};
void PrintTo(const Options& o, std::ostream* os) { *os << o.name; }

class LoopWakeFd : public ::testing::TestWithParam<Options> {};

TEST_P(LoopWakeFd, WorkAnnouncedThroughAWakeFdIsPolledBeforeTheLoopSleeps) {
  PostedWork h;
  reactor::LoopOptions o;
  o.busy_poll = GetParam().busy_poll;
  o.events_every = GetParam().events_every;
  auto loop = reactor::Loop::Create(o, &h);
  ASSERT_TRUE(loop) << loop.error().ToString();
  UniqueFd efd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  ASSERT_TRUE(efd);
  ASSERT_TRUE((*loop)->AddWakeFd(efd.get()));
  std::thread t([&] { (void)(*loop)->Run(); });
  // Each post lands at a random moment of the loop's round (polling, looking at its fds,
  // going to sleep) and must be taken within 2 s.
  std::mt19937 rng(7);
  uint64_t lost = 0;
  for (uint64_t i = 1; i <= 20'000 && lost == 0; ++i) {
    for (uint32_t spin = rng() % 2000; spin > 0; --spin) asm volatile("" ::: "memory");
    h.posted.store(i, std::memory_order_release);
    uint64_t one = 1;
    ASSERT_EQ(write(efd.get(), &one, sizeof one), 8);
    const uint64_t deadline = MonotonicNanos() + 2'000'000'000;
    while (h.taken.load(std::memory_order_acquire) != i) {
      if (MonotonicNanos() > deadline) {
        lost = i;
        break;
      }
      std::this_thread::yield();
    }
  }
  (*loop)->Stop();
  t.join();
  EXPECT_EQ(lost, 0u) << "post " << lost << " was not taken within 2 s (a lost wake-up)";
}

INSTANTIATE_TEST_SUITE_P(Options, LoopWakeFd,
                         ::testing::Values(Options{"SleepsAtOnceLooksAtFdsEveryRound", 0ns, 0ns},
                                           Options{"SleepsAtOnce", 0ns, 20us},
                                           Options{"Defaults", reactor::LoopOptions{}.busy_poll,
                                                   reactor::LoopOptions{}.events_every}),
                         [](const auto& info) { return std::string(info.param.name); });

// Counts its polls; reports work on each while `busy`.
class CountingSource : public reactor::EventSource {
 public:
  explicit CountingSource(bool transport)
      : transport_(transport), efd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  int event_fd() const override { return efd_.get(); }
  size_t Poll() override {
    polls.fetch_add(1, std::memory_order_relaxed);
    return busy.load(std::memory_order_relaxed) ? 1 : 0;
  }
  bool PrepareSleep() override { return true; }
  void Close() override {}
  bool transport() const override { return transport_; }
  std::atomic<uint64_t> polls{0};
  std::atomic<bool> busy{false};

 private:
  bool transport_;
  UniqueFd efd_;
};

class CountingHandler : public reactor::Handler {
 public:
  void OnMessage(reactor::Session&, std::span<const uint8_t>) override {}
  size_t OnPoll() override {
    polls.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  std::atomic<uint64_t> polls{0};
};

struct Counts {
  uint64_t transport = 0, background = 0, handler = 0;
};

// Runs a never-sleeping loop with one transport and one other source for `for_time`.
Counts RunCounting(uint32_t every, bool transport_busy, std::chrono::milliseconds for_time) {
  CountingHandler h;
  CountingSource transport(true), background(false);
  transport.busy = transport_busy;
  reactor::LoopOptions o;
  o.never_sleep = true;
  o.background_every = every;
  auto loop = reactor::Loop::Create(o, &h);
  EXPECT_TRUE(loop) << loop.error().ToString();
  if (!loop) return {};
  EXPECT_TRUE((*loop)->AddSource(&transport));
  EXPECT_TRUE((*loop)->AddSource(&background));
  std::thread t([&] { (void)(*loop)->Run(); });
  std::this_thread::sleep_for(for_time);
  (*loop)->Stop();
  t.join();
  return {transport.polls.load(), background.polls.load(), h.polls.load()};
}

TEST(LoopCadence, TransportsArePolledEveryRoundTheRestEveryFewWhetherIdleOrBusy) {
  for (bool busy : {false, true}) {
    SCOPED_TRACE(busy ? "the transport has work every round" : "idle");
    // Every 8th round is a full one (a look at the fds every 200 us starts a new count, so
    // a few more): the transport is polled 7-8 times as often as the rest, which is never
    // starved by a busy transport.
    const Counts c = RunCounting(8, busy, 100ms);
    ASSERT_GT(c.background, 100u);
    EXPECT_EQ(c.handler, c.background);
    EXPECT_LE(c.transport, 8 * c.background);
    EXPECT_GT(c.transport, 6 * c.background);
    // background_every 1: everything every round (the loop before the cadence).
    const Counts one = RunCounting(1, busy, 50ms);
    ASSERT_GT(one.background, 100u);
    EXPECT_EQ(one.transport, one.background);
    EXPECT_EQ(one.handler, one.background);
  }
}

// A loop that spins on a CPU another thread wants (two CPUs shared by the core, a client and
// a build) is run in turns of a time slice: each time work came, it found it one slice late,
// and it never slept (the work came more often than its spin ran out). Now an idle stretch of
// polls that took more than SpinBackoff::kPreemptedNs shows it was preempted, and it sleeps
// instead, to be woken by the wake fd at once. Here work comes every millisecond with a 5 ms
// spin, and a thread that never sleeps shares the loop's CPU.
class LoopOnABusyCpu : public ::testing::TestWithParam<bool> {};

TEST_P(LoopOnABusyCpu, PreemptedWhileSpinningItSleepsInstead) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &allowed)) ++cpu;
  ASSERT_LT(cpu, CPU_SETSIZE);
  auto pin = [cpu] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
  };
  PostedWork h;
  reactor::LoopOptions o;
  o.busy_poll = 5ms;
  o.yield_when_polling = GetParam();
  auto loop = reactor::Loop::Create(o, &h);
  ASSERT_TRUE(loop) << loop.error().ToString();
  UniqueFd efd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  ASSERT_TRUE(efd);
  ASSERT_TRUE((*loop)->AddWakeFd(efd.get()));
  std::atomic<bool> stop{false}, pinned_loop{false}, pinned_hog{false};
  std::thread hog([&] {
    pinned_hog = pin();
    while (!stop.load(std::memory_order_relaxed)) asm volatile("" ::: "memory");
  });
  std::thread t([&] {
    pinned_loop = pin();
    (void)(*loop)->Run();
  });
  for (uint64_t i = 1; i <= 400; ++i) {
    std::this_thread::sleep_for(1ms);
    h.posted.store(i, std::memory_order_release);
    uint64_t one = 1;
    ASSERT_EQ(write(efd.get(), &one, sizeof one), 8);
  }
  stop = true;
  hog.join();
  const uint64_t deadline = MonotonicNanos() + 5'000'000'000;  // (the last post is taken)
  while (h.taken.load(std::memory_order_acquire) != 400 && MonotonicNanos() < deadline)
    std::this_thread::sleep_for(1ms);
  (*loop)->Stop();
  t.join();
  ASSERT_TRUE(pinned_loop && pinned_hog) << "could not pin the threads to CPU " << cpu;
  EXPECT_EQ(h.taken.load(), 400u);
  const reactor::LoopStats& st = (*loop)->stats();
  EXPECT_GT(st.preempted, 0u) << "the loop never found that it had been preempted";
  EXPECT_GT(st.sleeps, 0u) << "the loop spun through 400 posts on a CPU it shared";
}

INSTANTIATE_TEST_SUITE_P(Polling, LoopOnABusyCpu, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Yielding" : "Pausing"; });

}  // namespace
}  // namespace goblin
