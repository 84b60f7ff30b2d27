// The client side of the UCX plane (used by libgoblin for "ucx://HOST:PORT"): its own UCP
// context and single-thread worker, one endpoint to the core's listener with peer error
// handling, the Hello/Welcome exchange, then SBE messages as eager active messages both
// ways. Received messages are copied into an inbox as UCX hands them over and given to the
// caller in order by Poll(), or, while a direct receiver is set (SetDirect), handed to it
// from UCX's callback itself when nothing is queued before them. Sleeping: wake_fd() is the
// worker's event fd, PrepareSleep() arms it (false: something is pending). Threading: the thread
// that connected (the worker is single-threaded), or with `handed_over` one thread at a time.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "goblin/common/function_ref.h"
#include "goblin/common/spin_backoff.h"
#include "goblin/common/status.h"
#include "goblin/verbs/ucx.h"

namespace goblin::verbs {

struct UcxClientOptions {
  std::string name = "libgoblin";
  uint8_t peer_kind = 0;  // wire::PeerKind
  uint32_t max_message = 256 << 10;
  size_t send_window = 1 << 20;  // bytes in flight before TrySend says "full"
  // Payloads sent by reference (SendWithPayload) take no buffer here: more may be in flight
  // (each is a rendezvous the core pulls; at most UcxServer::kMaxPullsPerSession at once).
  size_t payload_window = 8 << 20;
  std::chrono::milliseconds timeout = std::chrono::seconds(5);
  // Wait() polls the worker this long before arming it and sleeping (0: sleep at once),
  // with `spin_yield` giving the CPU away between polls (sched_yield).
  std::chrono::nanoseconds busy_poll = std::chrono::microseconds(50);
  bool spin_yield = false;
  uint16_t shard = 0;  // the core shard this endpoint is for (its listener must serve it)
  // Connected on one thread and then used on another (one at a time): a serialized worker.
  bool handed_over = false;
};

class UcxClient {
 public:
  // Connects to the core's UCX listener and exchanges Hello/Welcome. Unavailable when
  // nobody listens there (or the core refuses), Timeout when it does not answer.
  static Result<std::unique_ptr<UcxClient>> Connect(std::string_view host_port,
                                                    const UcxClientOptions& options);
  ~UcxClient();
  UcxClient(const UcxClient&) = delete;
  UcxClient& operator=(const UcxClient&) = delete;

  uint64_t client_id() const { return client_id_; }
  uint32_t server_pid() const { return server_pid_; }
  uint32_t max_message() const { return max_message_; }
  uint16_t shard_count() const { return shard_count_; }
  // The core's Welcome.putAlignment (0: none).
  uint32_t put_alignment() const { return put_alignment_; }
  uint32_t put_head_cut() const { return put_head_cut_; }  // Welcome.putHeadCut
  // Whether UCX may use shared memory (UcxContext::shared_memory).
  bool shared_memory() const { return context_->shared_memory(); }
  // Every shard's HOST:PORT in shard order, as the core's Welcome listed them.
  const std::string& shard_addresses() const { return shard_addresses_; }

  enum class SendStatus : uint8_t { kOk, kFull, kTooLarge };
  SendStatus TrySend(std::span<const uint8_t> msg);
  // Waits (progressing) for room up to `timeout`.
  VoidResult Send(std::span<const uint8_t> msg, std::chrono::nanoseconds timeout);
  // `header` (an SBE message ending in an empty varData32, copied) with `payload` as those
  // bytes, sent by reference: UCX reads the caller's memory (a rendezvous above its
  // threshold: over verbs the core RDMA-reads it) until the send completes, so the payload
  // must stay unchanged until Flush() returns. Together at most max_message() bytes; waits
  // for window room up to `timeout`.
  VoidResult SendWithPayload(std::span<const uint8_t> header, std::span<const uint8_t> payload,
                             std::chrono::nanoseconds timeout);
  // Registers `bytes` with UCX (ucp_mem_map) for the payloads sent from it until Flush():
  // the rendezvous then packs a key it has instead of registering inside the send. While an
  // earlier registration is still held (a Flush that timed out), it registers nothing and
  // UCX registers each send through its cache.
  VoidResult RegisterPayloads(std::span<const uint8_t> bytes);
  // Waits (progressing) until UCX is done with every send, payloads included; drops the
  // registration RegisterPayloads made.
  VoidResult Flush(std::chrono::nanoseconds timeout);
  // Encode into Reserve(max) (a staging buffer), then Commit(len) sends it; nullptr when
  // the send window is full right now.
  uint8_t* Reserve(uint32_t max_len);
  void Commit(uint32_t len);
  // After a Reserve or TrySend that found the send window full: progresses the worker,
  // sleeping on its events (at most 1 ms at a time, as Send does) up to `timeout`.
  void WaitForRoom(std::chrono::nanoseconds timeout) {
    if (in_callback_) return;  // (no progress inside UCX's callback: see SetDirect)
    worker_->WaitForEvents(std::min(timeout, std::chrono::nanoseconds(1'000'000)));
  }

  // Hands received messages to fn in arrival order; returns how many.
  Result<size_t> Poll(FunctionRef<void(std::span<const uint8_t>)> fn, size_t max = SIZE_MAX);
  // Blocks until a message is readable (true) or the timeout passes (false); error when
  // the core has gone away. A message handed to the direct receiver counts as readable.
  Result<bool> Wait(std::chrono::nanoseconds timeout);

  // The direct receiver (a synchronous exchange's fast path; nullptr: none). While it is set,
  // a message that arrives with nothing queued before it (so the order holds) is handed to it
  // from UCX's active message callback, inside progress, instead of being copied to the
  // inbox for Poll: a reply's handing-over took ~100 ns that way, ~50 ns this way
  // (docs/benchmarks/native.md). It may Send (a UCX callback may); it must not Wait, Poll,
  // Flush or sleep, which fail (kFailedPrecondition) or return at once while it runs: UCX
  // forbids progressing a worker from its own callback. Returns the receiver it replaces.
  using DirectFn = FunctionRef<void(std::span<const uint8_t>)>;
  DirectFn* SetDirect(DirectFn* fn) {
    direct_count_ = 0;
    return std::exchange(direct_, fn);
  }
  // How many messages went to the direct receiver since the last call.
  size_t TakeDirect() { return std::exchange(direct_count_, 0); }

  int wake_fd() const { return worker_->event_fd(); }
  bool PrepareSleep();
  void FinishSleep() {}
  // Unavailable once the endpoint failed (the core went away or reset the connection).
  VoidResult CheckAlive();

  // One-sided reads of the core's pools: asks for them (MapPools -> RemotePools: address,
  // size and packed rkey per pool; unpacked here once), then ReadRemote gets
  // [offset, offset + dst.size()) of pool `kind` (wire::PoolKind) straight from the core's
  // memory (RDMA read on verbs; emulated over tcp) without the core's handler.
  // (Messages other than the answer that arrive meanwhile are dropped: call it first, or
  // send MapPools yourself and hand the answer to AttachRemotePools.)
  VoidResult MapRemotePools(std::chrono::nanoseconds timeout);
  VoidResult AttachRemotePools(std::span<const uint8_t> reply);
  bool remote_pools_mapped() const { return !remote_.empty(); }
  VoidResult ReadRemote(uint8_t kind, uint64_t offset, std::span<uint8_t> dst,
                        std::chrono::nanoseconds timeout);

 private:
  UcxClient() = default;
  static ucs_status_t OnMessage(void* arg, const void* header, size_t header_length, void* data,
                                size_t length, const ucp_am_recv_param_t* param);
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void OnSent(void* user, SendBuffers::Buffer* buffer, ucs_status_t status);
  ucs_status_t OnPayloadMessage(const void* header, size_t header_length, void* data, size_t length,
                                const ucp_am_recv_param_t* param);
  static constexpr uint32_t kSlotMark = UINT32_MAX;
  struct Slot {  // a rendezvous message being received (reused)
    std::vector<uint8_t> bytes;
    bool ready = false;
    UcxClient* owner = nullptr;
  };
  bool Pending() const { return inbox_head_ < inbox_.size() || !incoming_.empty(); }
  // kFailedPrecondition inside the direct receiver (see SetDirect).
  VoidResult NotInCallback(const char* what) const;
  // The next record can be handed out (not a rendezvous still receiving).
  bool Deliverable() const;

  UcxClientOptions options_;
  SendBuffers buffers_;  // outlives the worker
  std::unique_ptr<UcxContext> context_;
  std::unique_ptr<UcxWorker> worker_;
  ucp_ep_h ep_ = nullptr;
  bool failed_ = false;
  SpinBackoff backoff_;  // (Wait: no spinning for a while on a CPU it was preempted on)
  // The active message id this client's messages go with: kAmMessage with the reply flag
  // until the core's Welcome gives the session its own (Welcome.amId; ucx.h).
  unsigned am_id_ = kAmMessage;
  bool answered_ = false;  // the core's Welcome (or Error) came: the endpoint is connected
  std::string failure_;
  size_t in_flight_ = 0;
  std::span<const uint8_t> payload_region_;  // RegisterPayloads' bytes and their memh
  ucp_mem_h payload_memh_ = nullptr;
  uint64_t client_id_ = 0;
  uint32_t server_pid_ = 0;
  uint16_t shard_count_ = 1;
  uint32_t put_alignment_ = 0;
  uint32_t put_head_cut_ = 0;
  std::string shard_addresses_;
  uint32_t max_message_ = 0;
  std::vector<uint8_t> staging_;
  std::vector<uint8_t> inbox_;  // [u32 length][bytes] records being handed out
  size_t inbox_head_ = 0;
  std::vector<uint8_t> incoming_;  // records UCX delivered since (same format)
  DirectFn* direct_ = nullptr;     // SetDirect
  size_t direct_count_ = 0;        // messages handed to it since TakeDirect
  bool in_callback_ = false;       // the direct receiver runs (inside UCX's callback)
  // Poll or the direct receiver is handing messages out: what arrives meanwhile (a send's
  // progress) is queued, never handed to the direct receiver inside the one running.
  bool delivering_ = false;
  std::deque<Slot> slots_;  // (a deque: slots never move while receiving into them)
  struct RemotePool {
    uint8_t kind = 0;
    uint64_t address = 0, bytes = 0;
    ucp_rkey_h rkey = nullptr;
  };
  std::vector<RemotePool> remote_;
  std::vector<uint32_t> free_slots_;
};

}  // namespace goblin::verbs
