#include "goblin/reactor/loop.h"

#include <emmintrin.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "goblin/common/clock.h"
#include "goblin/common/log.h"
#include "goblin/common/spin_backoff.h"

namespace goblin::reactor {
namespace {

constexpr std::string_view kLog = "reactor";
// epoll data: what an fd is (the low 32 bits index sources).
constexpr uint64_t kTagStop = 1ull << 32, kTagWake = 2ull << 32, kTagSource = 3ull << 32;

VoidResult EpollAdd(int epfd, int fd, uint64_t tag) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = tag;
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) return ErrnoErr("epoll_ctl(ADD)", errno);
  return {};
}

int Tighter(int a, int b) {  // the shorter of two sleep bounds (-1: none)
  if (a < 0) return b;
  if (b < 0) return a;
  return std::min(a, b);
}

}  // namespace

Result<std::unique_ptr<Loop>> Loop::Create(const LoopOptions& options, Handler* handler) {
  std::unique_ptr<Loop> l(new Loop());
  l->options_ = options;
  l->handler_ = handler;
  l->epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (!l->epoll_) return ErrnoErr("epoll_create1", errno);
  l->wake_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!l->wake_) return ErrnoErr("eventfd", errno);
  GOBLIN_RETURN_IF_ERROR(EpollAdd(l->epoll_.get(), l->wake_.get(), kTagStop));
  return l;
}

VoidResult Loop::AddWakeFd(int fd) {
  GOBLIN_RETURN_IF_ERROR(EpollAdd(epoll_.get(), fd, kTagWake + wake_fds_.size()));
  wake_fds_.push_back(fd);
  return {};
}

VoidResult Loop::AddSource(EventSource* source) {
  GOBLIN_RETURN_IF_ERROR(EpollAdd(epoll_.get(), source->event_fd(), kTagSource + sources_.size()));
  sources_.push_back(source);
  if (source->transport()) transports_.push_back(source);
  return {};
}

void Loop::Stop() {
  stop_.store(true, std::memory_order_release);
  uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof one);
}

VoidResult Loop::Run(int stop_fd) {
  stop_fd_ = stop_fd;
  if (stop_fd >= 0) GOBLIN_RETURN_IF_ERROR(EpollAdd(epoll_.get(), stop_fd, kTagStop));
  uint64_t last_work = MonotonicNanos(), last_events = last_work;
  const uint64_t busy_ns = static_cast<uint64_t>(options_.busy_poll.count());
  const uint64_t events_ns = static_cast<uint64_t>(options_.events_every.count());
  const uint32_t every = std::max<uint32_t>(1, options_.background_every);
  uint32_t round = 0;   // every `every`-th is a full one
  bool worked = false;  // a transports-only round did work (the clock is read at a full one)
  // Spinning stops for a while when a stretch of idle polling shows that this thread was
  // preempted (an oversubscribed CPU: common/spin_backoff.h); then every round is a full one,
  // so the loop goes to sleep at its next idle round. The stretches: from one idle full round
  // to the next, and (yielding) from the last clock reading to the end of a yield.
  SpinBackoff backoff;
  uint64_t idle_round_at = 0;  // the last full round, if it found nothing (else 0)
  uint64_t clock_at = 0;       // the clock's last reading with only idle polls since (else 0)
  bool may_spin = true;
  auto pause = [&] {
    if (!options_.yield_when_polling) {
      _mm_pause();
      return;
    }
    sched_yield();
    const uint64_t t = MonotonicNanos();  // (a yield is a system call: the clock is cheap here)
    if (clock_at != 0 && backoff.Idle(clock_at, t)) {
      ++stats_.preempted;
      may_spin = options_.never_sleep;
    }
    clock_at = t;
  };
  while (!stop_.load(std::memory_order_acquire)) {
    if (round++ % every != 0 && may_spin) {  // the transports only
      size_t n = 0;
      for (EventSource* src : transports_) n += src->Poll();
      if (n > 0) {
        worked = true;
        clock_at = 0;
      } else {
        pause();
      }
      continue;
    }
    size_t n = handler_ != nullptr ? handler_->OnPoll() : 0;
    for (EventSource* src : sources_) n += src->Poll();
    const uint64_t now = MonotonicNanos();
    const bool idle = n == 0 && !worked;
    if (n > 0 || worked) last_work = now;
    worked = false;
    if (idle && idle_round_at != 0 && backoff.Idle(idle_round_at, now)) ++stats_.preempted;
    idle_round_at = idle ? now : 0;
    clock_at = now;
    may_spin = options_.never_sleep || backoff.may_spin(now);  // (a CPU of its own: always)
    if (now - last_events >= events_ns) {  // accepts, hang-ups and wake fds while busy
      HandleEvents(0);
      last_events = now;
      round = 0;  // (what it took in, a drained wake fd's work, is polled before any sleep)
      idle_round_at = clock_at = 0;
      continue;
    }
    if (n > 0) continue;
    if (options_.never_sleep || (now - last_work < busy_ns && may_spin)) {
      pause();
      continue;
    }
    // Every source announces its sleep (so peers ring its doorbells) before any sleeps.
    bool can_sleep = true;
    for (EventSource* src : sources_) {
      if (!src->PrepareSleep()) can_sleep = false;
    }
    if (can_sleep) {
      ++stats_.sleeps;
      int timeout = handler_ != nullptr ? handler_->max_sleep_ms() : -1;
      for (EventSource* src : sources_) timeout = Tighter(timeout, src->max_sleep_ms());
      HandleEvents(timeout);
    } else {
      HandleEvents(0);
    }
    for (EventSource* src : sources_) src->FinishSleep();
    last_work = last_events = MonotonicNanos();
    round = 0;
    idle_round_at = clock_at = 0;
  }
  for (EventSource* src : sources_) src->Close();
  return {};
}

void Loop::HandleEvents(int timeout_ms) {
  epoll_event events[64];
  int n = epoll_wait(epoll_.get(), events, 64, timeout_ms);
  if (n < 0) {
    if (errno != EINTR) GOBLIN_LOG_ERROR(kLog, "epoll_wait: {}", ErrnoStatus("epoll_wait", errno));
    return;
  }
  for (int i = 0; i < n; ++i) {
    const uint64_t tag = events[i].data.u64;
    const uint64_t kind = tag & ~0xffffffffull;
    const auto idx = static_cast<size_t>(tag & 0xffffffffull);
    if (kind == kTagStop) {
      stop_.store(true, std::memory_order_release);
    } else if (kind == kTagWake && idx < wake_fds_.size()) {
      uint64_t v;  // (an eventfd: the handler's OnPoll does the work)
      [[maybe_unused]] ssize_t r = read(wake_fds_[idx], &v, sizeof v);
    } else if (kind == kTagSource && idx < sources_.size()) {
      sources_[idx]->OnReady();
    }
  }
}

}  // namespace goblin::reactor
