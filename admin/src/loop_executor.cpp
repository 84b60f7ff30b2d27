#include "goblin/admin/loop_executor.h"

#include <sys/eventfd.h>
#include <unistd.h>

namespace goblin::admin {

Result<std::unique_ptr<LoopExecutor>> LoopExecutor::Create() {
  std::unique_ptr<LoopExecutor> e(new LoopExecutor());
  e->efd_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!e->efd_) return Err(ErrnoStatus("eventfd(admin executor)", errno));
  return e;
}

VoidResult LoopExecutor::Call(const std::function<void()>& fn, std::chrono::milliseconds timeout) {
  auto task = std::make_shared<Task>();
  task->fn = &fn;
  std::unique_lock lock(mu_);
  if (closed_) return Err(StatusCode::kUnavailable, "goblin-core is shutting down");
  queue_.push_back(task);
  pending_.store(true, std::memory_order_release);
  uint64_t one = 1;
  if (write(efd_.get(), &one, sizeof one) < 0 && errno != EAGAIN) {
    return Err(ErrnoStatus("eventfd write (admin executor)", errno));
  }
  bool finished = done_.wait_for(lock, timeout, [&] {
    return task->state == Task::State::kDone || task->state == Task::State::kCancelled;
  });
  if (!finished && task->state == Task::State::kQueued) {
    task->state = Task::State::kCancelled;
    return Err(StatusCode::kUnavailable, "goblin-core's loop did not answer within {} ms",
               timeout.count());
  }
  // Running: it touches our state, so wait for it (loop work is short).
  done_.wait(lock, [&] {
    return task->state == Task::State::kDone || task->state == Task::State::kCancelled;
  });
  if (task->state == Task::State::kCancelled)
    return Err(StatusCode::kUnavailable, "goblin-core is shutting down");
  return {};
}

size_t LoopExecutor::Poll() {
  if (!pending_.load(std::memory_order_acquire)) return 0;  // every loop round: no syscall
  uint64_t n = 0;
  (void)!read(efd_.get(), &n, sizeof n);
  size_t ran = 0;
  std::unique_lock lock(mu_);
  pending_.store(false, std::memory_order_relaxed);
  while (!queue_.empty()) {
    std::shared_ptr<Task> t = std::move(queue_.front());
    queue_.pop_front();
    if (t->state != Task::State::kQueued) continue;  // its caller gave up
    t->state = Task::State::kRunning;
    lock.unlock();
    (*t->fn)();
    lock.lock();
    t->state = Task::State::kDone;
    ++ran;
  }
  if (ran > 0) done_.notify_all();
  return ran;
}

bool LoopExecutor::PrepareSleep() { return !pending_.load(std::memory_order_acquire); }

void LoopExecutor::Close() {
  std::lock_guard lock(mu_);
  closed_ = true;
  for (auto& t : queue_) {
    if (t->state == Task::State::kQueued) t->state = Task::State::kCancelled;
  }
  queue_.clear();
  done_.notify_all();
}

}  // namespace goblin::admin
