// The reactor: one event loop thread serving a shard's event sources (the transports side by
// side: ring/ and verbs/ are siblings on top of this layer) and its handler's own work. Each
// round polls the handler (OnPoll) and every source; after the last work it busy-polls for
// `busy_poll` (pausing, or yielding the CPU with yield_when_polling), then asks every
// source whether it may sleep and sleeps in epoll on their fds, the wake fds (a store's
// eventfds) and the stop fd, for no longer than the handler and the sources allow.
// Nothing here knows about messages, sessions or transports.
// Threading: Create/AddWakeFd/AddSource before Run; Run on the loop thread; Stop() from
// any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "goblin/common/fd.h"
#include "goblin/common/status.h"
#include "goblin/reactor/event_source.h"
#include "goblin/reactor/handler.h"

namespace goblin::reactor {

struct LoopOptions {
  std::chrono::nanoseconds busy_poll = std::chrono::microseconds(50);
  // While it polls, the loop looks at its fds (accepts, hang-ups, the stop fd) this often,
  // not every few rounds: epoll_wait is a system call, and a request that arrives during one
  // waits for it (2.2 us in a PVM guest, where every 64th idle round paid one).
  std::chrono::nanoseconds events_every = std::chrono::microseconds(200);
  // The loop polls its transports (EventSource::transport) every round and the rest (the
  // handler's OnPoll, other sources, the clock that decides on events and sleep) every this
  // many rounds: a request that arrives waits for the next transport poll, not for a round
  // of housekeeping (~200 ns of it here, where an idle transport poll is ~40 ns). 1: every
  // round polls everything.
  uint32_t background_every = 8;
  // Never sleep (dedicated CPUs: lowest latency, one CPU always busy).
  bool never_sleep = false;
  // While busy-polling, give the CPU away between polls (sched_yield) instead of pausing:
  // for a loop that shares its CPU with a process it serves (goblin-gateway on a 2-CPU
  // machine), so each hands the CPU to the other without a doorbell and a wake-up.
  bool yield_when_polling = false;
};

struct LoopStats {
  uint64_t sleeps = 0;  // times the loop slept in epoll
  // Times it found, polling idle, that it had been preempted (and stopped spinning for a
  // while: common/spin_backoff.h). Counted with never_sleep too, which spins on regardless.
  uint64_t preempted = 0;
};

class Loop {
 public:
  // `handler` (may be null) gets OnPoll and bounds the sleep.
  static Result<std::unique_ptr<Loop>> Create(const LoopOptions& options, Handler* handler);

  // Wakes the sleeping loop when `fd` (an eventfd) becomes readable; the loop drains it and
  // the handler's OnPoll does the work. Before Run().
  VoidResult AddWakeFd(int fd);
  // Serves `source` in this loop (not owned; outlives Run()). Before Run().
  VoidResult AddSource(EventSource* source);
  // Serves until Stop() or until `stop_fd` (if >= 0) becomes readable (it is never read,
  // so one fd can stop many loops). Closes every source before returning.
  VoidResult Run(int stop_fd = -1);
  void Stop();
  const LoopStats& stats() const { return stats_; }

 private:
  Loop() = default;
  void HandleEvents(int timeout_ms);

  LoopOptions options_;
  Handler* handler_ = nullptr;
  UniqueFd epoll_;
  UniqueFd wake_;  // an eventfd: Stop() rings it
  std::atomic<bool> stop_{false};
  int stop_fd_ = -1;
  std::vector<int> wake_fds_;
  std::vector<EventSource*> sources_;
  std::vector<EventSource*> transports_;  // (also in sources_)
  LoopStats stats_;
};

}  // namespace goblin::reactor
