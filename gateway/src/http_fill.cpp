// Misses of the HTTP front: one origin fetch per key, written to the core as a fill while
// the requesting client (the leader) reads it straight from the origin; other requests for
// the key wait for the origin's answer (waiters) and then follow the fill through the core
// (followers). How a fill ends (http_server_impl.h): committed, or aborted by an origin fault
// (AbortFill: nothing stored, everyone reading it cut off or answered 5xx, the key free at
// once), or left uncached by the core (Uncache: refused, aborted by the core, link lost; the
// leader finishes from the origin).
#include <algorithm>

#include "goblin/common/clock.h"
#include "goblin/common/log.h"
#include "goblin/gateway/cache_policy.h"
#include "goblin/sbe/wire_flags.h"
#include "http_server_impl.h"

namespace goblin::gateway {
namespace {
constexpr std::string_view kLog = "http";
}  // namespace

using detail::Describe;
using detail::StatusFor;

void HttpServer::Impl::Miss(Conn& c) {
  Exchange& ex = *c.ex;
  ex.is_miss = true;
  ex.cache = "MISS";
  ++stats_.misses;
  MissFill(c);
}

void HttpServer::Impl::MissFill(Conn& c) {
  Exchange& ex = *c.ex;
  bool ranged = !ex.range.empty();
  auto fit = fills_.find(ex.key);
  Fill* f = fit == fills_.end() ? nullptr : fit->second;
  if (f != nullptr && ex.reval_generation != 0 && f->stage == Stage::kCommitting) {
    // The stale version may be this very fill's (the core committed it and a lookup saw it
    // before its answer came here): following it would serve that version unvalidated.
    f->revalidators.push_back(c.id);
    ex.state = ExState::kWaitFill;
    return;
  }
  if (f != nullptr && !ranged) {
    ++stats_.coalesced;
    if (f->stage == Stage::kFilling || f->stage == Stage::kCommitting) return Follow(c);
    f->waiters.push_back(c.id);  // kFetching or kLeasing: until the origin/core decide
    ex.state = ExState::kWaitFill;
    return;
  }
  if (ranged) {
    // Answer the range from the origin at once; fill the whole object behind it.
    if (f == nullptr && Reserve(ex, 0) == nullptr) StartFill(ex, false, 0);
    return PassToOrigin(c);
  }
  if (Reserve(ex, c.id) == nullptr && StartFill(ex, true, c.id) == nullptr) {
    if (ServeStaleOnError(c)) return;  // (a revalidation whose stale-if-error allows it)
    const OriginFault why = OpenFault();
    return Fail(c, StatusFor(why), Describe(why));
  }
  ex.state = ExState::kOrigin;
}

namespace {
// A key with the request headers of --cache-key-header is one variant of its URL's object
// (policy::BuildCacheKey puts a NUL between them): the core bounds their number.
uint32_t VariantFlag(std::string_view key) {
  return key.find('\0') != std::string_view::npos ? wire::kPutVariant : 0;
}
}  // namespace

HttpServer::Impl::Fill* HttpServer::Impl::Reserve(Exchange& ex, uint64_t leader) {
  const uint64_t corr = next_corr_++;
  const std::string& key = ex.key;
  const uint16_t shard = core_->ShardFor(key);
  auto sent = core_->Send(
      [&](uint8_t* b, size_t cap) {
        return wire::PutBeginEncoder(b, cap)
            .set_correlation_id(corr)
            .set_expected_size(UINT64_MAX)
            .set_ttl_nanos(0)
            .set_flags((ex.reval_generation != 0 ? wire::kPutReserve | wire::kPutIfGeneration
                                                 : wire::kPutReserve) |
                       VariantFlag(key))
            .set_if_generation(ex.reval_generation)
            .set_key(key)
            .set_metadata(std::string_view())
            .Finish();
      },
      key.size() + 96, shard);
  if (sent != CoreLink::SendResult::kSent && sent != CoreLink::SendResult::kQueued) return nullptr;
  auto f = std::make_unique<Fill>();
  f->key = ex.key;
  f->shard = shard;
  f->target = ex.target;
  f->key_lines = ex.key_lines;
  f->host = ex.host;
  f->leader = leader;
  f->leader_head = leader != 0 && ex.head;
  f->reval_generation = ex.reval_generation;
  f->reval_meta = ex.reval_meta;
  f->stage = Stage::kReserving;
  f->begin_corr = corr;
  Fill* p = f.get();
  corr_[corr] = {CorrKind::kFill, 0, p, shard};
  fills_[p->key] = p;
  all_fills_.emplace(p, std::move(f));
  return p;
}

void HttpServer::Impl::OnReservation(Fill& f, uint64_t corr, uint16_t template_id,
                                     std::span<const uint8_t> m) {
  std::optional<wire::FillLeaseDecoder> lease;
  if (template_id == wire::FillLeaseDecoder::kTemplateId) {
    if (auto d = wire::FillLeaseDecoder::Decode(m)) lease = *d;
  }
  if (lease && lease->state() == wire::LeaseState::kGranted) {
    // Ours: now ask the origin (the id stays: the core names it in errors about the fill).
    f.put_id = lease->put_id();
    f.reserved = true;
    Origin* o = OpenOrigin("GET", f.target, "",
                           OriginLines(f.key_lines, f.reval_generation != 0 ? f.reval_meta : ""));
    if (o == nullptr) {
      SendPutAbort(f.put_id, f.shard);
      f.put_id = 0;
      f.reserved = false;
      corr_.erase(corr);
      f.begin_corr = 0;
      return AbortFill(f, OpenFault());
    }
    f.origin = o;
    o->fill = &f;
    f.stage = Stage::kFetching;
    return;
  }
  corr_.erase(corr);
  f.begin_corr = 0;
  std::vector<uint64_t> readers = std::move(f.waiters);
  f.waiters.clear();
  if (f.leader != 0) readers.insert(readers.begin(), f.leader);
  f.leader = 0;
  const bool elsewhere = lease && lease->state() == wire::LeaseState::kInProgress;
  if (!elsewhere && template_id == wire::ErrorDecoder::kTemplateId) {
    auto e = wire::ErrorDecoder::Decode(m);
    GOBLIN_LOG_WARN(kLog, "'{}' is served uncached: the core refused to reserve it: {}", f.key,
                    e ? e->text() : "error");
  }
  EndFill(f);
  // In progress elsewhere (another worker or gateway): everyone follows that fill (the core
  // holds the follow until its head is in). Refused: each fetches for itself, uncached.
  for (uint64_t id : readers) {
    Conn* c = Find(id);
    if (c == nullptr || !c->ex) continue;
    if (elsewhere && c->ex->range.empty()) {
      ++stats_.coalesced;
      Follow(*c);
    } else {
      PassToOrigin(*c);
    }
  }
}

HttpServer::Impl::Fill* HttpServer::Impl::StartFill(Exchange& ex, bool leader_is_client,
                                                    uint64_t leader) {
  Origin* o = OpenOrigin("GET", ex.target, "",
                         OriginLines(ex.key_lines, ex.reval_generation != 0 ? ex.reval_meta : ""));
  if (o == nullptr) return nullptr;
  auto f = std::make_unique<Fill>();
  f->reval_generation = ex.reval_generation;
  f->reval_meta = ex.reval_meta;
  f->key = ex.key;
  f->shard = core_->ShardFor(f->key);
  f->target = ex.target;
  f->key_lines = ex.key_lines;
  f->host = ex.host;
  f->leader = leader_is_client ? leader : 0;
  f->leader_head = leader_is_client && ex.head;
  f->origin = o;
  o->fill = f.get();
  Fill* p = f.get();
  fills_[p->key] = p;
  all_fills_.emplace(p, std::move(f));
  return p;
}

void HttpServer::Impl::OnFillHead(Origin& o) {
  Fill& f = *o.fill;
  const http::Response& r = o.resp;
  if (f.reval_generation != 0 && r.status == 304) return OnNotModified(f, r);
  if (f.reval_generation != 0 && r.status >= 500) {
    // A failed revalidation: readers whose stale-if-error allows it get the stale copy;
    // the others get this answer (the leader) or fetch for themselves.
    if (Conn* l = Find(f.leader); l != nullptr && l->ex && ServeStaleOnError(*l)) f.leader = 0;
    std::erase_if(f.waiters, [&](uint64_t id) {
      Conn* c = Find(id);
      return c != nullptr && c->ex && ServeStaleOnError(*c);
    });
  }
  std::string passthrough;
  for (const auto& h : r.headers) {
    if (detail::EndToEnd(h.name)) passthrough += fmt::format("{}: {}\r\n", h.name, h.value);
  }
  const policy::Storability verdict =
      policy::Decide(r, options_.default_ttl.count(), static_cast<int64_t>(detail::NowSeconds()),
                     options_.keep.count(), options_.grace.count());
  const bool cacheable = verdict.store;
  if (f.reval_generation != 0 && !cacheable && r.status < 500) DropStale(f);
  const std::string tags = cacheable ? policy::SurrogateKeys(r) : std::string();
  const uint64_t ttl_ns =
      static_cast<uint64_t>(verdict.ttl_seconds + verdict.keep_seconds) * 1'000'000'000ULL;
  if (Conn* leader = Find(f.leader); leader != nullptr && leader->ex) {
    std::string framing;
    if (r.framing.content_length) {
      framing = fmt::format("Content-Length: {}\r\n", *r.framing.content_length);
    } else if (!leader->ex->minor0) {
      framing = "Transfer-Encoding: chunked\r\n";
    }
    leader->ex->chunked_out = framing.starts_with("Transfer") && !leader->ex->head;
    if (framing.empty()) leader->close_after = true;
    Write(*leader,
          fmt::format("HTTP/1.1 {} {}\r\n{}Date: {}\r\nAge: 0\r\nVia: 1.1 goblin\r\nX-Cache: "
                      "MISS\r\n{}{}{}\r\n",
                      r.status, r.reason, passthrough, HttpDate(),
                      cacheable ? "Accept-Ranges: bytes\r\n" : "", framing,
                      leader->close_after ? "Connection: close\r\n" : ""),
          true);
    if (leader->ex->head) {
      leader->ex->state = ExState::kDone;
      f.leader = 0;
      FinishExchange(*leader);
    }
  }
  if (f.stage == Stage::kUncached) return;  // (the core went away meanwhile: just stream)
  if (!cacheable) {
    ++stats_.passes;
    if (Conn* l = f.leader != 0 ? Find(f.leader) : nullptr; l != nullptr && l->ex)
      l->ex->cache = "PASS";
    return Uncache(f, "");  // each waiter (here or in another gateway) fetches for itself
  }
  if (f.reserved) {
    // The reservation's head: from now on the core lets followers in, at once.
    const uint64_t expected = r.framing.content_length.value_or(UINT64_MAX);
    auto sent = SendPutHead(f, expected, ttl_ns, 0, StoredMeta(passthrough, verdict), tags);
    if (sent == CoreLink::SendResult::kDown) return;  // OnCoreDown has dealt with the fill
    f.reserved = false;
    return FillGranted(f);
  }
  uint64_t corr = next_corr_++;
  uint64_t expected = r.framing.content_length.value_or(UINT64_MAX);
  const std::string& key = f.key;
  const std::string meta = StoredMeta(passthrough, verdict);
  auto sent = core_->Send(
      [&](uint8_t* b, size_t cap) {
        return wire::PutBeginEncoder(b, cap)
            .set_correlation_id(corr)
            .set_expected_size(expected)
            .set_ttl_nanos(ttl_ns)
            .set_flags(VariantFlag(key))
            .set_key(key)
            .set_metadata(meta)
            .set_tags(tags)
            .Finish();
      },
      key.size() + meta.size() + tags.size() + 96, f.shard);
  if (sent != CoreLink::SendResult::kSent && sent != CoreLink::SendResult::kQueued) {
    return Uncache(f, sent == CoreLink::SendResult::kDown   ? "goblin-core is unavailable"
                      : sent == CoreLink::SendResult::kBusy ? "goblin-core is overloaded"
                                                            : "the headers do not fit the ring");
  }
  f.begin_corr = corr;
  f.stage = Stage::kLeasing;
  corr_[corr] = {CorrKind::kFill, 0, &f, f.shard};
}

void HttpServer::Impl::OnFillBody(Origin& o, std::string_view bytes) {
  Fill& f = *o.fill;
  f.received += bytes.size();
  Conn* leader = Find(f.leader);
  if (leader != nullptr && leader->ex) {
    if (leader->ex->chunked_out) Write(*leader, fmt::format("{:x}\r\n", bytes.size()));
    Write(*leader, std::string(bytes));
    if (leader->ex->chunked_out) Write(*leader, "\r\n");
  }
  if (f.stage == Stage::kFilling) {
    SendPutData(f, bytes);
  } else if (f.stage == Stage::kLeasing) {
    f.pending.append(bytes);  // until the lease arrives
  }
  // The origin waits for the slowest of: the leader, the core's ring, the lease.
  if (core_->queued_bytes() > kCoreBacklogHigh || f.pending.size() > kCoreBacklogHigh ||
      (leader != nullptr && leader->out_bytes > kClientOutputHigh)) {
    PauseOrigin(o);
  }
}

void HttpServer::Impl::SendPutData(Fill& f, std::string_view bytes) {
  const size_t max = core_->max_message() - 64;
  while (!bytes.empty()) {
    size_t n = std::min(max, bytes.size());
    std::string_view part = bytes.substr(0, n);
    uint64_t offset = f.sent;
    f.sent += n;
    // Always queued (bounded by pausing the origin): a lost PutData would break the fill.
    auto r = core_->SendAlways(
        [&](uint8_t* b, size_t cap) {
          return wire::PutDataEncoder(b, cap)
              .set_put_id(f.put_id)
              .set_offset(offset)
              .set_bytes(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(part.data()),
                                                  part.size()))
              .Finish();
        },
        n + 64, f.shard);
    if (r == CoreLink::SendResult::kDown) return;  // OnCoreDown has dealt with the fill
    bytes.remove_prefix(n);
  }
}

CoreLink::SendResult HttpServer::Impl::SendPutHead(const Fill& f, uint64_t expected_size,
                                                   uint64_t ttl_ns, uint32_t flags,
                                                   std::string_view metadata,
                                                   std::string_view tags) {
  // Always queued (bounded by pausing the origin): followers in the core wait for it.
  return core_->SendAlways(
      [&](uint8_t* b, size_t cap) {
        return wire::PutHeadEncoder(b, cap)
            .set_put_id(f.put_id)
            .set_expected_size(expected_size)
            .set_ttl_nanos(ttl_ns)
            .set_flags(flags)
            .set_metadata(metadata)
            .set_tags(tags)
            .Finish();
      },
      metadata.size() + tags.size() + 64, f.shard);
}

void HttpServer::Impl::SendPutAbort(uint64_t put_id, uint16_t shard) {
  core_->SendAlways(
      [&](uint8_t* b, size_t cap) {
        return wire::PutAbortEncoder(b, cap).set_put_id(put_id).Finish();
      },
      64, shard);
}

void HttpServer::Impl::OnFillReply(CorrTarget t, uint16_t shard, uint64_t corr,
                                   uint16_t template_id, std::span<const uint8_t> m) {
  if (t.kind == CorrKind::kOrphanLease) {
    // The fill ended before its lease came: give a granted lease straight back.
    corr_.erase(corr);
    if (template_id == wire::FillLeaseDecoder::kTemplateId) {
      auto lease = wire::FillLeaseDecoder::Decode(m);
      if (lease && lease->state() == wire::LeaseState::kGranted)
        SendPutAbort(lease->put_id(), shard);
    }
    return;
  }
  Fill& f = *t.fill;
  if (f.stage == Stage::kReserving && t.kind == CorrKind::kFill)
    return OnReservation(f, corr, template_id, m);
  if (template_id == wire::FillLeaseDecoder::kTemplateId && t.kind == CorrKind::kFill) {
    auto lease = wire::FillLeaseDecoder::Decode(m);
    if (lease && lease->state() == wire::LeaseState::kGranted) {
      f.put_id = lease->put_id();
      return FillGranted(f);  // (the id stays: the core names it in errors about the fill)
    }
    // Another process fills this key: our waiters follow that fill, our leader keeps
    // streaming from the origin, nothing of ours is stored.
    corr_.erase(corr);
    f.begin_corr = 0;
    f.stage = Stage::kUncached;
    f.pending.clear();
    fills_.erase(f.key);
    ReleaseWaiters(f, /*follow=*/true);
    if (f.origin_done) EndFill(f);
    return;
  }
  if (template_id == wire::PutResultDecoder::kTemplateId && t.kind == CorrKind::kFillCommit) {
    corr_.erase(corr);
    ++stats_.fills;
    return EndFill(f);
  }
  if (template_id != wire::ErrorDecoder::kTemplateId) return;
  auto e = wire::ErrorDecoder::Decode(m);
  std::string text = e ? std::string(e->text()) : "error";
  corr_.erase(corr);
  GOBLIN_LOG_WARN(kLog, "fill of '{}' not stored: {}", f.key, text);
  ++stats_.fills_aborted;
  if (t.kind == CorrKind::kFillCommit) return EndFill(f);  // followers were told by the core
  // Refused at PutBegin (a full tier, ...) or aborted by the core mid-fill (its followers
  // are cut off by the core): the leader still gets the origin's bytes.
  f.begin_corr = 0;
  Uncache(f, text);
}

void HttpServer::Impl::FillGranted(Fill& f) {
  f.stage = Stage::kFilling;
  if (!f.pending.empty()) {
    std::string p = std::move(f.pending);
    f.pending.clear();
    SendPutData(f, p);
  }
  ReleaseWaiters(f, /*follow=*/true);
  if (f.origin_done) CommitFill(f);
}

void HttpServer::Impl::CommitFill(Fill& f) {
  uint64_t corr = next_corr_++;
  auto r = core_->SendAlways(
      [&](uint8_t* b, size_t cap) {
        return wire::PutCommitEncoder(b, cap)
            .set_correlation_id(corr)
            .set_put_id(f.put_id)
            .set_total_size(f.received)
            .Finish();
      },
      64, f.shard);
  if (r == CoreLink::SendResult::kDown) return EndFill(f);
  f.stage = Stage::kCommitting;
  f.commit_corr = corr;
  corr_[corr] = {CorrKind::kFillCommit, 0, &f, f.shard};
}

void HttpServer::Impl::Uncache(Fill& f, std::string_view why) {
  if (!why.empty()) GOBLIN_LOG_INFO(kLog, "'{}' is served uncached: {}", f.key, why);
  Unstore(f);
  ReleaseWaiters(f, /*follow=*/false);                         // each fetches for itself
  if (f.origin_done || Find(f.leader) == nullptr) EndFill(f);  // (no one reads the origin)
}

void HttpServer::Impl::Unstore(Fill& f) {
  if (f.stage == Stage::kReserving) {
    // Nobody has asked the origin yet: the leader, too, fetches for itself.
    if (f.begin_corr != 0) corr_[f.begin_corr] = {CorrKind::kOrphanLease, 0, nullptr, f.shard};
    if (f.leader != 0) f.waiters.insert(f.waiters.begin(), f.leader);
    f.leader = 0;
  } else if (f.stage == Stage::kLeasing && f.begin_corr != 0) {
    corr_[f.begin_corr] = {CorrKind::kOrphanLease, 0, nullptr, f.shard};
  } else if (f.reserved && f.put_id != 0) {
    // Not stored: those waiting for the reservation in the core read a miss (or, for a
    // revalidation, the committed version) and fetch for themselves, like our waiters (a
    // no-op when the link is down).
    SendPutHead(f, 0, 0, wire::kHeadUncacheable, {});
    if (f.begin_corr != 0) corr_.erase(f.begin_corr);
  } else if (f.stage == Stage::kFilling && f.put_id != 0) {
    SendPutAbort(f.put_id,
                 f.shard);  // (a no-op when the link is down: the core dropped it already)
    if (f.begin_corr != 0) corr_.erase(f.begin_corr);
  }
  f.put_id = 0;
  f.reserved = false;
  f.begin_corr = 0;
  f.stage = Stage::kUncached;
  f.pending.clear();
  if (auto it = fills_.find(f.key); it != fills_.end() && it->second == &f) fills_.erase(it);
}

void HttpServer::Impl::AbortFill(Fill& f, OriginFault fault) {
  if ((f.stage == Stage::kLeasing || f.stage == Stage::kReserving) && f.begin_corr != 0) {
    corr_[f.begin_corr] = {CorrKind::kOrphanLease, 0, nullptr, f.shard};
    f.begin_corr = 0;
  } else if ((f.stage == Stage::kFilling || f.stage == Stage::kCommitting || f.reserved) &&
             f.put_id != 0) {
    SendPutAbort(f.put_id,
                 f.shard);  // the core cuts off its followers (Aborted) or lets them in
  }
  if (f.reserved || (f.stage != Stage::kFetching && f.stage != Stage::kUncached))
    ++stats_.fills_aborted;
  f.reserved = false;
  // (readers of a failed revalidation whose stale-if-error allows it get the stale copy:
  // the core still has it, and parked readers elsewhere read it when the abort arrives)
  const int status = StatusFor(fault);
  if (Conn* leader = Find(f.leader); leader != nullptr && leader->ex) {
    if (!ServeStaleOnError(*leader)) Fail(*leader, status, Describe(fault));
  }
  f.leader = 0;
  std::vector<uint64_t> waiters = std::move(f.waiters);
  f.waiters.clear();
  for (uint64_t id : waiters) {
    if (Conn* c = Find(id); c != nullptr && c->ex && !ServeStaleOnError(*c))
      Fail(*c, status, Describe(fault));
  }
  EndFill(f);
}

void HttpServer::Impl::OnFillOriginDone(Fill& f, bool ok, OriginFault fault) {
  f.origin = nullptr;
  if (!ok) return AbortFill(f, fault);
  f.origin_done = true;
  Conn* leader = Find(f.leader);
  if (leader != nullptr && leader->ex && leader->ex->state == ExState::kOrigin) {
    if (leader->ex->chunked_out) Write(*leader, "0\r\n\r\n");
    f.leader = 0;
    FinishExchange(*leader);
  }
  switch (f.stage) {
    case Stage::kFilling:
      return CommitFill(f);
    case Stage::kLeasing:
      return;  // FillGranted commits when the lease arrives
    default:
      return EndFill(f);
  }
}

void HttpServer::Impl::ReleaseWaiters(Fill& f, bool follow) {
  std::vector<uint64_t> waiters = std::move(f.waiters);
  f.waiters.clear();
  for (uint64_t id : waiters) {
    Conn* c = Find(id);
    if (c == nullptr || !c->ex) continue;
    if (follow && c->ex->range.empty()) {
      Follow(*c);
    } else {
      PassToOrigin(*c);
    }
  }
}

void HttpServer::Impl::PassToOrigin(Conn& c) {
  ++stats_.passes;
  c.ex->cache = "PASS";
  Origin* o = OpenOrigin(c.ex->head ? "HEAD" : "GET", c.ex->target, c.ex->range, c.ex->key_lines);
  if (o == nullptr) {
    const OriginFault why = OpenFault();
    return Fail(c, StatusFor(why), Describe(why));
  }
  o->pass_conn = c.id;
  c.ex->state = ExState::kOrigin;
}

void HttpServer::Impl::Follow(Conn& c) {
  // An in-progress fill is visible to ObjectGet (follow) only, so HEAD and conditional
  // requests read it as a GET (a HEAD stops after the headers).
  c.ex->follow = true;
  c.ex->via_head_lookup = false;
  CoreGet(c, 0, c.ex->head ? 0 : UINT64_MAX, true);
}

void HttpServer::Impl::EndFill(Fill& f) {
  if (f.ended) return;
  f.ended = true;
  if (f.origin != nullptr) {
    Origin* o = f.origin;
    f.origin = nullptr;
    o->fill = nullptr;
    CloseOrigin(*o);
  }
  if (f.begin_corr != 0) {
    if (auto it = corr_.find(f.begin_corr); it != corr_.end() && it->second.fill == &f)
      corr_.erase(it);
  }
  if (f.commit_corr != 0) {
    if (auto it = corr_.find(f.commit_corr); it != corr_.end() && it->second.fill == &f)
      corr_.erase(it);
  }
  if (auto it = fills_.find(f.key); it != fills_.end() && it->second == &f) fills_.erase(it);
  after_commit_.insert(after_commit_.end(), f.revalidators.begin(), f.revalidators.end());
  f.revalidators.clear();
  if (auto it = all_fills_.find(&f); it != all_fills_.end()) {
    dead_fills_.push_back(std::move(it->second));
    all_fills_.erase(it);
  }
}

void HttpServer::Impl::AfterCommits() {
  std::vector<uint64_t> ids = std::move(after_commit_);
  after_commit_.clear();
  for (uint64_t id : ids) {
    Conn* c = Find(id);
    // (the connection may have gone, or moved on: a revalidation waits in kWaitFill)
    if (c != nullptr && c->ex && c->ex->state == ExState::kWaitFill) MissFill(*c);
  }
}

}  // namespace goblin::gateway
