// MemcacheServer: the writes.
//   set, add, replace, cas: the fill is begun (PutBegin, conditional for add/replace/cas) as
//     soon as the command line is read, and the data block goes to the core as it arrives;
//     until the core grants the write it waits in the client's input (reading pauses past
//     kInputLimit). The reply comes once the block and its "\r\n" are read, as memcached's.
//   append, prepend, incr, decr: read-modify-writes. The current value is read, the new one
//     written with a put conditional on the generation read (the core checks it at begin and
//     at commit), and on a race (another write came between) the whole is done again.
//   A write that meets another write of the same key (kInProgress) tries again every
//     millisecond, up to key_busy_timeout.
#include <fmt/format.h>

#include "core_objects.h"
#include "goblin/common/clock.h"
#include "goblin/common/log.h"
#include "goblin/sbe/wire_flags.h"
#include "goblin/wire/goblin_wire.h"
#include "http_util.h"
#include "memcache_server_impl.h"

namespace goblin::gateway {
namespace {
constexpr std::string_view kLog = "memcache";
constexpr int kMaxAttempts = 100;  // read-modify-writes that lost a race
// incr/decr read this much of a value: the number and what ends it.
constexpr uint64_t kNumberPrefix = 96;
// memcached keeps values above its chunk size (512 KiB by default) in chunks and refuses to
// incr/decr them; goblin refuses past the same size.
constexpr uint64_t kMaxNumericValue = 512 * 1024;
}  // namespace

bool MemcacheServer::Impl::IsRmw(const Op& op) const {
  using memcache::Cmd;
  return op.cmd == Cmd::kAppend || op.cmd == Cmd::kPrepend || op.cmd == Cmd::kIncr ||
         op.cmd == Cmd::kDecr;
}

void MemcacheServer::Impl::StartStore(Client& c, const memcache::Request& req) {
  ++stats_.cmd_set;
  c.op = std::make_unique<Op>();
  Op& op = *c.op;
  op.cmd = req.cmd;
  op.noreply = req.noreply;
  op.seq = c.next_seq++;
  op.key = std::string(req.key);
  op.flags = req.flags;
  op.ttl_ns = memcache::ExptimeToTtlNanos(req.exptime, static_cast<int64_t>(std::time(nullptr)));
  op.cas = req.cas;
  op.size = req.bytes;
  op.data_left = req.bytes;
  if (req.is_meta) {
    op.meta = true;
    op.mf = req.meta;
    for (size_t i = 0; i < req.meta.count; ++i) op.meta_tokens.emplace_back(req.meta.tokens[i]);
  }
  if (!core_->up()) {
    op.lease = Lease::kRefused;
    op.refusal = "SERVER_ERROR goblin-core is unavailable\r\n";
  } else if (!IsRmw(op)) {
    SendPutBegin(c, op);
  }
  PumpStore(c);
}

void MemcacheServer::Impl::StartDelta(Client& c, const memcache::Request& req) {
  if (!core_->up()) {
    if (!req.noreply) Write(c, "SERVER_ERROR goblin-core is unavailable\r\n");
    return;
  }
  c.op = std::make_unique<Op>();
  Op& op = *c.op;
  op.cmd = req.cmd;
  op.noreply = req.noreply;
  op.seq = c.next_seq++;
  op.key = std::string(req.key);
  op.cas = req.delta;  // (the delta)
  op.data_done = true;
  if (req.is_meta) {
    op.meta = true;
    op.mf = req.meta;
    for (size_t i = 0; i < req.meta.count; ++i) op.meta_tokens.emplace_back(req.meta.tokens[i]);
  }
  Fetch(c, op);
}

void MemcacheServer::Impl::SendPutBegin(Client& c, Op& op) {
  using memcache::Cmd;
  uint32_t flags = 0;
  uint64_t if_generation = 0;
  std::string metadata;
  uint64_t size = op.size, ttl = op.ttl_ns;
  if (op.vivifying) {  // ma N: the value is created (if nobody else did meanwhile)
    flags = wire::kPutIfAbsent;
    metadata = memcache::MetadataFor(0, false);  // (memcached: an item ma makes is not b)
    size = op.value.size();
    ttl = memcache::ExptimeToTtlNanos(op.mf.vivify_ttl, static_cast<int64_t>(std::time(nullptr)));
    const uint64_t now_ns = detail::NowUnixNanos();
    op.new_expires = ttl == 0 ? 0 : now_ns + ttl;
  } else if (IsRmw(op)) {
    flags = wire::kPutIfGeneration;
    if_generation = op.old_generation;
    metadata = op.old_metadata;
    // An append or prepend makes a new item whose key is never marked binary (memcached
    // copies the data, not that mark); incr and decr change the item in place.
    if (op.cmd == memcache::Cmd::kAppend || op.cmd == memcache::Cmd::kPrepend) {
      metadata = memcache::MetadataFor(memcache::FlagsFromMetadata(op.old_metadata), false);
    }
    size = op.value.size();
    // The value keeps its expiry (memcached's append and incr keep the item's exptime).
    const uint64_t now = detail::NowUnixNanos();
    ttl = op.old_expires == 0 ? 0 : (op.old_expires > now ? op.old_expires - now : 1);
    // ma T: a new time to live with the new value (ms's T does not apply to an append or a
    // prepend: the value keeps its expiry, as in memcached)
    if (op.meta && op.mf.has_ttl &&
        (op.cmd == memcache::Cmd::kIncr || op.cmd == memcache::Cmd::kDecr)) {
      ttl = memcache::ExptimeToTtlNanos(op.mf.ttl, static_cast<int64_t>(std::time(nullptr)));
    }
    op.new_expires = ttl == 0 ? 0 : now + ttl;
    // memcached changes a number in place when it keeps its length, and the item its marks
    // (stale, won, fetched); a longer one is a new item.
    if ((op.cmd == memcache::Cmd::kIncr || op.cmd == memcache::Cmd::kDecr) &&
        op.value.size() <= op.old_size) {
      flags |= wire::kPutKeepMarks;
    }
  } else {
    metadata = memcache::MetadataFor(op.flags, op.meta && op.mf.binary_key);
    if (op.cmd == Cmd::kAdd) flags = wire::kPutIfAbsent;
    if (op.cmd == Cmd::kReplace) flags = wire::kPutIfPresent;
    if (op.cmd == Cmd::kCas) {
      flags = wire::kPutIfGeneration;
      if_generation = op.cas;
      // ms I with C: a CAS older than the item's stores it all the same, marked stale
      if (op.meta && op.mf.invalidate) flags |= wire::kPutStaleIfOlder;
    }
  }
  const uint16_t shard = core_->ShardFor(op.key);
  op.begin_corr = Corr(c, CorrKind::kPutBegin, 0, shard);
  op.lease = Lease::kPending;
  const uint64_t corr = op.begin_corr;
  SendKeyed(
      op.key,
      [&](uint8_t* b, size_t cap) {
        return wire::PutBeginEncoder(b, cap)
            .set_correlation_id(corr)
            .set_expected_size(size)
            .set_ttl_nanos(ttl)
            .set_flags(flags)
            .set_if_generation(if_generation)
            .set_key(op.key)
            .set_metadata(metadata)
            .Finish();
      },
      op.key.size() + metadata.size() + 96, true);
}

void MemcacheServer::Impl::SendPieces(Client& /*c*/, Op& op, std::string_view bytes) {
  const size_t piece = std::max<size_t>(4096, core_->max_message() - 128);
  const uint16_t shard = core_->ShardFor(op.key);
  while (!bytes.empty()) {
    const size_t n = std::min(piece, bytes.size());
    const uint64_t put = op.put_id, offset = op.sent;
    std::string_view part = bytes.substr(0, n);
    core_->SendAlways(
        [&](uint8_t* b, size_t cap) {
          return wire::PutDataEncoder(b, cap)
              .set_put_id(put)
              .set_offset(offset)
              .set_bytes(part)
              .Finish();
        },
        n + 64, shard);
    op.sent += n;
    bytes.remove_prefix(n);
  }
}

void MemcacheServer::Impl::SendCommit(Client& c, Op& op) {
  const uint16_t shard = core_->ShardFor(op.key);
  const uint64_t corr = Corr(c, CorrKind::kPutCommit, 0, shard);
  const uint64_t put = op.put_id, total = op.sent;
  op.committing = true;
  core_->SendAlways(
      [&](uint8_t* b, size_t cap) {
        return wire::PutCommitEncoder(b, cap)
            .set_correlation_id(corr)
            .set_put_id(put)
            .set_total_size(total)
            .Finish();
      },
      64, shard);
}

void MemcacheServer::Impl::PumpStore(Client& c) {
  if (c.closed || !c.op) return;
  Op& op = *c.op;
  // Its input may shrink here: the loop looks at the client again (reading resumes once
  // it is under kInputLimit), and what was consumed is let go of.
  dirty_.push_back(&c);
  struct Compact {
    Client& c;
    ~Compact() {
      if (c.in_pos == c.in.size()) {
        c.in.clear();
        c.in_pos = 0;
      } else if (c.in_pos > (1u << 20)) {
        c.in.erase(0, c.in_pos);
        c.in_pos = 0;
      }
    }
  } compact{c};
  if (!op.data_done) {
    while (op.data_left > 0 && c.in_pos < c.in.size()) {
      const size_t n =
          static_cast<size_t>(std::min<uint64_t>(op.data_left, c.in.size() - c.in_pos));
      std::string_view bytes(c.in.data() + c.in_pos, n);
      if (IsRmw(op)) {
        op.data.append(bytes);
      } else if (op.lease == Lease::kGranted) {
        if (core_->over_limit()) {  // the core is behind: the rest waits (and TCP pushes back)
          waiting_.push_back(c.id);
          break;
        }
        SendPieces(c, op, bytes.substr(0, std::min<size_t>(n, 4u << 20)));
        const size_t sent = std::min<size_t>(n, 4u << 20);
        c.in_pos += sent;
        op.data_left -= sent;
        continue;
      } else if (op.lease != Lease::kRefused) {
        break;  // (kPending, kRetry: it waits in the input for the core's grant)
      }
      c.in_pos += n;  // (kRefused: swallowed)
      op.data_left -= n;
    }
    if (op.data_left == 0 && c.in.size() - c.in_pos >= 2) {
      op.bad_chunk = c.in.compare(c.in_pos, 2, "\r\n") != 0;
      c.in_pos += 2;
      op.data_done = true;
    }
    if (!op.data_done) return;
  }
  if (op.bad_chunk) {
    if (op.lease == Lease::kPending) return;  // the grant comes, then it is given back
    if (op.lease == Lease::kGranted && core_->up()) {
      const uint64_t put = op.put_id;
      core_->SendAlways(
          [&](uint8_t* b, size_t cap) {
            return wire::PutAbortEncoder(b, cap).set_correlation_id(0).set_put_id(put).Finish();
          },
          64, core_->ShardFor(op.key));
    }
    if (op.begin_corr) corr_.erase(op.begin_corr);
    return Finish(c, "CLIENT_ERROR bad data chunk\r\n");
  }
  if (IsRmw(op) && op.lease == Lease::kNone) {
    if (!op.fetching && !op.fetched) Fetch(c, op);
    return;
  }
  switch (op.lease) {
    case Lease::kRefused:
      if (op.begin_corr) corr_.erase(op.begin_corr);
      return Finish(c, op.refusal);
    case Lease::kGranted:
      if (!op.committing && !IsRmw(op)) SendCommit(c, op);
      return;
    default:
      return;
  }
}

void MemcacheServer::Impl::Fetch(Client& c, Op& op) {
  op.fetching = true;
  op.fetched = op.found = false;
  op.old_size = op.old_generation = op.old_expires = 0;
  op.old_metadata.clear();
  op.old_value.clear();
  const bool number = op.cmd == memcache::Cmd::kIncr || op.cmd == memcache::Cmd::kDecr;
  // (the answer may come at once, the core being down: nothing of `op` is used after this)
  // (memcached's incr, decr, append and prepend do not count as reads of the item)
  objects_->Get(
      op.key, 0, number ? kNumberPrefix : UINT64_MAX,
      [this, id = c.id, seq = op.seq](Result<CoreObjects::Object> o) {
        Client* cl = Find(id);
        if (cl == nullptr || !cl->op || cl->op->seq != seq) return;  // (gone)
        Op& cur = *cl->op;
        if (!o) return Finish(*cl, ErrorReply(o.error().message()));
        cur.found = o->found;
        cur.old_size = o->size;
        cur.old_generation = o->generation;
        cur.old_expires = o->expires_ns;
        cur.old_metadata = std::move(o->metadata);
        cur.old_value = std::move(o->bytes);
        cur.fetching = false;
        cur.fetched = true;
        AfterFetch(*cl, cur);
      },
      wire::kGetNoBump);
}

void MemcacheServer::Impl::AfterFetch(Client& c, Op& op) {
  using memcache::Cmd;
  const bool number = op.cmd == Cmd::kIncr || op.cmd == Cmd::kDecr;
  if (!op.found && number && op.meta && op.mf.vivify) {
    op.vivifying = true;
    op.value = std::to_string(op.mf.initial);
    op.refusal = op.value + "\r\n";  // (the reply on success)
    return SendPutBegin(c, op);
  }
  op.vivifying = false;
  if (!op.found) {
    if (op.cmd == Cmd::kIncr) ++stats_.incr_misses;
    if (op.cmd == Cmd::kDecr) ++stats_.decr_misses;
    return Finish(c, number ? "NOT_FOUND\r\n" : "NOT_STORED\r\n");
  }
  if (number) {
    uint64_t v = 0;
    if (op.old_size == 0 || op.old_size > kMaxNumericValue ||
        !memcache::ParseStoredNumber(op.old_value.substr(0, op.old_size), &v) ||
        (op.old_value.size() < op.old_size && op.old_value.size() < kNumberPrefix)) {
      return Finish(c, "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n");
    }
    const uint64_t delta = op.cas;
    if (op.cmd == Cmd::kIncr) {
      v += delta;  // (wraps at 2^64, as memcached's does)
    } else {
      v = delta > v ? 0 : v - delta;
    }
    op.value = memcache::DeltaResult(v, op.old_size);
    op.refusal = std::to_string(v) + "\r\n";  // (the reply on success)
  } else if (op.meta && op.mf.has_cas && op.mf.cas != 0 && op.old_generation != op.mf.cas) {
    return Finish(c, "EXISTS\r\n");  // (ms MA/MP with C: the CAS must be the item's)
  } else if (op.cmd == Cmd::kAppend) {
    op.value = op.old_value + op.data;
  } else {
    op.value = op.data + op.old_value;
  }
  op.old_value.clear();
  SendPutBegin(c, op);
}

void MemcacheServer::Impl::Refused(Client& c, Op& op, uint16_t code, std::string_view text) {
  using memcache::Cmd;
  const auto ec = static_cast<wire::ErrorCode>(code);
  if (IsRmw(op) &&
      (ec == wire::ErrorCode::kFailedPrecondition || ec == wire::ErrorCode::kNotFound ||
       (op.vivifying && ec == wire::ErrorCode::kAlreadyExists))) {
    // Another write came between the read and this one: read again.
    if (++op.attempts < kMaxAttempts) {
      ++stats_.write_retries;
      if (op.begin_corr) corr_.erase(op.begin_corr);
      op.begin_corr = 0;
      op.lease = Lease::kNone;
      op.put_id = op.sent = 0;
      op.committing = false;
      return Fetch(c, op);
    }
    return Finish(c, "SERVER_ERROR the value kept changing; try again\r\n");
  }
  std::string reply;
  switch (ec) {
    case wire::ErrorCode::kAlreadyExists:
      reply = "NOT_STORED\r\n";
      break;
    case wire::ErrorCode::kNotFound:
      if (op.cmd == Cmd::kCas) ++stats_.cas_misses;
      reply = op.cmd == Cmd::kCas ? "NOT_FOUND\r\n" : "NOT_STORED\r\n";
      break;
    case wire::ErrorCode::kFailedPrecondition:
      ++stats_.cas_badval;
      reply = "EXISTS\r\n";
      break;
    case wire::ErrorCode::kResourceExhausted:
    case wire::ErrorCode::kMessageTooLarge:
      reply = "SERVER_ERROR object too large for cache\r\n";
      if (op.cmd == Cmd::kSet) {
        // As memcached: a set that cannot be stored does not leave the old value behind.
        const uint64_t corr = next_corr_++;
        corr_[corr] = CorrTarget{0, 0, CorrKind::kIgnore, 0, core_->ShardFor(op.key)};
        SendKeyed(
            op.key,
            [&](uint8_t* b, size_t cap) {
              return wire::ObjectDeleteEncoder(b, cap)
                  .set_correlation_id(corr)
                  .set_key(op.key)
                  .Finish();
            },
            op.key.size() + 64, true);
      }
      break;
    default:
      reply = ErrorReply(text);
      break;
  }
  op.lease = Lease::kRefused;
  op.refusal = op.bad_chunk ? "CLIENT_ERROR bad data chunk\r\n" : std::move(reply);  // (first)
  if (op.data_done) {
    if (op.begin_corr) corr_.erase(op.begin_corr);
    return Finish(c, op.refusal);
  }
  PumpStore(c);  // the rest of its data block is read and dropped, then the reply
}

void MemcacheServer::Impl::OnStoreReply(Client& c, Op& op, const CorrTarget& t,
                                        uint16_t template_id, std::span<const uint8_t> m,
                                        bool* last) {
  using memcache::Cmd;
  switch (t.kind) {
    case CorrKind::kPutBegin: {
      if (template_id == wire::FillLeaseDecoder::kTemplateId) {
        auto l = wire::FillLeaseDecoder::Decode(m);
        if (!l) return;
        if (l->state() == wire::LeaseState::kGranted) {
          *last = false;  // (an upload's failure would come with this id)
          op.lease = Lease::kGranted;
          op.put_id = l->put_id();
          op.busy_since = 0;
          if (IsRmw(op)) {
            SendPieces(c, op, op.value);
            SendCommit(c, op);
            return;
          }
          return PumpStore(c);
        }
        // Another write of the key is in progress: try again shortly.
        const uint64_t now = MonotonicNanos();
        if (op.busy_since == 0) op.busy_since = now;
        op.begin_corr = 0;
        if (now - op.busy_since >
            static_cast<uint64_t>(
                std::chrono::duration_cast<std::chrono::nanoseconds>(options_.key_busy_timeout)
                    .count())) {
          GOBLIN_LOG_WARN(kLog, "'{}': another write of it has been in progress for {} ms", op.key,
                          options_.key_busy_timeout.count());
          op.lease = Lease::kRefused;
          op.refusal = "SERVER_ERROR another write of this key is in progress\r\n";
          if (op.data_done) return Finish(c, op.refusal);
          return PumpStore(c);
        }
        ++stats_.write_retries;
        op.lease = Lease::kRetry;
        op.retry_at = now + 1'000'000;
        waiting_.push_back(c.id);
        if (op.bad_chunk) {  // nothing to write after all
          op.lease = Lease::kNone;
          return Finish(c, "CLIENT_ERROR bad data chunk\r\n");
        }
        return;
      }
      if (template_id == wire::ErrorDecoder::kTemplateId) {
        auto e = wire::ErrorDecoder::Decode(m);
        if (op.lease != Lease::kPending) return;  // (an upload failing: its commit says so)
        op.begin_corr = 0;
        return Refused(c, op, e ? static_cast<uint16_t>(e->code()) : 14, e ? e->text() : "error");
      }
      return;
    }
    case CorrKind::kPutCommit: {
      if (template_id == wire::PutResultDecoder::kTemplateId) {
        if (op.begin_corr) corr_.erase(op.begin_corr);
        if (auto r = wire::PutResultDecoder::Decode(m)) op.new_generation = r->generation();
        switch (op.cmd) {
          case Cmd::kIncr:
            ++stats_.incr_hits;
            return Finish(c, op.refusal);
          case Cmd::kDecr:
            ++stats_.decr_hits;
            return Finish(c, op.refusal);
          case Cmd::kCas:
            ++stats_.cas_hits;
            return Finish(c, "STORED\r\n");
          default:
            return Finish(c, "STORED\r\n");
        }
      }
      if (template_id == wire::ErrorDecoder::kTemplateId) {
        auto e = wire::ErrorDecoder::Decode(m);
        if (op.begin_corr) corr_.erase(op.begin_corr);
        op.begin_corr = 0;
        return Refused(c, op, e ? static_cast<uint16_t>(e->code()) : 14, e ? e->text() : "error");
      }
      return;
    }
    default:
      return;
  }
}

}  // namespace goblin::gateway
