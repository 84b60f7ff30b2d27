// Server side of the ring plane: one event loop that accepts clients on a unix socket,
// hands each a RingChannel (memfd + doorbells over SCM_RIGHTS), polls every client's ring,
// and passes each message to a Handler. It busy-polls for a bounded time after the last
// work, then sleeps in epoll on the doorbells and sockets; a client whose socket closes (or
// whose ring turns out corrupt) is dropped and its rings freed.
// Threading: Run() and every Handler call happen on one thread; Stop() may be called from
// any thread or a signal-driven eventfd.
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
  std::chrono::nanoseconds busy_poll = std::chrono::microseconds(50);
  WakeMode wake = WakeMode::kSpinThenSleep;
  // While busy-polling, give the CPU away between polls (sched_yield) instead of pausing:
  // for a core that shares its CPU with a process it serves (goblin-gateway on a 2-CPU
  // machine), so each hands the CPU to the other without a doorbell and a wake-up.
  bool yield_when_polling = false;
  // Shards: this server is shard `shard` of `shard_count` (one loop thread each). Only the
  // server with a socket_path listens; a Hello for another shard is handed to that shard's
  // server (SetShards), which answers the Welcome and owns the session from then on.
  uint16_t shard = 0;
  uint16_t shard_count = 1;
};

enum class SendOutcome : uint8_t {
  kSent,       // in the client's ring
  kQueued,     // ring full: queued in the session's bounded output buffer
  kTooLarge,   // larger than the client's ring can ever carry: not sent
  kOverLimit,  // output buffer limit reached: not sent (the client is too slow)
};

class RingServer;

// One client of goblin-core, whatever carries its messages: a ring session here, a UCX
// endpoint in verbs/ (the handler sees the same interface for both).
class Session {
 public:
  virtual ~Session() = default;
  uint64_t id() const { return id_; }
  uint8_t peer_kind() const { return peer_kind_; }
  uint32_t pid() const { return pid_; }
  const std::string& name() const { return name_; }
  // The largest message Send() takes.
  virtual uint32_t max_message() const = 0;
  // Bytes accepted by Send() that have not reached the client's side yet.
  virtual size_t queued_bytes() const = 0;

  // Sends one SBE message (record type = its template id).
  virtual SendOutcome Send(std::span<const uint8_t> msg) = 0;
  // Drops the session after the current callback returns.
  void Close() { closing_ = true; }
  bool closing() const { return closing_; }
  // Whether the client shares this host's memory (may map the core's pools read-only).
  virtual bool local() const { return false; }
  // Sends a frame with `fds` on the session's socket (not the ring): shared-memory fds for
  // zero-copy reads. Announce it with a ring message; the client then reads it. Only for
  // local() sessions.
  virtual VoidResult SendSideFrame(std::span<const uint8_t> msg, std::span<const int> fds);
  // Asks for Handler::OnWritable whenever this session's output queue is empty (for
  // streaming large responses at the pace the client reads them).
  void WantWritable(bool want) { want_writable_ = want; }
  bool wants_writable() const { return want_writable_; }

  // Zero-copy sends, for transports that can send from memory the caller keeps valid (the
  // UCX plane): `header` is an SBE message whose last field is an empty varData32, and
  // `payload` becomes that field's bytes on the client's side. The caller keeps `payload`
  // valid until Handler::OnPayloadSent(session, token), or releases it at once when the
  // result says `done`.
  virtual bool sends_by_reference() const { return false; }
  // A remote session's key for one-sided reads of [base, base + bytes) (memory the
  // transport registered), packed for the client; Unimplemented where there is none.
  virtual Result<std::vector<uint8_t>> PackRemoteKey(const void* base, size_t bytes) {
    (void)base;
    (void)bytes;
    return Err(StatusCode::kUnimplemented, "no one-sided reads on this plane");
  }
  struct PayloadSend {
    SendOutcome outcome = SendOutcome::kTooLarge;
    bool done = true;
  };
  virtual PayloadSend SendWithPayload(std::span<const uint8_t> header,
                                      std::span<const uint8_t> payload, uint64_t token) {
    (void)header;
    (void)payload;
    (void)token;
    return {};
  }

 protected:
  uint64_t id_ = 0;
  uint8_t peer_kind_ = 0;
  uint32_t pid_ = 0;
  std::string name_;
  bool closing_ = false;
  bool want_writable_ = false;
};

// A ring-plane session: a RingChannel plus its liveness socket.
class RingSession final : public Session {
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

// Another source of sessions served by the same loop (the UCX plane): its fd joins the
// loop's epoll set, Poll() runs every round, and the loop sleeps only if every source's
// PrepareSleep() agrees. Close() ends its sessions (Handler::OnClose) when Run() returns.
class EventSource {
 public:
  virtual ~EventSource() = default;
  virtual int event_fd() const = 0;
  // Makes progress; returns the units of work done (0 lets the loop go idle).
  virtual size_t Poll() = 0;
  // False when events are already pending (the loop must not sleep now).
  virtual bool PrepareSleep() = 0;
  // The longest the loop may sleep without polling this source (-1: no bound).
  virtual int max_sleep_ms() const { return -1; }
  virtual void Close() = 0;
};

class Handler {
 public:
  virtual ~Handler() = default;
  virtual void OnOpen(Session&) {}
  // `msg` is a private copy of the client's record (the ring is shared memory a client
  // could rewrite while we parse); it is valid during the call only.
  virtual void OnMessage(Session& session, std::span<const uint8_t> msg) = 0;
  virtual void OnClose(Session&) {}
  // The session asked for it (WantWritable) and its output queue is empty: send more.
  // Called from the loop after every poll round; send until Send() says kQueued.
  virtual void OnWritable(Session&) {}
  // Called once per loop round (and after every wake-up) for the handler's own work, such
  // as disk completions; returns the units of work done (0 lets the loop go idle).
  virtual size_t OnPoll() { return 0; }
  // The longest the loop may sleep before OnPoll runs again (-1: until an event), e.g. for
  // the handler's own timers.
  virtual int max_sleep_ms() const { return -1; }
  // The transport no longer reads the payload of SendWithPayload(..., token).
  virtual void OnPayloadSent(Session&, uint64_t token) { (void)token; }
};

struct ServerStats {
  uint64_t accepted = 0;
  uint64_t rejected = 0;
  uint64_t closed = 0;
  uint64_t messages = 0;
  uint64_t corrupt = 0;
  uint64_t sleeps = 0;
};

class RingServer {
 public:
  // Binds the socket (see ListenUnix; none when options.socket_path is empty: a shard that
  // only takes connections handed over by the listening one) and prepares the loop; does
  // not serve yet.
  static Result<std::unique_ptr<RingServer>> Listen(const ServerOptions& options, Handler* handler);
  ~RingServer();

  // Serves until Stop() or until `stop_fd` (if >= 0) becomes readable. Closes every session
  // (OnClose) and removes the socket file before returning.
  VoidResult Run(int stop_fd = -1);
  void Stop();
  // Also wakes the sleeping loop when `fd` becomes readable (the handler's event source);
  // the loop drains it (an eventfd) and calls Handler::OnPoll. Before Run().
  VoidResult AddWakeFd(int fd);
  // Serves `source` in this loop too (not owned; outlives Run()). Before Run().
  VoidResult AddSource(EventSource* source);
  // Every shard's server, in shard order (this one among them), for handing over Hellos
  // meant for another shard. Before any Run(); the servers outlive each other's loops.
  void SetShards(std::vector<RingServer*> shards) { shards_ = std::move(shards); }
  // Takes a connection whose Hello (in `hello_frame`, complete) another shard's server
  // read. Thread-safe; the handshake finishes on this server's loop.
  void Adopt(UniqueFd sock, std::vector<uint8_t> hello_frame);

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
  size_t PollRings();
  // Hands up to `max` of the session's records to the handler, each copied out of shared
  // memory first.
  PollResult Deliver(RingSession& s, size_t max);
  void HandleEvents(int timeout_ms);
  void CloseSession(uint64_t id);
  void CloseMarked();

  ServerOptions options_;
  Handler* handler_ = nullptr;
  UniqueFd listen_;
  UniqueFd epoll_;
  EventFd wake_;
  EventFd adopt_wake_;  // Adopt() rings it
  std::mutex adopt_mu_;
  std::vector<std::pair<UniqueFd, std::vector<uint8_t>>> adopted_;  // guarded by adopt_mu_
  std::atomic<bool> has_adopted_{false};
  std::vector<RingServer*> shards_;
  std::atomic<bool> stop_{false};
  int stop_fd_ = -1;
  uint64_t next_id_ = 1;
  std::unordered_map<int, Pending> pending_;  // by socket fd
  std::unordered_map<uint64_t, std::unique_ptr<RingSession>> sessions_;
  std::unordered_map<int, uint64_t> fd_to_session_;  // socket and doorbell fds
  std::vector<int> wake_fds_;                        // the handler's eventfds
  std::vector<EventSource*> sources_;
  std::vector<RingSession*> active_;  // iteration order for polling
  ByteBuffer scratch_;                // messages are copied here out of shared memory
  ServerStats stats_;
};

}  // namespace goblin::ring
