// libgoblin's gets: the reply of one get (ObjectInfo, with the first bytes on remote planes,
// then Loans or ObjectData until the last), read by a synchronous Get or by the gets a
// connection keeps in flight (StartGet / WaitGets), which finish in any order.
#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "connection_internal.h"
#include "goblin/common/clock.h"
#include "goblin/common/spin_backoff.h"
#include "goblin/sbe/wire_flags.h"

namespace goblin::client {

using detail::AssignMeta;
using detail::ErrorReply;
using detail::Mapped;
using detail::TemplateOf;

bool Connection::HandleGetMessage(GetState& g, std::span<const uint8_t> msg) {
  Link& l = *g.link;
  const uint16_t t = TemplateOf(msg);
  if (t == wire::ErrorDecoder::kTemplateId) {
    g.error = ErrorReply(msg);
    return true;
  }
  if (!g.have_info && t == wire::ObjectLentDecoder::kTemplateId) {
    // The answer with its first piece lent (kGetLoanInAnswer): given back whatever happens.
    auto lent = wire::ObjectLentDecoder::Decode(msg);
    if (!lent) {
      g.error = lent.error();
      return true;
    }
    g.have_info = true;
    AssignMeta(g.meta, *lent);
    if (g.on_meta) g.on_meta(g.meta);
    (void)TakeLentSegment(g, lent->pool() == wire::PoolKind::kHead, lent->pool_offset(), g.offset,
                          lent->length());
    ++stats_.loans;
    ++stats_.answer_loans;
    ReleaseLoan(l, lent->loan_id());
    g.abandoned = !g.error.ok() && lent->last() == 0;
    return lent->last() != 0 || !g.error.ok();  // (else Loans or ObjectData follow)
  }
  if (!g.have_info) {
    auto info = wire::ObjectInfoDecoder::Decode(msg);
    if (!info) {
      g.error = info.error();
      return true;
    }
    g.have_info = true;
    AssignMeta(g.meta, *info);
    if (!g.meta.found) return true;  // a miss ends the exchange; a hit is followed by ObjectData
    if (g.on_meta) g.on_meta(g.meta);
    if (auto first = info->first_bytes_bytes(); !first.empty()) {
      stats_.bytes_copied += first.size();
      if (auto r = g.sink(g.offset, first); !r) {
        g.error = r.error();
        g.abandoned = info->first_bytes_end() == 0;
        return true;
      }
    }
    return info->first_bytes_end() != 0;  // (else Loans or ObjectData follow)
  }
  if (t == wire::LoanDecoder::kTemplateId) {
    auto loan = wire::LoanDecoder::Decode(msg);
    if (!loan) {
      g.error = loan.error();
      return true;
    }
    bool last = loan->last() != 0;
    for (auto seg : loan->segments()) {
      if (!TakeLentSegment(g, seg.pool() == wire::PoolKind::kHead, seg.pool_offset(),
                           seg.object_offset(), seg.length()))
        break;
    }
    ++stats_.loans;
    ReleaseLoan(l, loan->loan_id());
    g.abandoned = !g.error.ok() && !last;
    return last || !g.error.ok();
  }
  if (t != wire::ObjectDataDecoder::kTemplateId) return false;
  auto d = wire::ObjectDataDecoder::Decode(msg);
  if (!d) {
    g.error = d.error();
    return true;
  }
  stats_.bytes_copied += d->bytes_bytes().size();
  if (auto r = g.sink(d->offset(), d->bytes_bytes()); !r) {
    g.error = r.error();
    g.abandoned = d->last() == 0;
    return true;
  }
  return d->last() != 0;
}

bool Connection::TakeLentSegment(GetState& g, bool head_pool, uint64_t pool_offset,
                                 uint64_t object_offset, uint64_t length) {
  const Link::Mapping& m = head_pool ? g.link->head_pool : g.link->io_pool;
  if (m.base == nullptr || pool_offset > m.bytes || length > m.bytes - pool_offset) {
    g.error = Status(StatusCode::kCorruption, "a loan outside the mapped pools");
    return false;
  }
  stats_.bytes_lent += length;
  if (auto r = g.sink(object_offset, {m.base + pool_offset, length}); !r) {
    g.error = r.error();
    return false;
  }
  return true;
}

namespace {

// An ObjectGet's flags for a link.
uint32_t GetFlags(const auto& l, const ConnectOptions& o, bool follow_fill) {
  // Remote planes take the first bytes in the answer (one message less before the first
  // byte); a reader of the pools takes the first piece lent in it (the same, in place), and
  // over UCX the first bytes of a small object only when the core has no loan to spare.
  const bool loans = o.zero_copy && Mapped(l);
  return (follow_fill ? wire::kGetFollowFill : 0) | (loans ? wire::kGetLoans : 0) |
         (loans && o.loan_in_answer ? wire::kGetLoanInAnswer : 0) |
         (l.transport->local() ? 0 : wire::kGetFirstBytes);
}

}  // namespace

Result<uint64_t> Connection::SendGet(Link& l, std::string_view key, uint64_t offset,
                                     uint64_t length, bool follow_fill) {
  if (options_.zero_copy && !Mapped(l) && !l.map_failed) {
    // (else copies: through the ring, or UCX's rendezvous)
    if (l.transport->local()) {
      if (auto r = MapPools(l); !r) l.map_failed = true;
    } else if (l.transport->may_map_in_place()) {
      if (auto r = MapPoolsInPlace(l); !r) l.map_failed = true;
    } else {
      l.map_failed = true;
    }
  }
  const uint32_t flags = GetFlags(l, options_, follow_fill);
  return SendRequest(l, key.size(), [&](uint8_t* b, size_t cap, uint64_t id) {
    return wire::ObjectGetEncoder(b, cap)
        .set_correlation_id(id)
        .set_offset(offset)
        .set_length(length)
        .set_flags(flags)
        .set_key(key)
        .Finish();
  });
}

Result<Connection::ObjectMeta> Connection::Get(std::string_view key, SinkRef sink, uint64_t offset,
                                               uint64_t length, bool follow_fill,
                                               MetaHook on_meta) {
  Link& l = LinkFor(key);
  GOBLIN_ASSIGN_OR_RETURN(uint64_t corr, SendGet(l, key, offset, length, follow_fill));
  GetState g;
  g.link = &l;
  g.id = corr;
  g.offset = offset;
  g.sink = sink;
  g.on_meta = on_meta;
  if (auto r = Receive(l, corr, [&](std::span<const uint8_t> m) { return HandleGetMessage(g, m); });
      !r) {
    // A get nobody reads on (timed out, or refused inside UCX's progress: a hook used this
    // Connection): the core is told to end its stream and take back its loans, so nothing
    // stays held for it (what is on its way is dropped as late). (An error the core sent
    // ended the get there; a link that is gone takes nothing.)
    const StatusCode code = r.error().code();
    if (code == StatusCode::kTimeout || code == StatusCode::kFailedPrecondition) {
      AbandonGet(l, corr);
    }
    return Err(r.error());
  }
  if (g.abandoned) {
    AbandonGet(l, corr);
    DrainAbandoned();
  }
  if (!g.error.ok()) return Err(g.error);
  return std::move(g.meta);  // (a member: no implicit move)
}

Result<uint64_t> Connection::StartGet(std::string_view key, Sink sink, uint64_t offset,
                                      uint64_t length) {
  if (gets_.size() >= kMaxGetsInFlight) {
    return Err(StatusCode::kResourceExhausted, "{} gets in flight already (WaitGets first)",
               gets_.size());
  }
  Link& l = LinkFor(key);
  GOBLIN_ASSIGN_OR_RETURN(uint64_t corr, SendGet(l, key, offset, length, false));
  auto g = std::make_unique<GetState>();
  g->link = &l;
  g->id = corr;
  g->offset = offset;
  g->owned_sink = std::move(sink);
  g->sink = g->owned_sink;
  gets_.emplace(corr, std::move(g));
  return corr;
}

bool Connection::RouteToGets(Link& l, std::span<const uint8_t> m) {
  if (gets_.empty() || m.size() < 16) return false;
  auto it = gets_.find(sbe::Load<uint64_t>(m.data() + 8));
  if (it == gets_.end() || it->second->link != &l) return false;
  GetState& g = *it->second;
  if (!HandleGetMessage(g, m)) return true;
  if (g.abandoned) AbandonGet(l, g.id);
  if (g.error.ok()) {
    gets_done_.push_back({g.id, std::move(g.meta)});  // (g is erased next)
  } else {
    gets_done_.push_back({g.id, Err(g.error)});
  }
  gets_.erase(it);
  return true;
}

void Connection::FailGets(Link& l, const Status& error) {
  for (auto it = gets_.begin(); it != gets_.end();) {
    if (it->second->link == &l) {
      gets_done_.push_back({it->first, Err(error)});
      it = gets_.erase(it);
    } else {
      ++it;
    }
  }
}

Result<std::vector<Connection::GetDone>> Connection::WaitGets(std::chrono::nanoseconds timeout) {
  const uint64_t start = MonotonicNanos();
  const uint64_t deadline = start + static_cast<uint64_t>(timeout.count());
  const uint64_t spin_until = start + static_cast<uint64_t>(options_.spin.count());
  // No spinning for a while on a CPU this thread was preempted on (a property of the
  // thread's CPU, not of the connection; not in the installed header either).
  thread_local SpinBackoff backoff;
  uint64_t checked = start;  // (the clock's last reading)
  for (;;) {
    // What has arrived, on every link (each get's reply comes on its key's shard).
    for (auto& lp : links_) {
      Link& l = *lp;
      auto polled = l.transport->Poll([&](std::span<const uint8_t> m) {
        if (TakeDelivery(m) || RouteToGets(l, m) || m.size() < 16) return;
        if (ReleaseOrphanLoan(l, m)) return;  // (an abandoned or failed request's loan)
        if (TemplateOf(m) == wire::ErrorDecoder::kTemplateId &&
            sbe::Load<uint64_t>(m.data() + 8) == 0) {
          FailGets(l, ErrorReply(m));  // the session as a whole
        }
      });
      if (!polled) FailGets(l, polled.error());
    }
    if (!gets_done_.empty() || gets_.empty()) {
      DrainAbandoned();  // (before the caller may go idle)
      std::vector<GetDone> out;
      out.swap(gets_done_);
      return out;
    }
    const uint64_t now = MonotonicNanos();
    if (now >= deadline) return std::vector<GetDone>{};
    // Poll a little before paying for a wake-up (as Wait does, and as it does not while
    // lately preempted spinning: common/spin_backoff.h).
    if (now < spin_until && backoff.may_spin(now) &&
        !backoff.Idle(std::exchange(checked, now), now)) {
      if (options_.spin_yield) sched_yield();
      continue;
    }
    SleepOnLinks(deadline - now);
  }
}

void Connection::SleepOnLinks(uint64_t max_ns) {
  // Every link announces its sleep before any fd is watched (a reply that lands in between
  // makes PrepareSleep say no); then one poll() over all their wake and liveness fds.
  std::vector<pollfd> fds;
  bool can_sleep = true;
  for (auto& lp : links_) {
    if (!lp->transport->PrepareSleep(false)) can_sleep = false;
    fds.push_back({lp->transport->wake_fd(), POLLIN, 0});
    if (int live = lp->transport->liveness_fd(); live >= 0) {
      fds.push_back({live, POLLIN | POLLRDHUP, 0});
    }
  }
  if (can_sleep) {
    const uint64_t ms = std::min<uint64_t>((max_ns + 999'999) / 1'000'000, 60'000);
    (void)poll(fds.data(), fds.size(), static_cast<int>(ms));
  }
  for (auto& lp : links_) {
    lp->transport->FinishSleep();
    if (auto alive = lp->transport->CheckAlive(); !alive) FailGets(*lp, alive.error());
  }
}

}  // namespace goblin::client
