// A duplex ring channel between goblin-core and one local client: two SPSC rings (one per
// direction) in one memfd, plus one eventfd doorbell per side. The server creates it and
// passes the three fds to the client (SCM_RIGHTS); each side then produces on one ring,
// consumes the other, sleeps on its own doorbell and rings the peer's only when the peer
// said it sleeps. Threading: one thread per side.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>

#include "goblin/common/spin_backoff.h"
#include "goblin/common/status.h"
#include "goblin/ring/shm.h"
#include "goblin/ring/spsc_ring.h"

namespace goblin::ring {

// Memory layout of the channel's memfd: control blocks in the first page, then the data
// areas. Total = kChannelHeaderBytes + 2 * capacity.
inline constexpr size_t kChannelHeaderBytes = 4096;
inline constexpr size_t kClientToServerControl = 0;
inline constexpr size_t kServerToClientControl = sizeof(RingControl);
inline constexpr size_t ChannelBytes(uint32_t capacity) {
  return kChannelHeaderBytes + 2 * static_cast<size_t>(capacity);
}

enum class SendStatus : uint8_t {
  kOk,
  kFull,      // no room now: back-pressure (retry, queue or wait)
  kTooLarge,  // can never fit this ring: the message is rejected, nothing was published
};

enum class WakeMode : uint8_t {
  kSpinThenSleep,  // busy-poll for a bounded time, then sleep on the doorbell
  kBusyPoll,       // never sleep, never ring doorbells (dedicated cores only)
};

class RingChannel {
 public:
  enum class Side : uint8_t { kServer, kClient };

  RingChannel() = default;
  RingChannel(RingChannel&&) = default;
  RingChannel& operator=(RingChannel&&) = default;

  // Server side: a fresh memfd and doorbells for rings of `capacity` bytes. `mode` is how
  // this side waits; `peer_mode` how the other side does: a peer that may sleep must be
  // woken through its doorbell, a pure busy-poller never is (and costs no fence).
  static Result<RingChannel> Create(uint32_t capacity, WakeMode mode, WakeMode peer_mode);
  // Client side: attaches to what the server sent.
  static Result<RingChannel> Attach(UniqueFd memfd, UniqueFd server_doorbell,
                                    UniqueFd client_doorbell, uint32_t capacity, WakeMode mode,
                                    WakeMode peer_mode);

  Side side() const { return side_; }
  uint32_t capacity() const { return capacity_; }
  uint32_t max_message() const { return MaxPayload(capacity_); }
  int memfd() const { return shm_.fd(); }
  int server_doorbell_fd() const { return server_bell_.fd(); }
  int client_doorbell_fd() const { return client_bell_.fd(); }
  // The eventfd this side sleeps on.
  int my_doorbell_fd() const {
    return side_ == Side::kServer ? server_bell_.fd() : client_bell_.fd();
  }

  // Copies a whole message in as one record of `type` and publishes it.
  SendStatus TrySend(int32_t type, std::span<const uint8_t> msg) {
    if (msg.size() > max_message()) return SendStatus::kTooLarge;
    bool ok = tx_.TryWrite(type, msg);
    Flush();  // on failure too: a padding record may be pending
    return ok ? SendStatus::kOk : SendStatus::kFull;
  }

  // Zero-copy send: Reserve room for up to max_len bytes, encode there, Complete(), and
  // Flush() (once per batch). Reserve returns nullptr when full or max_len is too large.
  uint8_t* Reserve(uint32_t max_len) {
    if (max_len > max_message()) return nullptr;
    uint8_t* p = tx_.Reserve(max_len);
    if (p == nullptr) Flush();  // a padding record may be pending
    return p;
  }
  void Complete(uint32_t len, int32_t type) { tx_.Complete(len, type); }
  void Flush() {
    if (tx_.Publish(peer_sleeps_)) peer_bell().Notify();
  }

  // Hands up to `max` received records to fn(type, payload); wakes a producer waiting for
  // space. A corrupt ring is reported (close the channel).
  template <typename Fn>
  PollResult Poll(Fn&& fn, size_t max = SIZE_MAX) {
    PollResult r = rx_.Poll(std::forward<Fn>(fn), max);
    // Any freed space counts: a producer may wait for room behind a lone padding record.
    if (r.advanced && peer_sleeps_ && rx_.ProducerWaiting()) {
      peer_bell().Notify();
    }
    return r;
  }
  bool HasData() const { return rx_.HasData(); }

  // Sleep protocol for one side's loop: PrepareSleep() announces it (for reading and, with
  // want_space, for writing); if it returns false there is work already, do not sleep.
  // After waking (or not sleeping), call FinishSleep().
  bool PrepareSleep(bool want_space);
  void FinishSleep();

  // Blocks until a record is readable, the peer frees space (when want_space), `also_fd`
  // is readable (e.g. the liveness socket), or the timeout passes. Spins for `spin` first,
  // pausing between checks, or with `spin_yield` giving the CPU away (sched_yield) so that a
  // thread with work on the same CPU (the core's shard, on a machine whose CPUs are shared)
  // runs meanwhile. Returns true when the wait ended for a reason other than the timeout.
  bool Wait(std::chrono::nanoseconds spin, std::chrono::nanoseconds timeout, bool want_space,
            int also_fd, bool spin_yield = false);

  RingProducer& producer() { return tx_; }
  RingConsumer& consumer() { return rx_; }

 private:
  RingChannel(Side side, uint32_t capacity, WakeMode mode, WakeMode peer_mode)
      : side_(side),
        mode_(mode),
        peer_sleeps_(peer_mode == WakeMode::kSpinThenSleep),
        capacity_(capacity) {}
  const EventFd& peer_bell() const { return side_ == Side::kServer ? client_bell_ : server_bell_; }
  const EventFd& my_bell() const { return side_ == Side::kServer ? server_bell_ : client_bell_; }
  void Bind();

  Side side_ = Side::kServer;
  WakeMode mode_ = WakeMode::kSpinThenSleep;
  bool peer_sleeps_ = true;
  uint32_t capacity_ = 0;
  SharedMemory shm_;
  EventFd server_bell_;
  EventFd client_bell_;
  RingProducer tx_;
  RingConsumer rx_;
  bool sleeping_for_space_ = false;
  SpinBackoff backoff_;  // (Wait: no spinning for a while on a CPU it was preempted on)
};

}  // namespace goblin::ring
