// Directory: the live members (member.h) under a prefix in etcd, kept current on a thread of
// its own: it lists the prefix, then watches it from the listing's revision; when the watch
// ends (etcd restarted, a member of it died, the revision was compacted) it lists again after
// a back-off (100 ms doubling to 2 s), so it never misses a change for longer than an outage.
// Readers take immutable snapshots; `generation()` (an atomic load) says whether the snapshot
// a reader holds is still current, so a router looks at it once per request for free; an
// event loop that sleeps watches a Listener's fd (readable after every change).
// Shared() gives every router of a process the same Directory for the same etcd and prefix
// (one watch and one gRPC channel per process, not one per gateway worker).
// Records that do not decode are skipped (logged once each).
// Threading: any thread may read; the watch thread writes.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "goblin/cluster/etcd_client.h"
#include "goblin/cluster/member.h"
#include "goblin/common/fd.h"
#include "goblin/common/status.h"

namespace goblin::cluster {

struct DirectorySnapshot {
  std::vector<Member> members;  // sorted by name
  uint64_t generation = 0;
};

class Directory {
 public:
  // Lists once before returning: an etcd that does not answer is an error here (a router
  // with no members could only fail), and later outages are ridden out.
  static Result<std::unique_ptr<Directory>> Open(const EtcdOptions& etcd, std::string_view prefix);
  // The process's Directory for these endpoints and prefix (opened at the first call, closed
  // with its last user).
  static Result<std::shared_ptr<Directory>> Shared(const EtcdOptions& etcd,
                                                   std::string_view prefix);
  ~Directory();
  Directory(const Directory&) = delete;
  Directory& operator=(const Directory&) = delete;

  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  std::shared_ptr<const DirectorySnapshot> snapshot() const;
  // Blocks until `pred(members)` holds (true) or `timeout` passes (false). For tests and tools.
  bool WaitUntil(const std::function<bool(const std::vector<Member>&)>& pred,
                 std::chrono::milliseconds timeout) const;
  const std::string& prefix() const { return prefix_; }
  // An eventfd of its own for one event loop, readable once the members changed (for its
  // epoll set); Drain() makes it unreadable again. Destroy it before the Directory.
  class Listener {
   public:
    ~Listener();
    Listener(const Listener&) = delete;
    Listener& operator=(const Listener&) = delete;
    int fd() const { return fd_.get(); }
    void Drain() const;

   private:
    friend class Directory;
    Listener(const Directory* d, UniqueFd fd) : dir_(d), fd_(std::move(fd)) {}
    const Directory* dir_;
    UniqueFd fd_;
  };
  Result<std::unique_ptr<Listener>> Listen() const;
  uint64_t watch_restarts() const { return restarts_.load(std::memory_order_relaxed); }

 private:
  Directory(std::unique_ptr<EtcdClient> etcd, std::string prefix);
  VoidResult List();
  void Publish();
  void Apply(const std::vector<EtcdEvent>& events);
  void Run();

  std::unique_ptr<EtcdClient> etcd_;
  std::string prefix_;           // "<prefix>/cores/"
  std::vector<Member> members_;  // the watch thread's copy
  std::set<std::string> bad_logged_;
  int64_t revision_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> restarts_{0};
  mutable std::mutex mu_;  // snapshot_, watch_, stop_
  mutable std::condition_variable cv_;
  mutable std::vector<int> listeners_;  // their eventfds (under mu_)
  std::shared_ptr<const DirectorySnapshot> snapshot_;
  std::unique_ptr<EtcdWatch> watch_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace goblin::cluster
