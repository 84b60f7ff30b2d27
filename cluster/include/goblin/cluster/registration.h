// Registration: keeps one core's member record (member.h) in etcd under a lease, on a thread
// of its own. It grants a lease of `ttl`, puts the record with it and renews the lease every
// ttl/3. While etcd does not answer it retries (every second, logged once per outage); a
// lease that expired meanwhile (etcd says TTL 0) means the record is gone, so it registers
// again under a new lease: a partitioned core that comes back rejoins by itself. Stop (and
// the destructor) revokes the lease, which deletes the record at once: a clean stop leaves
// the membership immediately, a crash within `ttl`.
// Threading: Start/Stop from one thread; the accessors from any.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "goblin/cluster/etcd_client.h"
#include "goblin/cluster/member.h"
#include "goblin/common/status.h"

namespace goblin::cluster {

struct RegistrationOptions {
  EtcdOptions etcd;
  std::string prefix = "/goblin";
  Member member;  // name and address required
  std::chrono::seconds ttl{10};
};

class Registration {
 public:
  // Bad options are an error; etcd not answering is not (the thread keeps trying, and says
  // so in the log): a core serves its local clients whether or not the fabric can see it.
  static Result<std::unique_ptr<Registration>> Start(const RegistrationOptions& options);
  ~Registration();
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

  // Revokes the lease (bounded by the etcd timeout) and joins the thread. Idempotent.
  void Stop();

  const std::string& key() const { return key_; }
  bool registered() const { return lease_.load(std::memory_order_acquire) != 0; }
  int64_t lease() const { return lease_.load(std::memory_order_acquire); }
  // Times the record was put (1 after the first; more after expiries).
  uint64_t registrations() const { return registrations_.load(std::memory_order_relaxed); }

 private:
  Registration(RegistrationOptions options, std::unique_ptr<EtcdClient> etcd);
  void Run();
  bool Register();                            // grant + put; false (logged) on failure
  bool WaitFor(std::chrono::milliseconds d);  // false: stopping

  RegistrationOptions options_;
  std::unique_ptr<EtcdClient> etcd_;
  std::string key_, value_;
  std::atomic<int64_t> lease_{0};
  std::atomic<uint64_t> registrations_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool outage_logged_ = false;
  std::thread thread_;
};

}  // namespace goblin::cluster
