#include "goblin/verbs/ucx.h"

#include <netdb.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "goblin/common/clock.h"

namespace goblin::verbs {

namespace {
// UCX contexts alive in this process, and the process that made them: a child forked while
// one lived cannot use UCX (UCX's async thread, which carries connection set-up, is not
// copied by fork but its state says it runs; a connect then waits out its timeout).
std::atomic<int> live_contexts{0};
std::atomic<pid_t> contexts_pid{0};
}  // namespace

Status UcsError(ucs_status_t status, std::string_view what) {
  StatusCode code = StatusCode::kInternal;
  switch (status) {
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_REJECTED:
    case UCS_ERR_CANCELED:
    case UCS_ERR_NOT_CONNECTED:
      code = StatusCode::kUnavailable;
      break;
    case UCS_ERR_TIMED_OUT:
      code = StatusCode::kTimeout;
      break;
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
      code = StatusCode::kResourceExhausted;
      break;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
      code = StatusCode::kInvalidArgument;
      break;
    case UCS_ERR_BUSY:
      code = StatusCode::kAlreadyExists;
      break;
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NO_DEVICE:
      code = StatusCode::kUnimplemented;
      break;
    default:
      break;
  }
  return Status(code, fmt::format("{}: {}", what, ucs_status_string(status)));
}

namespace {

// UCX_TLS as UCX read it (environment or ucx.conf): the printed configuration's TLS line.
std::string ConfiguredTls(const ucp_config_t* config) {
  char* text = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&text, &size);
  if (f == nullptr) return "all";
  ucp_config_print(config, f, nullptr, UCS_CONFIG_PRINT_CONFIG);
  fclose(f);
  std::string tls = "all";
  std::string_view all(text, size);
  for (size_t at = 0; at < all.size();) {
    size_t end = all.find('\n', at);
    if (end == std::string_view::npos) end = all.size();
    std::string_view line = all.substr(at, end - at);
    if (line.starts_with("UCX_TLS=")) tls = std::string(line.substr(8));
    at = end + 1;
  }
  free(text);
  return tls;
}

}  // namespace

bool TlsAllowsSharedMemory(std::string_view tls) {
  bool negated = tls.starts_with('^');
  if (negated) tls.remove_prefix(1);
  bool names_all_of_it = false, names_some = false;
  for (size_t at = 0; at <= tls.size();) {
    size_t end = tls.find(',', at);
    if (end == std::string_view::npos) end = tls.size();
    std::string_view t = tls.substr(at, end - at);
    if (t == "all" || t == "sm" || t == "shm" || t == "mm") names_all_of_it = true;
    if (t == "posix" || t == "sysv" || t == "xpmem" || t == "cma" || t == "knem") names_some = true;
    at = end + 1;
  }
  return negated ? !names_all_of_it : names_all_of_it || names_some;
}

Result<std::unique_ptr<UcxContext>> UcxContext::Create() {
  if (const pid_t me = getpid(); live_contexts.load() > 0 && contexts_pid.load() != me) {
    return Err(
        Status(StatusCode::kFailedPrecondition,
               fmt::format("UCX cannot be used in this process: it was forked from pid {} while "
                           "UCX connections were open there, and UCX does not survive fork (fork "
                           "before opening them or after closing them all, or exec in the child)",
                           contexts_pid.load())));
  }
  // The tcp transport's PUT zcopy (its rendezvous) trips an assertion in UCX 1.13 when a
  // peer dies with puts of ours outstanding ("tcp_ep.c:939 Assertion `ep->flags &
  // UCT_TCP_EP_FLAG_PUT_TX_WAITING_ACK' failed", and the process aborts; openucx/ucx#4680 is
  // the same family): seen with a client killed in the middle of a big Get. Rendezvous over
  // tcp then goes as active messages. Set in the environment, which is where UCX reads
  // transport settings (ucp_config_modify does not reach them in 1.13), before the first
  // context, from setup code; an explicit UCX_TCP_PUT_ENABLE is the operator's to choose.
  setenv("UCX_TCP_PUT_ENABLE", "n", /*overwrite=*/0);
  // A listener binds with SO_REUSEADDR, as servers do: a core restarted, or a worker
  // replaced (UcxServer::RestartWorker), listens again on its port while connections of the
  // old one linger in TIME_WAIT.
  setenv("UCX_TCP_CM_REUSEADDR", "y", /*overwrite=*/0);
  setenv("UCX_RDMA_CM_REUSEADDR", "y", /*overwrite=*/0);
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return Err(UcsError(st, "ucp_config_read"));
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  params.name = "goblin";
  std::unique_ptr<UcxContext> c(new UcxContext());
  c->shared_memory_ = TlsAllowsSharedMemory(ConfiguredTls(config));
  st = ucp_init(&params, config, &c->context_);
  ucp_config_release(config);
  if (st != UCS_OK) return Err(UcsError(st, "ucp_init"));
  if (live_contexts.fetch_add(1) == 0) contexts_pid.store(getpid());
  return c;
}

UcxContext::~UcxContext() {
  if (context_ == nullptr) return;
  ucp_cleanup(context_);
  live_contexts.fetch_sub(1);
}

Result<std::unique_ptr<UcxWorker>> UcxWorker::Create(UcxContext& context, bool serialized) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = serialized ? UCS_THREAD_MODE_SERIALIZED : UCS_THREAD_MODE_SINGLE;
  std::unique_ptr<UcxWorker> w(new UcxWorker());
  ucs_status_t st = ucp_worker_create(context.get(), &params, &w->worker_);
  if (st != UCS_OK) return Err(UcsError(st, "ucp_worker_create"));
  st = ucp_worker_get_efd(w->worker_, &w->efd_);
  if (st != UCS_OK) return Err(UcsError(st, "ucp_worker_get_efd"));
  return w;
}

UcxWorker::~UcxWorker() {
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
}

VoidResult UcxWorker::SetHandler(unsigned id, ucp_am_recv_callback_t cb, void* arg) {
  ucp_am_handler_param_t am{};
  am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  am.id = id;
  am.flags = UCP_AM_FLAG_WHOLE_MSG;
  am.cb = cb;
  am.arg = arg;
  ucs_status_t st = ucp_worker_set_am_recv_handler(worker_, &am);
  if (st != UCS_OK) return Err(UcsError(st, "ucp_worker_set_am_recv_handler"));
  return {};
}

size_t UcxWorker::Progress() {
  size_t work = 0;
  while (ucp_worker_progress(worker_) != 0) ++work;
  return work;
}

bool UcxWorker::Arm() {
  if (ucp_worker_arm(worker_) != UCS_OK) return false;  // UCS_ERR_BUSY: events pending
  // (see the header: a completion that landed before the CQs were armed raises no event)
  if (ucp_worker_progress(worker_) == 0) return true;
  ++late_completions_;
  return false;
}

void UcxWorker::WaitForEvents(std::chrono::nanoseconds timeout) {
  if (Progress() > 0 || !Arm()) return;
  pollfd p{efd_, POLLIN, 0};
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(timeout).count();
  (void)poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, INT32_MAX)));
}

Result<sockaddr_storage> ResolveHostPort(std::string_view host_port, socklen_t* len) {
  size_t colon = host_port.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == host_port.size()) {
    return Err(StatusCode::kInvalidArgument, "'{}': expected HOST:PORT", host_port);
  }
  std::string host(host_port.substr(0, colon));
  std::string port(host_port.substr(colon + 1));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host == "*") host = "0.0.0.0";
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    return Err(StatusCode::kInvalidArgument, "'{}': {}", host_port, gai_strerror(rc));
  }
  sockaddr_storage ss{};
  std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return ss;
}

SendBuffers::Buffer* SendBuffers::Acquire(size_t size) {
  Buffer* b;
  if (free_.empty()) {
    b = new Buffer();
    b->pool = this;
  } else {
    b = free_.back();
    free_.pop_back();
  }
  if (b->bytes.size() < size) b->bytes.resize(size);
  b->size = size;
  ++outstanding_;
  return b;
}

void SendBuffers::Release(Buffer* b) {
  --outstanding_;
  b->done = nullptr;
  b->user = nullptr;
  b->payload_size = 0;
  b->payload_token = 0;
  free_.push_back(b);
}

SendBuffers::~SendBuffers() {
  // Buffers still with UCX belong to endpoints closed before this; leaking them would be a
  // bug, not a crash: the owner closes its endpoints first.
  for (Buffer* b : free_) delete b;
}

namespace {

void OnSendComplete(void* request, ucs_status_t status, void* user_data) {
  auto* b = static_cast<SendBuffers::Buffer*>(user_data);
  if (b->done != nullptr) b->done(b->user, b, status);
  b->pool->Release(b);
  ucp_request_free(request);
}

}  // namespace

Result<size_t> SendMessage(ucp_ep_h ep, unsigned am_id, std::span<const uint8_t> msg,
                           SendBuffers& buffers, uint64_t owner, SendBuffers::Done done, void* user,
                           bool reply_flag, bool nothing_in_flight) {
  const uint32_t flags = UCP_AM_SEND_FLAG_EAGER | (reply_flag ? UCP_AM_SEND_FLAG_REPLY : 0);
  if (nothing_in_flight) {
    // The usual case: UCX takes the bytes at once, straight from the caller's buffer.
    ucp_request_param_t now{};
    now.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    now.flags = flags;
    ucs_status_ptr_t r = ucp_am_send_nbx(ep, am_id, nullptr, 0, msg.data(), msg.size(), &now);
    if (r == nullptr) return size_t{0};
    if (UCS_PTR_IS_ERR(r) && UCS_PTR_STATUS(r) != UCS_ERR_NO_RESOURCE) {
      return Err(UcsError(UCS_PTR_STATUS(r), "ucp_am_send_nbx"));
    }
    if (!UCS_PTR_IS_ERR(r)) ucp_request_free(r);  // (not expected with FORCE_IMM_CMPL)
  }
  // Not at once: a copy that stays with UCX until the send completes.
  SendBuffers::Buffer* b = buffers.Acquire(msg.size());
  std::memcpy(b->bytes.data(), msg.data(), msg.size());
  b->owner = owner;
  b->done = done;
  b->user = user;
  ucp_request_param_t p{};
  p.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = flags;
  p.cb.send = OnSendComplete;
  p.user_data = b;
  ucs_status_ptr_t r = ucp_am_send_nbx(ep, am_id, nullptr, 0, b->bytes.data(), msg.size(), &p);
  if (r == nullptr) {  // completed at once: the callback does not run
    buffers.Release(b);
    return size_t{0};
  }
  if (UCS_PTR_IS_ERR(r)) {
    buffers.Release(b);
    return Err(UcsError(UCS_PTR_STATUS(r), "ucp_am_send_nbx"));
  }
  return msg.size();
}

Result<ucp_mem_h> MapMemory(UcxContext& context, const void* base, size_t bytes) {
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = const_cast<void*>(base);
  mp.length = bytes;
  ucp_mem_h memh = nullptr;
  ucs_status_t st = ucp_mem_map(context.get(), &mp, &memh);
  if (st != UCS_OK) return Err(UcsError(st, "ucp_mem_map"));
  return memh;
}

Result<bool> SendHeaderAndPayload(ucp_ep_h ep, std::span<const uint8_t> header,
                                  std::span<const uint8_t> payload, ucp_mem_h memh,
                                  SendBuffers& buffers, uint64_t owner, uint64_t token,
                                  SendBuffers::Done done, void* user, uint32_t am_flags,
                                  unsigned am_id) {
  // UCX 1.13 reads the header until completion too: it lives in a reused buffer.
  SendBuffers::Buffer* b = buffers.Acquire(header.size());
  std::memcpy(b->bytes.data(), header.data(), header.size());
  b->owner = owner;
  b->done = done;
  b->user = user;
  b->payload_size = payload.size();
  b->payload_token = token;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = OnSendComplete;
  p.user_data = b;
  if (am_flags != 0) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = am_flags;
  }
  if (memh != nullptr) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    p.memh = memh;
  }
  ucs_status_ptr_t r = ucp_am_send_nbx(ep, am_id, b->bytes.data(), header.size(), payload.data(),
                                       payload.size(), &p);
  if (r == nullptr) {
    buffers.Release(b);
    return true;
  }
  if (UCS_PTR_IS_ERR(r)) {
    buffers.Release(b);
    return Err(UcsError(UCS_PTR_STATUS(r), "ucp_am_send_nbx"));
  }
  return false;
}

void CloseEndpoint(UcxWorker& worker, ucp_ep_h ep, bool force, std::chrono::milliseconds timeout) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) return;
  uint64_t deadline = MonotonicNanos() + static_cast<uint64_t>(timeout.count()) * 1'000'000;
  while (ucp_request_check_status(r) == UCS_INPROGRESS && MonotonicNanos() < deadline) {
    if (worker.Progress() == 0) worker.WaitForEvents(std::chrono::milliseconds(1));
  }
  if (ucp_request_check_status(r) == UCS_INPROGRESS) {
    ucp_request_cancel(worker.get(), r);
    worker.Progress();
  }
  ucp_request_free(r);
}

}  // namespace goblin::verbs
