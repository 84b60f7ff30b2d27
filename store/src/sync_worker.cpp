#include "goblin/store/sync_worker.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

namespace goblin::store {

Result<std::unique_ptr<SyncWorker>> SyncWorker::Start(std::string name) {
  std::unique_ptr<SyncWorker> w(new SyncWorker());
  w->efd_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!w->efd_) return ErrnoErr("eventfd (sync worker)", errno);
  w->thread_ = std::thread([p = w.get()] { p->Run(); });
  pthread_setname_np(w->thread_.native_handle(), name.substr(0, 15).c_str());
  return w;
}

SyncWorker::~SyncWorker() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

uint64_t SyncWorker::Submit(Job job) {
  uint64_t id = ++submitted_;
  {
    std::lock_guard<std::mutex> g(mu_);
    jobs_.emplace_back(id, std::move(job));
  }
  cv_.notify_one();
  return id;
}

std::vector<SyncWorker::Done> SyncWorker::Poll() {
  std::vector<Done> out;
  if (finished_.load(std::memory_order_acquire) == reaped_) return out;
  uint64_t v;
  [[maybe_unused]] ssize_t r = read(efd_.get(), &v, sizeof v);
  {
    std::lock_guard<std::mutex> g(mu_);
    out.swap(done_);
  }
  reaped_ += out.size();
  return out;
}

void SyncWorker::WaitFor(uint64_t id) {
  std::unique_lock<std::mutex> l(mu_);
  done_cv_.wait(l, [&] { return finished_.load(std::memory_order_relaxed) >= id; });
}

void SyncWorker::Run() {
  for (;;) {
    std::pair<uint64_t, Job> job;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stop_, and every job done
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    Status s = job.second();
    {
      std::lock_guard<std::mutex> g(mu_);
      done_.push_back({job.first, std::move(s)});
      finished_.store(job.first, std::memory_order_release);
    }
    done_cv_.notify_all();
    uint64_t one = 1;
    [[maybe_unused]] ssize_t w = write(efd_.get(), &one, sizeof one);
  }
}

}  // namespace goblin::store
