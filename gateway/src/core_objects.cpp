#include "core_objects.h"

#include <fmt/format.h>

#include <algorithm>

#include "goblin/common/clock.h"
#include "goblin/sbe/runtime.h"
#include "goblin/sbe/wire_flags.h"
#include "goblin/wire/goblin_wire.h"

namespace goblin::gateway {
namespace {

// The wire's codes mirror StatusCode for 1..14.
StatusCode FromWire(uint16_t code) {
  return code >= 1 && code <= 14 ? static_cast<StatusCode>(code) : StatusCode::kInternal;
}

Status ErrorFrom(std::span<const uint8_t> m) {
  auto e = wire::ErrorDecoder::Decode(m);
  if (!e) return Status(StatusCode::kInternal, "an undecodable Error from goblin-core");
  return Status(FromWire(static_cast<uint16_t>(e->code())), std::string(e->text()));
}

const Status& Unavailable() {
  static const Status s(StatusCode::kUnavailable, "goblin-core is unavailable");
  return s;
}

}  // namespace

bool IsLastObjectAnswer(uint16_t template_id, std::span<const uint8_t> m) {
  if (template_id == wire::ObjectInfoDecoder::kTemplateId) {
    auto info = wire::ObjectInfoDecoder::Decode(m);
    return !info || info->status() != wire::LookupStatus::kHit || info->first_bytes_end() == 1;
  }
  if (template_id == wire::ObjectDataDecoder::kTemplateId) {
    auto d = wire::ObjectDataDecoder::Decode(m);
    return !d || d->last() != 0;
  }
  if (template_id == wire::LoanDecoder::kTemplateId) {
    auto l = wire::LoanDecoder::Decode(m);
    return !l || l->last() != 0;
  }
  return true;
}

CoreObjects::CoreObjects(CoreLink* link, uint64_t* next_corr,
                         std::chrono::milliseconds busy_timeout, uint64_t max_value)
    : link_(link), next_corr_(next_corr), busy_timeout_(busy_timeout), max_value_(max_value) {}

CoreObjects::Req& CoreObjects::NewReq(Kind kind, std::string_view key) {
  auto r = std::make_unique<Req>();
  r->kind = kind;
  r->id = next_req_++;
  r->key = std::string(key);
  Req& ref = *r;
  reqs_.emplace(ref.id, std::move(r));
  return ref;
}

uint64_t CoreObjects::Corr(Req& r) {
  const uint64_t corr = (*next_corr_)++;
  corr_[corr] = r.id;
  if (r.corr == 0) r.corr = corr;
  return corr;
}

bool CoreObjects::Send(Req& r, FunctionRef<size_t(uint8_t*, size_t)> encode, size_t max_bytes,
                       uint16_t shard) {
  switch (link_->SendAlways(encode, max_bytes, shard)) {
    case CoreLink::SendResult::kSent:
    case CoreLink::SendResult::kQueued:
    case CoreLink::SendResult::kBusy:
      r.shard = shard;
      return true;
    case CoreLink::SendResult::kTooLarge:
      Fail(r, Status(StatusCode::kInvalidArgument,
                     "the request is larger than goblin-core's ring "
                     "carries"));
      return false;
    case CoreLink::SendResult::kDown:
      break;
  }
  Fail(r, Unavailable());
  return false;
}

void CoreObjects::Fail(Req& r, const Status& s) {
  switch (r.kind) {
    case Kind::kGet:
      if (r.get_done) r.get_done(std::unexpected(s));
      break;
    case Kind::kPut:
      if (r.put_done) r.put_done(std::unexpected(s));
      break;
    case Kind::kDelete:
      if (r.delete_done) r.delete_done(std::unexpected(s));
      break;
    case Kind::kTouch:
      if (r.touch_done) r.touch_done(std::unexpected(s));
      break;
    case Kind::kScan:
      if (r.scan_done) r.scan_done(std::unexpected(s));
      break;
    case Kind::kPurge:
      if (r.purge_done) r.purge_done(std::unexpected(s));
      break;
    case Kind::kConfig:
      if (r.config_done) r.config_done(std::unexpected(s));
      break;
  }
  Done(r);
}

void CoreObjects::Done(Req& r) {
  for (uint64_t c : {r.corr, r.begin_corr, r.commit_corr}) {
    if (c != 0) corr_.erase(c);
  }
  reqs_.erase(r.id);  // (destroys r)
}

void CoreObjects::Get(std::string_view key, uint64_t offset, uint64_t length, GetDone done,
                      uint32_t flags) {
  Req& r = NewReq(Kind::kGet, key);
  r.get_done = std::move(done);
  r.offset = offset;
  r.length = length;
  r.get_flags = flags;
  SendGet(r);
}

void CoreObjects::Head(std::string_view key, GetDone done) {
  Req& r = NewReq(Kind::kGet, key);
  r.get_done = std::move(done);
  r.head_only = true;
  SendGet(r);
}

void CoreObjects::SendGet(Req& r) {
  const uint64_t corr = Corr(r);
  if (r.head_only) {
    Send(
        r,
        [&](uint8_t* b, size_t cap) {
          return wire::ObjectHeadEncoder(b, cap).set_correlation_id(corr).set_key(r.key).Finish();
        },
        r.key.size() + 64, link_->ShardFor(r.key));
    return;
  }
  Send(
      r,
      [&](uint8_t* b, size_t cap) {
        return wire::ObjectGetEncoder(b, cap)
            .set_correlation_id(corr)
            .set_offset(r.offset)
            .set_length(r.length)
            .set_flags(wire::kGetFirstBytes | r.get_flags)
            .set_key(r.key)
            .Finish();
      },
      r.key.size() + 64, link_->ShardFor(r.key));
}

void CoreObjects::Put(std::string key, std::string value, PutSpec spec, PutDone done) {
  Req& r = NewReq(Kind::kPut, key);
  r.value = std::move(value);
  r.spec = std::move(spec);
  r.put_done = std::move(done);
  SendPutBegin(r);
}

void CoreObjects::SendPutBegin(Req& r) {
  r.begin_corr = Corr(r);
  r.corr = r.begin_corr;
  r.granted = false;
  r.put_id = r.sent = 0;
  const uint64_t corr = r.begin_corr;
  Send(
      r,
      [&](uint8_t* b, size_t cap) {
        return wire::PutBeginEncoder(b, cap)
            .set_correlation_id(corr)
            .set_expected_size(r.value.size())
            .set_ttl_nanos(r.spec.ttl_ns)
            .set_flags(r.spec.flags)
            .set_if_generation(r.spec.if_generation)
            .set_key(r.key)
            .set_metadata(r.spec.metadata)
            .Finish();
      },
      r.key.size() + r.spec.metadata.size() + 96, link_->ShardFor(r.key));
}

void CoreObjects::SendPieces(Req& r) {
  const size_t piece = std::max<size_t>(4096, link_->max_message() - 128);
  const uint16_t shard = link_->ShardFor(r.key);
  while (r.sent < r.value.size()) {
    if (link_->over_limit()) {  // the rest when the link has drained (Tick)
      if (std::find(sending_.begin(), sending_.end(), r.id) == sending_.end())
        sending_.push_back(r.id);
      return;
    }
    const size_t n = std::min<size_t>(piece, r.value.size() - r.sent);
    const std::string_view part(r.value.data() + r.sent, n);
    const uint64_t put = r.put_id, offset = r.sent;
    if (!Send(
            r,
            [&](uint8_t* b, size_t cap) {
              return wire::PutDataEncoder(b, cap)
                  .set_put_id(put)
                  .set_offset(offset)
                  .set_bytes(part)
                  .Finish();
            },
            n + 64, shard)) {
      return;  // (failed and forgotten)
    }
    r.sent += n;
  }
  r.commit_corr = Corr(r);
  const uint64_t corr = r.commit_corr, put = r.put_id, total = r.sent;
  Send(
      r,
      [&](uint8_t* b, size_t cap) {
        return wire::PutCommitEncoder(b, cap)
            .set_correlation_id(corr)
            .set_put_id(put)
            .set_total_size(total)
            .Finish();
      },
      64, shard);
}

void CoreObjects::Delete(std::string_view key, uint64_t if_generation, DeleteDone done) {
  Req& r = NewReq(Kind::kDelete, key);
  r.delete_done = std::move(done);
  const uint64_t corr = Corr(r);
  Send(
      r,
      [&](uint8_t* b, size_t cap) {
        return wire::ObjectDeleteEncoder(b, cap)
            .set_correlation_id(corr)
            .set_if_generation(if_generation)
            .set_key(key)
            .Finish();
      },
      key.size() + 64, link_->ShardFor(key));
}

void CoreObjects::Touch(std::string_view key, uint64_t ttl_ns, uint32_t flags,
                        std::function<void(Result<Touched>)> done) {
  Req& r = NewReq(Kind::kTouch, key);
  r.touch_done = std::move(done);
  const uint64_t corr = Corr(r);
  Send(
      r,
      [&](uint8_t* b, size_t cap) {
        return wire::ObjectTouchEncoder(b, cap)
            .set_correlation_id(corr)
            .set_ttl_nanos(ttl_ns)
            .set_flags(flags)
            .set_key(key)
            .Finish();
      },
      key.size() + 64, link_->ShardFor(key));
}

void CoreObjects::Scan(uint16_t shard, uint64_t cursor, uint32_t count,
                       std::function<void(Result<ScanPage>)> done) {
  Req& r = NewReq(Kind::kScan, {});
  r.scan_done = std::move(done);
  const uint64_t corr = Corr(r);
  Send(
      r,
      [&](uint8_t* b, size_t cap) {
        return wire::ObjectScanEncoder(b, cap)
            .set_correlation_id(corr)
            .set_cursor(cursor)
            .set_count(count)
            .Finish();
      },
      64, shard);
}

void CoreObjects::Purge(uint16_t shard, std::function<void(Result<uint64_t>)> done) {
  Req& r = NewReq(Kind::kPurge, {});
  r.purge_done = std::move(done);
  const uint64_t corr = Corr(r);
  Send(
      r,
      [&](uint8_t* b, size_t cap) {
        return wire::ObjectPurgeEncoder(b, cap).set_correlation_id(corr).set_prefix("").Finish();
      },
      64, shard);
}

void CoreObjects::Config(bool set, std::string_view name, std::string_view value,
                         std::function<void(Result<std::string>)> done) {
  Req& r = NewReq(Kind::kConfig, {});
  r.config_done = std::move(done);
  const uint64_t corr = Corr(r);
  Send(
      r,
      [&](uint8_t* b, size_t cap) {
        return wire::CoreConfigEncoder(b, cap)
            .set_correlation_id(corr)
            .set_set(set ? 1 : 0)
            .set_name(name)
            .set_value(value)
            .Finish();
      },
      name.size() + value.size() + 64, 0);
}

bool CoreObjects::OnMessage(uint16_t template_id, uint64_t corr, std::span<const uint8_t> m) {
  auto c = corr_.find(corr);
  if (c == corr_.end()) return false;
  auto it = reqs_.find(c->second);
  if (it == reqs_.end()) {
    corr_.erase(c);
    return true;
  }
  Req& r = *it->second;
  if (r.kind == Kind::kPut) {
    OnPutAnswer(r, corr, template_id, m);
    return true;
  }
  if (template_id == wire::ErrorDecoder::kTemplateId) {
    Fail(r, ErrorFrom(m));
    return true;
  }
  auto undecodable = [&] {
    Fail(r, Status(StatusCode::kInternal, fmt::format("an undecodable {} from goblin-core",
                                                      wire::TemplateName(template_id))));
  };
  switch (r.kind) {
    case Kind::kGet: {
      const bool last = r.head_only || IsLastObjectAnswer(template_id, m);
      if (template_id == wire::ObjectInfoDecoder::kTemplateId) {
        auto info = wire::ObjectInfoDecoder::Decode(m);
        if (!info) return undecodable(), true;
        if (info->status() == wire::LookupStatus::kHit) {
          if (info->object_size() > max_value_ && r.length > max_value_) {
            if (!IsLastObjectAnswer(template_id, m)) {  // the core stops streaming it
              link_->SendAlways(
                  [&](uint8_t* b, size_t cap) {
                    return wire::ObjectGetCancelEncoder(b, cap).set_correlation_id(corr).Finish();
                  },
                  64, link_->ShardFor(r.key));
            }
            return Fail(r, Status(StatusCode::kOutOfRange,
                                  fmt::format("the value is {} bytes; this front serves values "
                                              "of up to {} bytes",
                                              info->object_size(), max_value_))),
                   true;
          }
          Object& o = r.object;
          o.found = true;
          o.size = info->object_size();
          o.generation = info->generation();
          o.expires_ns = info->expires_nanos();
          o.metadata = std::string(info->metadata());
          o.bytes.append(info->first_bytes());
        }
      } else if (template_id == wire::ObjectDataDecoder::kTemplateId) {
        auto d = wire::ObjectDataDecoder::Decode(m);
        if (!d) return undecodable(), true;
        auto bytes = d->bytes_bytes();
        r.object.bytes.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      } else {
        return true;  // (not an answer to a get)
      }
      if (last) {
        GetDone done = std::move(r.get_done);
        Object o = std::move(r.object);
        Done(r);
        done(std::move(o));
      }
      return true;
    }
    case Kind::kDelete: {
      auto a = wire::DeleteAckDecoder::Decode(m);
      if (!a) return undecodable(), true;
      DeleteDone done = std::move(r.delete_done);
      Done(r);
      done(a->deleted() != 0);
      return true;
    }
    case Kind::kTouch: {
      auto a = wire::TouchAckDecoder::Decode(m);
      if (!a) return undecodable(), true;
      auto done = std::move(r.touch_done);
      Touched t{a->found() != 0, a->generation(), a->expires_nanos()};
      Done(r);
      done(t);
      return true;
    }
    case Kind::kScan: {
      auto a = wire::ScanReplyDecoder::Decode(m);
      if (!a) return undecodable(), true;
      ScanPage page;
      page.next_cursor = a->next_cursor();
      page.objects = a->objects();
      page.expiring = a->expiring();
      page.ram_bytes = a->ram_bytes();
      page.ram_limit = a->ram_limit();
      page.expired = a->expired();
      page.evicted = a->evicted();
      for (auto k : a->keys()) page.keys.emplace_back(k.key());
      auto done = std::move(r.scan_done);
      Done(r);
      done(std::move(page));
      return true;
    }
    case Kind::kPurge: {
      auto a = wire::PurgeAckDecoder::Decode(m);
      if (!a) return undecodable(), true;
      auto done = std::move(r.purge_done);
      Done(r);
      done(a->deleted());
      return true;
    }
    case Kind::kConfig: {
      auto a = wire::CoreConfigReplyDecoder::Decode(m);
      if (!a) return undecodable(), true;
      auto done = std::move(r.config_done);
      std::string value(a->value());
      Done(r);
      done(std::move(value));
      return true;
    }
    case Kind::kPut:
      break;
  }
  return true;
}

void CoreObjects::OnPutAnswer(Req& r, uint64_t corr, uint16_t template_id,
                              std::span<const uint8_t> m) {
  if (template_id == wire::ErrorDecoder::kTemplateId) {
    // A refusal of the begin, a failed upload (it comes with the begin's id: the fill is
    // gone in the core, its commit will be refused too) or of the commit.
    return Fail(r, ErrorFrom(m));
  }
  if (template_id == wire::FillLeaseDecoder::kTemplateId && corr == r.begin_corr) {
    auto l = wire::FillLeaseDecoder::Decode(m);
    if (!l) return Fail(r, Status(StatusCode::kInternal, "an undecodable FillLease"));
    if (l->state() == wire::LeaseState::kGranted) {
      r.granted = true;
      r.put_id = l->put_id();
      r.busy_since = 0;
      return SendPieces(r);
    }
    // Another write of the key is in progress: again in a millisecond, for a while.
    const uint64_t now = MonotonicNanos();
    if (r.busy_since == 0) r.busy_since = now;
    corr_.erase(r.begin_corr);
    r.begin_corr = 0;
    if (now - r.busy_since >
        static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(busy_timeout_).count())) {
      return Fail(r, Status(StatusCode::kAborted, "another write of this key is in progress"));
    }
    r.retry_at = now + 1'000'000;
    retrying_.push_back(r.id);
    return;
  }
  if (template_id == wire::PutResultDecoder::kTemplateId && corr == r.commit_corr) {
    auto p = wire::PutResultDecoder::Decode(m);
    if (!p) return Fail(r, Status(StatusCode::kInternal, "an undecodable PutResult"));
    PutDone done = std::move(r.put_done);
    const uint64_t generation = p->generation();
    const auto code = static_cast<uint16_t>(p->code());
    Done(r);
    if (code != 0) {
      done(std::unexpected(Status(FromWire(code), "goblin-core refused the commit")));
    } else {
      done(generation);
    }
  }
}

void CoreObjects::OnCoreDown() {
  std::vector<uint64_t> ids;
  ids.reserve(reqs_.size());
  for (auto& [id, r] : reqs_) ids.push_back(id);
  retrying_.clear();
  sending_.clear();
  corr_.clear();
  for (uint64_t id : ids) {
    auto it = reqs_.find(id);
    if (it == reqs_.end()) continue;
    Req& r = *it->second;
    if (resend_reads_ && r.kind == Kind::kGet && !r.resent) {
      // A read changes nothing: asked again once the link is back (at the key's owner then).
      r.resent = true;
      r.corr = 0;
      r.object = Object();
      resend_.push_back(id);
    } else {
      Fail(r, Unavailable());
    }
  }
  if (!resend_.empty()) resend_deadline_ = MonotonicNanos() + kResendWaitNs;
}

void CoreObjects::OnCoreLost(uint16_t first, uint16_t count) {
  std::vector<uint64_t> ids;
  for (auto& [id, r] : reqs_) {
    if (r->shard >= first && static_cast<uint32_t>(r->shard) < first + count) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());  // (in the order they were made)
  for (uint64_t id : ids) {
    auto it = reqs_.find(id);
    if (it == reqs_.end()) continue;
    Req& r = *it->second;
    for (uint64_t c : {r.corr, r.begin_corr, r.commit_corr}) {
      if (c != 0) corr_.erase(c);
    }
    if (resend_reads_ && r.kind == Kind::kGet && !r.resent) {
      r.resent = true;  // (a read changes nothing: asked at the key's next owner now)
      r.corr = 0;
      r.object = Object();
      SendGet(r);
    } else {
      Fail(r, Unavailable());
    }
  }
}

void CoreObjects::OnCoreUp() {
  std::vector<uint64_t> ids = std::move(resend_);
  resend_.clear();
  for (uint64_t id : ids) {
    if (auto it = reqs_.find(id); it != reqs_.end()) SendGet(*it->second);
  }
}

bool CoreObjects::Tick(uint64_t now) {
  bool did = false;
  if (!resend_.empty() && now >= resend_deadline_) {  // the link did not come back in time
    std::vector<uint64_t> ids = std::move(resend_);
    resend_.clear();
    for (uint64_t id : ids) {
      if (auto it = reqs_.find(id); it != reqs_.end()) Fail(*it->second, Unavailable());
    }
    did = true;
  }
  if (!retrying_.empty()) {
    std::vector<uint64_t> due;
    for (auto it = retrying_.begin(); it != retrying_.end();) {
      auto r = reqs_.find(*it);
      if (r == reqs_.end()) {
        it = retrying_.erase(it);
      } else if (r->second->retry_at <= now) {
        due.push_back(*it);
        it = retrying_.erase(it);
      } else {
        ++it;
      }
    }
    for (uint64_t id : due) {
      if (auto r = reqs_.find(id); r != reqs_.end()) SendPutBegin(*r->second);
      did = true;
    }
  }
  if (!sending_.empty() && !link_->over_limit()) {
    std::vector<uint64_t> ids = std::move(sending_);
    sending_.clear();
    for (uint64_t id : ids) {
      if (auto r = reqs_.find(id); r != reqs_.end()) SendPieces(*r->second);
    }
    did = true;
  }
  return did;
}

}  // namespace goblin::gateway
