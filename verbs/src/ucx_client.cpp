#include "goblin/verbs/ucx_client.h"

#include <sched.h>

#include <unistd.h>

#include <cstring>
#include <utility>

#include "goblin/common/clock.h"
#include "goblin/sbe/runtime.h"
#include "goblin/sbe/wire_flags.h"
#include "goblin/wire/goblin_wire.h"

namespace goblin::verbs {

Result<std::unique_ptr<UcxClient>> UcxClient::Connect(std::string_view host_port,
                                                      const UcxClientOptions& options) {
  std::unique_ptr<UcxClient> c(new UcxClient());
  c->options_ = options;
  socklen_t len = 0;
  GOBLIN_ASSIGN_OR_RETURN(sockaddr_storage addr, ResolveHostPort(host_port, &len));
  GOBLIN_ASSIGN_OR_RETURN(c->context_, UcxContext::Create());
  GOBLIN_ASSIGN_OR_RETURN(c->worker_, UcxWorker::Create(*c->context_, options.handed_over));
  GOBLIN_RETURN_IF_ERROR(c->worker_->SetMessageHandler(&UcxClient::OnMessage, c.get()));
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
  ep.sockaddr.addrlen = len;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &UcxClient::OnEndpointError;
  ep.err_handler.arg = c.get();
  ucs_status_t st = ucp_ep_create(c->worker_->get(), &ep, &c->ep_);
  if (st != UCS_OK) return Err(UcsError(st, fmt::format("UCX connect to {}", host_port)));

  uint8_t buf[512];
  wire::HelloEncoder hello(buf, sizeof buf);
  hello.set_protocol_version(wire::kProtocolVersion)
      .set_peer_kind(static_cast<wire::PeerKind>(options.peer_kind))
      .set_flags(0)
      .set_pid(static_cast<uint32_t>(getpid()))
      .set_max_message(options.max_message)
      .set_ring_bytes(0)
      .set_shard(options.shard)
      .set_client_name(options.name.substr(0, 200));
  c->max_message_ = options.max_message;
  auto deadline = std::chrono::nanoseconds(options.timeout);
  GOBLIN_RETURN_IF_ERROR_CTX(c->Send({buf, hello.Finish()}, deadline),
                             fmt::format("UCX connect to {}", host_port));
  std::vector<uint8_t> reply;
  uint64_t end = MonotonicNanos() + static_cast<uint64_t>(deadline.count());
  while (reply.empty()) {
    uint64_t now = MonotonicNanos();
    if (now >= end) {
      return Err(StatusCode::kTimeout, "UCX connect to {}: no Welcome within {} ms", host_port,
                 options.timeout.count());
    }
    auto ready = c->Wait(std::chrono::nanoseconds(end - now));
    if (!ready) return Err(ready.error().WithContext(fmt::format("UCX connect to {}", host_port)));
    GOBLIN_RETURN_IF_ERROR(
        c->Poll([&](std::span<const uint8_t> m) { reply.assign(m.begin(), m.end()); }, 1));
  }
  c->answered_ = true;
  if (auto err = wire::ErrorDecoder::Decode(reply)) {
    return Err(StatusCode::kUnavailable, "goblin-core at {} refused: {}", host_port, err->text());
  }
  auto w = wire::WelcomeDecoder::Decode(reply);
  if (!w) return Err(StatusCode::kCorruption, "malformed Welcome: {}", w.error().message());
  if (w->protocol_version() != wire::kProtocolVersion) {
    return Err(StatusCode::kFailedPrecondition, "core speaks protocol {}, this client {}",
               w->protocol_version(), wire::kProtocolVersion);
  }
  c->client_id_ = w->client_id();
  c->server_pid_ = w->server_pid();
  c->max_message_ = std::min(options.max_message, w->max_message());
  c->shard_count_ = w->shard_count() == 0 ? 1 : w->shard_count();
  // (a core of schema version 2 has none: SBE's null value)
  c->put_alignment_ = w->put_alignment() == UINT32_MAX ? 0 : w->put_alignment();
  c->put_head_cut_ = w->put_head_cut() == UINT32_MAX ? 0 : w->put_head_cut();  // (< version 10)
  c->shard_addresses_ = std::string(w->shard_addresses());
  // (a core before schema version 12 has none: SBE's null value; 0: it gave none)
  if (const uint16_t id = w->am_id(); id >= kAmSessionBase && id < kAmSessionBase + kAmSessionIds)
    c->am_id_ = id;
  return c;
}

UcxClient::~UcxClient() {
  for (const RemotePool& p : remote_) ucp_rkey_destroy(p.rkey);
  // An endpoint whose peer never answered (a listener that never accepts, a connect that
  // timed out) cannot be flushed: closed forcibly, its Hello still queued is canceled (else
  // UCX aborts the process when the worker goes: "pending request ... should have been
  // flushed").
  if (ep_ != nullptr) CloseEndpoint(*worker_, ep_, failed_ || !answered_);
  // Destroying the worker completes what is still in flight (a rendezvous receive into a
  // slot, canceled) through our callbacks: it goes first, while every member they touch
  // is alive (members declared after worker_ would otherwise be destroyed before it).
  worker_.reset();
}

VoidResult UcxClient::MapRemotePools(std::chrono::nanoseconds timeout) {
  if (!remote_.empty()) return {};
  const uint64_t corr = UINT64_MAX - 1;  // (the connection's own ids count up from 1)
  uint8_t buf[64];
  size_t n = wire::MapPoolsEncoder(buf, sizeof buf).set_correlation_id(corr).Finish();
  GOBLIN_RETURN_IF_ERROR(Send({buf, n}, timeout));
  uint64_t end = MonotonicNanos() + static_cast<uint64_t>(timeout.count());
  std::vector<uint8_t> reply;
  while (reply.empty()) {
    uint64_t now = MonotonicNanos();
    if (now >= end) return Err(StatusCode::kTimeout, "no answer to MapPools");
    GOBLIN_ASSIGN_OR_RETURN(bool ready, Wait(std::chrono::nanoseconds(end - now)));
    if (!ready) continue;
    GOBLIN_RETURN_IF_ERROR(Poll([&](std::span<const uint8_t> m) {
      if (m.size() >= 16 && sbe::Load<uint64_t>(m.data() + 8) == corr)
        reply.assign(m.begin(), m.end());
    }));
  }
  return AttachRemotePools(reply);
}

VoidResult UcxClient::AttachRemotePools(std::span<const uint8_t> reply) {
  if (auto e = wire::ErrorDecoder::Decode(reply)) {
    return Err(StatusCode::kUnavailable, "goblin-core: {}", e->text());
  }
  auto rp = wire::RemotePoolsDecoder::Decode(reply);
  if (!rp) return Err(StatusCode::kCorruption, "malformed RemotePools: {}", rp.error().message());
  std::vector<RemotePool> pools;
  for (auto p : rp->pools()) {
    RemotePool rpool;
    rpool.kind = static_cast<uint8_t>(p.pool());
    rpool.address = p.address();
    rpool.bytes = p.bytes();
    auto key = p.rkey_bytes();
    ucs_status_t st = ucp_ep_rkey_unpack(ep_, key.data(), &rpool.rkey);
    if (st != UCS_OK) {
      for (const RemotePool& q : pools) ucp_rkey_destroy(q.rkey);
      return Err(UcsError(st, "ucp_ep_rkey_unpack"));
    }
    pools.push_back(rpool);
  }
  for (const RemotePool& q : remote_) ucp_rkey_destroy(q.rkey);
  remote_ = std::move(pools);
  return {};
}

VoidResult UcxClient::ReadRemote(uint8_t kind, uint64_t offset, std::span<uint8_t> dst,
                                 std::chrono::nanoseconds timeout) {
  const RemotePool* pool = nullptr;
  for (const RemotePool& p : remote_) {
    if (p.kind == kind) pool = &p;
  }
  if (pool == nullptr) return Err(StatusCode::kFailedPrecondition, "pool {} is not mapped", kind);
  if (offset > pool->bytes || dst.size() > pool->bytes - offset) {
    return Err(StatusCode::kInvalidArgument, "[{}, +{}) is outside the {}-byte pool", offset,
               dst.size(), pool->bytes);
  }
  GOBLIN_RETURN_IF_ERROR(CheckAlive());
  struct Done {
    bool done = false;
    ucs_status_t status = UCS_OK;
  } done;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = [](void* request, ucs_status_t status, void* user) {
    auto* d = static_cast<Done*>(user);
    d->done = true;
    d->status = status;
    ucp_request_free(request);
  };
  p.user_data = &done;
  ucs_status_ptr_t r =
      ucp_get_nbx(ep_, dst.data(), dst.size(), pool->address + offset, pool->rkey, &p);
  if (UCS_PTR_IS_ERR(r)) return Err(UcsError(UCS_PTR_STATUS(r), "ucp_get_nbx"));
  if (r != nullptr) {
    uint64_t end = MonotonicNanos() + static_cast<uint64_t>(timeout.count());
    while (!done.done) {
      if (worker_->Progress() > 0) continue;
      uint64_t now = MonotonicNanos();
      if (now >= end || failed_) {
        ucp_request_cancel(worker_->get(), r);
        while (!done.done) worker_->Progress();  // the callback runs (canceled) before `done` goes
        return failed_ ? CheckAlive() : Err(StatusCode::kTimeout, "one-sided read timed out");
      }
      worker_->WaitForEvents(std::chrono::nanoseconds(end - now));
    }
    if (done.status != UCS_OK) return Err(UcsError(done.status, "one-sided read"));
  }
  return {};
}

void UcxClient::OnEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* self = static_cast<UcxClient*>(arg);
  self->failed_ = true;
  self->failure_ = ucs_status_string(status);
}

ucs_status_t UcxClient::OnMessage(void* arg, const void* header, size_t header_length, void* data,
                                  size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxClient*>(arg);
  if (header_length > 0) return self->OnPayloadMessage(header, header_length, data, length, param);
  if (self->direct_ != nullptr && !self->delivering_ && !self->Pending() &&
      !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    // (an eager message: its bytes are valid during the callback, all the receiver needs)
    self->in_callback_ = self->delivering_ = true;
    (*self->direct_)({static_cast<const uint8_t*>(data), length});
    self->in_callback_ = self->delivering_ = false;
    ++self->direct_count_;
    return UCS_OK;
  }
  // Into `incoming_`, never into the inbox Poll() may be reading from.
  size_t at = self->incoming_.size();
  self->incoming_.resize(at + 4 + length);
  uint32_t len = static_cast<uint32_t>(length);
  std::memcpy(self->incoming_.data() + at, &len, 4);
  if (length > 0) std::memcpy(self->incoming_.data() + at + 4, data, length);
  return UCS_OK;
}

// An AM header is an SBE message ending in an empty varData32 whose bytes are the AM data:
// the record handed out is the message with those bytes in place. Eager data is copied now;
// a rendezvous is received into a slot of its own, and records after it wait for it (Poll
// stops at a slot still receiving).
ucs_status_t UcxClient::OnPayloadMessage(const void* header, size_t header_length, void* data,
                                         size_t length, const ucp_am_recv_param_t* param) {
  if (header_length < 4 || length > (1u << 30)) {
    failed_ = true;
    failure_ = "a malformed payload message";
    return UCS_OK;
  }
  const uint32_t total = static_cast<uint32_t>(header_length + length);
  uint32_t len = static_cast<uint32_t>(length);
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    size_t at = incoming_.size();
    incoming_.resize(at + 4 + total);
    std::memcpy(incoming_.data() + at, &total, 4);
    std::memcpy(incoming_.data() + at + 4, header, header_length);
    std::memcpy(incoming_.data() + at + 4 + header_length - 4, &len, 4);
    if (length > 0) std::memcpy(incoming_.data() + at + 4 + header_length, data, length);
    return UCS_OK;
  }
  uint32_t slot;
  if (free_slots_.empty()) {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  Slot& s = slots_[slot];
  s.bytes.resize(total);
  std::memcpy(s.bytes.data(), header, header_length);
  std::memcpy(s.bytes.data() + header_length - 4, &len, 4);
  s.ready = false;
  s.owner = this;
  // The placeholder: length kSlotMark, then the slot's index.
  size_t at = incoming_.size();
  incoming_.resize(at + 8);
  std::memcpy(incoming_.data() + at, &kSlotMark, 4);
  std::memcpy(incoming_.data() + at + 4, &slot, 4);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = [](void* request, ucs_status_t status, size_t, void* user) {
    auto* s = static_cast<Slot*>(user);
    s->ready = true;
    if (status != UCS_OK && !s->owner->failed_) {
      s->owner->failed_ = true;
      s->owner->failure_ = ucs_status_string(status);
    }
    ucp_request_free(request);
  };
  p.user_data = &s;
  ucs_status_ptr_t r =
      ucp_am_recv_data_nbx(worker_->get(), data, s.bytes.data() + header_length, length, &p);
  if (r == nullptr) {
    s.ready = true;
  } else if (UCS_PTR_IS_ERR(r)) {
    s.ready = true;
    failed_ = true;
    failure_ = ucs_status_string(UCS_PTR_STATUS(r));
  }
  return UCS_OK;
}

void UcxClient::OnSent(void* user, SendBuffers::Buffer* buffer, ucs_status_t status) {
  auto* self = static_cast<UcxClient*>(user);
  self->in_flight_ -= std::min(self->in_flight_, buffer->size + buffer->payload_size);
  if (status != UCS_OK && status != UCS_ERR_CANCELED && !self->failed_) {
    self->failed_ = true;
    self->failure_ = ucs_status_string(status);
  }
}

UcxClient::SendStatus UcxClient::TrySend(std::span<const uint8_t> msg) {
  if (msg.size() > max_message_) return SendStatus::kTooLarge;
  // (inside UCX's callback the window is not waited for: the send is queued with UCX)
  if (in_flight_ > options_.send_window && !in_callback_) {
    worker_->Progress();
    if (in_flight_ > options_.send_window) return SendStatus::kFull;
  }
  if (failed_) return SendStatus::kOk;  // CheckAlive reports it; the bytes go nowhere
  auto r = SendMessage(ep_, am_id_, msg, buffers_, 0, &UcxClient::OnSent, this,
                       /*reply_flag=*/am_id_ == kAmMessage, in_flight_ == 0);
  if (!r) {
    failed_ = true;
    failure_ = r.error().message();
    return SendStatus::kOk;
  }
  in_flight_ += *r;
  return SendStatus::kOk;
}

VoidResult UcxClient::Send(std::span<const uint8_t> msg, std::chrono::nanoseconds timeout) {
  uint64_t end = 0;  // (the clock is read only when the message does not go at once)
  for (;;) {
    GOBLIN_RETURN_IF_ERROR(CheckAlive());
    switch (TrySend(msg)) {
      case SendStatus::kOk:
        return CheckAlive();
      case SendStatus::kTooLarge:
        return Err(StatusCode::kInvalidArgument, "a {}-byte message exceeds the {}-byte maximum",
                   msg.size(), max_message_);
      case SendStatus::kFull:
        break;
    }
    uint64_t now = MonotonicNanos();
    if (end == 0) end = now + static_cast<uint64_t>(timeout.count());
    if (now >= end) return Err(StatusCode::kTimeout, "the core took nothing for too long");
    WaitForRoom(std::chrono::nanoseconds(end - now));
  }
}

VoidResult UcxClient::SendWithPayload(std::span<const uint8_t> header,
                                      std::span<const uint8_t> payload,
                                      std::chrono::nanoseconds timeout) {
  if (header.size() < 4 || header.size() + payload.size() > max_message_) {
    return Err(StatusCode::kInvalidArgument,
               "a {}-byte message with a {}-byte payload exceeds the {}-byte maximum",
               header.size(), payload.size(), max_message_);
  }
  GOBLIN_RETURN_IF_ERROR(NotInCallback("a send with a payload"));
  uint64_t end = MonotonicNanos() + static_cast<uint64_t>(timeout.count());
  while (in_flight_ + payload.size() > options_.payload_window && in_flight_ > 0) {
    GOBLIN_RETURN_IF_ERROR(CheckAlive());
    if (worker_->Progress() > 0) continue;
    uint64_t now = MonotonicNanos();
    if (now >= end) return Err(StatusCode::kTimeout, "the core took nothing for too long");
    worker_->WaitForEvents(std::chrono::nanoseconds(std::min<uint64_t>(end - now, 1'000'000)));
  }
  GOBLIN_RETURN_IF_ERROR(CheckAlive());
  ucp_mem_h memh =
      payload_memh_ != nullptr && payload.data() >= payload_region_.data() &&
              payload.data() + payload.size() <= payload_region_.data() + payload_region_.size()
          ? payload_memh_
          : nullptr;
  // (rendezvous always: the core receives the bytes where they belong, over verbs an RDMA
  // READ of `payload`, and this side copies nothing)
  auto r = SendHeaderAndPayload(
      ep_, header, payload, memh, buffers_, 0, 0, &UcxClient::OnSent, this,
      UCP_AM_SEND_FLAG_RNDV | (am_id_ == kAmMessage ? UCP_AM_SEND_FLAG_REPLY : 0), am_id_);
  if (!r) {
    failed_ = true;
    failure_ = r.error().message();
    return CheckAlive();
  }
  if (!*r) in_flight_ += header.size() + payload.size();
  return {};
}

VoidResult UcxClient::RegisterPayloads(std::span<const uint8_t> bytes) {
  // A registration an earlier put's sends still hold (its Flush timed out) stays until they
  // complete; this put's sends then go without one (UCX registers them through its cache).
  if (payload_memh_ != nullptr) return {};
  GOBLIN_ASSIGN_OR_RETURN(payload_memh_, MapMemory(*context_, bytes.data(), bytes.size()));
  payload_region_ = bytes;
  return {};
}

VoidResult UcxClient::Flush(std::chrono::nanoseconds timeout) {
  GOBLIN_RETURN_IF_ERROR(NotInCallback("Flush"));
  uint64_t end = MonotonicNanos() + static_cast<uint64_t>(timeout.count());
  VoidResult done;
  while (in_flight_ > 0) {
    if (done = CheckAlive(); !done) break;
    if (worker_->Progress() > 0) continue;
    uint64_t now = MonotonicNanos();
    if (now >= end) {
      done = Err(StatusCode::kTimeout, "the core did not take the data in time");
      break;
    }
    worker_->WaitForEvents(std::chrono::nanoseconds(end - now));
  }
  if (done) done = CheckAlive();
  // (a send still in flight on a failed or stuck endpoint keeps its registration)
  if (payload_memh_ != nullptr && in_flight_ == 0) {
    ucp_mem_unmap(context_->get(), payload_memh_);
    payload_memh_ = nullptr;
    payload_region_ = {};
  }
  return done;
}

uint8_t* UcxClient::Reserve(uint32_t max_len) {
  if (max_len > max_message_) return nullptr;
  if (in_flight_ > options_.send_window && !in_callback_) {  // (as TrySend)
    worker_->Progress();
    if (in_flight_ > options_.send_window) return nullptr;
  }
  if (staging_.size() < max_len) staging_.resize(max_message_);
  return staging_.data();
}

void UcxClient::Commit(uint32_t len) { (void)TrySend({staging_.data(), len}); }

bool UcxClient::Deliverable() const {
  const std::vector<uint8_t>* v = &inbox_;
  size_t at = inbox_head_;
  if (at == inbox_.size()) {
    v = &incoming_;
    at = 0;
  }
  if (at == v->size()) return false;
  uint32_t len;
  std::memcpy(&len, v->data() + at, 4);
  if (len != kSlotMark) return true;
  uint32_t slot;
  std::memcpy(&slot, v->data() + at + 4, 4);
  return slots_[slot].ready;
}

Result<size_t> UcxClient::Poll(FunctionRef<void(std::span<const uint8_t>)> fn, size_t max) {
  GOBLIN_RETURN_IF_ERROR(NotInCallback("Poll"));
  // One step of progress: a message that is in is handed on before the worker takes in more
  // (a reply's first bytes do not wait for the rendezvous of the rest behind them).
  const size_t direct_before = direct_count_;  // (what that step hands to SetDirect's receiver)
  if (!Deliverable()) worker_->ProgressOnce();
  size_t n = 0;
  // (restored, not cleared: fn may Poll again)
  const bool was_delivering = std::exchange(delivering_, true);
  while (n < max && Pending()) {
    if (inbox_head_ == inbox_.size()) {  // take what arrived (both keep their capacity)
      inbox_.swap(incoming_);
      incoming_.clear();
      inbox_head_ = 0;
    }
    uint32_t len;
    std::memcpy(&len, inbox_.data() + inbox_head_, 4);
    if (len == kSlotMark) {  // a rendezvous: in order, once its bytes are in
      uint32_t slot;
      std::memcpy(&slot, inbox_.data() + inbox_head_ + 4, 4);
      if (!slots_[slot].ready) break;
      inbox_head_ += 8;
      // The slot is freed only after fn, and a deque's elements never move: a rendezvous
      // arriving while fn progresses the worker takes another slot.
      fn({slots_[slot].bytes.data(), slots_[slot].bytes.size()});
      free_slots_.push_back(slot);
      ++n;
      continue;
    }
    // Valid during fn even if fn progresses the worker: arrivals go to incoming_.
    size_t at = inbox_head_ + 4;
    inbox_head_ += 4 + len;
    fn({inbox_.data() + at, len});
    ++n;
  }
  delivering_ = was_delivering;
  if (n == 0 && direct_count_ == direct_before && failed_)
    return Err(StatusCode::kUnavailable, "goblin-core went away ({})", failure_);
  return n;
}

Result<bool> UcxClient::Wait(std::chrono::nanoseconds timeout) {
  GOBLIN_RETURN_IF_ERROR(NotInCallback("Wait"));
  uint64_t start = MonotonicNanos();
  uint64_t end = start + static_cast<uint64_t>(timeout.count());
  uint64_t spin_until = start + static_cast<uint64_t>(options_.busy_poll.count());
  // While spinning the clock is read at every 16th poll only: a read is 34 ns through the
  // vDSO in a KVM guest (more than a poll of an idle worker there), a reply that lands
  // during one waits for it, and perf had it at 21% of a spinning client's samples
  // (docs/benchmarks/native.md). A client that does not spin, or yields between polls, or
  // a wait of no time reads it every time.
  const uint32_t clock_every =
      options_.busy_poll.count() > 0 && !options_.spin_yield && timeout.count() > 0 ? 16 : 1;
  uint32_t polls = 0;
  uint64_t checked = start;  // (the clock's last reading)
  for (;;) {
    if (Deliverable() || direct_count_ > 0) return true;
    const bool did = worker_->ProgressOnce();  // (see Poll)
    if (Deliverable() || direct_count_ > 0) return true;
    if (failed_) return Err(CheckAlive().error());
    if (++polls < clock_every) continue;
    polls = 0;
    const uint64_t now = MonotonicNanos();
    if (now >= end) return false;
    const uint64_t idle_from = std::exchange(checked, now);
    if (did) continue;  // more may be in: poll again at once
    // Poll a little before paying for a wake-up, unless lately preempted while spinning (an
    // oversubscribed CPU: common/spin_backoff.h).
    if (now < spin_until && backoff_.may_spin(now) && !backoff_.Idle(idle_from, now)) {
      if (options_.spin_yield) sched_yield();
      continue;
    }
    worker_->WaitForEvents(std::chrono::nanoseconds(end - now));
  }
}

bool UcxClient::PrepareSleep() {
  if (in_callback_ || Deliverable() || direct_count_ > 0) return false;
  worker_->Progress();
  if (Deliverable() || failed_) return false;
  return worker_->Arm();
}

VoidResult UcxClient::NotInCallback(const char* what) const {
  if (!in_callback_) return {};
  return Err(StatusCode::kFailedPrecondition,
             "{} called while a message is handed over inside UCX's progress (a Connection's "
             "sink or on_meta hook must not use that Connection)",
             what);
}

VoidResult UcxClient::CheckAlive() {
  if (failed_) return Err(StatusCode::kUnavailable, "goblin-core went away ({})", failure_);
  return {};
}

}  // namespace goblin::verbs
