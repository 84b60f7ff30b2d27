#include "goblin/verbs/ucx_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

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
  auto r = SendMessage(ep_, msg, server_->buffers_, id_, &UcxServer::OnSent, server_, false,
                       queued_ == 0);
  if (!r) {
    GOBLIN_LOG_DEBUG(kLog, "client {}: {}", id_, r.error());
    failed_ = true;
    closing_ = true;
    return reactor::SendOutcome::kOverLimit;
  }
  queued_ += *r;
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
    closing_ = true;
    return {reactor::SendOutcome::kOverLimit, true};
  }
  if (*r) return {reactor::SendOutcome::kSent, true};
  queued_ += header.size() + payload.size();
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
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = base;
  mp.length = bytes;
  ucp_mem_h memh = nullptr;
  ucs_status_t st = ucp_mem_map(context_->get(), &mp, &memh);
  if (st != UCS_OK) return Err(UcsError(st, "ucp_mem_map"));
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
  socklen_t len = 0;
  GOBLIN_ASSIGN_OR_RETURN(sockaddr_storage addr, ResolveHostPort(options.listen, &len));
  GOBLIN_ASSIGN_OR_RETURN(s->context_, UcxContext::Create());
  GOBLIN_ASSIGN_OR_RETURN(s->worker_, UcxWorker::Create(*s->context_));

  GOBLIN_RETURN_IF_ERROR(s->worker_->SetMessageHandler(&UcxServer::OnMessage, s.get()));

  ucp_listener_params_t lp{};
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
  lp.sockaddr.addrlen = len;
  lp.conn_handler.cb = &UcxServer::OnConnRequest;
  lp.conn_handler.arg = s.get();
  ucs_status_t st = ucp_listener_create(s->worker_->get(), &lp, &s->listener_);
  if (st != UCS_OK) {
    return Err(UcsError(st, fmt::format("UCX listener on {}", options.listen)));
  }
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  st = ucp_listener_query(s->listener_, &attr);
  if (st != UCS_OK) return Err(UcsError(st, "ucp_listener_query"));
  if (attr.sockaddr.ss_family == AF_INET) {
    s->port_ = ntohs(reinterpret_cast<const sockaddr_in*>(&attr.sockaddr)->sin_port);
  } else if (attr.sockaddr.ss_family == AF_INET6) {
    s->port_ = ntohs(reinterpret_cast<const sockaddr_in6*>(&attr.sockaddr)->sin6_port);
  }
  GOBLIN_LOG_INFO(kLog, "UCX plane listening on {} (port {})", options.listen, s->port_);
  return s;
}

UcxServer::~UcxServer() {
  Close();
  // (the worker completes what is still in flight through OnSent and the receive
  // callbacks: it goes while the sessions and buffers they touch are alive)
  worker_.reset();
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
  self->by_ep_[h] = sess->id_;
  self->sessions_.emplace(sess->id_, std::move(sess));
  ++self->awaiting_hello_;
}

void UcxServer::OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* self = static_cast<UcxServer*>(arg);
  auto it = self->by_ep_.find(ep);
  if (it == self->by_ep_.end()) return;
  auto sit = self->sessions_.find(it->second);
  if (sit == self->sessions_.end()) return;
  ++self->stats_.failed_endpoints;
  GOBLIN_LOG_DEBUG(kLog, "client {} ({}): endpoint failed: {}", sit->first, sit->second->peer_,
                   ucs_status_string(status));
  sit->second->failed_ = true;
  sit->second->closing_ = true;
}

ucs_status_t UcxServer::OnMessage(void* arg, const void* /*header*/, size_t header_length,
                                  void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxServer*>(arg);
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
    GOBLIN_LOG_WARN(kLog, "dropping an active message without a reply endpoint");
    return UCS_OK;
  }
  auto it = self->by_ep_.find(param->reply_ep);
  if (it == self->by_ep_.end()) return UCS_OK;
  UcxSession& s = *self->sessions_.at(it->second);
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV || length > self->options_.max_message ||
      header_length != 0) {
    // Clients send every message eager, whole in the AM data, within max_message.
    GOBLIN_LOG_WARN(kLog,
                    "client {} ({}) broke the protocol ({}-byte message, max {}, {}-byte AM "
                    "header); closing it",
                    s.id_, s.peer_, length, self->options_.max_message, header_length);
    s.closing_ = true;
    return UCS_OK;
  }
  // Handed to the handler after progress returns (no sends from inside UCX callbacks).
  size_t at = self->inbox_.size();
  self->inbox_.resize(at + 12 + length);
  std::memcpy(self->inbox_.data() + at, &s.id_, 8);
  uint32_t len = static_cast<uint32_t>(length);
  std::memcpy(self->inbox_.data() + at + 8, &len, 4);
  if (length > 0) std::memcpy(self->inbox_.data() + at + 12, data, length);
  return UCS_OK;
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
    s.closing_ = true;
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
    s.closing_ = true;
    return;
  }
  if (hello->shard() != options_.shard) {
    wire::ErrorEncoder e(buf, sizeof buf);
    e.set_code(wire::ErrorCode::kWrongShard)
        .set_text(fmt::format("this listener serves shard {} of {}, not shard {}", options_.shard,
                              options_.shard_count, hello->shard()));
    (void)s.Send({buf, e.Finish()});
    ++stats_.rejected;
    s.closing_ = true;
    return;
  }
  s.peer_kind_ = static_cast<uint8_t>(hello->peer_kind());
  s.pid_ = hello->pid();
  s.name_ = std::string(hello->client_name());
  s.max_message_ = std::min(options_.max_message, std::max<uint32_t>(hello->max_message(), 4096));
  wire::WelcomeEncoder w(buf, sizeof buf);
  w.set_protocol_version(wire::kProtocolVersion)
      .set_flags(0)
      .set_server_pid(static_cast<uint32_t>(getpid()))
      .set_client_id(s.id_)
      .set_ring_bytes(0)
      .set_max_message(s.max_message_)
      .set_shard(options_.shard)
      .set_shard_count(options_.shard_count)
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
  size_t pos = 0;
  while (pos < inbox_.size()) {
    uint64_t id;
    uint32_t len;
    std::memcpy(&id, inbox_.data() + pos, 8);
    std::memcpy(&len, inbox_.data() + pos + 8, 4);
    std::span<const uint8_t> msg(inbox_.data() + pos + 12, len);
    pos += 12 + len;
    auto it = sessions_.find(id);
    if (it == sessions_.end() || it->second->closing_) continue;
    UcxSession& s = *it->second;
    ++stats_.messages;
    if (!s.welcomed_) {
      Welcome(s, msg);
    } else {
      handler_->OnMessage(s, msg);
    }
  }
  inbox_.clear();  // keeps its capacity
}

size_t UcxServer::Poll() {
  size_t work = worker_->Progress();
  if (!inbox_.empty()) {
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
  uint64_t now = MonotonicNanos();
  for (auto& [id, sp] : sessions_) {
    UcxSession& s = *sp;
    if (!s.welcomed_ && !s.closing_ &&
        now - s.connected_ns_ > static_cast<uint64_t>(options_.hello_timeout.count())) {
      ++stats_.hello_timeouts;
      GOBLIN_LOG_WARN(kLog, "dropping UCX client {} ({}): no Hello within {} ms", id, s.peer_,
                      options_.hello_timeout.count() / 1'000'000);
      s.closing_ = true;
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
  }
  for (uint64_t id : dead) CloseSession(id);
  if (!closing_.empty()) ReapClosing();
  return work;
}

bool UcxServer::PrepareSleep() {
  if (!inbox_.empty() || !payloads_done_.empty()) return false;
  for (auto& [id, s] : sessions_) {
    if (s->closing_ || (s->want_writable_ && s->queued_ <= options_.send_window / 2)) return false;
  }
  return worker_->Arm();
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
  by_ep_.erase(s.ep_);
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
