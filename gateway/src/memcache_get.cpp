// MemcacheServer: get, gets, gat, gats. Each key's value is asked of its core shard in
// pieces (ObjectGet of a range, the first bytes in the answer itself); answers are written in
// key order, the front key's as they arrive, the next keys' first pieces held here meanwhile
// (a window of kWindow keys). A value's next piece is asked for once the client has taken
// most of what it was given, so a slow reader holds about one piece here, not its value.
#include <fmt/format.h>

#include <chrono>

#include "core_objects.h"
#include "goblin/common/log.h"
#include "goblin/sbe/wire_flags.h"
#include "goblin/wire/goblin_wire.h"
#include "http_util.h"
#include "memcache_server_impl.h"

namespace goblin::gateway {
namespace {
constexpr std::string_view kLog = "memcache";
std::string SecondsLeftForMe(uint64_t expires_ns) {
  if (expires_ns == 0) return "-1";
  const auto now = detail::NowUnixNanos();
  return expires_ns <= now ? "0" : std::to_string((expires_ns - now) / 1'000'000'000ULL);
}
constexpr size_t kWindow = 16;  // keys of one get asked for ahead of the one being written
}  // namespace

void MemcacheServer::Impl::StartGet(Client& c, const memcache::Request& req) {
  using memcache::Cmd;
  if (!req.fail_reply.empty()) {
    // A get with an over-long key: the keys before it are looked up (a gat's touched), which
    // counts as a read of them (mg h), then the error.
    const uint64_t ttl =
        memcache::ExptimeToTtlNanos(req.exptime, static_cast<int64_t>(std::time(nullptr)));
    const bool touch = req.cmd == Cmd::kGat || req.cmd == Cmd::kGats;
    for (std::string_view key : req.keys) {
      if (!core_->up()) break;
      if (touch) {
        SendTouch(key, ttl);
      } else {
        SendHead(key);
      }
    }
    return Write(c, req.fail_reply);
  }
  if (req.keys.empty()) return Write(c, "END\r\n");  // ("gat 10" with no key)
  if (!core_->up()) return Write(c, "SERVER_ERROR goblin-core is unavailable\r\n");
  c.op = std::make_unique<Op>();
  Op& op = *c.op;
  op.cmd = req.cmd;
  op.seq = c.next_seq++;
  op.exptime = req.exptime;
  op.keys.resize(req.keys.size());
  for (size_t i = 0; i < req.keys.size(); ++i) op.keys[i].key = std::string(req.keys[i]);
  const bool touch = req.cmd == Cmd::kGat || req.cmd == Cmd::kGats;
  if (touch) {
    stats_.cmd_touch += req.keys.size();
  } else {
    stats_.cmd_get += req.keys.size();
  }
  PumpGet(c);
}

void MemcacheServer::Impl::SendTouch(std::string_view key, uint64_t ttl_ns, uint32_t flags) {
  const uint64_t corr = next_corr_++;
  corr_[corr] = CorrTarget{0, 0, CorrKind::kIgnore, 0, core_->ShardFor(key)};
  SendKeyed(
      key,
      [&](uint8_t* b, size_t cap) {
        return wire::ObjectTouchEncoder(b, cap)
            .set_correlation_id(corr)
            .set_ttl_nanos(ttl_ns)
            .set_flags(flags)
            .set_key(key)
            .Finish();
      },
      key.size() + 64, true);
}

void MemcacheServer::Impl::SendHead(std::string_view key) {
  const uint64_t corr = next_corr_++;
  corr_[corr] = CorrTarget{0, 0, CorrKind::kIgnore, 0, core_->ShardFor(key)};
  SendKeyed(
      key,
      [&](uint8_t* b, size_t cap) {
        return wire::ObjectHeadEncoder(b, cap).set_correlation_id(corr).set_key(key).Finish();
      },
      key.size() + 64, true);
}

void MemcacheServer::Impl::MetaTouchAfterRead(Op& op, std::string_view key) {
  if (op.cmd != memcache::Cmd::kMetaGet || !op.mf.has_ttl) return;
  // mg T: after the read, as memcached's (a hit whatever T says; R and N saw the item as it
  // was), and not itself a read; t shows the new expiry.
  const uint64_t ttl =
      memcache::ExptimeToTtlNanos(op.mf.ttl, static_cast<int64_t>(std::time(nullptr)));
  op.new_expires = ttl == 0 ? 0 : detail::NowUnixNanos() + ttl;
  SendTouch(key, ttl, wire::kTouchNoBump);
}

void MemcacheServer::Impl::AskPiece(Client& c, Op& op, size_t index) {
  GetKey& k = op.keys[index];
  const bool first = k.state == GetKey::State::kNotAsked;
  const uint64_t offset = k.asked_end;
  uint64_t length = options_.chunk_bytes;
  if (!first) length = std::min<uint64_t>(length, k.size - offset);
  const uint16_t shard = core_->ShardFor(k.key);
  // The first lookup is the read (its fetched mark, last access, mg's N / R / u); the
  // pieces after it are not.
  uint32_t read_flags = first ? 0 : wire::kGetNoBump;
  uint64_t recache = 0, vivify_ttl = 0;
  if (first && op.cmd == memcache::Cmd::kMetaDebug) read_flags |= wire::kGetNoBump;
  if (first && op.cmd == memcache::Cmd::kMetaGet) {
    const auto now = static_cast<int64_t>(std::time(nullptr));
    read_flags |= wire::kGetMeta;
    if (op.mf.no_bump) read_flags |= wire::kGetNoBump;
    if (op.mf.vivify) {
      read_flags |= wire::kGetVivify;
      vivify_ttl = memcache::ExptimeToTtlNanos(op.mf.vivify_ttl, now);
    }
    if (op.mf.recache) recache = memcache::ExptimeToTtlNanos(op.mf.recache_ttl, now);
  }
  if (op.no_value) {  // mg without v: what is known of it, not its bytes
    const uint64_t corr = Corr(c, CorrKind::kMetaHead, static_cast<uint32_t>(index), shard);
    SendKeyed(
        k.key,
        [&](uint8_t* b, size_t cap) {
          return wire::ObjectHeadEncoder(b, cap)
              .set_correlation_id(corr)
              .set_flags(read_flags)
              .set_recache_nanos(recache)
              .set_vivify_ttl_nanos(vivify_ttl)
              .set_key(k.key)
              .Finish();
        },
        k.key.size() + 64, true);
    MetaTouchAfterRead(op, k.key);
    k.state = GetKey::State::kAsked;
    k.piece_in_flight = true;
    return;
  }
  const uint64_t corr = Corr(c, CorrKind::kGetPiece, static_cast<uint32_t>(index), shard);
  // The key being written has its bytes lent (written from the core's pools); keys held
  // for later are copied (a loan must not wait on another key's client).
  uint32_t flags = wire::kGetFirstBytes | read_flags;
  if (index == op.front && core_->pools(shard) != nullptr) flags |= wire::kGetLoans;
  SendKeyed(
      k.key,
      [&](uint8_t* b, size_t cap) {
        return wire::ObjectGetEncoder(b, cap)
            .set_correlation_id(corr)
            .set_offset(offset)
            .set_length(length)
            .set_flags(flags)
            .set_recache_nanos(recache)
            .set_vivify_ttl_nanos(vivify_ttl)
            .set_key(k.key)
            .Finish();
      },
      k.key.size() + 64, true);
  if (first && (op.cmd == memcache::Cmd::kGat || op.cmd == memcache::Cmd::kGats)) {
    // The touch after the read: memcached's gat returns the value it touched even when the
    // new exptime has already passed.
    SendTouch(k.key,
              memcache::ExptimeToTtlNanos(op.exptime, static_cast<int64_t>(std::time(nullptr))));
  }
  if (first) MetaTouchAfterRead(op, k.key);
  if (first) k.state = GetKey::State::kAsked;
  k.asked_end = offset + length;
  k.piece_in_flight = true;
}

void MemcacheServer::Impl::OnGetReply(Client& c, Op& op, const CorrTarget& t, uint16_t template_id,
                                      std::span<const uint8_t> m, bool* last) {
  if (t.index >= op.keys.size()) return;
  GetKey& k = op.keys[t.index];
  const bool first = k.state == GetKey::State::kAsked;
  auto cut_off = [&](std::string_view why) {
    ++stats_.cut_off;
    GOBLIN_LOG_WARN(kLog, "client {}: '{}' {} while its value was being sent; closing the client",
                    c.id, k.key, why);
    Close(c, "");
  };
  *last = IsLastObjectAnswer(template_id, m);
  switch (template_id) {
    case wire::ObjectInfoDecoder::kTemplateId: {
      auto info = wire::ObjectInfoDecoder::Decode(m);
      if (!info) return cut_off("had an undecodable answer");
      if (info->status() != wire::LookupStatus::kHit) {
        if (!first) return cut_off("was deleted");
        k.state = GetKey::State::kMiss;
        k.piece_in_flight = false;
        ++stats_.get_misses;
        break;
      }
      if (first) {
        k.state = GetKey::State::kHit;
        k.size = info->object_size();
        k.generation = info->generation();
        k.expires_ns = info->expires_nanos();
        k.flags = memcache::FlagsFromMetadata(info->metadata());
        k.binary_key = memcache::KeyIsBinary(info->metadata());
        // (a core before schema version 6 has no marks: SBE's null values)
        k.marks = info->marks() == UINT8_MAX ? 0 : info->marks();
        k.idle_s = info->idle_seconds() == UINT32_MAX ? 0 : info->idle_seconds();
        k.asked_end = std::min(k.asked_end, k.size);
        ++(op.cmd == memcache::Cmd::kGat || op.cmd == memcache::Cmd::kGats ? stats_.touch_hits
                                                                           : stats_.get_hits);
      } else if (info->generation() != k.generation) {
        return cut_off("was replaced");
      }
      if (op.no_value) {  // (ObjectHead: nothing follows)
        k.received = k.size;
        k.piece_in_flight = false;
        *last = true;
        break;
      }
      Take(c, op, t.index, info->first_bytes());
      if (*last) k.piece_in_flight = false;
      break;
    }
    case wire::ObjectDataDecoder::kTemplateId: {
      auto d = wire::ObjectDataDecoder::Decode(m);
      if (!d) return cut_off("had an undecodable answer");
      auto bytes = d->bytes_bytes();
      Take(c, op, t.index, {reinterpret_cast<const char*>(bytes.data()), bytes.size()});
      if (*last) k.piece_in_flight = false;
      break;
    }
    case wire::LoanDecoder::kTemplateId: {
      auto l = wire::LoanDecoder::Decode(m);
      if (!l) return cut_off("had an undecodable answer");
      CoreLink::Pools* pools = core_->pools(t.shard);
      bool used = false;
      for (auto seg : l->segments()) {  // (one segment per loan)
        if (pools == nullptr) break;
        const Mapping& pool = seg.pool() == wire::PoolKind::kHead ? pools->head : pools->io;
        if (seg.pool_offset() + seg.length() > pool.size()) break;
        std::span<const uint8_t> bytes(pool.data() + seg.pool_offset(), seg.length());
        k.received += bytes.size();
        if (t.index == op.front && k.buf.empty()) {
          WriteValueHeader(c, op, k);
          WriteLent(c, bytes, l->loan_id(), pools);
        } else {  // (held for its turn: copied, the loan given back now)
          k.buf.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          core_->ReturnLoan(l->loan_id(), t.shard);
        }
        used = true;
        break;
      }
      if (!used) {
        core_->ReturnLoan(l->loan_id(), t.shard);
        return cut_off("was lent from outside the core's pools");
      }
      if (*last) k.piece_in_flight = false;
      break;
    }
    case wire::ErrorDecoder::kTemplateId: {
      auto e = wire::ErrorDecoder::Decode(m);
      // Once a value's first line is out, the client can only be cut off; before it (its
      // disk bytes unreadable, say: the core drops such an object), the key is a miss, as
      // memcached answers an extstore read that fails.
      if (k.header_out) return cut_off(fmt::format("failed ({})", e ? e->text() : "error"));
      GOBLIN_LOG_WARN(kLog, "get '{}': {} (answered as a miss)", k.key, e ? e->text() : "error");
      if (!first) {  // (counted as a hit when its answer began)
        --(op.cmd == memcache::Cmd::kGat || op.cmd == memcache::Cmd::kGats ? stats_.touch_hits
                                                                           : stats_.get_hits);
        k.buf.clear();
        k.received = 0;
      }
      k.state = GetKey::State::kMiss;
      k.piece_in_flight = false;
      ++stats_.get_misses;
      break;
    }
    default:
      return;
  }
  if (k.received > k.size) return cut_off("sent more bytes than its size");
  PumpGet(c);
}

void MemcacheServer::Impl::Take(Client& c, Op& op, size_t index, std::string_view bytes) {
  GetKey& k = op.keys[index];
  k.received += bytes.size();
  if (index != op.front || !k.buf.empty()) {  // (held until its turn)
    k.buf.append(bytes);
    return;
  }
  // The key being written: straight to the client's output (one copy fewer). Its first
  // line waits for its first bytes (a value whose head is not in RAM is answered with none):
  // until then a failure can still be answered as a miss.
  if (bytes.empty() && k.size > 0) return;
  WriteValueHeader(c, op, k);
  Write(c, bytes);
}

void MemcacheServer::Impl::WriteValueHeader(Client& c, const Op& op, GetKey& k) {
  if (k.header_out) return;
  fmt::memory_buffer b;
  if (op.cmd == memcache::Cmd::kMetaDebug) {
    // memcached's fields, goblin's values: la (seconds since the last read or write), fetch
    // (read since written); cls (its slab class) has no counterpart here and reads 1.
    fmt::format_to(std::back_inserter(b), "ME {} exp={} la={} cas={} fetch={} cls=1 size={}\r\n",
                   k.key, SecondsLeftForMe(k.expires_ns), k.idle_s, k.generation,
                   (k.marks & wire::kInfoFetched) != 0 ? "yes" : "no", k.size);
  } else if (op.meta) {
    std::string flags = MetaFlagsOut(op, &k, true);
    if (op.no_value) {
      fmt::format_to(std::back_inserter(b), "HD{}\r\n", flags);
    } else {
      fmt::format_to(std::back_inserter(b), "VA {}{}\r\n", k.size, flags);
    }
  } else if (op.cmd == memcache::Cmd::kGets || op.cmd == memcache::Cmd::kGats) {
    fmt::format_to(std::back_inserter(b), "VALUE {} {} {} {}\r\n", k.key, k.flags, k.size,
                   k.generation);
  } else {
    fmt::format_to(std::back_inserter(b), "VALUE {} {} {}\r\n", k.key, k.flags, k.size);
  }
  Write(c, {b.data(), b.size()});
  k.header_out = true;
}

void MemcacheServer::Impl::PumpGet(Client& c) {
  if (c.closed || !c.op) return;
  Op& op = *c.op;
  const size_t out_before = c.out_bytes;
  while (op.front < op.keys.size()) {
    GetKey& k = op.keys[op.front];
    if (k.state == GetKey::State::kNotAsked) AskPiece(c, op, op.front);
    if (k.state == GetKey::State::kAsked) break;
    if (k.state == GetKey::State::kMiss) {
      if (op.cmd == memcache::Cmd::kMetaDebug) {
        Write(c, "EN\r\n");
      } else if (op.meta && !op.mf.quiet) {
        Write(c, "EN" + MetaFlagsOut(op, &k, false) + "\r\n");
      }
      ++op.front;
      continue;
    }
    // (its first line waits for its first bytes: until then a failure is still a miss)
    if (k.received > 0 || k.size == 0 || op.no_value) WriteValueHeader(c, op, k);
    if (!k.buf.empty()) {
      Write(c, k.buf);
      k.buf.clear();
    }
    if (k.received == k.size && !k.piece_in_flight) {
      if (!op.no_value) Write(c, "\r\n");
      std::string().swap(k.buf);
      ++op.front;
      continue;
    }
    if (!k.piece_in_flight && k.asked_end < k.size && c.out_size() <= options_.output_limit)
      AskPiece(c, op, op.front);
    break;
  }
  // Ask ahead for the next keys' first pieces.
  for (size_t i = op.front; i < op.keys.size() && i < op.front + kWindow; ++i) {
    if (op.keys[i].state == GetKey::State::kNotAsked) AskPiece(c, op, i);
  }
  if (op.front == op.keys.size()) return Finish(c, op.meta ? "" : "END\r\n");
  if (c.out_bytes != out_before) dirty_.push_back(&c);  // (FlushClient calls here: no loop)
}

}  // namespace goblin::gateway
