// The core side of the UCX plane: a UCX listener (`--rdma-listen HOST:PORT`) on the core
// thread's own worker (single-thread mode), served by the same loop as the ring plane
// (it is a reactor::EventSource: the worker's event fd joins the loop's epoll set and the loop
// sleeps only after ucp_worker_arm agrees). Each connected endpoint is a reactor::Session for
// the same Handler (CoreService): the client's first message is a Hello, answered with a
// Welcome; then every SBE request is an eager active message and every reply one back.
// Sends that UCX cannot finish at once are copied into reusable buffers and counted as
// queued; a session reports back-pressure (kQueued) past a window of in-flight bytes and
// kOverLimit past its output limit, as a ring session does. An endpoint that fails (the
// client died or reset) closes its session: its fills, loans and subscriptions go.
// Threading: every call, and every Handler call it makes, on the loop thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "goblin/common/fd.h"
#include "goblin/common/status.h"
#include "goblin/reactor/event_source.h"
#include "goblin/reactor/handler.h"
#include "goblin/reactor/session.h"
#include "goblin/ring/client.h"
#include "goblin/verbs/busy_watch.h"
#include "goblin/verbs/ucx.h"

namespace goblin::verbs {

struct UcxServerOptions {
  std::string listen = "0.0.0.0:0";  // HOST:PORT (port 0: any; see port())
  std::string server_name = "goblin-core";
  uint32_t max_message = 256 << 10;  // the largest SBE message either way
  // Welcome.putAlignment: the store's extent size (pieces of a put sent by reference that
  // do not cross one land whole in the extent's write buffer); 0: none.
  uint32_t put_alignment = 0;
  // Welcome.putHeadCut: where an object's first extent ends (the store's RAM head size);
  // extents after it start every put_alignment bytes from there. 0: none.
  uint32_t put_head_cut = 0;
  uint32_t max_clients = 1024;
  // Output a session may have in flight before Send() says kQueued (streaming pauses), and
  // past which it says kOverLimit (a subscriber too slow: the handler drops it).
  size_t send_window = 1 << 20;
  size_t output_limit = 8 << 20;
  size_t output_soft_limit = 0;
  std::chrono::nanoseconds output_soft_time = std::chrono::seconds(60);
  // Session ids start here (disjoint from the ring plane's) and step by shard_count (each
  // shard starts at its own offset: ids are unique across shards).
  uint64_t first_session_id = 1ull << 48;
  // This listener serves shard `shard` of `shard_count` of the core (one listener and worker
  // per shard); a Hello for another shard is refused with wrongShard.
  uint16_t shard = 0;
  uint16_t shard_count = 1;
  // A client that connects but sends no Hello this long is dropped (its slot freed).
  std::chrono::nanoseconds hello_timeout = std::chrono::seconds(5);
};

struct UcxServerStats {
  uint64_t accepted = 0, rejected = 0, closed = 0, messages = 0, failed_endpoints = 0;
  uint64_t hello_timeouts = 0;
  // Messages that came with their session's own active message id (Welcome.amId), no reply
  // endpoint looked up; and those dropped for naming a closed session's id.
  uint64_t by_own_id = 0, own_id_late = 0;
  uint64_t payloads_by_rendezvous = 0;  // messages whose bytes a client sent by reference
  uint64_t payloads_waited = 0;  // (of them: waited for kPullsPerSession others of the client)
  uint64_t payloads_placed = 0;  // (of them: received where the handler lent, a fill's buffer)
  // The worker had events it could not take for kStuckNs (a shared-memory client died while
  // writing into its receive FIFO) and was replaced: every session of it was closed.
  uint64_t worker_restarts = 0;
  // 1 ms sleeps the loop took instead of spinning on a worker busy without progress.
  uint64_t busy_dozes = 0;
};

class UcxServer;

class UcxSession final : public reactor::Session {
 public:
  uint32_t max_message() const override { return max_message_; }
  size_t queued_bytes() const override { return queued_; }
  reactor::SendOutcome Send(std::span<const uint8_t> msg) override;
  bool sends_by_reference() const override { return true; }
  Result<std::vector<uint8_t>> PackRemoteKey(const void* base, size_t bytes) override;
  PayloadSend SendWithPayload(std::span<const uint8_t> header, std::span<const uint8_t> payload,
                              uint64_t token) override;
  // The peer's address as UCX reports it ("ucx" when unknown).
  const std::string& peer() const { return peer_; }

 private:
  friend class UcxServer;
  void Attend() override;
  UcxServer* server_ = nullptr;
  bool watched_ = false;  // in the server's watched_ list
  ucp_ep_h ep_ = nullptr;
  bool welcomed_ = false;
  uint64_t connected_ns_ = 0;  // a session without a Hello within hello_timeout is dropped
  bool failed_ = false;        // the endpoint reported an error: close it forcibly
  uint32_t max_message_ = 0;
  size_t queued_ = 0;
  uint64_t soft_since_ = 0;
  uint32_t pulls_ = 0;  // rendezvous receives of this client's messages started, not yet done
  std::deque<uint32_t> waiting_pulls_;  // (slots of those not started yet, in arrival order)
  std::string peer_ = "ucx";
  unsigned am_id_ = 0;  // the active message id of its own (Welcome.amId; 0: none)
};

class UcxServer final : public reactor::EventSource {
 public:
  static Result<std::unique_ptr<UcxServer>> Listen(const UcxServerOptions& options,
                                                   reactor::Handler* handler);
  ~UcxServer() override;
  UcxServer(const UcxServer&) = delete;
  UcxServer& operator=(const UcxServer&) = delete;

  int port() const { return port_; }
  // Every shard's HOST:PORT, comma-separated in shard order: sent in each Welcome so the
  // client connects to the other shards. Before clients connect.
  void SetShardAddresses(std::string addresses) { shard_addresses_ = std::move(addresses); }
  // Registers [base, base + bytes) with UCX once (ucp_mem_map): payloads sent from it need no
  // registration per send. For the head pool and the I/O buffers, before clients connect.
  VoidResult RegisterMemory(void* base, size_t bytes);
  size_t session_count() const { return sessions_.size(); }
  const UcxServerStats& stats() const { return stats_; }
  UcxContext& context() { return *context_; }
  UcxWorker& worker() { return *worker_; }
  uint64_t late_completions() const {
    return late_completions_before_ + (worker_ ? worker_->late_completions() : 0);
  }

  // An epoll set of the server's own holding the worker's event fd: it stays the same when
  // the worker is replaced (RestartWorker).
  int event_fd() const override { return epoll_.get(); }
  size_t Poll() override;
  bool transport() const override { return true; }
  bool PrepareSleep() override;
  // Sleeps as long as nothing happens, except while a connected client has not said Hello
  // (its hello_timeout is checked when the loop wakes).
  int max_sleep_ms() const override {
    if (dozing_) return 1;
    return awaiting_hello_ > 0 ? kHelloCheckMs : -1;
  }
  void FinishSleep() override;
  static constexpr int kHelloCheckMs = 100;
  void Close() override;

  // How long the worker may say it has events (ucp_worker_arm: busy) while progress takes
  // none, and no send of ours waits for a peer, before it counts as stuck. UCX's shared-memory
  // transport has one receive FIFO per worker that every local peer writes into: a sender reserves
  // an element, fills it, then marks it written. A client killed between the two leaves an element
  // that is never marked, and the worker reads nothing after it, from anyone, while the loop spins.
  // The only way out is a new worker (and FIFO): its sessions are closed (their clients see the
  // connection fail and reconnect), the listener reopens on the same port. Counted as
  // worker_restarts. Only when a peer of this worker has died (its Hello's pid is gone, or
  // a client was lost before its Hello: its endpoint failed or it timed out; UCX's own
  // wire-up and keepalive messages go into the FIFO before the Hello, so a client killed
  // while connecting blocks it as well) or a client connected kStuckNs ago still has not
  // said Hello (its Hello waits behind the blocked element): a worker is also busy without progress
  // while a live client does not progress its own worker (UCX's wire-up and protocol messages to it
  // wait), e.g. for a second while it fills a 1 GiB buffer after connecting; that is waited out,
  // dozing (1 ms sleeps). Limit: a client that exited normally also leaves a dead pid, so on a core
  // whose clients come and go this check passes and a slow live client can still cost the others
  // their connection; telling a killed sender from an exited one needs UCX's help (not found: tried
  // keeping only endpoint failures since the last arm, which missed real blockages).
  static constexpr uint64_t kStuckNs = 1'000'000'000;
  static constexpr uint64_t kDozeAfterNs = 2'000'000;
  // Messages of one client received by rendezvous at once, each into a buffer of the
  // server's; later ones wait (UCX keeps their descriptors) and the client's sends of them
  // do not complete, which holds it to its window. A client with kMaxWaitingPulls waiting
  // ignores its window and is closed.
  static constexpr uint32_t kPullsPerSession = 16;
  static constexpr size_t kMaxWaitingPulls = 4096;

 private:
  friend class UcxSession;
  UcxServer() = default;
  static void OnConnRequest(ucp_conn_request_h request, void* arg);
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t OnMessage(void* arg, const void* header, size_t header_length, void* data,
                                size_t length, const ucp_am_recv_param_t* param);
  // A message of a session's own active message id (arg: its AmRoute).
  static ucs_status_t OnSessionMessage(void* arg, const void* header, size_t header_length,
                                       void* data, size_t length, const ucp_am_recv_param_t* param);
  // A message of session `s`, however it was told apart.
  ucs_status_t Take(UcxSession& s, const void* header, size_t header_length, void* data,
                    size_t length, const ucp_am_recv_param_t* param);
  // Registers an active message id for `s` alone (0 when none is free or it fails).
  unsigned AssignAmId(UcxSession& s);
  static void OnSent(void* user, SendBuffers::Buffer* buffer, ucs_status_t status);
  void Deliver();
  VoidResult StartWorker();  // a worker (with the message handler), its listener, in epoll_
  void RestartWorker();
  void Welcome(UcxSession& s, std::span<const uint8_t> msg);
  void CloseSession(uint64_t id);
  void ReapClosing();
  ucp_mem_h MemhFor(const uint8_t* p, size_t n) const;
  struct Region {
    uint8_t* base = nullptr;
    size_t bytes = 0;
    ucp_mem_h memh = nullptr;
  };
  std::vector<Region> regions_;
  // Payloads UCX has finished with: (session, token), handed to the handler after progress.
  std::vector<std::pair<uint64_t, uint64_t>> payloads_done_;

  UcxServerOptions options_;
  reactor::Handler* handler_ = nullptr;
  SendBuffers buffers_;  // outlives the worker (its callbacks return buffers here)
  // A message whose bytes a client sent by reference, received by rendezvous into a slot of
  // its own (reused; a deque: a slot never moves while UCX writes into it; it outlives the
  // worker). Its place in inbox_ is a placeholder; the session's later messages wait for it.
  static constexpr uint32_t kSlotMark = UINT32_MAX;
  struct Slot {
    std::vector<uint8_t> bytes;
    bool ready = false;
    bool failed = false;
    bool orphan = false;  // its session went first: freed when UCX is done with it
    UcxServer* owner = nullptr;
    uint64_t session = 0;
    uint32_t index = 0;
    bool started = false;  // its rendezvous receive was started (StartPull)
    void* desc = nullptr;  // (until then: UCX's descriptor of the message)
    uint32_t length = 0;   // the payload's length
    // Where the handler placed the payload (PlacePayload), else into `bytes` after the header.
    uint8_t* placed = nullptr;
    uint64_t placement = 0;  // its token, released in FreeSlot
  };
  std::deque<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  ucs_status_t OnPayloadMessage(UcxSession& s, const void* header, size_t header_length, void* data,
                                size_t length, const ucp_am_recv_param_t* param);
  void StartPull(UcxSession& s, uint32_t slot);
  void FreeSlot(uint32_t slot);
  void DropWaitingPulls(UcxSession& s);
  std::unique_ptr<UcxContext> context_;
  std::unique_ptr<UcxWorker> worker_;
  ucp_listener_h listener_ = nullptr;
  UniqueFd epoll_;
  std::string listen_address_;  // what the listener binds (port_ once known: a restart reuses it)
  BusyWatch busy_{kDozeAfterNs, kStuckNs};  // busy without progress: doze, or a stuck FIFO
  uint64_t late_completions_before_ = 0;    // (of workers replaced)
  bool dozing_ = false;                     // PrepareSleep let the loop sleep 1 ms without arming
  std::vector<uint32_t> peer_pids_;         // welcomed clients' pids since the worker started
  static constexpr size_t kMaxPeerPids = 4096;
  bool lost_before_hello_ = false;  // (since the worker started: a pid we never learnt)
  // Whether a blockage of the worker's FIFO has a culprit: see kStuckNs.
  bool APeerDied(uint64_t now) const;
  int port_ = 0;
  uint64_t next_id_ = 0;
  std::string shard_addresses_;
  // (Swiss tables; a message finds its session by endpoint, by_ep_)
  absl::flat_hash_map<uint64_t, std::unique_ptr<UcxSession>> sessions_;
  // Sessions a poll round looks at: not welcomed yet, closing, wanting OnWritable or with
  // sends of theirs in flight (each round walks these, not every client: a shard with
  // hundreds of connected clients, a few talking, pays for those few). Every session in one
  // of those states is here (Watch); one that left them all goes at the next round.
  std::vector<uint64_t> watched_;
  void Watch(UcxSession& s);
  size_t awaiting_hello_ = 0;  // sessions connected that have not said Hello yet
  // Each session's endpoint (the session's, erased with it in CloseSession): one lookup per
  // message.
  absl::flat_hash_map<ucp_ep_h, UcxSession*> by_ep_;
  // Per-session active message ids (ucx.h): routes_[id - kAmSessionBase] is the session the
  // worker's handler of that id hands messages to (null: none now, and a late message of a
  // closed session's id is dropped). Handed out round robin, so an id comes back to another
  // session only after all the others (sized at the first Welcome: 4 per client allowed,
  // at most kAmSessionIds; never resized, each route is its handler's argument).
  struct AmRoute {
    UcxServer* server = nullptr;
    UcxSession* session = nullptr;
    bool registered = false;  // with the current worker
  };
  std::vector<AmRoute> routes_;
  size_t next_route_ = 0;
  // Received messages: [u64 session][u32 length][bytes], or [u64 session][kSlotMark][u32
  // slot] for one still arriving by rendezvous. deliverable_: something there can be handed
  // on (a message arrived or a slot filled since the last Deliver).
  std::vector<uint8_t> inbox_;
  std::vector<uint8_t> inbox_kept_;  // Deliver's leftovers (sessions waiting on a slot)
  std::vector<uint64_t> blocked_;    // (Deliver's: sessions waiting on a slot)
  bool deliverable_ = false;
  std::vector<void*> closing_;  // endpoint close requests still in progress
  UcxServerStats stats_;
};

}  // namespace goblin::verbs
