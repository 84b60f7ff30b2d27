// SyncWorker: the store's durability thread. The shard's loop hands it jobs (write a journal
// batch and fdatasync it; write a checkpoint file atomically; replace the journal), one at a
// time in submission order, so a slow disk sync never stalls the loop; each job's Status comes
// back through Poll(), and event_fd() becomes readable when one is ready (the loop has it in
// its epoll set). A job owns everything it touches (moved into it); nothing it does may reach
// back into the store.
// Threading: Submit/Poll/Wait from the owning (loop) thread only; jobs run on the worker.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "goblin/common/fd.h"
#include "goblin/common/status.h"

namespace goblin::store {

class SyncWorker {
 public:
  using Job = std::function<Status()>;
  struct Done {
    uint64_t id = 0;
    Status status;
  };

  static Result<std::unique_ptr<SyncWorker>> Start(std::string name);
  ~SyncWorker();  // finishes the queued jobs first
  SyncWorker(const SyncWorker&) = delete;
  SyncWorker& operator=(const SyncWorker&) = delete;

  // Queues a job; returns its id (ids count up from 1 in submission order).
  uint64_t Submit(Job job);
  // Jobs finished since the last call, in order. Never blocks; no system call or lock when
  // nothing finished (an atomic load), so it can be called every loop round.
  std::vector<Done> Poll();
  // Blocks until job `id` (and so every earlier one) has finished; its result then comes
  // from Poll() like any other.
  void WaitFor(uint64_t id);
  size_t in_flight() const { return submitted_ - reaped_; }
  int event_fd() const { return efd_.get(); }

 private:
  SyncWorker() = default;
  void Run();

  std::thread thread_;
  UniqueFd efd_;
  std::mutex mu_;
  std::condition_variable cv_;                 // work for the worker
  std::condition_variable done_cv_;            // a job finished
  std::deque<std::pair<uint64_t, Job>> jobs_;  // guarded by mu_
  std::vector<Done> done_;                     // guarded by mu_
  std::atomic<uint64_t> finished_{0};          // the last finished id (written under mu_)
  bool stop_ = false;                          // guarded by mu_
  uint64_t submitted_ = 0, reaped_ = 0;        // owner thread only
};

}  // namespace goblin::store
