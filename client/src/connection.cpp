#include "goblin/client/connection.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "connection_internal.h"
#include "goblin/client/transport.h"
#include "goblin/common/clock.h"
#include "goblin/common/fd.h"
#include "goblin/common/file.h"
#include "goblin/common/shard.h"
#include "goblin/sbe/head_table.h"
#include "goblin/sbe/runtime.h"
#include "goblin/sbe/wire_flags.h"
#include "goblin/wire/goblin_wire.h"
#include "piece_cut.h"

namespace goblin::client {

using detail::ErrorReply;
using detail::Mapped;
using detail::MetaOf;
using detail::TemplateOf;

Result<Target> ParseTarget(std::string_view text) {
  if (text.starts_with("unix:"))
    text.remove_prefix(5);
  else if (text.starts_with("ucx://")) {
    if (text.size() == 6)
      return Err(StatusCode::kInvalidArgument, "target '{}' has no host:port", text);
    return Target{Target::Kind::kUcx, std::string(text.substr(6))};
  } else if (!text.starts_with("/") && !text.starts_with(".")) {
    return Err(StatusCode::kInvalidArgument,
               "target '{}' is neither unix:PATH, a socket path, nor ucx://HOST:PORT", text);
  }
  if (text.empty()) return Err(StatusCode::kInvalidArgument, "empty unix socket path");
  return Target{Target::Kind::kUnix, std::string(text)};
}

Connection::Connection() = default;
Connection::~Connection() = default;

Result<std::unique_ptr<Connection>> Connection::Open(std::string_view target_text,
                                                     const ConnectOptions& options) {
  GOBLIN_ASSIGN_OR_RETURN(Target target, ParseTarget(target_text));
  std::unique_ptr<Connection> c(new Connection());
  c->options_ = options;
  TransportOptions to;
  to.name = options.name;
  to.ring_bytes = options.ring_bytes;
  to.peer_kind = static_cast<uint8_t>(wire::PeerKind::kClient);
  to.timeout = options.timeout;
  to.spin = options.spin;
  to.spin_yield = options.spin_yield;
  GOBLIN_ASSIGN_OR_RETURN(auto transports,
                          ConnectShards(target.kind == Target::Kind::kUcx, target.address, to));
  for (auto& t : transports) {
    c->links_.push_back(std::make_unique<Link>());
    c->links_.back()->transport = std::move(t);
  }
  return c;
}

Connection::Link& Connection::LinkFor(std::string_view key) {
  return *links_[ShardOf(key, static_cast<uint16_t>(links_.size()))];
}

uint64_t Connection::client_id() const { return links_.front()->transport->client_id(); }
uint32_t Connection::server_pid() const { return links_.front()->transport->server_pid(); }
uint32_t Connection::max_message() const { return links_.front()->transport->max_message(); }
uint16_t Connection::shard_count() const { return static_cast<uint16_t>(links_.size()); }
bool Connection::pools_mapped() const {
  for (const auto& l : links_) {
    if (Mapped(*l)) return true;
  }
  return false;
}

VoidResult Connection::Receive(Link& l, uint64_t correlation_id,
                               FunctionRef<bool(std::span<const uint8_t>)> fn) {
  // The timeout bounds silence, not the whole exchange: a large object may take longer.
  // (The clock is read once per wait, not per message: a reply that is all there in one
  // poll costs no read after it.)
  const uint64_t patience = static_cast<uint64_t>(options_.timeout.count()) * 1'000'000;
  uint64_t now = MonotonicNanos(), deadline = now + patience;
  bool done = false;
  Status error;
  auto take = [&](std::span<const uint8_t> m) {
    if (TakeDelivery(m)) return;
    if (m.size() < 16) return;
    if (RouteToGets(l, m)) return;  // (a get in flight's: its sink runs now)
    uint64_t corr = sbe::Load<uint64_t>(m.data() + 8);
    bool mine = corr == correlation_id && !done && error.ok();
    // A loan nobody will read (an abandoned or failed request's): given back at once.
    if (!mine && ReleaseOrphanLoan(l, m)) return;
    if (done || !error.ok()) return;
    if (TemplateOf(m) == wire::ErrorDecoder::kTemplateId && (corr == correlation_id || corr == 0)) {
      error = ErrorReply(m);
      return;
    }
    if (corr != correlation_id) return;  // a late reply to something abandoned
    done = fn(m);
  };
  // The same, handed each message as it arrives where the transport can (UCX: inside its
  // progress, so the hooks fn runs must not use this Connection; connection.h).
  Transport::DirectFn direct(take);
  struct Restore {
    Transport& t;
    Transport::DirectFn* was;
    ~Restore() { t.SetDirect(was); }
  } restore{*l.transport, l.transport->SetDirect(&direct)};
  while (!done && error.ok()) {
    if (now >= deadline) return Err(StatusCode::kTimeout, "no reply from goblin-core in time");
    auto ready = l.transport->Wait(std::chrono::nanoseconds(deadline - now));
    if (!ready) {
      // (FailedPrecondition: called from a hook inside UCX's progress; the link is fine)
      if (ready.error().code() != StatusCode::kFailedPrecondition) FailGets(l, ready.error());
      return Err(ready.error());
    }
    if (!*ready) {
      now = MonotonicNanos();
      continue;
    }
    size_t direct_now = l.transport->TakeDirect();
    stats_.direct_messages += direct_now;
    if (done || !error.ok()) break;
    auto polled = l.transport->Poll(take);
    if (!polled) {
      FailGets(l, polled.error());
      return Err(polled.error());
    }
    const size_t also_direct = l.transport->TakeDirect();
    stats_.direct_messages += also_direct;
    const size_t got = direct_now + *polled + also_direct;
    if (done || !error.ok()) break;
    now = MonotonicNanos();
    if (got > 0) deadline = now + patience;
  }
  if (!error.ok()) return Err(error);
  return {};
}

Result<std::vector<uint8_t>> Connection::AwaitReply(Link& l, uint64_t correlation_id) {
  std::vector<uint8_t> reply;
  GOBLIN_RETURN_IF_ERROR(Receive(l, correlation_id, [&](std::span<const uint8_t> m) {
    reply.assign(m.begin(), m.end());
    return true;
  }));
  return reply;
}

VoidResult Connection::SendEncoded(Link& l, uint32_t max,
                                   FunctionRef<size_t(uint8_t*, size_t)> encode) {
  const uint64_t deadline =
      MonotonicNanos() + static_cast<uint64_t>(options_.timeout.count()) * 1'000'000;
  for (;;) {
    uint8_t* p = l.transport->Reserve(max);
    if (p != nullptr) {
      size_t n = encode(p, max);
      if (n == 0) return Err(StatusCode::kInternal, "message did not encode");
      l.transport->Commit(static_cast<uint32_t>(n));
      return {};
    }
    if (max > l.transport->max_message()) {
      return Err(StatusCode::kInvalidArgument, "message of {} bytes exceeds the ring", max);
    }
    GOBLIN_RETURN_IF_ERROR(l.transport->CheckAlive());
    if (MonotonicNanos() >= deadline)
      return Err(StatusCode::kTimeout, "the core did not drain the ring");
    // Drain what the core says meanwhile (an error for this put ends it early).
    Status early;
    GOBLIN_RETURN_IF_ERROR(l.transport->Poll([&](std::span<const uint8_t> m) {
      if (early.ok() && m.size() >= 4 && TemplateOf(m) == wire::ErrorDecoder::kTemplateId) {
        early = ErrorReply(m);  // the first error is the cause; later ones are echoes
      }
    }));
    if (!early.ok()) return Err(early);
    // (not a yield loop: on a machine whose CPUs are busy, each yield gave them away for a
    // time slice, and an 8 MiB put through a 4 KiB ring took 9 s instead of 0.05)
    const uint64_t now = MonotonicNanos();
    l.transport->WaitForRoom(std::chrono::nanoseconds(now < deadline ? deadline - now : 0));
  }
}

Result<uint64_t> Connection::SendRequest(Link& l, size_t variable_bytes,
                                         FunctionRef<size_t(uint8_t*, size_t, uint64_t)> encode) {
  uint64_t corr = next_correlation_++;
  if (request_.size() < 256 + variable_bytes) request_.resize(256 + variable_bytes);
  size_t n = encode(request_.data(), 256 + variable_bytes, corr);
  if (n == 0 || n > l.transport->max_message()) {
    return Err(StatusCode::kInvalidArgument,
               "request does not fit a {}-byte ring message (key or metadata too long)",
               l.transport->max_message());
  }
  GOBLIN_RETURN_IF_ERROR(l.transport->Send({request_.data(), n}, options_.timeout));
  return corr;
}

Result<Connection::PutStarted> Connection::BeginPut(Link& l, std::string_view key, uint64_t size,
                                                    uint64_t ttl_ns, std::string_view metadata) {
  GOBLIN_ASSIGN_OR_RETURN(uint64_t corr, SendRequest(l, key.size() + metadata.size(),
                                                     [&](uint8_t* b, size_t cap, uint64_t id) {
                                                       wire::PutBeginEncoder e(b, cap);
                                                       return e.set_correlation_id(id)
                                                           .set_expected_size(size)
                                                           .set_ttl_nanos(ttl_ns)
                                                           .set_key(key)
                                                           .set_metadata(metadata)
                                                           .Finish();
                                                     }));
  GOBLIN_ASSIGN_OR_RETURN(auto lease_msg, AwaitReply(l, corr));
  auto lease = wire::FillLeaseDecoder::Decode(lease_msg);
  if (!lease) return Err(lease.error());
  if (lease->state() != wire::LeaseState::kGranted) {
    return Err(StatusCode::kAlreadyExists, "a fill of '{}' is already in progress", key);
  }
  return PutStarted{corr, lease->put_id()};
}

void Connection::AbortPut(Link& l, const PutStarted& put) {
  uint8_t ab[64];  // (best effort: the core also aborts a fill nobody feeds)
  wire::PutAbortEncoder a(ab, sizeof ab);
  (void)l.transport->Send(
      {ab, a.set_correlation_id(put.correlation_id).set_put_id(put.put_id).Finish()},
      options_.timeout);
}

Result<uint64_t> Connection::CommitPut(Link& l, const PutStarted& put, uint64_t total_size) {
  uint8_t cb[64];
  wire::PutCommitEncoder c(cb, sizeof cb);
  GOBLIN_RETURN_IF_ERROR(l.transport->Send({cb, c.set_correlation_id(put.correlation_id)
                                                    .set_put_id(put.put_id)
                                                    .set_total_size(total_size)
                                                    .Finish()},
                                           options_.timeout));
  GOBLIN_ASSIGN_OR_RETURN(auto result_msg, AwaitReply(l, put.correlation_id));
  auto result = wire::PutResultDecoder::Decode(result_msg);
  if (!result) return Err(result.error());
  return result->generation();
}

Result<uint64_t> Connection::Put(std::string_view key, const Source& source, uint64_t size,
                                 uint64_t ttl_ns, std::string_view metadata) {
  Link& l = LinkFor(key);
  GOBLIN_ASSIGN_OR_RETURN(PutStarted put, BeginPut(l, key, size, ttl_ns, metadata));
  // PutData: as much as one ring record carries.
  const uint32_t max = l.transport->max_message();
  const size_t chunk = max - 64;
  std::vector<uint8_t> data(chunk);
  uint64_t offset = 0;
  for (;;) {
    auto got = source(data);
    if (!got) {
      AbortPut(l, put);
      return Err(got.error());
    }
    if (*got == 0) break;
    std::span<const uint8_t> piece(data.data(), *got);
    GOBLIN_RETURN_IF_ERROR(SendEncoded(l, max, [&](uint8_t* p, size_t cap) {
      wire::PutDataEncoder d(p, cap);
      return d.set_put_id(put.put_id).set_offset(offset).set_bytes(piece).Finish();
    }));
    offset += *got;
  }
  return CommitPut(l, put, size == UINT64_MAX ? offset : size);
}

Result<uint64_t> Connection::PutByReference(Link& l, std::string_view key,
                                            std::span<const uint8_t> data, uint64_t ttl_ns,
                                            std::string_view metadata) {
  GOBLIN_ASSIGN_OR_RETURN(PutStarted put, BeginPut(l, key, data.size(), ttl_ns, metadata));
  // Each piece: a PutData whose bytes are the AM data.
  const PieceCut cut(l.transport->max_message() - 64, l.transport->put_alignment(),
                     l.transport->put_head_cut());
  Result<uint64_t> result = uint64_t{0};
  VoidResult sent = l.transport->RegisterPayloads(data);
  for (uint64_t offset = 0, len; offset < data.size() && sent; offset += len) {
    len = cut.Length(offset, data.size());
    uint8_t hb[64];
    wire::PutDataEncoder d(hb, sizeof hb);
    const size_t n =
        d.set_put_id(put.put_id).set_offset(offset).set_bytes(std::span<const uint8_t>()).Finish();
    sent = l.transport->SendWithPayload({hb, n}, data.subspan(offset, len), options_.timeout);
  }
  if (sent) {
    result = CommitPut(l, put, data.size());
  } else {
    result = Err(sent.error());
    AbortPut(l, put);
  }
  // UCX may read `data` until its sends complete: the caller gets it back only after.
  if (auto flushed = l.transport->FlushPayloads(options_.timeout); !flushed && result) {
    return Err(flushed.error());
  }
  return result;
}

Result<uint64_t> Connection::Put(std::string_view key, std::span<const uint8_t> data,
                                 uint64_t ttl_ns, std::string_view metadata) {
  Link& l = LinkFor(key);
  if (l.transport->sends_payload_by_reference() && data.size() >= kPutByReferenceMin) {
    return PutByReference(l, key, data, ttl_ns, metadata);
  }
  size_t pos = 0;
  return Put(
      key,
      [&](std::span<uint8_t> out) -> Result<size_t> {
        size_t n = std::min(out.size(), data.size() - pos);
        if (n > 0)
          std::memcpy(out.data(), data.data() + pos, n);  // (an empty span's data may be null)
        pos += n;
        return n;
      },
      data.size(), ttl_ns, metadata);
}

Result<Connection::ObjectMeta> Connection::Head(std::string_view key) {
  Link& l = LinkFor(key);
  GOBLIN_ASSIGN_OR_RETURN(
      uint64_t corr, SendRequest(l, key.size(), [&](uint8_t* b, size_t cap, uint64_t id) {
        return wire::ObjectHeadEncoder(b, cap).set_correlation_id(id).set_key(key).Finish();
      }));
  GOBLIN_ASSIGN_OR_RETURN(auto reply, AwaitReply(l, corr));
  auto info = wire::ObjectInfoDecoder::Decode(reply);
  if (!info) return Err(info.error());
  return MetaOf(*info);
}

bool Connection::TakeDelivery(std::span<const uint8_t> m) {
  if (TemplateOf(m) != wire::DeliveryDecoder::kTemplateId) return false;
  auto d = wire::DeliveryDecoder::Decode(m);
  if (!d) return true;  // malformed: dropped
  Message msg;
  msg.kind = static_cast<SubKind>(d->kind());
  for (auto s : d->sessions()) msg.session_ids.push_back(s.session_id());
  msg.pattern = std::string(d->pattern());
  msg.channel = std::string(d->channel());
  msg.payload = std::string(d->payload());
  inbox_.push_back(std::move(msg));
  return true;
}

Result<uint64_t> Connection::Publish(std::string_view channel, std::string_view payload,
                                     bool sharded) {
  Link& l = first();
  GOBLIN_ASSIGN_OR_RETURN(uint64_t corr, SendRequest(l, channel.size() + payload.size(),
                                                     [&](uint8_t* b, size_t cap, uint64_t id) {
                                                       return wire::PublishEncoder(b, cap)
                                                           .set_correlation_id(id)
                                                           .set_sharded(sharded ? 1 : 0)
                                                           .set_channel(channel)
                                                           .set_payload(payload)
                                                           .Finish();
                                                     }));
  GOBLIN_ASSIGN_OR_RETURN(auto reply, AwaitReply(l, corr));
  auto ack = wire::PublishAckDecoder::Decode(reply);
  if (!ack) return Err(ack.error());
  return ack->receivers();
}

Result<std::vector<Connection::Confirmation>> Connection::Subscribe(
    SubKind kind, std::span<const std::string> names, bool unsubscribe, uint64_t session_id) {
  Link& l = first();
  size_t bytes = 0;
  for (const auto& n : names) bytes += n.size() + 4;
  GOBLIN_ASSIGN_OR_RETURN(
      uint64_t corr, SendRequest(l, bytes, [&](uint8_t* b, size_t cap, uint64_t id) {
        wire::SubscribeEncoder e(b, cap);
        e.set_correlation_id(id)
            .set_kind(static_cast<wire::SubKind>(kind))
            .set_action(unsubscribe ? wire::SubAction::kUnsubscribe : wire::SubAction::kSubscribe)
            .set_session_id(session_id);
        auto g = e.BeginNames();
        for (const auto& n : names) g.Next().set_name(n);
        return e.Finish();
      }));
  // Named requests get one confirmation per name; unsubscribe-all ends with an empty ack.
  const bool all = unsubscribe && names.empty();
  std::vector<Confirmation> out;
  Status bad;
  GOBLIN_RETURN_IF_ERROR(Receive(l, corr, [&](std::span<const uint8_t> m) {
    auto a = wire::SubscribeAckDecoder::Decode(m);
    if (!a) {
      bad = a.error();
      return true;
    }
    size_t before = out.size();
    for (auto c : a->confirmations()) {
      Confirmation x;
      if (!c.name_is_nil()) x.name = std::string(c.name());
      x.count = c.count();
      out.push_back(std::move(x));
    }
    return all ? out.size() == before : out.size() >= names.size();
  }));
  if (!bad.ok()) return Err(bad);
  return out;
}

Result<std::optional<Connection::Message>> Connection::NextMessage(
    std::chrono::nanoseconds timeout) {
  Link& l = first();
  uint64_t deadline = MonotonicNanos() + static_cast<uint64_t>(timeout.count());
  for (;;) {
    GOBLIN_RETURN_IF_ERROR(l.transport->Poll([&](std::span<const uint8_t> m) {
      if (TakeDelivery(m)) return;
      (void)ReleaseOrphanLoan(l, m);  // (a loan nobody waits for)
    }));
    if (!inbox_.empty()) break;
    uint64_t now = MonotonicNanos();
    if (now >= deadline) {
      GOBLIN_RETURN_IF_ERROR(l.transport->CheckAlive());
      return std::optional<Message>();
    }
    GOBLIN_RETURN_IF_ERROR(l.transport->Wait(std::chrono::nanoseconds(deadline - now)));
  }
  Message m = std::move(inbox_.front());
  inbox_.pop_front();
  return std::optional<Message>(std::move(m));
}

Result<uint64_t> Connection::PublishAsync(std::string_view channel, std::string_view payload,
                                          bool sharded) {
  Link& l = first();
  const size_t need = sbe::MessageHeader::kSize + wire::PublishEncoder::kBlockLength +
                      2 * sbe::DataLengthSize(sbe::SectionKind::kData32) + channel.size() +
                      payload.size();
  if (need > l.transport->max_message()) {
    return Err(StatusCode::kInvalidArgument,
               "a {}-byte PUBLISH does not fit a {}-byte ring message", need,
               l.transport->max_message());
  }
  uint8_t* p = l.transport->Reserve(static_cast<uint32_t>(need));
  if (p == nullptr) return Err(StatusCode::kResourceExhausted, "the ring is full");
  uint64_t corr = next_correlation_++;
  size_t n = wire::PublishEncoder(p, need)
                 .set_correlation_id(corr)
                 .set_sharded(sharded ? 1 : 0)
                 .set_channel(channel)
                 .set_payload(payload)
                 .Finish();
  l.transport->Commit(static_cast<uint32_t>(n));
  return corr;
}

Result<size_t> Connection::PollPubsub(PubsubHandler& handler, size_t max) {
  Link& l = first();
  size_t handled = 0;
  while (!inbox_.empty() && handled < max) {
    Message m = std::move(inbox_.front());
    inbox_.pop_front();
    MessageView v{m.kind,
                  m.pattern,
                  m.channel,
                  m.payload,
                  static_cast<uint32_t>(m.session_ids.size()),
                  m.session_ids.empty() ? 0 : m.session_ids.front()};
    handler.OnMessage(v);
    ++handled;
  }
  if (handled >= max) return handled;
  GOBLIN_ASSIGN_OR_RETURN(size_t n,
                          l.transport->Poll(
                              [&](std::span<const uint8_t> m) {
                                switch (m.size() < 8 ? 0 : TemplateOf(m)) {
                                  case wire::DeliveryDecoder::kTemplateId: {
                                    auto d = wire::DeliveryDecoder::Decode(m);
                                    if (!d) return;  // malformed: dropped
                                    MessageView v;
                                    v.kind = static_cast<SubKind>(d->kind());
                                    for (auto s : d->sessions()) {
                                      if (v.sessions++ == 0) v.first_session = s.session_id();
                                    }
                                    v.pattern = d->pattern();
                                    v.channel = d->channel();
                                    v.payload = d->payload();
                                    handler.OnMessage(v);
                                    return;
                                  }
                                  case wire::PublishAckDecoder::kTemplateId: {
                                    auto a = wire::PublishAckDecoder::Decode(m);
                                    if (a)
                                      handler.OnPublishAck(a->correlation_id(), a->receivers());
                                    return;
                                  }
                                  case wire::ErrorDecoder::kTemplateId: {
                                    auto e = wire::ErrorDecoder::Decode(m);
                                    if (e) handler.OnError(e->correlation_id(), ErrorReply(m));
                                    return;
                                  }
                                  case wire::LoanDecoder::kTemplateId:  // nobody waits for it
                                  case wire::ObjectLentDecoder::kTemplateId:
                                    (void)ReleaseOrphanLoan(l, m);
                                    return;
                                  default:
                                    return;  // a late reply to an abandoned synchronous request
                                }
                              },
                              max - handled));
  return handled + n;
}

// (pub/sub lives on shard 0: its transport is the one an event loop watches)
int Connection::wake_fd() const { return links_.front()->transport->wake_fd(); }
int Connection::liveness_fd() const { return links_.front()->transport->liveness_fd(); }
bool Connection::PrepareSleep() { return first().transport->PrepareSleep(false); }
void Connection::FinishSleep() { first().transport->FinishSleep(); }
VoidResult Connection::CheckAlive() {
  for (auto& l : links_) GOBLIN_RETURN_IF_ERROR(l->transport->CheckAlive());
  return {};
}

Result<Connection::QueryResult> Connection::PubsubQuery(Query q,
                                                        std::span<const std::string> args) {
  Link& l = first();
  size_t bytes = 0;
  for (const auto& a : args) bytes += a.size() + 4;
  GOBLIN_ASSIGN_OR_RETURN(
      uint64_t corr, SendRequest(l, bytes, [&](uint8_t* b, size_t cap, uint64_t id) {
        wire::PubsubQueryEncoder e(b, cap);
        e.set_correlation_id(id).set_query(static_cast<wire::PubsubQueryKind>(q));
        auto g = e.BeginArgs();
        for (const auto& a : args) g.Next().set_arg(a);
        return e.Finish();
      }));
  QueryResult out;
  Status bad;
  GOBLIN_RETURN_IF_ERROR(Receive(l, corr, [&](std::span<const uint8_t> m) {
    auto r = wire::PubsubReplyDecoder::Decode(m);
    if (!r) {
      bad = r.error();
      return true;
    }
    out.number = r->number();
    for (auto e : r->entries()) out.entries.emplace_back(std::string(e.name()), e.count());
    return q == Query::kNumPat || out.entries.size() >= static_cast<size_t>(out.number);
  }));
  if (!bad.ok()) return Err(bad);
  return out;
}

bool Connection::ReleaseOrphanLoan(Link& l, std::span<const uint8_t> m) {
  if (m.size() < 8) return false;
  if (TemplateOf(m) == wire::LoanDecoder::kTemplateId) {
    if (auto loan = wire::LoanDecoder::Decode(m)) ReleaseLoan(l, loan->loan_id());
    return true;
  }
  if (TemplateOf(m) == wire::ObjectLentDecoder::kTemplateId) {
    if (auto lent = wire::ObjectLentDecoder::Decode(m)) ReleaseLoan(l, lent->loan_id());
    return true;
  }
  return false;
}

void Connection::ReleaseLoan(Link& l, uint64_t loan_id) {
  uint8_t b[32];
  size_t n = wire::LoanReleaseEncoder(b, sizeof b).set_loan_id(loan_id).Finish();
  (void)l.transport->Send({b, n}, options_.timeout);  // a dead core frees everything anyway
}

void Connection::AbandonGet(Link& l, uint64_t correlation_id) {
  uint8_t b[32];
  size_t n = wire::ObjectGetCancelEncoder(b, sizeof b)
                 .set_correlation_id(correlation_id)
                 .set_flags(wire::kCancelTakeBackLoans)
                 .Finish();
  (void)l.transport->Send({b, n}, options_.timeout);  // (as ReleaseLoan)
  if (!l.transport->local()) l.drain = true;
}

void Connection::DrainAbandoned() {
  // (a get in flight routed meanwhile may abandon another link: a few rounds at most)
  for (int round = 0; round < 4; ++round) {
    bool any = false;
    for (auto& lp : links_) {
      Link& l = *lp;
      if (!l.drain) continue;
      l.drain = false;
      any = true;
      // The core answers after the cancel and every send before it; the transport hands out
      // the Pong only after the rendezvous records ahead of it (UcxClient::Poll).
      const uint64_t id = next_correlation_++;
      uint8_t b[64];
      size_t n = wire::PingEncoder(b, sizeof b).set_correlation_id(id).set_payload("").Finish();
      if (l.transport->Send({b, n}, options_.timeout)) (void)AwaitReply(l, id);
    }
    if (!any) return;
  }
}

VoidResult Connection::MapPools(Link& l) {
  GOBLIN_ASSIGN_OR_RETURN(uint64_t corr,
                          SendRequest(l, 0, [&](uint8_t* b, size_t cap, uint64_t id) {
                            return wire::MapPoolsEncoder(b, cap).set_correlation_id(id).Finish();
                          }));
  GOBLIN_ASSIGN_OR_RETURN(auto reply, AwaitReply(l, corr));
  if (!l.transport->local()) {
    GOBLIN_RETURN_IF_ERROR(l.transport->AttachRemotePools(reply));
    l.remote_mapped = true;
    return {};
  }
  std::vector<uint8_t> side;
  std::vector<UniqueFd> fds;
  GOBLIN_RETURN_IF_ERROR(l.transport->ReceiveSideFrame(&side, &fds, options_.timeout));
  auto map = wire::PoolMapDecoder::Decode(side);
  if (!map) return Err(map.error());
  size_t i = 0;
  for (auto p : map->pools()) {
    if (i >= fds.size()) return Err(StatusCode::kCorruption, "PoolMap names more pools than fds");
    int fd = fds[i++].get();
    Link::Mapping* m = p.pool() == wire::PoolKind::kHead        ? &l.head_pool
                       : p.pool() == wire::PoolKind::kIo        ? &l.io_pool
                       : p.pool() == wire::PoolKind::kHeadTable ? &l.head_table
                                                                : nullptr;
    if (m == nullptr) continue;  // a pool this library does not know
    void* a = mmap(nullptr, p.bytes(), PROT_READ, MAP_SHARED, fd, 0);
    if (a == MAP_FAILED) return Err(ErrnoStatus("mmap(goblin-core pool)", errno));
    if (m->base != nullptr) munmap(m->base, m->bytes);
    m->base = static_cast<uint8_t*>(a);
    m->bytes = p.bytes();
  }
  if (l.head_pool.base == nullptr || l.io_pool.base == nullptr)
    return Err(StatusCode::kCorruption, "PoolMap without both pools");
  return {};
}

VoidResult Connection::MapPoolsInPlace(Link& l) {
  const std::string boot_id = HostBootId();
  if (boot_id.empty()) return Err(StatusCode::kUnimplemented, "no boot id to compare");
  GOBLIN_ASSIGN_OR_RETURN(uint64_t corr,
                          SendRequest(l, boot_id.size(), [&](uint8_t* b, size_t cap, uint64_t id) {
                            return wire::MapPoolsInPlaceEncoder(b, cap)
                                .set_correlation_id(id)
                                .set_boot_id(boot_id)
                                .Finish();
                          }));
  GOBLIN_ASSIGN_OR_RETURN(auto reply, AwaitReply(l, corr));  // (an Error: another host)
  auto map = wire::ProcessPoolsDecoder::Decode(reply);
  if (!map) return Err(map.error());
  Link::Mapping head, io;
  auto unmap = [&] {
    for (Link::Mapping* m : {&head, &io}) {
      if (m->base != nullptr) munmap(m->base, m->bytes);
    }
  };
  for (auto p : map->pools()) {
    Link::Mapping* m = p.pool() == wire::PoolKind::kHead ? &head
                       : p.pool() == wire::PoolKind::kIo ? &io
                                                         : nullptr;
    if (m == nullptr || m->base != nullptr) continue;
    std::string path = fmt::format("/proc/{}/fd/{}", map->pid(), p.fd());
    UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st {};
    if (!fd || fstat(fd.get(), &st) != 0) {
      unmap();
      return ErrnoErr(fmt::format("open({}) of goblin-core's pool", path), errno);
    }
    // Another pid namespace, or a recycled fd number: not the core's pool.
    if (static_cast<uint64_t>(st.st_dev) != p.device() ||
        static_cast<uint64_t>(st.st_ino) != p.inode() ||
        static_cast<uint64_t>(st.st_size) < p.bytes()) {
      unmap();
      return Err(StatusCode::kFailedPrecondition, "{} is not goblin-core's pool", path);
    }
    void* a = mmap(nullptr, p.bytes(), PROT_READ, MAP_SHARED, fd.get(), 0);
    if (a == MAP_FAILED) {
      unmap();
      return ErrnoErr("mmap(goblin-core pool)", errno);
    }
    m->base = static_cast<uint8_t*>(a);
    m->bytes = p.bytes();
  }
  if (head.base == nullptr || io.base == nullptr) {
    unmap();
    return Err(StatusCode::kCorruption, "ProcessPools without both pools");
  }
  l.head_pool = head;
  l.io_pool = io;
  return {};
}

Result<std::optional<Connection::HeadDescriptor>> Connection::Describe(std::string_view key) {
  Link& l = LinkFor(key);
  GOBLIN_ASSIGN_OR_RETURN(
      uint64_t corr, SendRequest(l, key.size(), [&](uint8_t* b, size_t cap, uint64_t id) {
        return wire::ObjectDescribeEncoder(b, cap).set_correlation_id(id).set_key(key).Finish();
      }));
  GOBLIN_ASSIGN_OR_RETURN(auto reply, AwaitReply(l, corr));
  auto d = wire::HeadDescriptorDecoder::Decode(reply);
  if (!d) return Err(d.error());
  if (d->status() != wire::LookupStatus::kHit) return std::optional<HeadDescriptor>();
  HeadDescriptor h;
  h.size = d->object_size();
  h.generation = d->generation();
  h.entry = d->entry();
  h.pool_offset = d->pool_offset();
  h.length = d->head_length();
  h.checksum = d->checksum();
  h.stamp = d->stamp();
  h.shard = ShardOf(key, shard_count());
  return std::optional<HeadDescriptor>(h);
}

Result<std::array<uint64_t, 4>> Connection::ReadEntry(Link& l, uint32_t entry) {
  const uint64_t at = uint64_t{entry} * sizeof(sbe::HeadTableEntry);
  std::array<uint64_t, 4> e{};
  if (!l.transport->local()) {
    GOBLIN_RETURN_IF_ERROR(l.transport->ReadRemote(
        static_cast<uint8_t>(wire::PoolKind::kHeadTable), at,
        {reinterpret_cast<uint8_t*>(e.data()), sizeof e}, options_.timeout));
    return e;
  }
  if (at + sizeof e > l.head_table.bytes)
    return Err(StatusCode::kOutOfRange, "head table entry {} is outside the table", entry);
  const auto* src = reinterpret_cast<const uint64_t*>(l.head_table.base + at);
  e[0] = __atomic_load_n(&src[0], __ATOMIC_ACQUIRE);  // the stamp first (seqlock)
  for (int i = 1; i < 4; ++i) e[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
  return e;
}

Result<bool> Connection::ReadHead(const HeadDescriptor& d, std::span<uint8_t> dst) {
  if (d.shard >= links_.size()) return Err(StatusCode::kInvalidArgument, "no shard {}", d.shard);
  Link& l = *links_[d.shard];
  if (!d.readable()) return Err(StatusCode::kInvalidArgument, "the head has no descriptor entry");
  if (dst.size() < d.length) {
    return Err(StatusCode::kInvalidArgument, "a {}-byte buffer for a {}-byte head", dst.size(),
               d.length);
  }
  if (l.transport->local() ? !Mapped(l) || l.head_table.base == nullptr : !l.remote_mapped) {
    GOBLIN_RETURN_IF_ERROR(MapPools(l));
    if (l.transport->local() && l.head_table.base == nullptr)
      return Err(StatusCode::kUnimplemented, "goblin-core has no head table");
  }
  const sbe::HeadTableEntry described{d.stamp, d.pool_offset, d.length, d.checksum};
  auto as_entry = [](const std::array<uint64_t, 4>& e) {
    return sbe::HeadTableEntry{e[0], e[1], e[2], e[3]};
  };
  GOBLIN_ASSIGN_OR_RETURN(auto before, ReadEntry(l, d.entry));
  auto stale = [&] {
    ++stats_.stale_reads;
    return false;
  };
  if (as_entry(before) != described) return stale();  // no need to read the bytes
  std::span<uint8_t> out = dst.first(d.length);
  if (l.transport->local()) {
    if (d.pool_offset > l.head_pool.bytes || d.length > l.head_pool.bytes - d.pool_offset)
      return Err(StatusCode::kOutOfRange, "a head outside the mapped pool");
    std::memcpy(out.data(), l.head_pool.base + d.pool_offset, out.size());
    std::atomic_thread_fence(std::memory_order_acquire);
  } else {
    GOBLIN_RETURN_IF_ERROR(l.transport->ReadRemote(static_cast<uint8_t>(wire::PoolKind::kHead),
                                                   d.pool_offset, out, options_.timeout));
  }
  GOBLIN_ASSIGN_OR_RETURN(auto after, ReadEntry(l, d.entry));
  if (!sbe::HeadReadIsCurrent(described, as_entry(before), as_entry(after),
                              XXH3_64bits(out.data(), out.size()))) {
    return stale();
  }
  ++stats_.one_sided_reads;
  return true;
}

Result<uint64_t> Connection::PutFile(std::string_view key, const std::string& path, uint64_t ttl_ns,
                                     std::string_view metadata) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoErr(fmt::format("open({})", path), errno);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return ErrnoErr(fmt::format("stat({})", path), errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  uint64_t at = 0;
  return Put(
      key,
      [&](std::span<uint8_t> out) -> Result<size_t> {
        size_t want = static_cast<size_t>(std::min<uint64_t>(out.size(), size - at));
        if (want == 0) return size_t{0};
        for (;;) {
          ssize_t n = pread(fd.get(), out.data(), want, static_cast<off_t>(at));
          if (n < 0 && errno == EINTR) continue;
          if (n < 0) return ErrnoErr(fmt::format("read({})", path), errno);
          if (n == 0) {
            return Err(StatusCode::kIoError, "{} shrank to {} bytes while being stored", path, at);
          }
          at += static_cast<uint64_t>(n);
          return static_cast<size_t>(n);
        }
      },
      size, ttl_ns, metadata);
}

Result<Connection::ObjectMeta> Connection::GetInto(std::string_view key, std::span<uint8_t> buffer,
                                                   uint64_t offset, uint64_t* bytes) {
  uint64_t got = 0;
  auto meta = Get(
      key,
      [&](uint64_t off, std::span<const uint8_t> b) -> VoidResult {
        if (off < offset || off - offset + b.size() > buffer.size()) {
          return Err(StatusCode::kCorruption, "bytes at {} outside the requested range", off);
        }
        std::memcpy(buffer.data() + (off - offset), b.data(), b.size());
        got = std::max<uint64_t>(got, off - offset + b.size());
        return {};
      },
      offset, buffer.size());
  if (bytes != nullptr) *bytes = got;
  return meta;
}

Result<bool> Connection::Delete(std::string_view key) {
  Link& l = LinkFor(key);
  GOBLIN_ASSIGN_OR_RETURN(
      uint64_t corr, SendRequest(l, key.size(), [&](uint8_t* b, size_t cap, uint64_t id) {
        return wire::ObjectDeleteEncoder(b, cap).set_correlation_id(id).set_key(key).Finish();
      }));
  GOBLIN_ASSIGN_OR_RETURN(auto reply, AwaitReply(l, corr));
  auto ack = wire::DeleteAckDecoder::Decode(reply);
  if (!ack) return Err(ack.error());
  return ack->deleted() != 0;
}

Result<std::chrono::nanoseconds> Connection::Ping(std::string_view payload) {
  Link& l = first();
  uint64_t id = next_correlation_++;
  std::vector<uint8_t> buf(64 + payload.size());
  wire::PingEncoder e(buf.data(), buf.size());
  uint64_t start = MonotonicNanos();
  size_t n = e.set_correlation_id(id).set_send_nanos(start).set_payload(payload).Finish();
  if (n == 0)
    return Err(StatusCode::kInvalidArgument, "ping payload of {} bytes is too large",
               payload.size());
  GOBLIN_RETURN_IF_ERROR(l.transport->Send({buf.data(), n}, options_.timeout));
  GOBLIN_ASSIGN_OR_RETURN(auto reply, AwaitReply(l, id));
  uint64_t end = MonotonicNanos();
  if (TemplateOf(reply) != wire::PongDecoder::kTemplateId) {
    return Err(StatusCode::kCorruption, "expected Pong, got {}",
               wire::TemplateName(TemplateOf(reply)));
  }
  auto pong = wire::PongDecoder::Decode(reply);
  if (!pong) return Err(pong.error());
  if (pong->payload() != payload)
    return Err(StatusCode::kCorruption, "pong payload differs from ping");
  return std::chrono::nanoseconds(end - start);
}

}  // namespace goblin::client
