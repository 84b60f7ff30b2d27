#include "goblin/core/core_service.h"

#include <algorithm>

#include "goblin/common/log.h"
#include "goblin/wire/goblin_wire.h"

namespace goblin::core {

namespace {
constexpr std::string_view kLog = "core";
constexpr uint64_t kMinStreamWindow = 1 << 20;  // bytes read from the store per refill

wire::ErrorCode ToWire(StatusCode c) {
  // The wire enum mirrors StatusCode for 1..14.
  return static_cast<wire::ErrorCode>(static_cast<uint16_t>(c));
}
}  // namespace

void CoreService::OnOpen(ring::Session& session) {
  ++counters_.sessions_opened;
  GOBLIN_LOG_INFO(kLog, "client {} connected: '{}' pid {}", session.id(), session.name(),
                  session.pid());
}

void CoreService::OnClose(ring::Session& session) {
  ++counters_.sessions_closed;
  if (store_ != nullptr) {
    for (auto it = uploads_.begin(); it != uploads_.end();) {
      if (it->second.session == session.id()) {
        if (it->second.failed.ok()) store_->Abort(it->first);
        it = uploads_.erase(it);
      } else {
        ++it;
      }
    }
    if (auto d = downloads_.find(session.id()); d != downloads_.end()) {
      store_->Release(d->second.loan);
      downloads_.erase(d);
    }
  }
  GOBLIN_LOG_INFO(kLog, "client {} disconnected", session.id());
}

bool CoreService::Send(ring::Session& session, size_t n) {
  if (n == 0) {
    GOBLIN_LOG_ERROR(kLog, "a reply did not fit the encoder buffer (a bug)");
    return false;
  }
  switch (session.Send({out_.data(), n})) {
    case ring::SendOutcome::kSent:
    case ring::SendOutcome::kQueued:
      return true;
    case ring::SendOutcome::kTooLarge:
      GOBLIN_LOG_ERROR(kLog, "a {}-byte reply does not fit client {}'s ring", n, session.id());
      session.Close();
      return false;
    case ring::SendOutcome::kOverLimit:
      GOBLIN_LOG_WARN(kLog, "client {} does not read its replies; dropping it", session.id());
      session.Close();
      return false;
  }
  return false;
}

void CoreService::SendError(ring::Session& session, uint64_t correlation_id, uint16_t code,
                            std::string_view text) {
  wire::ErrorEncoder e(out_.data(), out_.size());
  e.set_correlation_id(correlation_id)
      .set_code(static_cast<wire::ErrorCode>(code))
      .set_text(text.substr(0, 1024));
  ++counters_.errors_sent;
  Send(session, e.Finish());
}

void CoreService::SendStatusError(ring::Session& session, uint64_t correlation_id,
                                  const Status& s) {
  SendError(session, correlation_id, static_cast<uint16_t>(ToWire(s.code())), s.ToString());
}

void CoreService::OnMessage(ring::Session& session, std::span<const uint8_t> msg) {
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
    case wire::PutBeginDecoder::kTemplateId:
    case wire::PutDataDecoder::kTemplateId:
    case wire::PutCommitDecoder::kTemplateId:
    case wire::PutAbortDecoder::kTemplateId:
    case wire::ObjectHeadDecoder::kTemplateId:
    case wire::ObjectGetDecoder::kTemplateId:
    case wire::ObjectDeleteDecoder::kTemplateId:
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

void CoreService::HandleObject(ring::Session& session, uint16_t template_id,
                               std::span<const uint8_t> msg, uint16_t block_length,
                               uint16_t version) {
  auto bad = [&](std::string_view what, sbe::DecodeError e) {
    ++counters_.malformed;
    SendError(session, 0, static_cast<uint16_t>(wire::ErrorCode::kInvalidArgument),
              fmt::format("{}: {}", what, sbe::DecodeErrorName(e)));
  };
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
      auto r = store_->BeginFill(d.key(), d.ttl_nanos(), d.metadata());
      if (!r) return SendStatusError(session, d.correlation_id(), r.error());
      wire::FillLeaseEncoder f(out_.data(), out_.size());
      bool granted = r->first == store::Store::FillStart::kGranted;
      f.set_correlation_id(d.correlation_id())
          .set_put_id(granted ? r->second : 0)
          .set_state(granted ? wire::LeaseState::kGranted : wire::LeaseState::kInProgress);
      if (granted) uploads_[r->second] = Upload{session.id(), 0};
      Send(session, f.Finish());
      return;
    }
    case wire::PutDataDecoder::kTemplateId: {
      wire::PutDataDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("PutData", e);
      auto it = uploads_.find(d.put_id());
      if (it == uploads_.end() || it->second.session != session.id()) {
        return SendError(session, 0, static_cast<uint16_t>(wire::ErrorCode::kNotFound),
                         fmt::format("PutData for unknown put {}", d.put_id()));
      }
      Upload& up = it->second;
      if (!up.failed.ok()) return;  // already failed and reported: drop the rest quietly
      if (d.offset() != up.received) {
        store_->Abort(d.put_id());
        up.failed =
            Status(StatusCode::kInvalidArgument,
                   fmt::format("PutData at offset {} but {} bytes were received: fill aborted",
                               d.offset(), up.received));
        return SendStatusError(session, 0, up.failed);
      }
      auto bytes = d.bytes_bytes();
      if (auto r = store_->Append(d.put_id(), bytes); !r) {
        up.failed = r.error();  // the store aborted the fill
        return SendStatusError(session, 0, up.failed);
      }
      up.received += bytes.size();
      counters_.bytes_in += bytes.size();
      return;
    }
    case wire::PutCommitDecoder::kTemplateId: {
      wire::PutCommitDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("PutCommit", e);
      auto it = uploads_.find(d.put_id());
      if (it == uploads_.end() || it->second.session != session.id()) {
        return SendError(session, d.correlation_id(),
                         static_cast<uint16_t>(wire::ErrorCode::kNotFound),
                         fmt::format("PutCommit for unknown put {}", d.put_id()));
      }
      Status failed = it->second.failed;
      uploads_.erase(it);
      if (!failed.ok()) return SendStatusError(session, d.correlation_id(), failed);
      auto gen = store_->Commit(d.put_id(), d.total_size());
      wire::PutResultEncoder p(out_.data(), out_.size());
      p.set_correlation_id(d.correlation_id()).set_put_id(d.put_id());
      if (!gen) return SendStatusError(session, d.correlation_id(), gen.error());
      ++counters_.puts;
      p.set_code(wire::ErrorCode::kOk).set_generation(*gen).set_size(d.total_size());
      Send(session, p.Finish());
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
      }
      return;
    }
    case wire::ObjectHeadDecoder::kTemplateId:
    case wire::ObjectGetDecoder::kTemplateId: {
      bool get = template_id == wire::ObjectGetDecoder::kTemplateId;
      std::string key;
      uint64_t offset = 0, length = UINT64_MAX;
      if (get) {
        wire::ObjectGetDecoder d;
        if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
          return bad("ObjectGet", e);
        key = std::string(d.key());
        offset = d.offset();
        length = d.length();
      } else {
        wire::ObjectHeadDecoder d;
        if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
          return bad("ObjectHead", e);
        key = std::string(d.key());
      }
      if (get && downloads_.count(session.id())) {
        return SendError(session, corr, static_cast<uint16_t>(wire::ErrorCode::kFailedPrecondition),
                         "one ObjectGet at a time per session");
      }
      std::optional<store::Loan> loan;
      std::optional<store::ObjectInfo> info;
      if (get) {
        auto r = store_->Get(key);
        if (!r) return SendStatusError(session, corr, r.error());
        loan = std::move(*r);
        if (loan) info = loan->info;
      } else {
        auto r = store_->Head(key);
        if (!r) return SendStatusError(session, corr, r.error());
        info = std::move(*r);
      }
      wire::ObjectInfoEncoder oi(out_.data(), out_.size());
      oi.set_correlation_id(corr).set_status(info ? wire::LookupStatus::kHit
                                                  : wire::LookupStatus::kMiss);
      if (info) {
        oi.set_object_size(info->size)
            .set_generation(info->generation)
            .set_created_nanos(info->created_unix_ns)
            .set_expires_nanos(info->expires_unix_ns)
            .set_metadata(info->metadata.substr(0, session.max_message() / 2));
      }
      if (!Send(session, oi.Finish()) || !loan) {
        if (loan) store_->Release(*loan);
        return;
      }
      ++counters_.gets;
      uint64_t size = loan->info.size;
      if (offset > size) offset = size;
      uint64_t end = length == UINT64_MAX || length > size - offset ? size : offset + length;
      Download dl;
      dl.correlation_id = corr;
      dl.loan = std::move(*loan);
      dl.next = offset;
      dl.end = end;
      dl.window_start = offset;
      downloads_[session.id()] = std::move(dl);
      session.WantWritable(true);
      return;
    }
    case wire::ObjectDeleteDecoder::kTemplateId: {
      wire::ObjectDeleteDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("ObjectDelete", e);
      auto r = store_->Delete(d.key());
      if (!r) return SendStatusError(session, d.correlation_id(), r.error());
      wire::DeleteAckEncoder a(out_.data(), out_.size());
      a.set_correlation_id(d.correlation_id()).set_deleted(*r ? 1 : 0);
      Send(session, a.Finish());
      return;
    }
    default:
      return;
  }
}

void CoreService::OnWritable(ring::Session& session) {
  auto it = downloads_.find(session.id());
  if (it == downloads_.end()) {
    session.WantWritable(false);
    return;
  }
  Download& d = it->second;
  // Room for one record: the ring's largest message less the ObjectData framing.
  const uint64_t chunk_max = session.max_message() - 64;
  for (int burst = 0; burst < 64; ++burst) {
    uint64_t window_end = d.window_start + d.window.size();
    if (d.next >= window_end && d.next < d.end) {
      uint64_t n;
      if (d.loan.head && d.next < d.loan.head_bytes) {
        // Head first: the RAM head goes out at once, before any disk read.
        n = std::min(d.loan.head_bytes, d.end) - d.next;
      } else {
        // Then whole extents per refill: a smaller window would read an extent repeatedly.
        uint64_t ext = store_->tier().extent_bytes();
        uint64_t window = std::max<uint64_t>(kMinStreamWindow, ext);
        uint64_t aligned = d.next / ext * ext;  // start on an extent boundary
        n = std::min(window - (d.next - aligned), d.end - d.next);
      }
      d.window.resize(n);
      d.window_start = d.next;
      if (auto r = store_->Read(d.loan, d.next, d.window); !r) {
        SendStatusError(session, d.correlation_id, r.error());
        store_->Release(d.loan);
        downloads_.erase(it);
        session.WantWritable(false);
        return;
      }
      window_end = d.window_start + d.window.size();
    }
    uint64_t n = std::min({chunk_max, d.end - d.next, window_end - d.next});
    bool last = d.next + n == d.end;
    wire::ObjectDataEncoder od(out_.data(), out_.size());
    od.set_correlation_id(d.correlation_id).set_offset(d.next).set_last(last ? 1 : 0);
    od.set_bytes(std::span<const uint8_t>(d.window.data() + (d.next - d.window_start), n));
    ring::SendOutcome outcome = session.Send({out_.data(), od.Finish()});
    if (outcome == ring::SendOutcome::kTooLarge || outcome == ring::SendOutcome::kOverLimit) {
      session.Close();
      return;
    }
    d.next += n;
    counters_.bytes_out += n;
    if (last) {
      store_->Release(d.loan);
      downloads_.erase(it);
      session.WantWritable(false);
      return;
    }
    if (outcome == ring::SendOutcome::kQueued) return;  // the ring is full: wait for the reader
  }
}

}  // namespace goblin::core
