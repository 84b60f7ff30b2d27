#include "goblin/verbs/ucx_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <cstring>

#include "goblin/common/clock.h"
#include "goblin/common/log.h"
#include "goblin/sbe/runtime.h"
#include "goblin/sbe/wire_flags.h"
#include "goblin/wire/goblin_wire.h"

namespace goblin::verbs {
namespace {

constexpr std::string_view kLog = "ucx";

std::string FormatSockaddr(const sockaddr_storage& ss) {
  char ip[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    return fmt::format("{}:{}", ip, ntohs(a->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
    return fmt::format("[{}]:{}", ip, ntohs(a->sin6_port));
  }
  return "ucx";
}

}  // namespace

reactor::SendOutcome UcxSession::Send(std::span<const uint8_t> msg) {
  if (msg.size() > max_message_) return reactor::SendOutcome::kTooLarge;
  if (failed_ || ep_ == nullptr) return reactor::SendOutcome::kOverLimit;
  const UcxServerOptions& o = server_->options_;
  if (queued_ + msg.size() > o.send_window + o.output_limit)
    return reactor::SendOutcome::kOverLimit;
  if (o.output_soft_limit != 0 && queued_ + msg.size() > o.send_window + o.output_soft_limit) {
    uint64_t now = MonotonicNanos();
    if (soft_since_ == 0) {
      soft_since_ = now;
    } else if (now - soft_since_ > static_cast<uint64_t>(o.output_soft_time.count())) {
      return reactor::SendOutcome::kOverLimit;
    }
  }
  auto r = SendMessage(ep_, kAmMessage, msg, server_->buffers_, id_, &UcxServer::OnSent, server_,
                       false, queued_ == 0);
  if (!r) {
    GOBLIN_LOG_DEBUG(kLog, "client {}: {}", id_, r.error());
    failed_ = true;
    Close();
    return reactor::SendOutcome::kOverLimit;
  }
  queued_ += *r;
  if (queued_ > 0) server_->Watch(*this);
  return queued_ > o.send_window ? reactor::SendOutcome::kQueued : reactor::SendOutcome::kSent;
}

reactor::Session::PayloadSend UcxSession::SendWithPayload(std::span<const uint8_t> header,
                                                          std::span<const uint8_t> payload,
                                                          uint64_t token) {
  if (failed_ || ep_ == nullptr) return {reactor::SendOutcome::kOverLimit, true};
  if (header.size() + 4 > max_message_) return {reactor::SendOutcome::kTooLarge, true};
  const UcxServerOptions& o = server_->options_;
  auto r =
      SendHeaderAndPayload(ep_, header, payload, server_->MemhFor(payload.data(), payload.size()),
                           server_->buffers_, id_, token, &UcxServer::OnSent, server_);
  if (!r) {
    GOBLIN_LOG_DEBUG(kLog, "client {}: {}", id_, r.error());
    failed_ = true;
    Close();
    return {reactor::SendOutcome::kOverLimit, true};
  }
  if (*r) return {reactor::SendOutcome::kSent, true};
  queued_ += header.size() + payload.size();
  server_->Watch(*this);
  return {queued_ > o.send_window ? reactor::SendOutcome::kQueued : reactor::SendOutcome::kSent,
          false};
}

Result<std::vector<uint8_t>> UcxSession::PackRemoteKey(const void* base, size_t bytes) {
  ucp_mem_h memh = server_->MemhFor(static_cast<const uint8_t*>(base), bytes);
  if (memh == nullptr) return Err(StatusCode::kNotFound, "that memory is not registered");
  void* buf = nullptr;
  size_t size = 0;
  ucs_status_t st = ucp_rkey_pack(server_->context_->get(), memh, &buf, &size);
  if (st != UCS_OK) return Err(UcsError(st, "ucp_rkey_pack"));
  std::vector<uint8_t> out(static_cast<uint8_t*>(buf), static_cast<uint8_t*>(buf) + size);
  ucp_rkey_buffer_release(buf);
  return out;
}

VoidResult UcxServer::RegisterMemory(void* base, size_t bytes) {
  GOBLIN_ASSIGN_OR_RETURN(ucp_mem_h memh, MapMemory(*context_, base, bytes));
  regions_.push_back({static_cast<uint8_t*>(base), bytes, memh});
  return {};
}

ucp_mem_h UcxServer::MemhFor(const uint8_t* p, size_t n) const {
  for (const Region& r : regions_) {
    if (p >= r.base && p + n <= r.base + r.bytes) return r.memh;
  }
  return nullptr;
}

Result<std::unique_ptr<UcxServer>> UcxServer::Listen(const UcxServerOptions& options,
                                                     reactor::Handler* handler) {
  std::unique_ptr<UcxServer> s(new UcxServer());
  s->options_ = options;
  s->handler_ = handler;
  s->next_id_ = options.first_session_id;
  s->listen_address_ = options.listen;
  s->epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (!s->epoll_) return ErrnoErr("epoll_create1", errno);
  GOBLIN_ASSIGN_OR_RETURN(s->context_, UcxContext::Create());
  GOBLIN_RETURN_IF_ERROR(s->StartWorker());
  GOBLIN_LOG_INFO(kLog, "UCX plane listening on {} (port {})", options.listen, s->port_);
  return s;
}

VoidResult UcxServer::StartWorker() {
  socklen_t len = 0;
  GOBLIN_ASSIGN_OR_RETURN(sockaddr_storage addr, ResolveHostPort(listen_address_, &len));
  GOBLIN_ASSIGN_OR_RETURN(worker_, UcxWorker::Create(*context_));
  GOBLIN_RETURN_IF_ERROR(worker_->SetMessageHandler(&UcxServer::OnMessage, this));

  ucp_listener_params_t lp{};
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
  lp.sockaddr.addrlen = len;
  lp.conn_handler.cb = &UcxServer::OnConnRequest;
  lp.conn_handler.arg = this;
  ucs_status_t st = ucp_listener_create(worker_->get(), &lp, &listener_);
  if (st != UCS_OK) {
    return Err(UcsError(st, fmt::format("UCX listener on {}", listen_address_)));
  }
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  st = ucp_listener_query(listener_, &attr);
  if (st != UCS_OK) return Err(UcsError(st, "ucp_listener_query"));
  if (attr.sockaddr.ss_family == AF_INET) {
    port_ = ntohs(reinterpret_cast<const sockaddr_in*>(&attr.sockaddr)->sin_port);
  } else if (attr.sockaddr.ss_family == AF_INET6) {
    port_ = ntohs(reinterpret_cast<const sockaddr_in6*>(&attr.sockaddr)->sin6_port);
  }
  // (a replacement listens where this one did, port 0 or not)
  listen_address_ =
      fmt::format("{}:{}", listen_address_.substr(0, listen_address_.rfind(':')), port_);
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, worker_->event_fd(), &ev) != 0) {
    return ErrnoErr("epoll_ctl(UCX worker)", errno);
  }
  busy_.Armed();                                    // (a new worker: nothing pending yet)
  for (AmRoute& r : routes_) r.registered = false;  // (the new worker has no handlers yet)
  peer_pids_.clear();
  lost_before_hello_ = false;
  return {};
}

void UcxServer::RestartWorker() {
  ++stats_.worker_restarts;
  GOBLIN_LOG_WARN(kLog,
                  "the UCX worker has had events it cannot take for {} ms (a shared-memory "
                  "client that died in the middle of a send blocks its receive FIFO): "
                  "replacing it; its {} client(s) are disconnected",
                  kStuckNs / 1'000'000, sessions_.size());
  std::vector<uint64_t> ids;
  for (auto& [id, sess] : sessions_) ids.push_back(id);
  for (uint64_t id : ids) {
    sessions_.at(id)->failed_ = true;  // (closed forcibly: nothing can be flushed)
    CloseSession(id);
  }
  ucp_listener_destroy(listener_);
  listener_ = nullptr;
  for (void* r : closing_) ucp_request_free(r);
  closing_.clear();
  (void)epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, worker_->event_fd(), nullptr);
  late_completions_before_ += worker_->late_completions();
  // Destroying the worker cancels what it still had in flight (sends, rendezvous receives:
  // their slots end failed or orphaned); the inbox holds only closed sessions' messages now.
  worker_.reset();
  for (Slot& sl : slots_) {  // (UCX cancels them on the way; none can land after it)
    if (!sl.started || sl.ready) continue;
    sl.ready = sl.failed = true;
    if (sl.orphan) FreeSlot(sl.index);
  }
  Deliver();
  if (auto started = StartWorker(); !started) {
    GOBLIN_LOG_ERROR(kLog, "could not replace the UCX worker: {}; this shard's UCX plane is down",
                     started.error());
  }
}

UcxServer::~UcxServer() {
  Close();  // (with no worker left, after a replacement failed, nothing is open but memory)
  // (the worker completes what is still in flight through OnSent and the receive
  // callbacks: it goes while the sessions and buffers they touch are alive)
  worker_.reset();
  for (Slot& sl : slots_) {  // (closed sessions' slots Deliver never reached)
    if (sl.placed != nullptr) handler_->ReleasePlacement(sl.placement);
    sl.placed = nullptr;
  }
}

void UcxServer::Close() {
  std::vector<uint64_t> ids;
  for (auto& [id, sess] : sessions_) ids.push_back(id);
  for (uint64_t id : ids) CloseSession(id);
  if (listener_ != nullptr) {
    ucp_listener_destroy(listener_);
    listener_ = nullptr;
  }
  uint64_t deadline = MonotonicNanos() + 1'000'000'000ULL;
  while (!closing_.empty() && MonotonicNanos() < deadline) {
    if (worker_->Progress() == 0) worker_->WaitForEvents(std::chrono::milliseconds(1));
    ReapClosing();
  }
  for (void* r : closing_) ucp_request_free(r);
  closing_.clear();
  payloads_done_.clear();
  for (const Region& r : regions_) ucp_mem_unmap(context_->get(), r.memh);
  regions_.clear();
}

void UcxServer::OnConnRequest(ucp_conn_request_h request, void* arg) {
  auto* self = static_cast<UcxServer*>(arg);
  ucp_conn_request_attr_t ra{};
  ra.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  std::string peer = "ucx";
  if (ucp_conn_request_query(request, &ra) == UCS_OK) peer = FormatSockaddr(ra.client_address);
  if (self->sessions_.size() >= self->options_.max_clients) {
    ++self->stats_.rejected;
    GOBLIN_LOG_WARN(kLog, "refused a UCX client from {}: {} clients already", peer,
                    self->options_.max_clients);
    ucp_listener_reject(self->listener_, request);
    return;
  }
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                  UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.conn_request = request;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &UcxServer::OnEndpointError;
  ep.err_handler.arg = self;
  ucp_ep_h h = nullptr;
  ucs_status_t st = ucp_ep_create(self->worker_->get(), &ep, &h);
  if (st != UCS_OK) {
    ++self->stats_.rejected;
    GOBLIN_LOG_WARN(kLog, "UCX endpoint for {}: {}", peer, ucs_status_string(st));
    return;
  }
  auto sess = std::make_unique<UcxSession>();
  sess->server_ = self;
  sess->ep_ = h;
  sess->id_ = self->next_id_;
  self->next_id_ += std::max<uint16_t>(self->options_.shard_count, 1);
  sess->max_message_ = self->options_.max_message;
  sess->peer_ = peer;
  sess->connected_ns_ = MonotonicNanos();
  self->by_ep_[h] = sess.get();
  self->Watch(*sess);  // (until its Hello)
  self->sessions_.emplace(sess->id_, std::move(sess));
  ++self->awaiting_hello_;
}

void UcxServer::OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* self = static_cast<UcxServer*>(arg);
  auto it = self->by_ep_.find(ep);
  if (it == self->by_ep_.end()) return;
  UcxSession& s = *it->second;
  ++self->stats_.failed_endpoints;
  GOBLIN_LOG_DEBUG(kLog, "client {} ({}): endpoint failed: {}", s.id_, s.peer_,
                   ucs_status_string(status));
  if (!s.welcomed_) self->lost_before_hello_ = true;
  s.failed_ = true;
  s.Close();
}

ucs_status_t UcxServer::OnMessage(void* arg, const void* header, size_t header_length, void* data,
                                  size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxServer*>(arg);
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
    GOBLIN_LOG_WARN(kLog, "dropping an active message without a reply endpoint");
    return UCS_OK;
  }
  auto it = self->by_ep_.find(param->reply_ep);
  if (it == self->by_ep_.end()) return UCS_OK;
  return self->Take(*it->second, header, header_length, data, length, param);
}

ucs_status_t UcxServer::OnSessionMessage(void* arg, const void* header, size_t header_length,
                                         void* data, size_t length,
                                         const ucp_am_recv_param_t* param) {
  const auto* route = static_cast<const AmRoute*>(arg);
  if (route->session == nullptr) {  // (a closed session's late message)
    ++route->server->stats_.own_id_late;
    return UCS_OK;
  }
  ++route->server->stats_.by_own_id;
  return route->server->Take(*route->session, header, header_length, data, length, param);
}

unsigned UcxServer::AssignAmId(UcxSession& s) {
  if (routes_.empty()) {
    routes_.resize(std::clamp<size_t>(size_t{4} * options_.max_clients, 64, kAmSessionIds));
    for (AmRoute& r : routes_) r.server = this;
  }
  for (size_t tried = 0; tried < routes_.size(); ++tried) {
    const size_t i = next_route_;
    next_route_ = (next_route_ + 1) % routes_.size();
    AmRoute& r = routes_[i];
    if (r.session != nullptr) continue;
    const unsigned id = kAmSessionBase + static_cast<unsigned>(i);
    if (!r.registered) {
      if (auto set = worker_->SetHandler(id, &UcxServer::OnSessionMessage, &r); !set) {
        GOBLIN_LOG_WARN(kLog, "client {}: no active message id of its own: {}", s.id_, set.error());
        return 0;
      }
      r.registered = true;
    }
    r.session = &s;
    return id;
  }
  return 0;
}

ucs_status_t UcxServer::Take(UcxSession& s, const void* header, size_t header_length, void* data,
                             size_t length, const ucp_am_recv_param_t* param) {
  if (header_length != 0) return OnPayloadMessage(s, header, header_length, data, length, param);
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV || length > options_.max_message) {
    // A message without an AM header is sent eager, whole in the AM data, within max_message.
    GOBLIN_LOG_WARN(kLog, "client {} ({}) broke the protocol ({}-byte message, max {}); closing it",
                    s.id_, s.peer_, length, options_.max_message);
    s.Close();
    return UCS_OK;
  }
  // Handed to the handler here, within progress, when nothing waits in the inbox (so every
  // session's messages keep their order) and the session said Hello: copying it to the inbox
  // and delivering after progress returns was ~100 ns of every request (the rest of the
  // progress pass, then Deliver). A UCX callback may send (the answer goes out from here);
  // it may not progress the worker, and nothing the handler calls does.
  if (inbox_.empty() && s.welcomed_ && !s.closing_) {
    ++stats_.messages;
    handler_->OnMessage(s, {static_cast<const uint8_t*>(data), length});
    return UCS_OK;
  }
  // Else after progress returns, in order.
  deliverable_ = true;
  size_t at = inbox_.size();
  inbox_.resize(at + 12 + length);
  std::memcpy(inbox_.data() + at, &s.id_, 8);
  uint32_t len = static_cast<uint32_t>(length);
  std::memcpy(inbox_.data() + at + 8, &len, 4);
  if (length > 0) std::memcpy(inbox_.data() + at + 12, data, length);
  return UCS_OK;
}

// An AM header is an SBE message ending in an empty varData32 whose bytes are the AM data
// (a PutData whose bytes the client sent by reference): the message handed on is the header
// with those bytes in place. Eager data is copied now; a rendezvous is received into a slot
// (over verbs: an RDMA read of the client's memory), and the session's later messages wait
// for it in Deliver.
ucs_status_t UcxServer::OnPayloadMessage(UcxSession& s, const void* header, size_t header_length,
                                         void* data, size_t length,
                                         const ucp_am_recv_param_t* param) {
  if (header_length < 4 || header_length + length > options_.max_message) {
    GOBLIN_LOG_WARN(kLog,
                    "client {} ({}) broke the protocol ({}-byte message with a {}-byte payload, "
                    "max {}); closing it",
                    s.id_, s.peer_, header_length, length, options_.max_message);
    s.Close();
    return UCS_OK;
  }
  const uint32_t total = static_cast<uint32_t>(header_length + length);
  const uint32_t len = static_cast<uint32_t>(length);
  deliverable_ = true;
  size_t at = inbox_.size();
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    inbox_.resize(at + 12 + total);
    uint8_t* p = inbox_.data() + at;
    std::memcpy(p, &s.id_, 8);
    std::memcpy(p + 8, &total, 4);
    std::memcpy(p + 12, header, header_length);
    std::memcpy(p + 12 + header_length - 4, &len, 4);
    if (length > 0) std::memcpy(p + 12 + header_length, data, length);
    return UCS_OK;
  }
  if (s.waiting_pulls_.size() >= kMaxWaitingPulls) {
    GOBLIN_LOG_WARN(kLog,
                    "client {} ({}) has {} more messages waiting to arrive by rendezvous, the "
                    "most a client may (it ignores its window); closing it",
                    s.id_, s.peer_, s.waiting_pulls_.size());
    s.Close();
    return UCS_OK;
  }
  uint32_t slot;
  if (free_slots_.empty()) {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back().index = slot;
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  Slot& sl = slots_[slot];
  sl.bytes.assign(static_cast<const uint8_t*>(header),
                  static_cast<const uint8_t*>(header) + header_length);
  sl.ready = sl.failed = sl.orphan = sl.started = false;
  sl.owner = this;
  sl.session = s.id_;
  sl.desc = data;
  sl.length = len;
  inbox_.resize(at + 16);
  std::memcpy(inbox_.data() + at, &s.id_, 8);
  std::memcpy(inbox_.data() + at + 8, &kSlotMark, 4);
  std::memcpy(inbox_.data() + at + 12, &slot, 4);
  ++stats_.payloads_by_rendezvous;
  if (s.pulls_ < kPullsPerSession) {
    StartPull(s, slot);
    return UCS_OK;
  }
  // The client's sends complete only once they are pulled: waiting here holds it back.
  s.waiting_pulls_.push_back(slot);
  ++stats_.payloads_waited;
  return UCS_INPROGRESS;  // (UCX keeps the descriptor until StartPull or a release)
}

void UcxServer::StartPull(UcxSession& s, uint32_t slot) {
  Slot& sl = slots_[slot];
  sl.started = true;
  ++s.pulls_;
  const size_t header_length = sl.bytes.size();
  uint8_t* into;
  reactor::Handler::Placement placement;
  if (s.welcomed_ && handler_->PlacePayload(s, sl.bytes, sl.length, &placement)) {
    sl.placed = into = placement.at;
    sl.placement = placement.token;
    ++stats_.payloads_placed;
  } else {
    sl.bytes.resize(header_length + sl.length);
    std::memcpy(sl.bytes.data() + header_length - 4, &sl.length, 4);
    into = sl.bytes.data() + header_length;
  }
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = [](void* request, ucs_status_t status, size_t, void* user) {
    auto* sl = static_cast<Slot*>(user);
    sl->ready = true;
    sl->failed = status != UCS_OK;
    sl->owner->deliverable_ = true;
    if (sl->orphan) sl->owner->FreeSlot(sl->index);
    ucp_request_free(request);
  };
  p.user_data = &sl;
  ucs_status_ptr_t r = ucp_am_recv_data_nbx(worker_->get(), sl.desc, into, sl.length, &p);
  sl.desc = nullptr;
  if (r == nullptr) {
    sl.ready = true;
    deliverable_ = true;
  } else if (UCS_PTR_IS_ERR(r)) {
    sl.ready = true;
    sl.failed = true;
    deliverable_ = true;
  }
}

void UcxServer::FreeSlot(uint32_t slot) {
  Slot& sl = slots_[slot];
  const bool started = sl.started;
  sl.ready = sl.failed = sl.orphan = sl.started = false;
  if (sl.placed != nullptr) {
    sl.placed = nullptr;
    handler_->ReleasePlacement(sl.placement);
  }
  free_slots_.push_back(slot);
  auto it = sessions_.find(sl.session);
  if (!started || it == sessions_.end()) return;
  UcxSession& s = *it->second;
  s.pulls_ -= std::min<uint32_t>(s.pulls_, 1);
  if (!s.waiting_pulls_.empty() && !s.closing_) {
    uint32_t next = s.waiting_pulls_.front();
    s.waiting_pulls_.pop_front();
    StartPull(s, next);
  }
}

void UcxServer::DropWaitingPulls(UcxSession& s) {
  for (uint32_t slot : s.waiting_pulls_) {
    Slot& sl = slots_[slot];
    if (sl.desc != nullptr) ucp_am_data_release(worker_->get(), sl.desc);
    sl.desc = nullptr;
    sl.ready = sl.failed = true;  // (Deliver frees it: its session is gone)
  }
  s.waiting_pulls_.clear();
}

void UcxServer::OnSent(void* user, SendBuffers::Buffer* buffer, ucs_status_t status) {
  auto* self = static_cast<UcxServer*>(user);
  auto it = self->sessions_.find(buffer->owner);
  if (it == self->sessions_.end()) return;
  UcxSession& s = *it->second;
  s.queued_ -= std::min(s.queued_, buffer->size + buffer->payload_size);
  if (buffer->payload_token != 0) self->payloads_done_.emplace_back(s.id_, buffer->payload_token);
  if (s.queued_ <= self->options_.send_window / 2) s.soft_since_ = 0;
  if (status != UCS_OK && status != UCS_ERR_CANCELED) {
    s.failed_ = true;
    s.Close();
  }
}

void UcxServer::Welcome(UcxSession& s, std::span<const uint8_t> msg) {
  auto hello = wire::HelloDecoder::Decode(msg);
  uint8_t buf[8192];  // (the Welcome lists every shard's address)
  if (!hello || hello->protocol_version() != wire::kProtocolVersion) {
    wire::ErrorEncoder e(buf, sizeof buf);
    e.set_code(wire::ErrorCode::kInvalidArgument)
        .set_text(!hello ? fmt::format("expected Hello: {}", hello.error().message())
                         : fmt::format("protocol version {} (this core speaks {})",
                                       hello->protocol_version(), wire::kProtocolVersion));
    (void)s.Send({buf, e.Finish()});
    ++stats_.rejected;
    s.Close();
    return;
  }
  if (hello->shard() != options_.shard) {
    wire::ErrorEncoder e(buf, sizeof buf);
    e.set_code(wire::ErrorCode::kWrongShard)
        .set_text(fmt::format("this listener serves shard {} of {}, not shard {}", options_.shard,
                              options_.shard_count, hello->shard()));
    (void)s.Send({buf, e.Finish()});
    ++stats_.rejected;
    s.Close();
    return;
  }
  s.peer_kind_ = static_cast<uint8_t>(hello->peer_kind());
  s.pid_ = hello->pid();
  if (std::find(peer_pids_.begin(), peer_pids_.end(), s.pid_) == peer_pids_.end()) {
    // (bounded: the oldest half goes; a blocked FIFO's culprit is a recent peer)
    if (peer_pids_.size() >= kMaxPeerPids)
      peer_pids_.erase(peer_pids_.begin(), peer_pids_.begin() + kMaxPeerPids / 2);
    peer_pids_.push_back(s.pid_);
  }
  s.name_ = std::string(hello->client_name());
  s.max_message_ = std::min(options_.max_message, std::max<uint32_t>(hello->max_message(), 4096));
  if (s.am_id_ == 0) s.am_id_ = AssignAmId(s);  // (a second Hello keeps the first's id)
  wire::WelcomeEncoder w(buf, sizeof buf);
  w.set_protocol_version(wire::kProtocolVersion)
      .set_flags(0)
      .set_server_pid(static_cast<uint32_t>(getpid()))
      .set_client_id(s.id_)
      .set_ring_bytes(0)
      .set_max_message(s.max_message_)
      .set_shard(options_.shard)
      .set_shard_count(options_.shard_count)
      .set_put_alignment(options_.put_alignment)
      .set_put_head_cut(options_.put_head_cut)
      .set_am_id(static_cast<uint16_t>(s.am_id_))
      .set_server_name(options_.server_name)
      .set_shard_addresses(shard_addresses_);
  if (s.Send({buf, w.Finish()}) == reactor::SendOutcome::kOverLimit) return;
  s.welcomed_ = true;
  --awaiting_hello_;
  ++stats_.accepted;
  GOBLIN_LOG_DEBUG(kLog, "client {} connected over UCX: {} pid {} from {}", s.id_, s.name_, s.pid_,
                   s.peer_);
  handler_->OnOpen(s);
}

void UcxServer::Deliver() {
  deliverable_ = false;
  inbox_kept_.clear();
  blocked_.clear();  // sessions with a message still arriving: their later ones wait for it
  size_t pos = 0;
  while (pos < inbox_.size()) {
    const uint8_t* e = inbox_.data() + pos;
    uint64_t id;
    uint32_t len, slot = 0;
    std::memcpy(&id, e, 8);
    std::memcpy(&len, e + 8, 4);
    const bool in_slot = len == kSlotMark;
    if (in_slot) std::memcpy(&slot, e + 12, 4);
    const size_t entry = in_slot ? 16 : 12 + size_t{len};
    pos += entry;
    auto it = sessions_.find(id);
    if (it == sessions_.end() || it->second->closing_) {
      if (in_slot && slots_[slot].ready) {
        FreeSlot(slot);
      } else if (in_slot) {
        slots_[slot].orphan = true;  // (freed when UCX is done writing into it)
      }
      continue;
    }
    const bool waits = std::find(blocked_.begin(), blocked_.end(), id) != blocked_.end();
    if (waits || (in_slot && !slots_[slot].ready)) {
      if (!waits) blocked_.push_back(id);
      inbox_kept_.insert(inbox_kept_.end(), e, e + entry);
      continue;
    }
    UcxSession& s = *it->second;
    if (in_slot && slots_[slot].failed) {
      GOBLIN_LOG_DEBUG(kLog, "client {} ({}): a rendezvous receive failed; closing it", s.id_,
                       s.peer_);
      s.Close();
      FreeSlot(slot);
      continue;
    }
    std::span<const uint8_t> msg = in_slot ? std::span<const uint8_t>(slots_[slot].bytes)
                                           : std::span<const uint8_t>(e + 12, len);
    ++stats_.messages;
    if (in_slot && slots_[slot].placed != nullptr) {
      handler_->OnPlacedMessage(s, msg, {slots_[slot].placed, slots_[slot].length});
    } else if (!s.welcomed_) {
      Welcome(s, msg);
    } else {
      handler_->OnMessage(s, msg);
    }
    if (in_slot) FreeSlot(slot);
  }
  inbox_.swap(inbox_kept_);  // what waits keeps its order (both keep their capacity)
}

size_t UcxServer::Poll() {
  if (worker_ == nullptr) return 0;
  size_t work = worker_->Progress();
  if (work > 0) busy_.Progressed();
  if (deliverable_) {
    work += 1;
    Deliver();
  }
  if (!payloads_done_.empty()) {
    work += payloads_done_.size();
    for (auto [sid, token] : payloads_done_) {
      auto it = sessions_.find(sid);
      if (it != sessions_.end()) handler_->OnPayloadSent(*it->second, token);
    }
    payloads_done_.clear();
  }
  std::vector<uint64_t> dead;
  // (the clock only while a session has not said Hello: not every round)
  const uint64_t now = awaiting_hello_ > 0 ? MonotonicNanos() : 0;
  size_t kept = 0;
  for (size_t i = 0; i < watched_.size(); ++i) {  // (OnWritable may add to it: by index)
    const uint64_t id = watched_[i];
    auto it = sessions_.find(id);
    if (it == sessions_.end()) continue;  // (closed meanwhile)
    UcxSession& s = *it->second;
    if (!s.welcomed_ && !s.closing_ &&
        now - s.connected_ns_ > static_cast<uint64_t>(options_.hello_timeout.count())) {
      ++stats_.hello_timeouts;
      lost_before_hello_ = true;
      GOBLIN_LOG_WARN(kLog, "dropping UCX client {} ({}): no Hello within {} ms", id, s.peer_,
                      options_.hello_timeout.count() / 1'000'000);
      s.Close();
    }
    if (s.closing_) {
      dead.push_back(id);
      continue;
    }
    if (s.welcomed_ && s.want_writable_ && s.queued_ <= options_.send_window / 2) {
      size_t before = s.queued_;
      handler_->OnWritable(s);
      if (s.queued_ != before || s.want_writable_) ++work;
    }
    if (s.closing_ || !s.welcomed_ || s.want_writable_ || s.queued_ > 0) {
      watched_[kept++] = id;
    } else {
      s.watched_ = false;
    }
  }
  watched_.resize(kept);
  for (uint64_t id : dead) CloseSession(id);
  if (!closing_.empty()) ReapClosing();
  return work;
}

void UcxServer::Watch(UcxSession& s) {
  if (s.watched_) return;
  s.watched_ = true;
  watched_.push_back(s.id_);
}

void UcxSession::Attend() { server_->Watch(*this); }

bool UcxServer::PrepareSleep() {
  if (worker_ == nullptr) return true;
  if (deliverable_ || !payloads_done_.empty()) return false;
  bool sending = false;           // a send of ours has not completed
  for (uint64_t id : watched_) {  // (every other session: welcomed, nothing to send or do)
    auto it = sessions_.find(id);
    if (it == sessions_.end()) continue;
    const UcxSession& s = *it->second;
    if (s.closing_ || (s.want_writable_ && s.queued_ <= options_.send_window / 2)) return false;
    sending |= s.queued_ > 0;
  }
  if (worker_->Arm()) {
    busy_.Armed();
    return true;
  }
  // Busy: events are pending, and progress takes them at once, unless a send of ours waits
  // for room in a peer that does not read (a full shared-memory FIFO: UCX retries it on
  // every progress and will not arm meanwhile) or the worker is stuck. With a send waiting
  // the loop dozes (1 ms sleeps) rather than spin once that has lasted kDozeAfterNs; with
  // none, kStuckNs of it is a blocked receive FIFO (busy_: both count only time without
  // progress). (Dozing whenever busy-without-progress lasted 2 ms also caught libgoblin's
  // one-sided head reads over shared memory, 130 -> 690 us for 1 MiB: the worker has work
  // there that its progress count does not show.)
  const uint64_t now = MonotonicNanos();
  const BusyWatch::Verdict v = busy_.OnBusy(now, sending);
  if (v == BusyWatch::Verdict::kCheckPeers && APeerDied(now)) {
    RestartWorker();
    return false;
  }
  if (v != BusyWatch::Verdict::kSpin) {  // (stuck with every peer alive: waited out, dozing)
    // (the worker's fd may stay readable: out of the loop's epoll set for the doze)
    epoll_event ev{};
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, worker_->event_fd(), &ev) != 0) return false;
    ++stats_.busy_dozes;
    dozing_ = true;
    return true;
  }
  return false;
}

bool UcxServer::APeerDied(uint64_t now) const {
  if (lost_before_hello_) return true;
  for (uint32_t pid : peer_pids_) {
    if (pid != 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
  }
  if (awaiting_hello_ == 0) return false;
  for (const auto& [id, s] : sessions_) {  // (a Hello sent at once, kept behind the element)
    if (!s->welcomed_ && !s->closing_ && now - s->connected_ns_ > kStuckNs) return true;
  }
  return false;
}

void UcxServer::FinishSleep() {
  if (!dozing_) return;
  dozing_ = false;
  epoll_event ev{};
  ev.events = EPOLLIN;
  (void)epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, worker_->event_fd(), &ev);
}

void UcxServer::CloseSession(uint64_t id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  UcxSession& s = *it->second;
  if (s.welcomed_) {
    handler_->OnClose(s);
  } else {
    --awaiting_hello_;
  }
  DropWaitingPulls(s);
  by_ep_.erase(s.ep_);
  if (s.am_id_ != 0) routes_[s.am_id_ - kAmSessionBase].session = nullptr;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = s.failed_ ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t r = ucp_ep_close_nbx(s.ep_, &p);
  if (r != nullptr && !UCS_PTR_IS_ERR(r)) closing_.push_back(r);
  ++stats_.closed;
  GOBLIN_LOG_DEBUG(kLog, "client {} ({}) closed", id, s.peer_);
  sessions_.erase(it);
}

void UcxServer::ReapClosing() {
  std::erase_if(closing_, [](void* r) {
    if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
    ucp_request_free(r);
    return true;
  });
}

}  // namespace goblin::verbs
