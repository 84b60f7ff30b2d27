// The HTTP front's side of the core link: lookups and their answers (hits from the lent
// pools, ranges, multipart/byteranges, conditionals, HEAD), PURGE, and what the front does
// when the core link goes down. See http_server_impl.h.
#include <algorithm>
#include <random>

#include "goblin/common/clock.h"
#include "goblin/common/log.h"
#include "goblin/gateway/cache_policy.h"
#include "goblin/sbe/wire_flags.h"
#include "http_server_impl.h"

namespace goblin::gateway {
namespace {
constexpr std::string_view kLog = "http";
}  // namespace

using detail::ErrorBody;
using detail::MetaGet;
using detail::Reason;

void HttpServer::Impl::ExpectCoreReply() {
  poll_until_ = std::max(
      poll_until_, MonotonicNanos() + static_cast<uint64_t>(options_.core_reply_poll.count()));
}

bool HttpServer::Impl::SendRequest(Conn& c, FunctionRef<size_t(uint8_t*, size_t)> encode,
                                   size_t max_bytes, uint16_t shard) {
  switch (core_->Send(encode, max_bytes, shard)) {
    case CoreLink::SendResult::kSent:
    case CoreLink::SendResult::kQueued:
      return true;
    case CoreLink::SendResult::kTooLarge:
      Fail(c, 414, "the URL is too long for goblin-core's ring");
      return false;
    case CoreLink::SendResult::kBusy:
      ++stats_.core_unavailable;
      Fail(c, 503, "goblin-core is overloaded");
      return false;
    case CoreLink::SendResult::kDown:
      ++stats_.core_unavailable;
      Fail(c, 503, "goblin-core is unavailable");
      return false;
  }
  return false;
}

uint64_t HttpServer::Impl::CoreGet(Conn& c, uint64_t offset, uint64_t length, bool follow) {
  uint64_t corr = next_corr_++;
  const std::string& key = c.ex->key;
  uint32_t flags = wire::kGetLoans | (follow ? wire::kGetFollowFill : 0);
  // A reader revalidating a stale copy it may not serve waits for the revalidation in
  // progress (in any worker or gateway) rather than reading that copy.
  if (follow && c.ex->reval_generation != 0) flags |= wire::kGetAwaitReserved;
  if (follow && c.ex->await_commit) flags |= wire::kGetAwaitCommit;
  // A whole object: where its head is, for local hits of the next requests.
  if (options_.local_hits && offset == 0 && length == UINT64_MAX) flags |= wire::kGetDescribe;
  const uint16_t shard = core_->ShardFor(key);
  bool sent = SendRequest(
      c,
      [&](uint8_t* b, size_t cap) {
        return wire::ObjectGetEncoder(b, cap)
            .set_correlation_id(corr)
            .set_offset(offset)
            .set_length(length)
            .set_flags(flags)
            .set_key(key)
            .Finish();
      },
      key.size() + 64, shard);
  if (!sent) return 0;
  corr_[corr] = {CorrKind::kLookup, c.id, nullptr, shard};
  c.ex->corr = corr;
  c.ex->state = ExState::kLookup;
  ExpectCoreReply();
  return corr;
}

void HttpServer::Impl::CancelCoreGet(Conn& c) {
  if (!c.ex || c.ex->corr == 0) return;
  auto it = corr_.find(c.ex->corr);
  if (it == corr_.end() || it->second.kind != CorrKind::kLookup || it->second.conn != c.id) return;
  const uint64_t corr = c.ex->corr;
  const uint16_t shard = it->second.shard;  // (where the get went: a core may have joined since)
  corr_.erase(it);
  c.ex->corr = 0;
  core_->SendAlways(
      [&](uint8_t* b, size_t cap) {
        return wire::ObjectGetCancelEncoder(b, cap).set_correlation_id(corr).Finish();
      },
      32, shard);
}

uint64_t HttpServer::Impl::CoreHead(Conn& c) {
  uint64_t corr = next_corr_++;
  const std::string& key = c.ex->key;
  const uint16_t shard = core_->ShardFor(key);
  bool sent = SendRequest(
      c,
      [&](uint8_t* b, size_t cap) {
        return wire::ObjectHeadEncoder(b, cap).set_correlation_id(corr).set_key(key).Finish();
      },
      key.size() + 64, shard);
  if (!sent) return 0;
  corr_[corr] = {CorrKind::kHeadLookup, c.id, nullptr, shard};
  c.ex->corr = corr;
  c.ex->state = ExState::kLookup;
  ExpectCoreReply();
  return corr;
}

std::string HttpServer::Impl::HitHead(Exchange& ex, int status, std::string_view meta,
                                      uint64_t created_ns, std::string_view extra,
                                      bool drop_content_type, size_t body_bytes) {
  uint64_t now = detail::NowUnixNanos();
  uint64_t age = created_ns != 0 && now > created_ns ? (now - created_ns) / 1'000'000'000ULL : 0;
  std::string out = TakeString();
  // One allocation for the whole head (and a body the caller appends).
  out.reserve(192 + meta.size() + extra.size() + body_bytes);
  fmt::format_to(std::back_inserter(out), "HTTP/1.1 {} {}\r\n", status, Reason(status));
  detail::AppendStoredHeaders(&out, meta, drop_content_type);
  fmt::format_to(std::back_inserter(out),
                 "Date: {}\r\nAge: {}\r\nVia: 1.1 goblin\r\nX-Cache: {}\r\nAccept-Ranges: "
                 "bytes\r\n{}{}\r\n",
                 HttpDate(), age,
                 ex.is_miss ? "MISS"
                 : ex.stale ? "STALE"
                            : "HIT",
                 extra, ex.keep_alive ? "" : "Connection: close\r\n");
  return out;
}

std::string_view HttpServer::Impl::HttpDate() {
  uint64_t now = detail::NowSeconds();
  if (now != date_second_ || date_.empty()) {
    date_ = http::FormatHttpDate(static_cast<int64_t>(now));
    date_second_ = now;
  }
  return date_;
}

void HttpServer::Impl::OnCoreMessage(uint16_t shard, std::span<const uint8_t> m) {
  sbe::MessageHeader h;
  if (!sbe::MessageHeader::Read(m, &h) || m.size() < 16) return;
  uint64_t corr = sbe::Load<uint64_t>(m.data() + 8);
  auto it = corr_.find(corr);
  if (it == corr_.end()) {
    if (h.template_id == wire::LoanDecoder::kTemplateId) {  // nobody wants it any more
      if (auto l = wire::LoanDecoder::Decode(m)) core_->ReturnLoan(l->loan_id(), shard);
    }
    return;
  }
  CorrTarget t = it->second;
  if (t.kind == CorrKind::kFill || t.kind == CorrKind::kFillCommit ||
      t.kind == CorrKind::kOrphanLease) {
    return OnFillReply(t, shard, corr, h.template_id, m);
  }
  OnExchangeReply(t, shard, corr, h.template_id, m);
}

void HttpServer::Impl::OnExchangeReply(CorrTarget t, uint16_t shard, uint64_t corr,
                                       uint16_t template_id, std::span<const uint8_t> m) {
  auto it = corr_.find(corr);
  Conn* c = Find(t.conn);
  if (c == nullptr || !c->ex || c->ex->corr != corr) {
    // The client went away (or moved on): give back what was lent, forget the id at the end.
    bool last_message = true;
    if (template_id == wire::LoanDecoder::kTemplateId) {
      if (auto l = wire::LoanDecoder::Decode(m)) {
        core_->ReturnLoan(l->loan_id(), shard);
        last_message = l->last() != 0;
      }
    } else if (template_id == wire::ObjectDataDecoder::kTemplateId) {
      if (auto d = wire::ObjectDataDecoder::Decode(m)) last_message = d->last() != 0;
    } else if (template_id == wire::ObjectInfoDecoder::kTemplateId) {
      auto info = wire::ObjectInfoDecoder::Decode(m);
      last_message =
          !info || info->status() == wire::LookupStatus::kMiss || t.kind == CorrKind::kHeadLookup;
    }
    if (last_message) corr_.erase(it);
    return;
  }
  switch (template_id) {
    case wire::ObjectInfoDecoder::kTemplateId: {
      auto info = wire::ObjectInfoDecoder::Decode(m);
      if (!info) return;
      // A HEAD lookup or a miss is the whole answer; a GET's body follows.
      if (info->status() == wire::LookupStatus::kMiss || t.kind == CorrKind::kHeadLookup)
        corr_.erase(it);
      OnObjectInfo(*c, *info);
      return;
    }
    case wire::LoanDecoder::kTemplateId: {
      auto l = wire::LoanDecoder::Decode(m);
      if (!l) return;
      CoreLink::Pools* pools = core_->pools(shard);
      bool last = l->last() != 0;
      if (last) corr_.erase(it);
      bool used = false;
      for (auto seg : l->segments()) {
        const Mapping& pool = seg.pool() == wire::PoolKind::kHead ? pools->head : pools->io;
        if (seg.pool_offset() + seg.length() > pool.size()) {
          GOBLIN_LOG_ERROR(kLog, "a loan outside the core's pool (offset {} + {} > {})",
                           seg.pool_offset(), seg.length(), pool.size());
          break;
        }
        stats_.bytes_lent += seg.length();
        CoreLink::Hold(pools);
        used = true;
        const bool by_ref = options_.send_by_reference && !async_ &&
                            seg.pool() == wire::PoolKind::kHead &&
                            (seg.flags() & wire::kSegmentStable) != 0 && pools->head_fd;
        OnCoreBody(*c, {pool.data() + seg.pool_offset(), seg.length()}, l->loan_id(), pools, by_ref,
                   last);
        break;  // one segment per loan
      }
      if (!used) {
        core_->ReturnLoan(l->loan_id(), shard);
        Fail(*c, 502, "goblin-core lent memory outside its pools");
      }
      return;
    }
    case wire::ObjectDataDecoder::kTemplateId: {
      auto d = wire::ObjectDataDecoder::Decode(m);
      if (!d) return;
      bool last = d->last() != 0;
      if (last) corr_.erase(it);
      OnCoreBody(*c, d->bytes_bytes(), 0, nullptr, false, last);
      return;
    }
    case wire::PurgeAckDecoder::kTemplateId: {
      auto a = wire::PurgeAckDecoder::Decode(m);
      c->ex->purged += a ? a->deleted() : 0;
      if (c->ex->acks_due > 1) {  // other shards are still purging theirs
        --c->ex->acks_due;
        return;
      }
      corr_.erase(it);
      ++stats_.purges;
      return Respond(*c, 200,
                     fmt::format("200 {} {} objects\n",
                                 c->ex->purge_soft ? "Soft-purged" : "Purged", c->ex->purged));
    }
    case wire::DeleteAckDecoder::kTemplateId: {
      auto a = wire::DeleteAckDecoder::Decode(m);
      corr_.erase(it);
      ++stats_.purges;
      if (a && a->deleted())
        return Respond(*c, 200, c->ex->purge_soft ? "200 Soft-purged\n" : "200 Purged\n");
      return Respond(*c, 404, "404 Not in cache\n");
    }
    case wire::ErrorDecoder::kTemplateId: {
      auto e = wire::ErrorDecoder::Decode(m);
      corr_.erase(it);
      std::string text = e ? std::string(e->text()) : "error";
      if (c->ex->head_sent) {
        // A followed fill that was abandoned, a damaged extent, ...: cut the body off.
        GOBLIN_LOG_WARN(kLog, "'{}' failed mid-body: {}", c->ex->key, text);
      }
      // A fill it waited for ended before its head (the origin failed it): the origin's fault.
      if (e && e->code() == wire::ErrorCode::kAborted) {
        return Fail(*c, 502, text);
      }
      return Fail(*c, 503, text);
    }
    default:
      return;
  }
}

void HttpServer::Impl::OnObjectInfo(Conn& c, const wire::ObjectInfoDecoder& info) {
  Exchange& ex = *c.ex;
  if (ex.local_tail) {
    // The tail of a head sent from here: it must be the same version's.
    if (info.status() != wire::LookupStatus::kHit || info.generation() != ex.local_generation) {
      ++stats_.local_cut;
      return Fail(c, 503, "the object changed while its head was sent");
    }
    return;
  }
  if (ex.state == ExState::kCoreBody) return;  // a later part of a multi-range answer
  if (info.status() == wire::LookupStatus::kMiss) {
    // (also when the fill we meant to follow ended before we asked: committed and gone,
    // or abandoned; or ended unstored: a revalidation answered 304 refreshed the stored
    // version, so look once more before going to the origin)
    if (ex.follow && ex.relookups == 0) return LookAgain(c);
    ex.follow = false;
    return Miss(c);
  }
  std::string_view meta = info.metadata();  // (the message outlives this call)
  uint64_t size = info.object_size();
  bool filling = info.status() == wire::LookupStatus::kFilling;
  // A stale version (past its freshness, kept for revalidation or grace): served in grace
  // while revalidated in the background, served when the origin is sick and its
  // stale-if-error allows, else asked for conditionally, once per exchange (after that,
  // what the core has is served).
  if (!filling && ex.revalidations == 0) {
    const uint64_t now_ms = detail::NowUnixNanos() / 1'000'000;
    const policy::Freshness fr =
        policy::Judge(meta, now_ms, options_.grace.count(), (info.marks() & wire::kInfoStale) != 0);
    // (a committing fill, read as a hit before its record is in, has no generation yet)
    if (fr.stale && info.generation() == 0 && !ex.await_commit) return AwaitCommit(c);
    if (fr.stale) {
      if (fr.if_error() && OpenFault() == OriginFault::kSick) {
        ex.stale = true;
        ++stats_.stale_if_error;
      } else if (fr.in_grace()) {
        ex.stale = true;
        RevalidateInBackground(ex, info.generation(), meta);
      } else {
        ex.if_error_until_ms = fr.if_error_until(now_ms);
        return Revalidate(c, info.generation(), meta);
      }
    }
  }
  // Only a committed object is a HIT (every byte in and checksummed: its record may still
  // be on the way); a fill in progress is streamed as a MISS. A miss that went to follow a
  // fill and found it complete reads a hit.
  if (filling) {
    if (!ex.is_miss) ++stats_.coalesced;
    ex.is_miss = true;
    ex.cache = "MISS";
  } else {
    if (ex.is_miss && stats_.misses > 0) --stats_.misses;
    ex.is_miss = false;
    ex.cache = ex.stale ? "STALE" : ex.revalidated ? "REVALIDATED" : "HIT";
    ++stats_.hits;
    if (ex.stale) ++stats_.stale_served;
  }
  if (ex.via_head_lookup) {
    // Conditionals first, then ranges.
    if (policy::NotModified(ex.inm, ex.ims, MetaGet(meta, "etag"),
                            MetaGet(meta, "last-modified"))) {
      Write(c, HitHead(ex, 304, meta, info.created_nanos(), ""), true);
      return FinishExchange(c);
    }
    if (ex.head) {
      Write(c, HitHead(ex, 200, meta, info.created_nanos(), detail::ContentLength(size).view()),
            true);
      return FinishExchange(c);
    }
    auto rr = http::ParseRange(ex.range, size, &ex.ranges);
    if (rr == http::RangeResult::kUnsatisfiable) {
      Write(c,
            HitHead(ex, 416, "", info.created_nanos(),
                    fmt::format("Content-Range: bytes */{}\r\nContent-Length: 0\r\n", size)),
            true);
      return FinishExchange(c);
    }
    ex.size = size;
    if (rr == http::RangeResult::kOk && ex.ranges.size() == 1) {
      const auto& r = ex.ranges[0];
      Write(c,
            HitHead(ex, 206, meta, info.created_nanos(),
                    fmt::format("Content-Range: bytes {}-{}/{}\r\nContent-Length: {}\r\n", r.first,
                                r.last, size, r.length())),
            true);
      if (CoreGet(c, r.first, r.length(), false) != 0) ex.state = ExState::kCoreBody;
      return;
    }
    if (rr == http::RangeResult::kOk) {
      // multipart/byteranges: the length is known up front; the parts carry the type.
      std::mt19937_64 rng(detail::NowUnixNanos());
      ex.boundary = fmt::format("goblin{:016x}", rng());
      ex.content_type = std::string(MetaGet(meta, "content-type"));
      uint64_t total = 0;
      for (const auto& r : ex.ranges) {
        total +=
            fmt::format("\r\n--{}\r\n{}Content-Range: bytes {}-{}/{}\r\n\r\n", ex.boundary,
                        ex.content_type.empty() ? "" : "Content-Type: " + ex.content_type + "\r\n",
                        r.first, r.last, size)
                .size() +
            r.length();
      }
      total += fmt::format("\r\n--{}--\r\n", ex.boundary).size();
      Write(
          c,
          HitHead(ex, 206, meta, info.created_nanos(),
                  fmt::format("Content-Type: multipart/byteranges; boundary={}\r\nContent-Length: "
                              "{}\r\n",
                              ex.boundary, total),
                  /*drop_content_type=*/true),
          true);
      ex.range_idx = 0;
      ex.state = ExState::kCoreBody;
      return StartRangePart(c);
    }
    // No (usable) range: the whole object.
    Write(c, HitHead(ex, 200, meta, info.created_nanos(), detail::ContentLength(size).view()),
          true);
    if (CoreGet(c, 0, UINT64_MAX, false) != 0) ex.state = ExState::kCoreBody;
    return;
  }
  // ObjectGet answered: the body follows.
  ex.size = size;
  if (!filling && !ex.stale) Learn(ex, info);  // (a stale head is not served locally)
  if (ex.head) {
    Write(c,
          HitHead(ex, 200, meta, info.created_nanos(),
                  size == UINT64_MAX ? std::string_view() : detail::ContentLength(size).view()),
          true);
    return FinishExchange(c);
  }
  if (filling && size == UINT64_MAX) {
    ex.chunked_out = !ex.minor0;
    if (ex.minor0) c.close_after = true;
    Write(c,
          HitHead(ex, 200, meta, info.created_nanos(),
                  ex.chunked_out ? "Transfer-Encoding: chunked\r\n" : ""),
          true);
  } else {
    Write(c, HitHead(ex, 200, meta, info.created_nanos(), detail::ContentLength(size).view()),
          true);
  }
  // (a zero-byte object: the core still sends one empty last record, which ends it)
  ex.state = ExState::kCoreBody;
}

void HttpServer::Impl::StartRangePart(Conn& c) {
  Exchange& ex = *c.ex;
  const auto& r = ex.ranges[ex.range_idx];
  Write(c, fmt::format("\r\n--{}\r\n{}Content-Range: bytes {}-{}/{}\r\n\r\n", ex.boundary,
                       ex.content_type.empty() ? "" : "Content-Type: " + ex.content_type + "\r\n",
                       r.first, r.last, ex.size));
  if (CoreGet(c, r.first, r.length(), false) != 0) ex.state = ExState::kCoreBody;
}

void HttpServer::Impl::OnCoreBody(Conn& c, std::span<const uint8_t> bytes, uint64_t loan,
                                  CoreLink::Pools* pools, bool by_ref, bool last) {
  Exchange& ex = *c.ex;
  if (ex.chunked_out && !bytes.empty()) Write(c, fmt::format("{:x}\r\n", bytes.size()));
  if (loan != 0) {
    if (bytes.empty()) {
      ReleaseLoan(loan, pools);
    } else {
      WriteLoan(c, bytes.data(), bytes.size(), loan, pools, by_ref);
    }
  } else if (!bytes.empty()) {
    Write(c, std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }
  if (ex.chunked_out && !bytes.empty()) Write(c, "\r\n");
  if (!last) return;
  if (!ex.ranges.empty() && ex.ranges.size() > 1) {
    if (++ex.range_idx < ex.ranges.size()) return StartRangePart(c);
    Write(c, fmt::format("\r\n--{}--\r\n", ex.boundary));
  }
  if (ex.chunked_out) Write(c, "0\r\n\r\n");
  FinishExchange(c);
}

void HttpServer::Impl::OnCoreDown() {
  ++stats_.core_disconnects;
  EndCoreRequests(0, 0, /*whole_link=*/true);
}

void HttpServer::Impl::OnCoreLost(uint16_t first, uint16_t count) {
  ++stats_.cores_lost;
  EndCoreRequests(first, count, /*whole_link=*/false);
}

void HttpServer::Impl::EndCoreRequests(uint16_t first, uint16_t count, bool whole_link) {
  hot_.Clear();  // (descriptors name the old connection's mappings)
  auto lost = [&](uint16_t shard) {
    return whole_link || (shard >= first && static_cast<uint32_t>(shard) < first + count);
  };
  // Every request to the lost shards is gone with them; fills there lose their lease.
  std::vector<uint64_t> waiting, purging;  // (a purge is not looked up again: it gets 503)
  for (auto it = corr_.begin(); it != corr_.end();) {
    if (!lost(it->second.shard) && it->second.shard != kEveryShard) {
      ++it;
      continue;
    }
    if (it->second.conn != 0) {
      (it->second.kind == CorrKind::kPurge ? purging : waiting).push_back(it->second.conn);
    }
    it = corr_.erase(it);
  }
  std::sort(waiting.begin(), waiting.end());
  waiting.erase(std::unique(waiting.begin(), waiting.end()), waiting.end());
  for (uint64_t id : purging) {
    if (Conn* c = Find(id); c != nullptr && c->ex) {
      ++stats_.core_unavailable;
      Fail(*c, 503, "goblin-core is unavailable");
    }
  }
  std::vector<Fill*> fills;
  for (auto& [ptr, f] : all_fills_) {
    if (lost(f->shard)) fills.push_back(ptr);
  }
  for (Fill* f : fills) {
    if (f->stage == Stage::kCommitting) {
      EndFill(*f);  // the origin is done; the commit's fate is unknown: not stored here
    } else if (f->stage != Stage::kUncached && (f->stage != Stage::kFetching || f->reserved)) {
      Uncache(*f, whole_link ? "the core link went down" : "its core was lost");
    }
  }
  std::vector<uint64_t> now;  // (a core lost alone: its keys have their next owner already)
  for (uint64_t id : waiting) {
    Conn* c = Find(id);
    if (c == nullptr || !c->ex) continue;
    Exchange& ex = *c->ex;
    if (ex.state == ExState::kLookup && !ex.head_sent && !ex.relooked) {
      // Nothing went to the client yet: asked again (a core that died: its keys at their
      // next owner; a core restart: the same core once the link is back).
      ex.relooked = true;
      ex.corr = 0;
      (whole_link ? relook_ : now).push_back(id);
    } else if (ex.state == ExState::kLookup || ex.state == ExState::kCoreBody) {
      if (ex.relooked) GOBLIN_LOG_WARN(kLog, "a lookup sent again was lost with the link again");
      ++stats_.core_unavailable;
      Fail(*c, 503, "goblin-core is unavailable");
    }
  }
  if (whole_link && !relook_.empty()) {
    relook_deadline_ = MonotonicNanos() + kRelookWaitNs;
    GOBLIN_LOG_INFO(kLog, "{} lookup{} in flight on the lost core link will be sent again",
                    relook_.size(), relook_.size() == 1 ? "" : "s");
  }
  if (!now.empty()) {
    GOBLIN_LOG_INFO(kLog, "{} lookup{} in flight on the lost core sent to the next owner",
                    now.size(), now.size() == 1 ? "" : "s");
  }
  for (uint64_t id : now) {
    Conn* c = Find(id);
    if (c != nullptr && c->ex && c->ex->state == ExState::kLookup && c->ex->corr == 0) Relook(*c);
  }
}

void HttpServer::Impl::Relook(Conn& c) {
  ++stats_.core_retries;
  if (c.ex->follow) {
    Follow(c);
  } else {
    LookUp(c);
  }
}

void HttpServer::Impl::TakeRelooks(FunctionRef<void(Conn&)> fn) {
  std::vector<uint64_t> ids = std::move(relook_);
  relook_.clear();
  for (uint64_t id : ids) {
    Conn* c = Find(id);
    // (still waiting: not closed, nor answered meanwhile)
    if (c != nullptr && c->ex && c->ex->state == ExState::kLookup && c->ex->corr == 0) fn(*c);
  }
}

void HttpServer::Impl::OnCoreUp() {
  TakeRelooks([this](Conn& c) { Relook(c); });
}

void HttpServer::Impl::ExpireRelooks(uint64_t now) {
  if (now < relook_deadline_) return;
  size_t n = 0;
  TakeRelooks([&](Conn& c) {
    ++n;
    ++stats_.core_unavailable;
    Fail(c, 503, "goblin-core is unavailable");
  });
  if (n > 0) {
    GOBLIN_LOG_WARN(kLog, "{} lookup{} answered 503: the core link was not back within {} s", n,
                    n == 1 ? "" : "s", kRelookWaitNs / 1'000'000'000);
  }
}

}  // namespace goblin::gateway
