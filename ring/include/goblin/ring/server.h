// Server side of the ring plane, one transport of a reactor loop (reactor/loop.h): it accepts
// clients on a unix socket, hands each a RingChannel (memfd + doorbells over SCM_RIGHTS),
// polls every client's ring and passes each message to the engine's reactor::Handler. Its
// own epoll set (listen socket, handshakes, liveness sockets, doorbells) is its event fd in
// the loop's; sleeping, it announces itself on every ring (PrepareSleep) so clients ring its
// doorbells. A client whose socket closes (or whose ring turns out corrupt) is dropped and
// its rings freed.
// Threading: every call on the loop thread, except Adopt (any thread).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "goblin/common/buffer.h"
#include "goblin/common/fd.h"
#include "goblin/common/status.h"
#include "goblin/reactor/event_source.h"
#include "goblin/reactor/handler.h"
#include "goblin/reactor/session.h"
#include "goblin/ring/channel.h"
#include "goblin/ring/shm.h"

namespace goblin::ring {

struct ServerOptions {
  std::string socket_path;
  std::string server_name = "goblin-core";
  uint32_t default_ring_bytes = kDefaultCapacity;
  uint32_t max_ring_bytes = 1u << 20;
  uint32_t max_clients = 1024;
  // Bytes of messages queued for a client whose ring is full before Send() says kOverLimit
  // (Redis's hard limit), and the soft limit: over `output_soft_limit` (0: none) for longer
  // than `output_soft_time`, Send() says kOverLimit too.
  size_t output_limit = 8 * 1024;
  size_t output_soft_limit = 0;
  std::chrono::nanoseconds output_soft_time = std::chrono::seconds(60);
  // kBusyPoll: the loop never sleeps (reactor::LoopOptions::never_sleep), so clients need
  // not ring it (Welcome flag 1).
  WakeMode wake = WakeMode::kSpinThenSleep;
  // Shards: this server is shard `shard` of `shard_count` (one loop thread each). Only the
  // server with a socket_path listens; a Hello for another shard is handed to that shard's
  // server (SetShards), which answers the Welcome and owns the session from then on.
  uint16_t shard = 0;
  uint16_t shard_count = 1;
};

using reactor::SendOutcome;

// A ring-plane session: a RingChannel plus its liveness socket.
class RingSession final : public reactor::Session {
 public:
  uint32_t max_message() const override { return channel_.max_message(); }
  size_t queued_bytes() const override { return out_.size() - out_head_; }
  SendOutcome Send(std::span<const uint8_t> msg) override;
  bool local() const override { return true; }
  VoidResult SendSideFrame(std::span<const uint8_t> msg, std::span<const int> fds) override;

 private:
  friend class RingServer;
  bool DrainOutput();  // moves queued messages into the ring; true when empty

  UniqueFd sock_;
  RingChannel channel_;
  size_t output_limit_ = 0;
  size_t soft_limit_ = 0;
  uint64_t soft_ns_ = 0;
  uint64_t soft_since_ = 0;   // when the queue went over the soft limit (0: it is not)
  std::vector<uint8_t> out_;  // queued frames: [u32 length][message]
  size_t out_head_ = 0;
};

struct ServerStats {
  uint64_t accepted = 0;
  uint64_t rejected = 0;
  uint64_t closed = 0;
  uint64_t messages = 0;
  uint64_t corrupt = 0;
};

class RingServer final : public reactor::EventSource {
 public:
  // Binds the socket (see ListenUnix; none when options.socket_path is empty: a shard that
  // only takes connections handed over by the listening one) and prepares the loop; does
  // not serve yet.
  static Result<std::unique_ptr<RingServer>> Listen(const ServerOptions& options,
                                                    reactor::Handler* handler);
  ~RingServer() override;  // removes the socket file
  // Binds the socket now (a server made without one: e.g. once everything else is ready,
  // so that the socket's appearance means the core serves).
  VoidResult BindSocket(const std::string& socket_path);
  // Every shard's server, in shard order (this one among them), for handing over Hellos
  // meant for another shard. Before any Run(); the servers outlive each other's loops.
  void SetShards(std::vector<RingServer*> shards) { shards_ = std::move(shards); }
  // Takes a connection whose Hello (in `hello_frame`, complete) another shard's server
  // read. Thread-safe; the handshake finishes on this server's loop.
  void Adopt(UniqueFd sock, std::vector<uint8_t> hello_frame);

  // reactor::EventSource (loop thread)
  int event_fd() const override { return epoll_.get(); }
  size_t Poll() override;  // every session's ring (batches of 64) and output queue
  bool transport() const override { return true; }
  void OnReady() override;  // accepts, handshakes, liveness sockets
  bool PrepareSleep() override;
  void FinishSleep() override;
  int max_sleep_ms() const override { return pending_.empty() ? -1 : 1000; }
  void Close() override;  // closes every session (Handler::OnClose)

  size_t session_count() const { return sessions_.size(); }
  const ServerStats& stats() const { return stats_; }
  const std::string& socket_path() const { return options_.socket_path; }

 private:
  struct Pending {
    UniqueFd sock;
    std::vector<uint8_t> in;
    uint64_t accepted_at = 0;
  };
  RingServer() = default;
  void Accept();
  void ReadHandshake(int fd);
  // The Hello in pending_[fd].in is a complete frame: answer it (or hand it to its shard).
  void Handshake(int fd, std::span<const uint8_t> frame);
  void TakeAdopted();
  void Reject(int sock, uint16_t code, std::string_view text);
  void DropStaleHandshakes();
  // Hands up to `max` of the session's records to the handler, each copied out of shared
  // memory first.
  PollResult Deliver(RingSession& s, size_t max);
  void CloseSession(uint64_t id);
  void CloseMarked();

  ServerOptions options_;
  reactor::Handler* handler_ = nullptr;
  UniqueFd listen_;
  UniqueFd epoll_;      // this plane's fds (nested in the loop's epoll set)
  EventFd adopt_wake_;  // Adopt() rings it
  std::mutex adopt_mu_;
  std::vector<std::pair<UniqueFd, std::vector<uint8_t>>> adopted_;  // guarded by adopt_mu_
  std::atomic<bool> has_adopted_{false};
  std::vector<RingServer*> shards_;
  uint32_t rounds_ = 0;
  uint64_t next_id_ = 1;
  std::unordered_map<int, Pending> pending_;  // by socket fd
  std::unordered_map<uint64_t, std::unique_ptr<RingSession>> sessions_;
  std::unordered_map<int, uint64_t> fd_to_session_;  // socket and doorbell fds
  std::vector<RingSession*> active_;                 // iteration order for polling
  ByteBuffer scratch_;  // messages are copied here out of shared memory
  ServerStats stats_;
};

}  // namespace goblin::ring
