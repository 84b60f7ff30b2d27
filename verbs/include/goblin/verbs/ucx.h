// UCX basics for the native plane: RAII owners of a UCP context and of a worker in
// single-thread mode (one per loop thread, never shared), the wake-up protocol of a worker
// (event fd, Arm), UCS status -> Status, host:port resolution, and the pool of send
// buffers both ends use for active messages. Every goblin message on the UCX plane is one
// active message whose data is one SBE message (no AM header), sent eager (in order,
// delivered whole): of id kAmMessage, a client's with UCP_AM_SEND_FLAG_REPLY (the core finds
// its session by the reply endpoint), or once welcomed of the id the core gave its session
// (Welcome.amId, from kAmSessionBase on: the core registered it for that session alone, and
// the send needs no reply flag).
// Threading: a worker and everything created on it belong to the thread that progresses it.
#pragma once

#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "goblin/common/status.h"

namespace goblin::verbs {

inline constexpr unsigned kAmMessage = 1;
// Per-session active message ids: kAmSessionBase to kAmSessionBase + kAmSessionIds - 1.
inline constexpr unsigned kAmSessionBase = 16;
inline constexpr unsigned kAmSessionIds = 16384;

// A UCS status as a Status (UCS_ERR_UNREACHABLE/CONNECTION_RESET/... -> Unavailable).
Status UcsError(ucs_status_t status, std::string_view what);

class UcxContext {
 public:
  // Features: active messages, RMA (one-sided reads of registered memory), wake-up.
  // UCX reads its UCX_* environment here (UCX_TLS, UCX_NET_DEVICES, ...).
  static Result<std::unique_ptr<UcxContext>> Create();
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;
  ucp_context_h get() const { return context_; }
  // Whether the transports UCX was given (UCX_TLS, however set) include shared memory: a
  // peer on this host may then be reached through memory (libgoblin maps the core's pools).
  bool shared_memory() const { return shared_memory_; }

 private:
  UcxContext() = default;
  ucp_context_h context_ = nullptr;
  bool shared_memory_ = true;
};

// Whether a UCX_TLS value lets UCX use shared memory: "all", "sm"/"shm"/"mm" or one of their
// transports (posix, sysv, xpmem, cma, knem) named; a "^" list unless it excludes them all.
bool TlsAllowsSharedMemory(std::string_view tls);

class UcxWorker {
 public:
  // `serialized`: used by more than one thread, one at a time (UCS_THREAD_MODE_SERIALIZED:
  // made on one thread and handed to another; UCX then flushes its stores for the next
  // thread); else only by the thread that made it (SINGLE).
  static Result<std::unique_ptr<UcxWorker>> Create(UcxContext& context, bool serialized = false);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;
  ucp_worker_h get() const { return worker_; }

  // Progresses until nothing more happens now; returns how many times progress did work.
  size_t Progress();
  // One ucp_worker_progress call: true when it did something. For a reader that hands each
  // message on as it arrives (Progress() would first take in all that is there, a whole
  // rendezvous included, before the first message is handed on).
  bool ProgressOnce() { return ucp_worker_progress(worker_) != 0; }
  // Routes goblin messages (active message kAmMessage, delivered whole) to cb(arg, ...).
  VoidResult SetMessageHandler(ucp_am_recv_callback_t cb, void* arg) {
    return SetHandler(kAmMessage, cb, arg);
  }
  // The same for active message `id` (a session's, kAmSessionBase on).
  VoidResult SetHandler(unsigned id, ucp_am_recv_callback_t cb, void* arg);
  // An fd that becomes readable when the armed worker has events.
  int event_fd() const { return efd_; }
  // Arms the worker before sleeping on event_fd(): false when events are pending (progress
  // instead of sleeping). Once ucp_worker_arm agrees it progresses once more, and says false
  // if that found work: a verbs CQ raises an event only for completions added after it was
  // armed, and UCX's arm does not poll after arming. mlx5 hardware checks the consumer index
  // when armed and so loses none, but Soft-RoCE (rxe) loses a completion that landed between
  // the last progress and the arm, and the worker would sleep with it unnoticed
  // (late_completions() counts the ones caught here).
  bool Arm();
  uint64_t late_completions() const { return late_completions_; }
  // Progresses, then sleeps on event_fd() up to `timeout` when nothing happened.
  void WaitForEvents(std::chrono::nanoseconds timeout);

 private:
  UcxWorker() = default;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  uint64_t late_completions_ = 0;
};

// "host:port" ("[v6]:port" too) -> a socket address for a listener or a client.
Result<sockaddr_storage> ResolveHostPort(std::string_view host_port, socklen_t* len);

// Buffers for eager sends that may complete later: a message is copied into one, the
// buffer stays with UCX until the send's callback gives it back. Reused: no allocation
// once warm.
class SendBuffers {
 public:
  struct Buffer;
  using Done = void (*)(void* user, Buffer* buffer, ucs_status_t status);
  struct Buffer {
    std::vector<uint8_t> bytes;
    size_t size = 0;
    uint64_t owner = 0;          // who sent it (a session id)
    size_t payload_size = 0;     // SendHeaderAndPayload: the caller's bytes sent after it
    uint64_t payload_token = 0;  // and the caller's token for them
    SendBuffers* pool = nullptr;
    Done done = nullptr;
    void* user = nullptr;
  };
  Buffer* Acquire(size_t size);
  void Release(Buffer* b);
  ~SendBuffers();

 private:
  std::vector<Buffer*> free_;
  size_t outstanding_ = 0;
};

// Sends `msg` on `ep` as one eager active message. With `nothing_in_flight` (the caller
// has no earlier send pending on `ep`, so order cannot change) UCX is first asked to take
// it at once from `msg` itself; otherwise, or when it cannot, `msg` is copied into a
// SendBuffers buffer owned by `owner` that stays with UCX until the send completes and
// `done(user, buffer)` runs (from progress; the buffer goes back to `buffers` after it).
// Returns the bytes queued (0: sent already). `am_id`: kAmMessage or a session's id.
Result<size_t> SendMessage(ucp_ep_h ep, unsigned am_id, std::span<const uint8_t> msg,
                           SendBuffers& buffers, uint64_t owner, SendBuffers::Done done, void* user,
                           bool reply_flag, bool nothing_in_flight);

// Sends `header` (copied) followed by `payload` (by reference: UCX reads it until the send
// completes; eager or rendezvous as UCX chooses) as one active message; the receiver sees
// `header` as the AM header. `memh`: the registration covering `payload` (or nullptr: UCX
// registers it, through its cache). `am_flags`: UCP_AM_SEND_FLAG_* (a client's sends to the
// core: REPLY, the receiver gets a reply endpoint; RNDV, the receiver pulls the payload, over
// verbs with an RDMA READ, whatever its size). Returns true when the send completed at once (`done`
// is not called), false when `done` will be called from progress. The two sides read such a message
// the same way (UcxClient and UcxServer): `header` is an SBE message ending in an empty varData32,
// and the AM data are its bytes.
Result<bool> SendHeaderAndPayload(ucp_ep_h ep, std::span<const uint8_t> header,
                                  std::span<const uint8_t> payload, ucp_mem_h memh,
                                  SendBuffers& buffers, uint64_t owner, uint64_t token,
                                  SendBuffers::Done done, void* user, uint32_t am_flags = 0,
                                  unsigned am_id = kAmMessage);

// Registers [base, base + bytes) with `context` (ucp_mem_map): sends from it pass the memh
// instead of registering inside each send. The caller unmaps it (ucp_mem_unmap).
Result<ucp_mem_h> MapMemory(UcxContext& context, const void* base, size_t bytes);

// Closes an endpoint (forcibly when `force`), progressing the worker until UCX is done or
// `timeout` passes.
void CloseEndpoint(UcxWorker& worker, ucp_ep_h ep, bool force,
                   std::chrono::milliseconds timeout = std::chrono::milliseconds(500));

}  // namespace goblin::verbs
