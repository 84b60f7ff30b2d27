#include "core_connector.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <utility>

namespace goblin::gateway {

Result<std::unique_ptr<CoreConnector>> CoreConnector::Create() {
  std::unique_ptr<CoreConnector> c(new CoreConnector());
  int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) return ErrnoErr("eventfd", errno);
  c->wake_ = UniqueFd(fd);
  return c;
}

CoreConnector::~CoreConnector() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void CoreConnector::Start(Job job) {
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(job));
  }
  if (!thread_.joinable()) {
    thread_ = std::thread([this] { Run(); });
    pthread_setname_np(thread_.native_handle(), "gb-connect");
  } else {
    cv_.notify_one();
  }
}

std::vector<CoreConnector::Done> CoreConnector::Take() {
  // Drained under the lock Run writes it under: a wake-up left behind with ready() false
  // would keep the owner's level-triggered epoll returning at once, a busy loop.
  std::lock_guard lock(mu_);
  uint64_t n;
  while (read(wake_.get(), &n, sizeof n) > 0) {
  }
  ready_.store(false, std::memory_order_relaxed);
  return std::exchange(done_, {});
}

void CoreConnector::Run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job.options.handed_over = true;  // (the loop thread uses them)
    auto t = client::ConnectShards(job.ucx, job.address, job.options);
    lock.lock();
    done_.push_back({std::move(job), std::move(t)});
    ready_.store(true, std::memory_order_release);
    const uint64_t one = 1;
    (void)!write(wake_.get(), &one, sizeof one);
  }
}

}  // namespace goblin::gateway
