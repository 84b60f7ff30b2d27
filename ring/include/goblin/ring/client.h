// Client side of the ring plane: connects to goblin-core's unix socket, performs the
// Hello/Welcome handshake, attaches the rings it is given, and then sends and receives SBE
// messages through shared memory. The socket stays open as the liveness channel: a dead
// core is reported as an Unavailable error by Wait()/Send().
// Threading: one thread uses a RingClient at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "goblin/common/fd.h"
#include "goblin/common/status.h"
#include "goblin/ring/channel.h"
#include "goblin/sbe/wire_flags.h"

namespace goblin::ring {

// Protocol version spoken in Hello/Welcome (the wire's, for every plane).
inline constexpr uint16_t kProtocolVersion = wire::kProtocolVersion;

struct ClientOptions {
  uint32_t ring_bytes = kDefaultCapacity;  // per direction; power of two >= 4 KiB
  uint8_t peer_kind = 1;                   // wire::PeerKind
  std::string name = "goblin-client";
  WakeMode wake = WakeMode::kSpinThenSleep;
  std::chrono::nanoseconds spin = std::chrono::microseconds(50);
  bool spin_yield = false;  // give the CPU away while spinning (RingChannel::Wait)
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(5);
  uint16_t shard = 0;  // the core shard to reach (Welcome: shard_count())
};

class RingClient {
 public:
  // Connects and handshakes. Errors: the socket is absent or refuses (Unavailable), the core
  // rejects the Hello (its Error text), a malformed Welcome (Corruption).
  static Result<std::unique_ptr<RingClient>> Connect(const std::string& socket_path,
                                                     const ClientOptions& options);

  uint64_t client_id() const { return client_id_; }
  uint32_t server_pid() const { return server_pid_; }
  const std::string& server_name() const { return server_name_; }
  uint16_t shard() const { return shard_; }
  // How many shards the core runs (connect to each for keys: goblin::ShardOf).
  uint16_t shard_count() const { return shard_count_; }
  uint32_t ring_bytes() const { return channel_.capacity(); }
  uint32_t max_message() const { return channel_.max_message(); }

  // Non-blocking: kOk, kFull (back-pressure) or kTooLarge. The record type is the SBE
  // template id read from the message header.
  SendStatus TrySend(std::span<const uint8_t> msg);
  // Waits (spin, then sleep) for room up to `timeout`. Errors: too large for the ring
  // (InvalidArgument), timeout, core gone (Unavailable).
  VoidResult Send(std::span<const uint8_t> msg, std::chrono::nanoseconds timeout);
  // After a Reserve or TrySend that found the ring full: waits (spin, then sleep) up to
  // `timeout` for the core to free half of it, for a record from it, or for its socket.
  void WaitForRoom(std::chrono::nanoseconds timeout) {
    channel_.Wait(options_.spin, timeout, /*want_space=*/true, sock_.get(), options_.spin_yield);
  }

  // Zero-copy: encode into Reserve(max), then Commit(len) (publishes at once).
  uint8_t* Reserve(uint32_t max_len) {
    reserved_ = channel_.Reserve(max_len);
    return reserved_;
  }
  void Commit(uint32_t len);

  // Hands received messages to fn(std::span<const uint8_t> msg); returns how many.
  template <typename Fn>
  Result<size_t> Poll(Fn&& fn, size_t max = SIZE_MAX) {
    PollResult r = channel_.Poll([&](int32_t, std::span<const uint8_t> m) { fn(m); }, max);
    if (r.corrupt) return Err(StatusCode::kCorruption, "the core's ring is corrupt");
    return r.records;
  }
  // Blocks until a message is readable (true), or the timeout passes (false). Error when
  // the core has gone away.
  Result<bool> Wait(std::chrono::nanoseconds timeout);

  // For an event loop that sleeps in its own epoll: the fds to watch (doorbell: messages or
  // space; socket: the core went away) and the sleep protocol (PrepareSleep false: do not
  // sleep, there is work; FinishSleep after waking).
  int doorbell_fd() const { return channel_.my_doorbell_fd(); }
  int socket_fd() const { return sock_.get(); }
  bool PrepareSleep(bool want_space) { return channel_.PrepareSleep(want_space); }
  void FinishSleep() { channel_.FinishSleep(); }

  // Checks the liveness socket without blocking (and without consuming a side frame).
  VoidResult CheckAlive();
  // Receives a frame the core sent on the session socket (e.g. shared-memory fds for
  // zero-copy reads, announced by a ring message first).
  VoidResult ReceiveSideFrame(std::vector<uint8_t>* msg, std::vector<UniqueFd>* fds,
                              std::chrono::milliseconds timeout);

 private:
  RingClient() = default;
  UniqueFd sock_;
  RingChannel channel_;
  ClientOptions options_;
  uint64_t client_id_ = 0;
  uint32_t server_pid_ = 0;
  uint16_t shard_ = 0, shard_count_ = 1;
  std::string server_name_;
  uint8_t* reserved_ = nullptr;
};

}  // namespace goblin::ring
