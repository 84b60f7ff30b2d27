#include "goblin/ring/channel.h"

#include <sched.h>

#include <emmintrin.h>
#include <poll.h>

#include <cerrno>

#include "goblin/common/clock.h"

namespace goblin::ring {

Result<RingChannel> RingChannel::Create(uint32_t capacity, WakeMode mode, WakeMode peer_mode) {
  GOBLIN_RETURN_IF_ERROR(ValidateCapacity(capacity));
  RingChannel c(Side::kServer, capacity, mode, peer_mode);
  GOBLIN_ASSIGN_OR_RETURN(c.shm_, SharedMemory::Create("goblin-ring", ChannelBytes(capacity)));
  GOBLIN_ASSIGN_OR_RETURN(c.server_bell_, EventFd::Create());
  GOBLIN_ASSIGN_OR_RETURN(c.client_bell_, EventFd::Create());
  InitRing(reinterpret_cast<RingControl*>(c.shm_.data() + kClientToServerControl), capacity);
  InitRing(reinterpret_cast<RingControl*>(c.shm_.data() + kServerToClientControl), capacity);
  c.Bind();
  return c;
}

Result<RingChannel> RingChannel::Attach(UniqueFd memfd, UniqueFd server_doorbell,
                                        UniqueFd client_doorbell, uint32_t capacity, WakeMode mode,
                                        WakeMode peer_mode) {
  GOBLIN_RETURN_IF_ERROR(ValidateCapacity(capacity));
  RingChannel c(Side::kClient, capacity, mode, peer_mode);
  GOBLIN_ASSIGN_OR_RETURN(c.shm_, SharedMemory::Map(std::move(memfd), ChannelBytes(capacity)));
  for (size_t off : {kClientToServerControl, kServerToClientControl}) {
    auto* ctl = reinterpret_cast<RingControl*>(c.shm_.data() + off);
    if (ctl->magic != kRingMagic || ctl->capacity != capacity) {
      return Err(StatusCode::kCorruption, "ring control block does not match the handshake");
    }
  }
  c.server_bell_ = EventFd(std::move(server_doorbell));
  c.client_bell_ = EventFd(std::move(client_doorbell));
  c.Bind();
  return c;
}

void RingChannel::Bind() {
  uint8_t* base = shm_.data();
  auto* c2s = reinterpret_cast<RingControl*>(base + kClientToServerControl);
  auto* s2c = reinterpret_cast<RingControl*>(base + kServerToClientControl);
  uint8_t* c2s_data = base + kChannelHeaderBytes;
  uint8_t* s2c_data = c2s_data + capacity_;
  if (side_ == Side::kServer) {
    tx_ = RingProducer(s2c, s2c_data, capacity_);
    rx_ = RingConsumer(c2s, c2s_data, capacity_);
  } else {
    tx_ = RingProducer(c2s, c2s_data, capacity_);
    rx_ = RingConsumer(s2c, s2c_data, capacity_);
  }
}

bool RingChannel::PrepareSleep(bool want_space) {
  rx_.SetWaiting(true);
  sleeping_for_space_ = want_space;
  if (want_space) tx_.SetWaiting(true);
  // Re-check after announcing (the peer checks our flag after publishing).
  if (rx_.HasData()) return false;
  if (want_space && tx_.FreeSpace() >= capacity_ / 2) return false;
  return true;
}

void RingChannel::FinishSleep() {
  rx_.SetWaiting(false);
  if (sleeping_for_space_) tx_.SetWaiting(false);
  sleeping_for_space_ = false;
  my_bell().Drain();
}

bool RingChannel::Wait(std::chrono::nanoseconds spin, std::chrono::nanoseconds timeout,
                       bool want_space, int also_fd, bool spin_yield) {
  const uint64_t start = MonotonicNanos();
  const uint64_t spin_until = start + static_cast<uint64_t>(spin.count());
  const uint64_t deadline = start + static_cast<uint64_t>(timeout.count());
  const uint32_t space_goal = capacity_ / 2;
  auto ready = [&] { return rx_.HasData() || (want_space && tx_.FreeSpace() >= space_goal); };
  // Bounded spin: check the clock only every 64 pauses (every yield: each is a system call).
  // None while it was lately preempted spinning (common/spin_backoff.h).
  uint64_t checked = start;
  for (uint32_t i = 0; backoff_.may_spin(checked); ++i) {
    if (ready()) return true;
    if (spin_yield || (i & 63) == 0) {
      uint64_t now = MonotonicNanos();
      if (backoff_.Idle(checked, now)) break;
      checked = now;
      if (now >= spin_until || now >= deadline) break;
    }
    if (spin_yield) {
      sched_yield();
    } else {
      _mm_pause();
    }
  }
  if (mode_ == WakeMode::kBusyPoll) {
    while (MonotonicNanos() < deadline) {
      for (int i = 0; i < 64; ++i) {
        if (ready()) return true;
        _mm_pause();
      }
    }
    return false;
  }
  for (;;) {
    if (!PrepareSleep(want_space)) {
      FinishSleep();
      return true;
    }
    uint64_t now = MonotonicNanos();
    if (now >= deadline) {
      FinishSleep();
      return false;
    }
    pollfd fds[2] = {{my_bell().fd(), POLLIN, 0}, {also_fd, POLLIN | POLLRDHUP, 0}};
    uint64_t left_ms = (deadline - now + 999'999) / 1'000'000;
    int n = poll(fds, also_fd >= 0 ? 2 : 1, static_cast<int>(std::min<uint64_t>(left_ms, 60'000)));
    FinishSleep();
    if (n > 0 && also_fd >= 0 && fds[1].revents != 0) return true;
    if (ready()) return true;
    if (n < 0 && errno != EINTR) return true;
  }
}

}  // namespace goblin::ring
