// LoopExecutor: runs work from other threads (the admin API's gRPC threads) on the core's
// loop thread, where the store, the pools' bookkeeping and the sessions live and are never
// locked. A reactor::EventSource in that loop: Call() queues a closure and rings an eventfd;
// the loop runs queued closures in Poll(). Admin calls are rare, so a mutex and a condition
// variable per call are fine here; nothing on the request path goes through this.
// Threading: Call() from any thread except the loop's; the EventSource methods from the
// loop thread only.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

#include "goblin/common/fd.h"
#include "goblin/common/status.h"
#include "goblin/reactor/event_source.h"

namespace goblin::admin {

class LoopExecutor final : public reactor::EventSource {
 public:
  static Result<std::unique_ptr<LoopExecutor>> Create();

  // Runs `fn` on the loop thread and returns once it ran. Unavailable when the loop is not
  // serving (closed, shutting down) or does not get to it within `timeout`; `fn` then never
  // runs (if it had started, Call waits for it to finish: it may touch the caller's state).
  VoidResult Call(const std::function<void()>& fn, std::chrono::milliseconds timeout);

  // reactor::EventSource (loop thread)
  int event_fd() const override { return efd_.get(); }
  size_t Poll() override;
  bool PrepareSleep() override;
  void Close() override;

 private:
  LoopExecutor() = default;
  struct Task {
    const std::function<void()>* fn = nullptr;
    enum class State { kQueued, kRunning, kDone, kCancelled } state = State::kQueued;
  };
  UniqueFd efd_;
  std::mutex mu_;
  std::condition_variable done_;
  std::deque<std::shared_ptr<Task>> queue_;
  std::atomic<bool> pending_{false};  // queue_ is not empty: the loop's cheap check
  bool closed_ = false;
};

}  // namespace goblin::admin
