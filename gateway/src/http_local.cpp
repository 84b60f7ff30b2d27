// Local hits: a GET or HEAD whose head this worker knows to be in the core's RAM is answered
// from the pools it maps, without a message to the core (docs/hot-path.md, "Local hits").
//
// Why the bytes sent are the object's: the core withdraws a head's table entry (stamp 0,
// then a full fence) before its pool slot can be freed, and a stamp names one publication
// only (goblin/sbe/head_table.h). The worker checks the stamp before it reads a head and
// again after every read of it (its own copy, or the kernel's copy during a socket write:
// done once the write returned or completed), with an acquire fence before that second
// check. An unchanged stamp then means the slot had not been withdrawn when the last byte
// was read, so nothing had overwritten it.
//   - Heads up to kLocalCopyBytes that are the whole object are copied behind the response
//     headers and checked before anything is sent: a stale one costs nothing (the request
//     goes to the core). One write.
//   - Bigger heads are written from the mapping (no copy; the first byte does not wait for
//     one), checked once the kernel has read them, with nothing after them in the same
//     write; a whole object's last byte is held back and copied just before that check, so
//     a client never receives a complete response whose head changed mid-send: if the
//     check fails the connection is closed before the response is complete.
//   - A tail beyond the head is asked of the core at once (its disk read runs while the
//     head goes out) and must be of the same version, else the connection is closed.
// Expiry is checked here against the descriptor's TTL (the same clock as the core's).
// Everything else (ranges, unknown keys, stale descriptors, misses) goes to the core.
#include <atomic>

#include "goblin/common/clock.h"
#include "goblin/common/config.h"
#include "goblin/gateway/cache_policy.h"
#include "goblin/sbe/head_table.h"
#include "http_server_impl.h"

namespace goblin::gateway {
namespace {
// Whole objects up to this size are copied and checked before they are sent (a copy of
// this much costs a few microseconds; beyond it the first byte should not wait for one).
constexpr uint64_t kLocalCopyBytes = 64 << 10;
}  // namespace

using detail::MetaGet;

bool HttpServer::Impl::StampHolds(const CoreLink::Pools& p, uint32_t entry, uint64_t stamp) {
  std::atomic_thread_fence(std::memory_order_acquire);
  const auto* e = reinterpret_cast<const uint64_t*>(p.table.data() +
                                                    uint64_t{entry} * sizeof(sbe::HeadTableEntry));
  return __atomic_load_n(e, __ATOMIC_ACQUIRE) == stamp;
}

void HttpServer::Impl::Touch(const CoreLink::Pools& p, uint32_t entry) {
  if (entry >= p.touch.size()) return;
  uint8_t* t = p.touch.data() + entry;
  // (read first: a hot head's byte stays set until the core looks, and its cache line
  // need not bounce between workers)
  if (__atomic_load_n(t, __ATOMIC_RELAXED) == 0) __atomic_store_n(t, uint8_t{1}, __ATOMIC_RELAXED);
}

void HttpServer::Impl::Learn(const Exchange& ex, const wire::ObjectInfoDecoder& info) {
  if (!options_.local_hits || info.head_stamp() == 0) return;
  uint16_t shard = core_->ShardFor(ex.key);
  CoreLink::Pools* p = core_->pools(shard);
  if (p == nullptr || !p->table) return;
  // Only what the mappings can hold (a core that says otherwise is not believed).
  uint64_t entry_end = (uint64_t{info.head_entry()} + 1) * sizeof(sbe::HeadTableEntry);
  if (entry_end > p->table.size() || info.head_offset() > p->head.size() ||
      info.head_length() > p->head.size() - info.head_offset() ||
      info.head_length() > info.object_size() || info.head_length() == 0) {
    return;
  }
  HotHead& h = hot_.Slot(ex.key);
  h.metadata.assign(info.metadata());
  h.epoch = core_->epoch();
  h.shard = shard;
  h.entry = info.head_entry();
  h.stamp = info.head_stamp();
  h.offset = info.head_offset();
  h.length = info.head_length();
  h.size = info.object_size();
  h.generation = info.generation();
  h.created_ns = info.created_nanos();
  h.expires_ns = info.expires_nanos();
  h.fresh_until_ms = policy::FreshUntilMs(h.metadata);
}

bool HttpServer::Impl::ServeLocal(Conn& c) {
  Exchange& ex = *c.ex;
  HotHead* h = hot_.Find(ex.key);
  if (h == nullptr) return false;
  CoreLink::Pools* p = h->epoch == core_->epoch() ? core_->pools(h->shard) : nullptr;
  auto stale = [&] {
    ++stats_.local_stale;
    hot_.Erase(ex.key);
    return false;
  };
  if (p == nullptr || !p->table) return stale();
  // The key moved to another core (one joined an etcd:// link): its owner answers now, and a
  // tail asked of it would not match this head.
  if (h->shard != core_->ShardFor(ex.key)) return stale();
  const uint64_t now = detail::NowUnixNanos();
  if (h->expires_ns != 0 && now >= h->expires_ns) return stale();
  if (now / 1'000'000 >= h->fresh_until_ms) return stale();  // (the core revalidates it)
  if (!StampHolds(*p, h->entry, h->stamp)) return stale();
  const std::string_view meta = h->metadata;
  const bool whole = h->length == h->size;
  auto count = [&] {
    ++stats_.hits;
    ++stats_.local_hits;
    c.ex->cache = "HIT";
    Touch(*p, h->entry);
    ExpectNextRequest();
  };
  if (policy::NotModified(ex.inm, ex.ims, MetaGet(meta, "etag"), MetaGet(meta, "last-modified"))) {
    count();
    Write(c, HitHead(ex, 304, meta, h->created_ns, ""), true);
    FinishExchange(c);
    return true;
  }
  if (ex.head) {
    count();
    Write(c, HitHead(ex, 200, meta, h->created_ns, detail::ContentLength(h->size).view()), true);
    FinishExchange(c);
    return true;
  }
  const uint8_t* bytes = p->head.data() + h->offset;
  if (whole && h->size <= kLocalCopyBytes) {
    std::string out = HitHead(ex, 200, meta, h->created_ns, detail::ContentLength(h->size).view(),
                              false, h->size);
    out.append(reinterpret_cast<const char*>(bytes), h->size);
    if (!StampHolds(*p, h->entry, h->stamp)) return stale();  // (nothing sent yet)
    count();
    Write(c, std::move(out), true);
    FinishExchange(c);
    return true;
  }
  count();
  Write(c, HitHead(ex, 200, meta, h->created_ns, detail::ContentLength(h->size).view()), true);
  CoreLink::Hold(p);
  if (c.out.empty()) c.last_progress = MonotonicNanos();
  Piece piece;
  piece.ptr = bytes;
  piece.len = whole ? h->size - 1 : h->length;
  piece.pools = p;
  piece.stamp = h->stamp;
  piece.entry = h->entry;
  c.out_bytes += piece.len;
  c.out.push_back(std::move(piece));
  if (whole) {
    Piece last;
    last.owned.assign(1, '\0');
    last.seal = bytes + h->size - 1;
    c.out_bytes += 1;
    c.out.push_back(std::move(last));
    dirty_.push_back(&c);
    FinishExchange(c);
    return true;
  }
  // The tail from the core, asked now: its disk read runs while the head goes out. The
  // head's first write (headers and 4 KiB) goes just before (asking the core may wake it,
  // and on a machine whose CPUs it shares, the client's first byte should not wait for
  // that); the rest of the head after (the disk read must start before it, not after).
  ex.local_tail = true;
  ex.local_generation = h->generation;
  ex.size = h->size;
  const uint64_t tail_from = h->length;
  Flush(c, /*once=*/true);
#if GOBLIN_HAVE_URING
  if (async_) net_.Submit();
#endif
  if (c.closed || !c.ex) return true;
  if (CoreGet(c, tail_from, UINT64_MAX, false) != 0) c.ex->state = ExState::kCoreBody;
  return true;
}

}  // namespace goblin::gateway
