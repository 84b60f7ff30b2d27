// CoreConnector: connects a CoreLink to cores off its loop thread. A core that joins, one
// left out that is tried again, or every core when the link reconnects after going down,
// may take up to the connect timeout to answer (or never: a core cut off by the network);
// the loop that serves every client of the gateway must not wait for it. Start() hands a member to
// a thread of the connector's own, which runs client::ConnectShards (its transports made to be
// handed over: TransportOptions:: handed_over) and queues the result; the owner's loop wakes on
// fd() and Take()s them. Threading: Start, Take, ready and fd on the owner's (loop) thread; one
// worker thread, started at the first Start and joined by the destructor (which waits for a connect
// in progress: at most its timeout).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "goblin/client/transport.h"
#include "goblin/cluster/directory.h"
#include "goblin/common/fd.h"
#include "goblin/common/status.h"

namespace goblin::gateway {

class CoreConnector {
 public:
  struct Job {
    cluster::Member member;
    bool ucx = true;
    std::string address;  // ucx: HOST:PORT; ring: the socket's path
    client::TransportOptions options;
    uint64_t round = 0;  // a CoreLink's reconnect of the whole link (0: one core joining)
  };
  struct Done {
    Job job;
    Result<std::vector<std::unique_ptr<client::Transport>>> transports;
  };

  static Result<std::unique_ptr<CoreConnector>> Create();
  ~CoreConnector();
  CoreConnector(const CoreConnector&) = delete;
  CoreConnector& operator=(const CoreConnector&) = delete;

  // Becomes readable when results are ready (Take drains it).
  int fd() const { return wake_.get(); }
  // Connects in the background (jobs run one after another, in order).
  void Start(Job job);
  // Some result is ready (one atomic load: for every loop turn).
  bool ready() const { return ready_.load(std::memory_order_acquire); }
  // The results so far, in the order they finished.
  std::vector<Done> Take();

 private:
  CoreConnector() = default;
  void Run();

  UniqueFd wake_;  // eventfd
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;    // (mu_)
  std::vector<Done> done_;  // (mu_)
  bool stop_ = false;       // (mu_)
  std::atomic<bool> ready_{false};
  std::thread thread_;
};

}  // namespace goblin::gateway
