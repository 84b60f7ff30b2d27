#include "goblin/core/core_service.h"
#include "goblin/core/keyspace_events.h"

#include "goblin/common/shard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <tuple>

#include "goblin/common/clock.h"
#include "goblin/common/file.h"
#include "goblin/common/log.h"
#include "goblin/sbe/wire_flags.h"
#include "goblin/wire/goblin_wire.h"

namespace goblin::core {

namespace {
// store::AccessMarks bits as ObjectInfo.marks (wire_flags.h).
uint8_t WireMarks(uint8_t m) {
  uint8_t w = 0;
  if ((m & store::kAccessFetched) != 0) w |= wire::kInfoFetched;
  if ((m & store::kAccessStale) != 0) w |= wire::kInfoStale;
  if ((m & store::kAccessTokenSent) != 0) w |= wire::kInfoTokenSent;
  if ((m & store::kAccessWon) != 0) w |= wire::kInfoWon;
  return w;
}
constexpr std::string_view kLog = "core";

// An object's description in an ObjectInfo, from a stream's store::ObjectInfo or straight
// from its index record (the same fields); the metadata within half the session's message.
template <typename Object>
void SetObject(wire::ObjectInfoEncoder& oi, const Object& obj, const store::AccessMarks& marks,
               const reactor::Session& session) {
  oi.set_object_size(obj.size)
      .set_generation(obj.generation)
      .set_created_nanos(obj.created_unix_ns)
      .set_expires_nanos(obj.expires_unix_ns)
      .set_marks(WireMarks(marks.marks))
      .set_idle_seconds(marks.idle_s)
      .set_metadata(std::string_view(obj.metadata).substr(0, session.max_message() / 2));
}

wire::ErrorCode ToWire(StatusCode c) {
  // The wire enum mirrors StatusCode for 1..14.
  return static_cast<wire::ErrorCode>(static_cast<uint16_t>(c));
}
}  // namespace

void CoreService::OnOpen(reactor::Session& session) {
  ++counters_.sessions_opened;
  auto& per = sessions_[session.id()];
  per = std::make_unique<PerSession>();
  per->session = &session;
  session.set_handler_data(per.get());
  if (store_ != nullptr && session.sends_by_reference()) {
    // A remote session (UCX): object bytes are sent straight from the pools, each piece
    // held (pinned head, detached I/O buffer) until the transport is done with it.
    per->lends = true;
    Lender& l = per->lender;
    l.max_loans = kMaxLoansPerSession * 4;
    l.max_buffers = std::max<size_t>(1, store_->buffers().count() / 4);
  }
  GOBLIN_LOG_INFO(kLog, "client {} connected: '{}' pid {}", session.id(), session.name(),
                  session.pid());
}

void CoreService::OnClose(reactor::Session& session) {
  ++counters_.sessions_closed;
  auto node = sessions_.extract(session.id());  // (its state goes at the end)
  if (node.empty()) return;                     // (never opened)
  PerSession& per = *node.mapped();
  session.set_handler_data(nullptr);
  DropSubscribers(session);
  if (store_ != nullptr) {
    for (auto it = uploads_.begin(); it != uploads_.end();) {
      if (it->second.session == session.id()) {
        if (it->second.failed.ok()) store_->Abort(it->first);
        it = uploads_.erase(it);
      } else {
        ++it;
      }
    }
    for (Download& d : per.downloads) Unpause(d);
    per.downloads.clear();  // the stream releases what it holds
    per.lender.paused.clear();
    ReplayParked();  // (its own parked gets are dropped; others' fills it reserved ended)
    describes_.remove_if([&](const PendingDescribe& p) { return p.session == session.id(); });
    if (per.lends) {
      per.lender.loans.ForEach([&](const Lent& lent) { ReleaseLent(lent); });
      per.lender.loans.Clear();
      per.lends = false;
    }
  }
  GOBLIN_LOG_INFO(kLog, "client {} disconnected", session.id());
}

bool CoreService::Send(reactor::Session& session, size_t n) {
  if (n == 0) {
    GOBLIN_LOG_ERROR(kLog, "a reply did not fit the encoder buffer (a bug)");
    return false;
  }
  switch (session.Send({out_.data(), n})) {
    case reactor::SendOutcome::kSent:
    case reactor::SendOutcome::kQueued:
      return true;
    case reactor::SendOutcome::kTooLarge:
      GOBLIN_LOG_ERROR(kLog, "a {}-byte reply does not fit client {}'s ring", n, session.id());
      session.Close();
      return false;
    case reactor::SendOutcome::kOverLimit:
      GOBLIN_LOG_WARN(kLog, "client {} does not read its replies; dropping it", session.id());
      session.Close();
      return false;
  }
  return false;
}

void CoreService::SendError(reactor::Session& session, uint64_t correlation_id, uint16_t code,
                            std::string_view text) {
  wire::ErrorEncoder e(out_.data(), out_.size());
  e.set_correlation_id(correlation_id)
      .set_code(static_cast<wire::ErrorCode>(code))
      .set_text(text.substr(0, 1024));
  ++counters_.errors_sent;
  Send(session, e.Finish());
}

void CoreService::SendMalformed(reactor::Session& session, std::string_view what,
                                sbe::DecodeError e) {
  ++counters_.malformed;
  SendError(session, 0, static_cast<uint16_t>(wire::ErrorCode::kInvalidArgument),
            fmt::format("{}: {}", what, sbe::DecodeErrorName(e)));
}

void CoreService::SendStatusError(reactor::Session& session, uint64_t correlation_id,
                                  const Status& s) {
  SendError(session, correlation_id, static_cast<uint16_t>(ToWire(s.code())), s.ToString());
}

void CoreService::OnMessage(reactor::Session& session, std::span<const uint8_t> msg) {
  sbe::MessageHeader h;
  if (!sbe::MessageHeader::Read(msg, &h) || h.schema_id != wire::kSchemaId) {
    ++counters_.malformed;
    SendError(session, 0, static_cast<uint16_t>(wire::ErrorCode::kInvalidArgument),
              "not a Goblin SBE message");
    return;
  }
  if (h.template_id == wire::PingDecoder::kTemplateId) {
    wire::PingDecoder ping;
    if (auto e = ping.WrapBody(msg, h.block_length, h.version); e != sbe::DecodeError::kNone) {
      ++counters_.malformed;
      SendError(session, 0, static_cast<uint16_t>(wire::ErrorCode::kInvalidArgument),
                fmt::format("Ping: {}", sbe::DecodeErrorName(e)));
      return;
    }
    ++counters_.pings;
    wire::PongEncoder pong(out_.data(), out_.size());
    pong.set_correlation_id(ping.correlation_id())
        .set_send_nanos(ping.send_nanos())
        .set_payload(ping.payload());
    Send(session, pong.Finish());
    return;
  }
  switch (h.template_id) {
    case wire::CoreConfigDecoder::kTemplateId:
      return HandleConfig(session, msg, h.block_length, h.version);
    case wire::SubscribeDecoder::kTemplateId:
    case wire::PublishDecoder::kTemplateId:
    case wire::PubsubQueryDecoder::kTemplateId:
      if (shard_ != 0) {
        uint64_t corr =
            msg.size() >= 16 && h.block_length >= 8 ? sbe::Load<uint64_t>(msg.data() + 8) : 0;
        SendError(session, corr, static_cast<uint16_t>(wire::ErrorCode::kWrongShard),
                  fmt::format("pub/sub is served by shard 0, not shard {}", shard_));
        return;
      }
      HandlePubsub(session, h.template_id, msg, h.block_length, h.version);
      return;
    case wire::PutBeginDecoder::kTemplateId:
    case wire::PutDataDecoder::kTemplateId:
    case wire::PutCommitDecoder::kTemplateId:
    case wire::PutAbortDecoder::kTemplateId:
    case wire::PutHeadDecoder::kTemplateId:
    case wire::ObjectHeadDecoder::kTemplateId:
    case wire::ObjectGetDecoder::kTemplateId:
    case wire::ObjectDeleteDecoder::kTemplateId:
    case wire::MapPoolsDecoder::kTemplateId:
    case wire::MapPoolsInPlaceDecoder::kTemplateId:
    case wire::LoanReleaseDecoder::kTemplateId:
    case wire::ObjectPurgeDecoder::kTemplateId:
    case wire::ObjectDescribeDecoder::kTemplateId:
    case wire::ObjectGetCancelDecoder::kTemplateId:
    case wire::ObjectTouchDecoder::kTemplateId:
    case wire::ObjectRefreshDecoder::kTemplateId:
    case wire::ObjectScanDecoder::kTemplateId:
      HandleObject(session, h.template_id, msg, h.block_length, h.version);
      return;
    default: {
      uint64_t corr = 0;  // requests carry their correlation id first
      if (msg.size() >= 16 && h.block_length >= 8) corr = sbe::Load<uint64_t>(msg.data() + 8);
      SendError(session, corr, static_cast<uint16_t>(wire::ErrorCode::kUnimplemented),
                fmt::format("{} is not served by this goblin-core yet",
                            wire::TemplateName(h.template_id)));
      return;
    }
  }
}

void CoreService::HandleConfig(reactor::Session& session, std::span<const uint8_t> msg,
                               uint16_t block_length, uint16_t version) {
  wire::CoreConfigDecoder d;
  if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
    return SendMalformed(session, "CoreConfig", e);
  auto invalid = [&](std::string text) {
    SendError(session, d.correlation_id(), static_cast<uint16_t>(wire::ErrorCode::kInvalidArgument),
              text);
  };
  if (d.name() != "notify-keyspace-events" || keyspace_ == nullptr) {
    return invalid(fmt::format("no setting '{}' in this goblin-core", d.name()));
  }
  if (d.set() != 0) {
    auto classes = KeyspaceEvents::ParseClasses(d.value());
    if (!classes) return invalid("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.");
    keyspace_->set_classes(*classes);
    GOBLIN_LOG_INFO(kLog, "notify-keyspace-events '{}'", KeyspaceEvents::ClassesString(*classes));
  }
  const std::string now = KeyspaceEvents::ClassesString(keyspace_->classes());
  wire::CoreConfigReplyEncoder r(out_.data(), out_.size());
  r.set_correlation_id(d.correlation_id()).set_value(now);
  Send(session, r.Finish());
}

bool CoreService::OwnsKey(reactor::Session& session, uint64_t correlation_id,
                          std::string_view key) {
  if (shard_count_ <= 1) return true;
  const uint16_t owner = ShardOf(key, shard_count_);
  if (owner == shard_) return true;
  SendError(
      session, correlation_id, static_cast<uint16_t>(wire::ErrorCode::kWrongShard),
      fmt::format("key belongs to shard {} of {}, not shard {}", owner, shard_count_, shard_));
  return false;
}

template <typename Encoder>
void CoreService::DescribeHead(Encoder& oi, const reactor::Session& session, uint32_t flags,
                               wire::LookupStatus status, const store::ObjectInfo& info) {
  // A reader that serves heads itself learns where this one is (ring sessions only: the
  // head table is mapped, not read remotely, on this path).
  if ((flags & wire::kGetDescribe) == 0 || status != wire::LookupStatus::kHit || !session.local()) {
    return;
  }
  if (auto p = store_->PublishHead(info.key, info.generation)) {
    oi.set_head_entry(p->first)
        .set_head_stamp(p->second.stamp)
        .set_head_offset(p->second.offset)
        .set_head_length(p->second.length);
  }
}

void CoreService::HandleRead(reactor::Session& session, uint16_t template_id,
                             std::span<const uint8_t> msg, uint16_t block_length, uint16_t version,
                             uint64_t corr) {
  const bool get = template_id == wire::ObjectGetDecoder::kTemplateId;
  std::string_view key;  // (into `msg`, which outlives this call)
  uint64_t offset = 0, length = UINT64_MAX;
  uint32_t flags = 0;
  store::AccessRequest access;  // (fields of schema version 6: null values before it)
  if (get) {
    wire::ObjectGetDecoder d;
    if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
      return SendMalformed(session, "ObjectGet", e);
    key = d.key();
    offset = d.offset();
    length = d.length();
    flags = d.flags();
    access.recache_ns = version < 6 ? 0 : d.recache_nanos();
    access.vivify_ttl_ns = version < 6 ? 0 : d.vivify_ttl_nanos();
  } else {
    wire::ObjectHeadDecoder d;
    if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
      return SendMalformed(session, "ObjectHead", e);
    key = d.key();
    flags = version < 6 ? 0 : d.flags();
    access.recache_ns = version < 6 ? 0 : d.recache_nanos();
    access.vivify_ttl_ns = version < 6 ? 0 : d.vivify_ttl_nanos();
  }
  access.bump = (flags & wire::kGetNoBump) == 0;
  access.vivify = (flags & wire::kGetVivify) != 0;
  access.meta = (flags & wire::kGetMeta) != 0;
  store::AccessMarks marks;
  if (!OwnsKey(session, corr, key)) return;
  PerSession& per = Of(session);
  if (get && per.downloads.size() >= kMaxDownloadsPerSession) {
    return SendError(
        session, corr, static_cast<uint16_t>(wire::ErrorCode::kResourceExhausted),
        fmt::format("more than {} ObjectGets at once on one session", kMaxDownloadsPerSession));
  }
  const bool follow = get && (flags & wire::kGetFollowFill) != 0;
  const bool await_commit =
      follow && (flags & wire::kGetAwaitCommit) != 0 && store_->FillCommitting(key);
  if (await_commit || (follow && store_->FillAwaitingHead(key) &&
                       ((flags & wire::kGetAwaitReserved) != 0 || !store_->Committed(key)))) {
    // Reserved by a cache that is asking its origin: wait for the head it sends (a
    // revalidation's readers read the committed version meanwhile, unless they wait).
    // With kGetAwaitCommit, a fill committing: wait for its record (and generation).
    if (parked_.size() >= kMaxDownloadsPerSession * 4) {
      return SendError(session, corr, static_cast<uint16_t>(wire::ErrorCode::kResourceExhausted),
                       "too many ObjectGets waiting for reserved fills");
    }
    ++counters_.gets_parked;
    parked_.push_back(ParkedGet{session.id(), std::string(key),
                                std::vector<uint8_t>(msg.begin(), msg.end()), block_length, version,
                                await_commit});
    return;
  }
  if (!get) return AnswerHead(session, corr, key, flags, access);
  const bool lend = per.lends && ((flags & wire::kGetLoans) != 0 || session.sends_by_reference());
  const bool in_place = lend && per.lender.in_place && (flags & wire::kGetLoans) != 0;
  const bool first_bytes_wanted = (flags & wire::kGetFirstBytes) != 0;
  wire::LookupStatus status = wire::LookupStatus::kMiss;
  const store::ObjectInfo* info = nullptr;  // (its stream's)
  store::Store::StreamPtr stream;
  {
    // A reader of the pools that takes the first piece in the answer: a range whole in a
    // RAM head is lent from the lookup itself, without a stream or a download.
    const bool lend_head = lend && (flags & wire::kGetLoans) != 0 &&
                           (flags & wire::kGetLoanInAnswer) != 0 &&
                           (in_place || !first_bytes_wanted) && session.queued_bytes() == 0 &&
                           per.lender.loans.size() < per.lender.max_loans;
    auto r = store_->OpenStream(key, offset, length, follow, &access, &marks, lend_head);
    if (!r) return SendStatusError(session, corr, r.error());
    // (a reader in place has even a small object lent: copied into a UCX shared-memory
    // answer, 1 KiB made it a bigger message than the loan, first byte 2.9 against 1.9
    // us here; at its loan limit it gets the first bytes in the answer below instead)
    if (r->lent) {
      return AnswerHeadLent(session, corr, *r->lent, marks, first_bytes_wanted && !in_place);
    }
    if (r->status != store::Store::Lookup::kMiss) {
      status = r->status == store::Store::Lookup::kHit ? wire::LookupStatus::kHit
                                                       : wire::LookupStatus::kFilling;
      info = r->info;
      stream = std::move(r->stream);
    }
  }
  // A reader of the pools in place may get the range's first piece lent in the answer.
  if (stream && lend && (flags & wire::kGetLoanInAnswer) != 0 && session.queued_bytes() == 0 &&
      AnswerLent(session, corr, status, *info, stream, in_place, first_bytes_wanted)) {
    return;
  }
  wire::ObjectInfoEncoder oi(out_.data(), out_.size());
  oi.set_correlation_id(corr).set_status(status);
  if (info) {
    SetObject(oi, *info, marks, session);
    if (offset == 0) DescribeHead(oi, session, flags, status, *info);
  }
  // The first bytes in the answer itself (kGetFirstBytes): peeked last, after every other
  // store call (the span is valid until the next one).
  uint64_t first_n = 0;
  bool first_ends = false;
  uint64_t first_start = 0;
  // Not while replies wait for the ring already: a reader that asks for many objects at
  // once (a gateway's pipelined gets) would otherwise have each one's first bytes queued
  // here, past its output limit; they come as ObjectData instead, as its ring drains.
  if (stream && (flags & wire::kGetFirstBytes) != 0 && session.queued_bytes() == 0) {
    first_start = MonotonicNanos();  // (as a Download's started_ns: from here to its bytes)
    std::span<const uint8_t> bytes;
    auto step = stream->Peek(&bytes);
    if (step && *step == store::Store::Stream::Step::kData && !bytes.empty()) {
      first_n = FirstInlineBytes(session, bytes.size());
      first_ends = stream->end() != UINT64_MAX && stream->position() + first_n == stream->end();
      // A reader that maps the pools in place gets a Loan of the whole piece right behind
      // a small answer instead (a copy of the first bytes into the answer costs more than
      // the Loan); unless they are the whole range: then one message is all there is.
      if (!first_ends && in_place) first_n = 0;
      if (first_n > 0) {
        oi.set_first_bytes_end(first_ends ? 1 : 0).set_first_bytes(bytes.first(first_n));
      }
    }
  }
  if (!Send(session, oi.Finish()) || !stream) return;
  ++counters_.gets;
  if (first_n > 0) {
    stream->Consume(first_n);
    counters_.bytes_out += first_n;
    histograms_.get_first_piece.Record(MonotonicNanos() - first_start);
    if (first_ends) return;
  }
  Download& d = StartDownload(session, corr, stream, lend, in_place);
  d.first_sent = first_n > 0;
  d.started_ns = first_n > 0 ? 0 : MonotonicNanos();
  WatchDownload(session, d);
}

void CoreService::HandleObject(reactor::Session& session, uint16_t template_id,
                               std::span<const uint8_t> msg, uint16_t block_length,
                               uint16_t version) {
  auto bad = [&](std::string_view what, sbe::DecodeError e) { SendMalformed(session, what, e); };
  uint64_t corr = msg.size() >= 16 && block_length >= 8 ? sbe::Load<uint64_t>(msg.data() + 8) : 0;
  if (store_ == nullptr && template_id != wire::PutDataDecoder::kTemplateId) {
    SendError(session, corr, static_cast<uint16_t>(wire::ErrorCode::kFailedPrecondition),
              "this goblin-core has no disk tier (start it with --ssd-dir DIR)");
    return;
  }
  switch (template_id) {
    case wire::PutBeginDecoder::kTemplateId: {
      wire::PutBeginDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("PutBegin", e);
      if (!OwnsKey(session, d.correlation_id(), d.key())) return;
      const bool reserve = (d.flags() & wire::kPutReserve) != 0;
      uint32_t flags = d.flags();
      if (reserve) {
        // Committed since the client looked (its fill was committing): read that instead;
        // unless it is the version the client revalidates (kPutIfGeneration).
        const uint64_t current = store_->CommittedGeneration(d.key());
        if (current == 0) flags &= ~wire::kPutIfGeneration;  // (gone meanwhile: a plain miss)
        const bool revalidation =
            (flags & wire::kPutIfGeneration) != 0 && current == d.if_generation();
        if (current != 0 && !revalidation) {
          wire::FillLeaseEncoder f(out_.data(), out_.size());
          f.set_correlation_id(d.correlation_id())
              .set_put_id(0)
              .set_state(wire::LeaseState::kInProgress);
          Send(session, f.Finish());
          return;
        }
      }
      store::Store::PutCondition cond;
      using CondKind = store::Store::PutCondition::Kind;
      if ((flags & wire::kPutIfGeneration) != 0) {
        cond = {CondKind::kGeneration, d.if_generation()};
      } else if ((d.flags() & wire::kPutIfPresent) != 0) {
        cond.kind = CondKind::kPresent;
      } else if ((d.flags() & wire::kPutIfAbsent) != 0) {
        cond.kind = CondKind::kAbsent;
      }
      cond.keep_expiry = (d.flags() & wire::kPutKeepExpiry) != 0;
      cond.stale_if_older = (d.flags() & wire::kPutStaleIfOlder) != 0;
      cond.keep_marks = (d.flags() & wire::kPutKeepMarks) != 0;
      auto r =
          store_->BeginFill(d.key(), d.ttl_nanos(), d.metadata(), d.expected_size(), reserve, cond);
      if (!r) return SendStatusError(session, d.correlation_id(), r.error());
      wire::FillLeaseEncoder f(out_.data(), out_.size());
      bool granted = r->first == store::Store::FillStart::kGranted;
      if (granted && !reserve && version >= 7 && !d.tags().empty()) {
        (void)store_->SetFillTags(r->second, d.tags());  // (the fill is ours: it is there)
      }
      if (granted && (d.flags() & wire::kPutVariant) != 0) {
        if (auto v = store_->SetFillVariant(r->second); !v) {  // (a key without its NUL)
          store_->Abort(r->second);
          return SendStatusError(session, d.correlation_id(), v.error());
        }
      }
      if (granted && reserve) ++counters_.reservations;
      f.set_correlation_id(d.correlation_id())
          .set_put_id(granted ? r->second : 0)
          .set_state(granted ? wire::LeaseState::kGranted : wire::LeaseState::kInProgress);
      if (granted) {
        uploads_[r->second] =
            Upload{session.id(), d.correlation_id(), 0, std::string(d.key()), Status()};
      }
      Send(session, f.Finish());
      return;
    }
    case wire::PutDataDecoder::kTemplateId: {
      wire::PutDataDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("PutData", e);
      return AppendPutData(session, d.put_id(), d.offset(), d.bytes_bytes());
    }
    case wire::PutCommitDecoder::kTemplateId: {
      wire::PutCommitDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("PutCommit", e);
      auto it = OwnUpload(session, d.put_id(), "PutCommit", d.correlation_id());
      if (it == uploads_.end()) return;
      Status failed = it->second.failed;
      uploads_.erase(it);
      if (!failed.ok()) return SendStatusError(session, d.correlation_id(), failed);
      const uint64_t t0 = MonotonicNanos();
      // The loop does not wait: the last write is started, the object becomes visible when
      // its writes land, and PutResult goes once its record is durable (group commit).
      auto r = store_->CommitAsync(
          d.put_id(), d.total_size(),
          [this, sid = session.id(), corr = d.correlation_id(), put = d.put_id(),
           size = d.total_size(), t0](Result<uint64_t> gen) {
            histograms_.put_commit.Record(MonotonicNanos() - t0);
            reactor::Session* s = SessionById(sid);
            if (s == nullptr) return;
            if (!gen) return SendStatusError(*s, corr, gen.error());
            ++counters_.puts;
            wire::PutResultEncoder p(out_.data(), out_.size());
            p.set_correlation_id(corr).set_put_id(put);
            p.set_code(wire::ErrorCode::kOk).set_generation(*gen).set_size(size);
            Send(*s, p.Finish());
          });
      if (!r) return SendStatusError(session, d.correlation_id(), r.error());
      return;
    }
    case wire::PutAbortDecoder::kTemplateId: {
      wire::PutAbortDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("PutAbort", e);
      if (auto it = uploads_.find(d.put_id());
          it != uploads_.end() && it->second.session == session.id()) {
        store_->Abort(d.put_id());
        uploads_.erase(it);
        ReplayParked();
      }
      return;
    }
    case wire::PutHeadDecoder::kTemplateId: {
      wire::PutHeadDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("PutHead", e);
      auto it = OwnUpload(session, d.put_id(), "PutHead", 0);
      if (it == uploads_.end()) return;
      Upload& up = it->second;
      if (!up.failed.ok()) return;
      const std::string key = up.key;
      if ((d.flags() & wire::kHeadUncacheable) != 0) {
        store_->Abort(d.put_id());  // nothing to store: whoever waits asks for itself
        uploads_.erase(it);
        return ReplayParked(key);
      }
      if (auto r = store_->SetFillHead(d.put_id(), d.expected_size(), d.ttl_nanos(), d.metadata());
          !r) {
        store_->Abort(d.put_id());
        ReplayParked(key);  // refused (too large): its followers read a miss
        FailUpload(up, r.error());
        return;
      }
      if (version >= 7 && !d.tags().empty()) (void)store_->SetFillTags(d.put_id(), d.tags());
      ReplayParked();  // its followers now open it
      return;
    }
    case wire::ObjectHeadDecoder::kTemplateId:
    case wire::ObjectGetDecoder::kTemplateId:
      return HandleRead(session, template_id, msg, block_length, version, corr);
    case wire::ObjectPurgeDecoder::kTemplateId: {
      wire::ObjectPurgeDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("ObjectPurge", e);
      const bool soft = version >= 7 && (d.flags() & wire::kPurgeSoft) != 0;
      if (version >= 7 && (d.flags() & wire::kPurgeTag) != 0) {
        // By tag: the keys now, purged in slices by OnPoll (a tag of 100,000 objects must
        // not hold the shard's loop for the whole purge).
        TagPurge& p = tag_purges_.emplace_back();
        p.session = session.id();
        p.corr = d.correlation_id();
        p.tag = std::string(d.prefix());
        p.soft = soft;
        p.members = store_->TagMembers(d.prefix());
        return;
      }
      auto r = soft ? store_->InvalidatePrefix(d.prefix()) : store_->DeletePrefix(d.prefix());
      if (!r) return SendStatusError(session, d.correlation_id(), r.error());
      GOBLIN_LOG_INFO(kLog, "{} {} objects with prefix '{}'", soft ? "soft-purged" : "purged", *r,
                      d.prefix());
      store_->WhenDurable(
          [this, sid = session.id(), corr = d.correlation_id(), n = *r](const Status& st) {
            reactor::Session* s = SessionById(sid);
            if (s == nullptr) return;
            if (!st.ok()) return SendStatusError(*s, corr, st);
            wire::PurgeAckEncoder a(out_.data(), out_.size());
            a.set_correlation_id(corr).set_deleted(n);
            Send(*s, a.Finish());
          });
      return;
    }
    case wire::ObjectDescribeDecoder::kTemplateId: {
      wire::ObjectDescribeDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("ObjectDescribe", e);
      if (!OwnsKey(session, d.correlation_id(), d.key())) return;
      store::Store::StreamPtr refill;
      auto r = store_->Describe(d.key(), store::Store::DiskRead::kAsync, &refill);
      if (!r) return SendStatusError(session, d.correlation_id(), r.error());
      if (refill) {  // the head is on disk only: read it asynchronously, answer then
        describes_.push_back(
            {session.id(), d.correlation_id(), std::string(d.key()), std::move(refill)});
        PendingDescribe* p = &describes_.back();
        p->refill->SetReadyCallback([this, p] {
          p->ready = true;
          describes_ready_ = true;
        });
        describes_ready_ = true;  // (the first Peek starts the read)
        return;
      }
      return SendDescription(session, d.correlation_id(), *r);
    }
    case wire::ObjectGetCancelDecoder::kTemplateId: {
      wire::ObjectGetCancelDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("ObjectGetCancel", e);
      const uint32_t flags = d.flags() == UINT32_MAX ? 0 : d.flags();  // (< version 11)
      return CancelDownload(session, d.correlation_id(), flags);
    }
    case wire::MapPoolsDecoder::kTemplateId: {
      wire::MapPoolsDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("MapPools", e);
      return HandleMapPools(session, d.correlation_id());
    }
    case wire::MapPoolsInPlaceDecoder::kTemplateId: {
      wire::MapPoolsInPlaceDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("MapPoolsInPlace", e);
      return HandleMapPoolsInPlace(session, d.correlation_id(), d.boot_id());
    }
    case wire::LoanReleaseDecoder::kTemplateId: {
      wire::LoanReleaseDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("LoanRelease", e);
      return HandleLoanRelease(session, d.loan_id());
    }
    case wire::ObjectTouchDecoder::kTemplateId: {
      wire::ObjectTouchDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("ObjectTouch", e);
      if (!OwnsKey(session, d.correlation_id(), d.key())) return;
      store::TouchCondition cond;
      const uint32_t tflags = version < 5 ? 0 : d.flags();  // (null before schema version 5)
      cond.if_no_expiry = (tflags & wire::kTouchIfNoExpiry) != 0;
      cond.if_expiry = (tflags & wire::kTouchIfExpiry) != 0;
      cond.if_later = (tflags & wire::kTouchIfLater) != 0;
      cond.if_sooner = (tflags & wire::kTouchIfSooner) != 0;
      cond.delete_now = (tflags & wire::kTouchDelete) != 0;
      cond.no_bump = (tflags & wire::kTouchNoBump) != 0;
      auto r = store_->Touch(d.key(), cond.delete_now ? 1 : d.ttl_nanos(), cond);
      if (!r) return SendStatusError(session, d.correlation_id(), r.error());
      return AckTouchWhenDurable(session, d.correlation_id(), *r);
    }
    case wire::ObjectRefreshDecoder::kTemplateId: {
      wire::ObjectRefreshDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("ObjectRefresh", e);
      if (!OwnsKey(session, d.correlation_id(), d.key())) return;
      auto r =
          store_->Refresh(d.key(), d.if_generation(), std::string(d.metadata()), d.ttl_nanos());
      if (!r) return SendStatusError(session, d.correlation_id(), r.error());
      return AckTouchWhenDurable(session, d.correlation_id(), *r);
    }
    case wire::ObjectDeleteDecoder::kTemplateId: {
      wire::ObjectDeleteDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("ObjectDelete", e);
      if (!OwnsKey(session, d.correlation_id(), d.key())) return;
      // (fields a client of an older schema does not send read as SBE's null values)
      const uint32_t dflags = version < 6 ? 0 : d.flags();
      const uint64_t if_gen = version < 5 ? 0 : d.if_generation();
      Result<bool> r = false;
      if ((dflags & wire::kDeleteInvalidate) != 0) {
        const uint64_t ttl = d.ttl_nanos();
        auto inv = store_->Invalidate(d.key(), if_gen, (dflags & wire::kDeleteSetTtl) != 0, ttl);
        if (!inv) return SendStatusError(session, d.correlation_id(), inv.error());
        r = *inv != 0;
      } else {
        r = if_gen != 0 ? store_->DeleteIfGeneration(d.key(), if_gen) : store_->Delete(d.key());
      }
      if (!r) return SendStatusError(session, d.correlation_id(), r.error());
      store_->WhenDurable(
          [this, sid = session.id(), corr = d.correlation_id(), deleted = *r](const Status& st) {
            reactor::Session* s = SessionById(sid);
            if (s == nullptr) return;
            if (!st.ok()) return SendStatusError(*s, corr, st);
            wire::DeleteAckEncoder a(out_.data(), out_.size());
            a.set_correlation_id(corr).set_deleted(deleted ? 1 : 0);
            Send(*s, a.Finish());
          });
      return;
    }
    case wire::ObjectScanDecoder::kTemplateId: {
      wire::ObjectScanDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("ObjectScan", e);
      ++counters_.scans;
      store::Store::ScanPage page;
      page.next_cursor = 0;
      // (count 0: the object count only; a page's keys fit one message)
      if (d.count() > 0) {
        const size_t room = std::min<size_t>(session.max_message(), out_.size()) - 128;
        page = store_->Scan(d.cursor(), std::min<uint32_t>(d.count(), 100000), room);
      }
      wire::ScanReplyEncoder a(out_.data(), out_.size());
      a.set_correlation_id(d.correlation_id())
          .set_next_cursor(page.next_cursor)
          .set_objects(store_->stats().objects)
          .set_expiring(store_->expiring_objects())
          .set_ram_bytes(store_->pool().stats().bytes_reserved)
          .set_ram_limit(store_->pool().stats().pool_bytes)
          .set_expired(store_->stats().expired)
          .set_evicted(store_->stats().evicted);
      auto g = a.BeginKeys();
      for (const std::string& k : page.keys) g.Next().set_key(k);
      Send(session, a.Finish());
      return;
    }
    default:
      return;
  }
}

namespace {
// A read-only fd of the same memory (a client cannot map it writable).
Result<UniqueFd> ReopenReadOnly(int fd) {
  std::string path = fmt::format("/proc/self/fd/{}", fd);
  int ro = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ro < 0) return Err(ErrnoStatus(fmt::format("reopen {} read-only", path), errno));
  return UniqueFd(ro);
}
}  // namespace

VoidResult CoreService::OpenReadOnlyPools() {
  if (ro_pool_fd_) return {};
  GOBLIN_ASSIGN_OR_RETURN(auto p, ReopenReadOnly(store_->pool().fd()));
  GOBLIN_ASSIGN_OR_RETURN(auto b, ReopenReadOnly(store_->buffers().fd()));
  GOBLIN_ASSIGN_OR_RETURN(auto t, ReopenReadOnly(store_->head_table().fd()));
  ro_pool_fd_ = std::move(p);
  ro_io_fd_ = std::move(b);
  ro_table_fd_ = std::move(t);
  return {};
}

void CoreService::HandleMapPools(reactor::Session& session, uint64_t correlation_id) {
  if (!session.local()) return HandleRemotePools(session, correlation_id);
  if (auto r = OpenReadOnlyPools(); !r) return SendStatusError(session, correlation_id, r.error());
  wire::PoolMapEncoder m(out_.data(), out_.size());
  m.set_correlation_id(correlation_id);
  auto g = m.BeginPools();
  g.Next().set_pool(wire::PoolKind::kHead).set_bytes(store_->pool().size());
  g.Next()
      .set_pool(wire::PoolKind::kIo)
      .set_bytes(uint64_t{store_->buffers().count()} * store_->buffers().buffer_bytes());
  g.Next().set_pool(wire::PoolKind::kHeadTable).set_bytes(store_->head_table().bytes());
  // (writable: a reader that serves a head itself marks it read there)
  g.Next().set_pool(wire::PoolKind::kTouchTable).set_bytes(store_->head_table().touch_bytes());
  size_t n = m.Finish();
  int fds[4] = {ro_pool_fd_.get(), ro_io_fd_.get(), ro_table_fd_.get(),
                store_->head_table().touch_fd()};
  // The fds travel on the session socket first; the ring reply tells the client to read them.
  if (auto r = session.SendSideFrame({out_.data(), n}, fds); !r) {
    return SendStatusError(session, correlation_id, r.error());
  }
  PerSession& per = Of(session);
  per.lends = true;
  Lender& lender = per.lender;
  bool gateway = session.peer_kind() == static_cast<uint8_t>(wire::PeerKind::kGateway);
  lender.max_loans = gateway ? kMaxLoansPerGateway : kMaxLoansPerSession;
  lender.max_buffers =
      gateway ? std::max<size_t>(1, store_->buffers().count() / 2) : kMaxLoansPerSession;
  Send(session, n);
}

// A UCX client on this host maps the pools through /proc/PID/fd (no fds travel over UCX);
// from then on its gets flagged kGetLoans are lent like a ring session's, read in place.
void CoreService::HandleMapPoolsInPlace(reactor::Session& session, uint64_t correlation_id,
                                        std::string_view boot_id) {
  static const std::string kBootId = HostBootId();
  PerSession& per = Of(session);
  if (session.local() || !per.lends) {
    return SendError(session, correlation_id,
                     static_cast<uint16_t>(wire::ErrorCode::kFailedPrecondition),
                     "MapPoolsInPlace is for sessions of a plane without fd passing");
  }
  if (kBootId.empty() || boot_id != kBootId) {
    return SendError(session, correlation_id,
                     static_cast<uint16_t>(wire::ErrorCode::kUnimplemented),
                     "the client is not on this goblin-core's host");
  }
  if (auto r = OpenReadOnlyPools(); !r) return SendStatusError(session, correlation_id, r.error());
  wire::ProcessPoolsEncoder m(out_.data(), out_.size());
  m.set_correlation_id(correlation_id).set_pid(static_cast<uint32_t>(getpid()));
  auto g = m.BeginPools();
  const uint64_t io_bytes = uint64_t{store_->buffers().count()} * store_->buffers().buffer_bytes();
  for (auto [kind, fd, bytes] :
       {std::tuple{wire::PoolKind::kHead, ro_pool_fd_.get(), uint64_t{store_->pool().size()}},
        std::tuple{wire::PoolKind::kIo, ro_io_fd_.get(), io_bytes}}) {
    struct stat st {};
    if (fstat(fd, &st) != 0) {
      return SendStatusError(session, correlation_id, ErrnoStatus("fstat(pool)", errno));
    }
    g.Next()
        .set_pool(kind)
        .set_fd(fd)
        .set_bytes(bytes)
        .set_device(static_cast<uint64_t>(st.st_dev))
        .set_inode(static_cast<uint64_t>(st.st_ino));
  }
  per.lender.in_place = true;
  Send(session, m.Finish());
}

// A remote session gets each pool's address and a key for one-sided reads instead of fds.
void CoreService::HandleRemotePools(reactor::Session& session, uint64_t correlation_id) {
  const uint8_t* head = store_->pool().data();
  const uint8_t* io = store_->buffers().Buffer(0);
  uint64_t head_bytes = store_->pool().size();
  uint64_t io_bytes = uint64_t{store_->buffers().count()} * store_->buffers().buffer_bytes();
  auto head_key = session.PackRemoteKey(head, head_bytes);
  if (!head_key) return SendStatusError(session, correlation_id, head_key.error());
  auto io_key = session.PackRemoteKey(io, io_bytes);
  if (!io_key) return SendStatusError(session, correlation_id, io_key.error());
  const uint8_t* table = store_->head_table().data();
  auto table_key = session.PackRemoteKey(table, store_->head_table().bytes());
  if (!table_key) return SendStatusError(session, correlation_id, table_key.error());
  wire::RemotePoolsEncoder m(out_.data(), out_.size());
  m.set_correlation_id(correlation_id);
  auto g = m.BeginPools();
  g.Next()
      .set_pool(wire::PoolKind::kHead)
      .set_address(reinterpret_cast<uintptr_t>(head))
      .set_bytes(head_bytes)
      .set_rkey(*head_key);
  g.Next()
      .set_pool(wire::PoolKind::kIo)
      .set_address(reinterpret_cast<uintptr_t>(io))
      .set_bytes(io_bytes)
      .set_rkey(*io_key);
  g.Next()
      .set_pool(wire::PoolKind::kHeadTable)
      .set_address(reinterpret_cast<uintptr_t>(table))
      .set_bytes(store_->head_table().bytes())
      .set_rkey(*table_key);
  Send(session, m.Finish());
}

void CoreService::ReleaseLent(const Lent& l) {
  if (l.tally) --l.tally->out;
  if (l.buffer != UINT32_MAX) {
    store_->ReleaseBuffer(l.buffer);
  } else {
    store_->ReleasePin(l.pin);
  }
}

void CoreService::AckTouchWhenDurable(reactor::Session& session, uint64_t corr,
                                      std::optional<store::Store::Touched> t) {
  store_->WhenDurable([this, sid = session.id(), corr, t](const Status& st) {
    reactor::Session* s = SessionById(sid);
    if (s == nullptr) return;
    if (!st.ok()) return SendStatusError(*s, corr, st);
    wire::TouchAckEncoder a(out_.data(), out_.size());
    a.set_correlation_id(corr)
        .set_found(t ? 1 : 0)
        .set_generation(t ? t->generation : 0)
        .set_expires_nanos(t ? t->expires_unix_ns : 0);
    Send(*s, a.Finish());
  });
}

void CoreService::HandleLoanRelease(reactor::Session& session, uint64_t loan_id, bool in_transit) {
  PerSession& per = Of(session);
  if (!per.lends) return;
  Lender& l = per.lender;
  const Lent* lent = l.loans.Find(loan_id);
  // (unknown, released twice, taken back, or a send's still under way: ignored)
  if (lent == nullptr || lent->in_transit != in_transit) return;
  if (lent->buffer != UINT32_MAX) --l.buffers;
  ReleaseLent(*lent);
  // Its own download, if it waited for one of its loans (before the slot and, maybe, the
  // tally's last owner go); then the session has room for one more loan.
  if (LoanTally* t = lent->tally.get(); t && t->paused && t->pause == Pause::kOwnLimit) {
    Wake(session, *t);
  }
  l.loans.Remove(loan_id);
  WakeFirstPaused(session, l);
}

void CoreService::TakeBackLoans(reactor::Session& session, uint64_t correlation_id) {
  PerSession& per = Of(session);
  if (!per.lends) return;
  Lender& l = per.lender;
  const size_t n = l.loans.RemoveIf([&](const Lent& lent) {
    if (lent.correlation_id != correlation_id || lent.in_transit) return false;
    if (lent.buffer != UINT32_MAX) --l.buffers;
    ReleaseLent(lent);
    return true;
  });
  counters_.loans_taken_back += n;
  for (size_t i = 0; i < n; ++i) WakeFirstPaused(session, l);  // (room for n more loans)
}

bool CoreService::PassOnRoom(reactor::Session& session, Lender& lender) {
  return !lender.paused.empty() && lender.loans.size() < lender.max_loans &&
         WakeFirstPaused(session, lender);
}

void CoreService::PauseLending(Lender& lender, Download& d, Pause why) {
  ++counters_.loan_pauses;
  d.tally->pause = why;
  d.tally->paused = &d;
  if (why == Pause::kSessionLimit && !d.tally->queued) {
    d.tally->queued = true;
    lender.paused.push_back(d.tally);
  }
}

void CoreService::Wake(reactor::Session& session, LoanTally& t) {
  t.paused->ready = true;
  t.paused = nullptr;
  t.pause = Pause::kNone;
  session.WantWritable(true);
}

bool CoreService::WakeFirstPaused(reactor::Session& session, Lender& lender) {
  while (!lender.paused.empty()) {  // (entries woken otherwise or ended are dropped)
    std::shared_ptr<LoanTally> t = std::move(lender.paused.front());
    lender.paused.pop_front();
    t->queued = false;
    if (t->paused != nullptr && t->pause == Pause::kSessionLimit) {
      Wake(session, *t);
      return true;
    }
  }
  return false;
}

std::optional<uint64_t> CoreService::Hold(reactor::Session& session, Download& d, bool last_piece,
                                          bool in_transit) {
  Lender& lender = Of(session).lender;
  store::Store::Stream& st = *d.stream;
  bool head = st.where() == store::Store::Stream::Where::kHeadPool;
  if (!d.tally) d.tally = std::make_shared<LoanTally>();
  if (d.tally->out >= kMaxLoansPerDownload) {
    PauseLending(lender, d, Pause::kOwnLimit);
    return std::nullopt;
  }
  if (lender.loans.size() >= lender.max_loans || (!head && lender.buffers >= lender.max_buffers)) {
    PauseLending(lender, d, Pause::kSessionLimit);
    return std::nullopt;
  }
  Lent lent;
  lent.in_transit = in_transit;
  lent.correlation_id = d.correlation_id;
  lent.tally = d.tally;
  ++d.tally->out;
  if (head) {
    // (the range's last piece: the stream's own pin goes with it; it reads nothing more)
    lent.pin = last_piece && st.loan().id != 0 ? st.TakePin() : store_->Pin(st.loan());
  } else {
    lent.buffer = st.DetachChunk();
    ++lender.buffers;
  }
  return lender.loans.Add(std::move(lent));
}

std::optional<CoreService::LentPiece> CoreService::LendPiece(reactor::Session& session, Download& d,
                                                             std::span<const uint8_t> bytes) {
  store::Store::Stream& st = *d.stream;
  bool head = st.where() == store::Store::Stream::Where::kHeadPool;
  const uint8_t* base = head ? store_->pool().data() : store_->buffers().Buffer(0);
  LentPiece p;
  p.head = head;
  p.pool_offset = static_cast<uint64_t>(bytes.data() - base);
  p.last = st.end() != UINT64_MAX && st.position() + bytes.size() == st.end();
  // (the bytes stay where they are: a pin, or a detached buffer)
  auto held = Hold(session, d, p.last);
  if (!held) return std::nullopt;
  p.loan_id = *held;
  p.object_offset = st.position();
  p.length = static_cast<uint32_t>(bytes.size());
  p.stable = head && st.stable();
  st.Consume(bytes.size());
  ++counters_.loans;
  counters_.bytes_lent += bytes.size();
  return p;
}

uint64_t CoreService::FirstInlineBytes(const reactor::Session& session, uint64_t available) {
  // (within the session's largest message, beside metadata of up to half of it)
  return std::min<uint64_t>({available, kFirstInlineBytes, session.max_message() / 4});
}

CoreService::Download& CoreService::StartDownload(reactor::Session& session, uint64_t corr,
                                                  store::Store::StreamPtr& stream, bool lend,
                                                  bool in_place) {
  Download& d = NewDownload(Of(session).downloads);
  d.correlation_id = corr;
  d.stream = std::move(stream);
  d.lend = lend;
  d.in_place = in_place;
  return d;
}

void CoreService::EndLastDownload(reactor::Session& session) {
  Downloads& list = Of(session).downloads;
  EndDownload(list, std::prev(list.end()));
}

void CoreService::WatchDownload(reactor::Session& session, Download& d) {
  reactor::Session* s = &session;
  Download* dp = &d;
  d.stream->SetReadyCallback([s, dp] {
    dp->ready = true;
    s->WantWritable(true);
  });
  session.WantWritable(true);
}

bool CoreService::AnswerLent(reactor::Session& session, uint64_t corr, wire::LookupStatus status,
                             const store::ObjectInfo& info, store::Store::StreamPtr& stream,
                             bool in_place, bool first_bytes_wanted) {
  const uint64_t start = MonotonicNanos();
  std::span<const uint8_t> bytes;
  auto step = stream->Peek(&bytes);
  if (!step || *step != store::Store::Stream::Step::kData || bytes.empty() ||
      stream->where() == store::Store::Stream::Where::kPrivate) {
    return false;  // (nothing in memory now: the ObjectInfo, and the stream's pieces later)
  }
  // Where the first bytes are copied into an ObjectInfo instead (a reader not in place; a
  // range they cover whole in an I/O buffer: one message, and the buffer free at once), they
  // are. A reader in place has a range in the head pool lent, small or not (as
  // AnswerHeadLent).
  if (first_bytes_wanted &&
      (!in_place ||
       (stream->where() == store::Store::Stream::Where::kIoBuffer && stream->end() != UINT64_MAX &&
        stream->position() + FirstInlineBytes(session, bytes.size()) == stream->end())))
    return false;
  Download& d = StartDownload(session, corr, stream, /*lend=*/true, in_place);
  auto p = LendPiece(session, d, bytes);
  if (!p) {  // at the session's loan limit: answered as usual, lent when a loan comes back
    stream = std::move(d.stream);
    EndLastDownload(session);
    return false;
  }
  const size_t n = EncodeLent(session, corr, status, info, *p);
  const bool sent = Send(session, n);
  histograms_.get_first_piece.Record(MonotonicNanos() - start);  // (read after the send)
  counters_.gets += sent ? 1 : 0;
  if (!sent || p->last) {  // (what it lent stays out until released, or the session ends)
    EndLastDownload(session);
    return true;
  }
  d.first_sent = true;
  WatchDownload(session, d);
  return true;
}

template <typename Object>
size_t CoreService::EncodeLent(const reactor::Session& session, uint64_t corr,
                               wire::LookupStatus status, const Object& obj, const LentPiece& p) {
  return wire::ObjectLentEncoder(out_.data(), out_.size())
      .set_correlation_id(corr)
      .set_status(status)
      .set_object_size(obj.size)
      .set_generation(obj.generation)
      .set_created_nanos(obj.created_unix_ns)
      .set_expires_nanos(obj.expires_unix_ns)
      .set_loan_id(p.loan_id)
      .set_pool(p.head ? wire::PoolKind::kHead : wire::PoolKind::kIo)
      .set_pool_offset(p.pool_offset)
      .set_length(p.length)
      .set_last(p.last ? 1 : 0)
      .set_metadata(std::string_view(obj.metadata).substr(0, session.max_message() / 2))
      .Finish();
}

void CoreService::AnswerHead(reactor::Session& session, uint64_t corr, std::string_view key,
                             uint32_t flags, const store::AccessRequest& access) {
  store::AccessMarks marks;
  auto r = store_->Head(key, &access, &marks);
  if (!r) return SendStatusError(session, corr, r.error());
  wire::ObjectInfoEncoder oi(out_.data(), out_.size());
  oi.set_correlation_id(corr).set_status(*r ? wire::LookupStatus::kHit : wire::LookupStatus::kMiss);
  if (*r) {
    SetObject(oi, **r, marks, session);
    DescribeHead(oi, session, flags, wire::LookupStatus::kHit, **r);
  }
  Send(session, oi.Finish());
}

void CoreService::AnswerHeadLent(reactor::Session& session, uint64_t corr,
                                 const store::Store::HeadLoan& h, const store::AccessMarks& marks,
                                 bool first_bytes_wanted) {
  // (timed one get in kTimedEvery: two clock reads are a fifth of this path's work)
  const bool timed = (head_lent_answers_++ % kTimedEvery) == 0;
  const uint64_t start = timed ? MonotonicNanos() : 0;
  const store::ObjectRecord& rec = *h.record;
  const uint64_t n = h.bytes.size();
  bool sent;
  if (first_bytes_wanted && FirstInlineBytes(session, n) == n) {
    // A range the answer carries whole (a remote reader's small object): one message, and
    // nothing left lent.
    wire::ObjectInfoEncoder oi(out_.data(), out_.size());
    oi.set_correlation_id(corr).set_status(wire::LookupStatus::kHit);
    SetObject(oi, rec, marks, session);
    sent = Send(session, oi.set_first_bytes_end(1).set_first_bytes(h.bytes).Finish());
    store_->ReleasePin(h.pin);
    counters_.bytes_out += sent ? n : 0;
  } else {
    Lent lent;
    lent.pin = h.pin;
    lent.correlation_id = corr;
    LentPiece p;
    p.loan_id = Of(session).lender.loans.Add(std::move(lent));
    p.pool_offset = static_cast<uint64_t>(h.bytes.data() - store_->pool().data());
    p.length = static_cast<uint32_t>(n);
    p.last = true;
    ++counters_.loans;
    counters_.bytes_lent += n;
    // (not sent: the loan is given back when the session ends)
    sent = Send(session, EncodeLent(session, corr, wire::LookupStatus::kHit, rec, p));
  }
  counters_.gets += sent ? 1 : 0;
  if (timed) histograms_.get_first_piece.Record(MonotonicNanos() - start);  // (after the send)
}

bool CoreService::Lend(reactor::Session& session, Download& d, std::span<const uint8_t> bytes) {
  auto p = LendPiece(session, d, bytes);
  if (!p) return false;
  const store::Store::Stream& st = *d.stream;
  wire::LoanEncoder e(out_.data(), out_.size());
  e.set_correlation_id(d.correlation_id)
      .set_loan_id(p->loan_id)
      .set_generation(st.info().generation)
      .set_object_size(st.end() == UINT64_MAX ? UINT64_MAX : st.info().size)
      .set_last(p->last ? 1 : 0);
  e.BeginSegments()
      .Next()
      .set_pool(p->head ? wire::PoolKind::kHead : wire::PoolKind::kIo)
      .set_pool_offset(p->pool_offset)
      .set_object_offset(p->object_offset)
      .set_length(p->length)
      .set_checksum(0)
      .set_flags(p->stable ? wire::kSegmentStable : 0);
  Send(session, e.Finish());
  return true;
}

std::optional<reactor::SendOutcome> CoreService::SendByReference(reactor::Session& session,
                                                                 Download& d,
                                                                 std::span<const uint8_t> bytes) {
  store::Store::Stream& st = *d.stream;
  const bool last = st.end() != UINT64_MAX && st.position() + bytes.size() == st.end();
  auto held = Hold(session, d, last, /*in_transit=*/true);
  if (!held) return std::nullopt;
  uint64_t token = *held;
  wire::ObjectDataEncoder od(out_.data(), out_.size());
  od.set_correlation_id(d.correlation_id).set_offset(st.position()).set_last(last ? 1 : 0);
  od.set_bytes(std::span<const uint8_t>());  // the bytes travel as the payload
  size_t n = od.Finish();
  st.Consume(bytes.size());
  counters_.bytes_out += bytes.size();
  auto r = session.SendWithPayload({out_.data(), n}, bytes, token);
  if (r.done) HandleLoanRelease(session, token, /*in_transit=*/true);
  return r.outcome;
}

void CoreService::OnPayloadSent(reactor::Session& session, uint64_t token) {
  HandleLoanRelease(session, token, /*in_transit=*/true);
}

int CoreService::max_sleep_ms() const {
  if (!tag_purges_.empty()) return 0;  // (a tag purge is under way: its next slice)
  return store_ ? store_->MillisUntilDue() : -1;
}

std::vector<CoreService::SessionView> CoreService::Sessions() const {
  std::vector<SessionView> out;
  out.reserve(sessions_.size());
  for (const auto& [id, per] : sessions_) {
    SessionView v;
    v.session = per->session;
    v.loans = per->lender.loans.size();
    v.downloads = per->downloads.size();
    if (auto p = sub_ids_.find(id); p != sub_ids_.end()) v.subscribers = p->second.size();
    out.push_back(v);
  }
  std::sort(out.begin(), out.end(), [](const SessionView& a, const SessionView& b) {
    return a.session->id() < b.session->id();
  });
  return out;
}

void CoreService::SendDescription(reactor::Session& session, uint64_t correlation_id,
                                  const std::optional<store::HeadDescription>& d) {
  wire::HeadDescriptorEncoder hd(out_.data(), out_.size());
  hd.set_correlation_id(correlation_id)
      .set_status(d ? wire::LookupStatus::kHit : wire::LookupStatus::kMiss)
      .set_entry(sbe::kNoHeadEntry);
  if (d) {
    hd.set_object_size(d->info.size)
        .set_generation(d->info.generation)
        .set_entry(d->entry)
        .set_pool_offset(d->head.offset)
        .set_head_length(d->head.length)
        .set_checksum(d->head.checksum)
        .set_stamp(d->head.stamp);
  }
  Send(session, hd.Finish());
}

void CoreService::PumpDescribes() {
  if (!describes_ready_) return;
  describes_ready_ = false;
  for (auto it = describes_.begin(); it != describes_.end();) {
    if (!it->ready) {
      ++it;
      continue;
    }
    it->ready = false;
    std::span<const uint8_t> bytes;
    auto step = it->refill->Peek(&bytes);
    if (step && *step == store::Store::Stream::Step::kWait) {
      ++it;
      continue;
    }
    // The first chunk is in (the head adopted into RAM if the pool had room), or the read
    // failed (a damaged extent drops the object): describe again, without the disk.
    it->refill.reset();
    if (reactor::Session* s = SessionById(it->session)) {
      auto r = store_->Describe(it->key, store::Store::DiskRead::kNever);
      if (!r) {
        SendStatusError(*s, it->correlation_id, r.error());
      } else {
        SendDescription(*s, it->correlation_id, *r);
      }
    }
    it = describes_.erase(it);
  }
}

void CoreService::AppendPutData(reactor::Session& session, uint64_t put_id, uint64_t offset,
                                std::span<const uint8_t> bytes) {
  auto it = OwnUpload(session, put_id, "PutData", 0);
  if (it == uploads_.end()) return;
  Upload& up = it->second;
  if (!up.failed.ok()) return;  // already failed and reported: drop the rest quietly
  if (offset != up.received) {
    store_->Abort(put_id);
    return FailUpload(
        up, Status(StatusCode::kInvalidArgument,
                   fmt::format("PutData at offset {} but {} bytes were received: fill aborted",
                               offset, up.received)));
  }
  if (auto r = store_->Append(put_id, bytes); !r) {
    return FailUpload(up, r.error());  // the store aborted the fill
  }
  up.received += bytes.size();
  counters_.bytes_in += bytes.size();
}

bool CoreService::PlacePayload(reactor::Session& session, std::span<const uint8_t> header,
                               uint32_t length, Placement* out) {
  sbe::MessageHeader h;
  if (store_ == nullptr || !sbe::MessageHeader::Read(header, &h) ||
      h.schema_id != wire::kSchemaId || h.template_id != wire::PutDataDecoder::kTemplateId) {
    return false;
  }
  wire::PutDataDecoder d;
  if (d.WrapBody(header, h.block_length, h.version) != sbe::DecodeError::kNone) return false;
  auto it = uploads_.find(d.put_id());
  if (it == uploads_.end() || it->second.session != session.id() || !it->second.failed.ok())
    return false;
  auto placed = store_->PlaceAppend(d.put_id(), d.offset(), length);
  if (!placed) return false;
  out->at = placed->at;
  out->token = placed->buffer;
  ++counters_.payloads_placed;
  return true;
}

void CoreService::OnPlacedMessage(reactor::Session& session, std::span<const uint8_t> header,
                                  std::span<const uint8_t> payload) {
  sbe::MessageHeader h;
  wire::PutDataDecoder d;
  (void)sbe::MessageHeader::Read(header, &h);  // (PlacePayload read and decoded it)
  if (auto e = d.WrapBody(header, h.block_length, h.version); e != sbe::DecodeError::kNone)
    return SendMalformed(session, "PutData", e);
  AppendPutData(session, d.put_id(), d.offset(), payload);
}

void CoreService::ReleasePlacement(uint64_t token) {
  if (store_ != nullptr) store_->ReleasePlacement(static_cast<uint32_t>(token));
}

CoreService::Uploads::iterator CoreService::OwnUpload(reactor::Session& session, uint64_t put_id,
                                                      std::string_view what, uint64_t corr) {
  auto it = uploads_.find(put_id);
  if (it != uploads_.end() && it->second.session == session.id()) return it;
  SendError(session, corr, static_cast<uint16_t>(wire::ErrorCode::kNotFound),
            fmt::format("{} for unknown put {}", what, put_id));
  return uploads_.end();
}

void CoreService::FailUpload(Upload& up, Status why) {
  up.failed = std::move(why);
  auto s = sessions_.find(up.session);
  if (s != sessions_.end()) SendStatusError(*s->second->session, up.begin_correlation, up.failed);
  ReplayParked();
}

void CoreService::ReplayParked(std::string_view as_miss) {
  if (parked_.empty() || store_ == nullptr) return;
  std::vector<std::pair<ParkedGet, bool>> ready;  // (get, handle again)
  std::erase_if(parked_, [&](ParkedGet& p) {
    if (sessions_.count(p.session) == 0) return true;  // its session went away
    if (!as_miss.empty() && p.key == as_miss) {
      ready.emplace_back(std::move(p), true);
      return true;
    }
    if (p.await_commit) {
      if (store_->FillCommitting(p.key)) return false;
      ready.emplace_back(std::move(p), true);  // (committed, or not: it reads what there is)
      return true;
    }
    if (store_->FillAwaitingHead(p.key)) return false;
    // The fill went on (or something else filled or committed the key meanwhile); or it
    // ended without a head: the fill this get followed was aborted.
    bool again = store_->Filling(p.key) || store_->Committed(p.key);
    ready.emplace_back(std::move(p), again);
    return true;
  });
  for (auto& [p, again] : ready) {
    auto s = sessions_.find(p.session);
    if (s == sessions_.end()) continue;
    if (again) {
      HandleObject(*s->second->session, wire::ObjectGetDecoder::kTemplateId, p.msg, p.block_length,
                   p.version);
    } else {
      const uint64_t corr = p.msg.size() >= 16 ? sbe::Load<uint64_t>(p.msg.data() + 8) : 0;
      SendError(*s->second->session, corr, static_cast<uint16_t>(wire::ErrorCode::kAborted),
                fmt::format("the fill of '{}' it followed was aborted before its head", p.key));
    }
  }
}

size_t CoreService::OnPoll() {
  if (store_ == nullptr) return 0;
  if (auto r = store_->Poll(); !r) GOBLIN_LOG_ERROR(kLog, "store: {}", r.error());
  PumpDescribes();
  for (store::Store::FillId id : store_->TakeTimedOutFills()) {
    auto it = uploads_.find(id);
    if (it == uploads_.end() || !it->second.failed.ok()) continue;
    FailUpload(it->second,
               Status(StatusCode::kTimeout, "the fill received no data for too long: aborted"));
  }
  ReplayParked();
  return PumpTagPurges();
}

size_t CoreService::PumpTagPurges() {
  if (tag_purges_.empty()) return 0;
  TagPurge& p = tag_purges_.front();
  const size_t n = std::min(kTagPurgeSlice, p.members.size() - p.next);
  p.keys.clear();
  store_->KeysWithTag(std::span<const store::KeyDigest>(p.members).subspan(p.next, n), p.tag,
                      &p.keys);
  p.next += n;
  size_t done = 0;
  for (const std::string& k : p.keys) {
    ++done;
    if (p.soft) {
      auto g = store_->Invalidate(k, 0, false, 0);
      if (!g) {
        p.error = g.error();
        break;
      }
      p.purged += *g != 0 ? 1 : 0;
    } else {
      auto d = store_->Delete(k);
      if (!d) {
        p.error = d.error();
        break;
      }
      p.purged += *d ? 1 : 0;
    }
  }
  if (p.error.ok() && p.next < p.members.size()) return done + 1;  // (more next round)
  GOBLIN_LOG_INFO(kLog, "{} {} objects tagged '{}'", p.soft ? "soft-purged" : "purged", p.purged,
                  p.tag);
  store_->WhenDurable(
      [this, sid = p.session, corr = p.corr, n = p.purged, err = p.error](const Status& st) {
        reactor::Session* s = SessionById(sid);
        if (s == nullptr) return;  // (the requester left: the purge was done all the same)
        if (!err.ok()) return SendStatusError(*s, corr, err);
        if (!st.ok()) return SendStatusError(*s, corr, st);
        wire::PurgeAckEncoder a(out_.data(), out_.size());
        a.set_correlation_id(corr).set_deleted(n);
        Send(*s, a.Finish());
      });
  tag_purges_.pop_front();
  return done + 1;
}

CoreService::Download& CoreService::NewDownload(Downloads& list) {
  if (spare_downloads_.empty()) return list.emplace_back();
  list.splice(list.end(), spare_downloads_, spare_downloads_.begin());
  Download& d = list.back();
  // A loan of its last stream may still count on the old tally: then a new one.
  std::shared_ptr<LoanTally> tally = std::move(d.tally);
  d = Download{};
  if (tally.use_count() == 1) {
    *tally = LoanTally{};
    d.tally = std::move(tally);
  }
  return d;
}

CoreService::Downloads::iterator CoreService::EndDownload(Downloads& list, Downloads::iterator it) {
  auto next = std::next(it);
  Unpause(*it);
  it->stream.reset();  // releases what the stream holds now
  if (spare_downloads_.size() < kMaxDownloadsPerSession) {
    spare_downloads_.splice(spare_downloads_.end(), list, it);
  } else {
    list.erase(it);
  }
  return next;
}

void CoreService::CancelDownload(reactor::Session& session, uint64_t correlation_id,
                                 uint32_t flags) {
  PerSession& per = Of(session);
  Downloads& list = per.downloads;
  auto d = std::find_if(list.begin(), list.end(),
                        [&](const Download& x) { return x.correlation_id == correlation_id; });
  if (d != list.end()) {
    ++counters_.gets_cancelled;
    EndDownload(list, d);  // (what it lent stays out until released, or is taken back below)
    PassOnRoom(session, per.lender);
  } else if (auto p = std::find_if(parked_.begin(), parked_.end(),
                                   [&](const ParkedGet& g) {
                                     return g.session == session.id() && g.msg.size() >= 16 &&
                                            sbe::Load<uint64_t>(g.msg.data() + 8) == correlation_id;
                                   });
             p != parked_.end()) {
    ++counters_.gets_cancelled;
    parked_.erase(p);
  }
  // (after the stream ended: the room its loans free goes to the others, not to a wake of it)
  if ((flags & wire::kCancelTakeBackLoans) != 0) TakeBackLoans(session, correlation_id);
}

void CoreService::OnWritable(reactor::Session& session) {
  PerSession& per = Of(session);
  Downloads& list = per.downloads;
  if (list.empty()) {
    session.WantWritable(false);
    return;
  }
  // Each ready stream gets a turn; streams with nothing to send wait for their callback.
  bool any_ready = false;
  for (auto d = list.begin(); d != list.end();) {
    if (session.closing()) return;
    if (d->ready && !Pump(session, *d)) {
      d = EndDownload(list, d);  // (its last piece may be the one that filled the ring)
      // (a download it wakes may lie behind us in the list: then this pass must not end
      // with WantWritable(false), or that wake is lost)
      any_ready |= PassOnRoom(session, per.lender);
    } else {
      any_ready |= d->ready;
      ++d;
    }
    if (session.queued_bytes() > 0) {  // the ring is full: the rest wait for the reader
      any_ready = true;
      break;
    }
  }
  // (a loan given back within this pass - a by-reference send done at once - may have woken
  // a download already behind us: it is ready, so the session stays writable)
  if (!any_ready) {
    any_ready = std::any_of(list.begin(), list.end(), [](const Download& x) { return x.ready; });
  }
  if (!any_ready) session.WantWritable(false);
}

bool CoreService::Pump(reactor::Session& session, Download& d) {
  store::Store::Stream& st = *d.stream;
  // Room for one record: the ring's largest message less the ObjectData framing.
  const uint64_t chunk_max = session.max_message() - 64;
  for (int burst = 0; burst < 64; ++burst) {
    std::span<const uint8_t> bytes;
    auto step = st.Peek(&bytes);
    if (!step) {
      SendStatusError(session, d.correlation_id, step.error());
      return false;
    }
    if (*step == store::Store::Stream::Step::kWait) {
      d.ready = false;  // the stream's ready callback turns it back on
      return true;
    }
    if (d.started_ns != 0) {
      histograms_.get_first_piece.Record(MonotonicNanos() - d.started_ns);
      d.started_ns = 0;
    }
    // A remote session's first piece goes inline (a copy of at most kFirstInlineBytes, sent
    // eager): the client's first byte does not wait for a rendezvous of a whole head.
    // (by rendezvous: a UCX session whose client has not mapped the pools in place)
    const bool by_reference = session.sends_by_reference() && !d.in_place;
    if (*step == store::Store::Stream::Step::kData && d.lend &&
        st.where() != store::Store::Stream::Where::kPrivate && (d.first_sent || !by_reference)) {
      bool last = st.end() != UINT64_MAX && st.position() + bytes.size() == st.end();
      if (by_reference) {
        auto sent = SendByReference(session, d, bytes);
        if (!sent) {
          d.ready = false;  // OnPayloadSent resumes it
          return true;
        }
        if (*sent == reactor::SendOutcome::kOverLimit || *sent == reactor::SendOutcome::kTooLarge) {
          GOBLIN_LOG_WARN(kLog,
                          "client {} does not read its replies ({} bytes queued); dropping it",
                          session.id(), session.queued_bytes());
          session.Close();
          return false;
        }
        if (last) return false;
        if (*sent == reactor::SendOutcome::kQueued) return true;
        continue;
      }
      if (!Lend(session, d, bytes)) {
        d.ready = false;  // a LoanRelease resumes it
        return true;
      }
      if (last) return false;
      if (session.queued_bytes() > 0) return true;
      continue;
    }
    uint64_t n = 0;
    bool last = true;
    if (*step == store::Store::Stream::Step::kData) {
      n = std::min<uint64_t>(chunk_max, bytes.size());
      if (!d.first_sent && by_reference) n = std::min(n, kFirstInlineBytes);
      d.first_sent = true;
      last = st.end() != UINT64_MAX && st.position() + n == st.end();
    }
    wire::ObjectDataEncoder od(out_.data(), out_.size());
    od.set_correlation_id(d.correlation_id).set_offset(st.position()).set_last(last ? 1 : 0);
    od.set_bytes(bytes.first(n));
    reactor::SendOutcome outcome = session.Send({out_.data(), od.Finish()});
    if (outcome == reactor::SendOutcome::kTooLarge || outcome == reactor::SendOutcome::kOverLimit) {
      GOBLIN_LOG_WARN(kLog, "client {} does not read its replies ({} bytes queued); dropping it",
                      session.id(), session.queued_bytes());
      session.Close();
      return false;
    }
    st.Consume(n);
    counters_.bytes_out += n;
    if (last) return false;
    if (outcome == reactor::SendOutcome::kQueued) return true;  // the ring is full
  }
  return true;
}

}  // namespace goblin::core
