// Store: per-key operations besides fills and streams - Touch (a new expiry in place),
// DeleteIfGeneration, Invalidate (memcache md I: stale under a new generation, in place),
// Refresh (an HTTP 304: new metadata and expiry under a new generation, in place),
// Scan (a page of keys), and the bookkeeping of reads for memcache's meta commands
// (FindForRead: read marks, recache wins, Vivify on a miss). Same threading as store.cpp:
// the owning shard's thread.
#include "goblin/store/store.h"

namespace goblin::store {

Result<const ObjectRecord*> Store::Vivify(std::string_view key, uint64_t ttl_ns) {
  if (Filling(key)) return static_cast<const ObjectRecord*>(nullptr);  // (it comes: a miss)
  ObjectRecord rec;
  rec.key.assign(key);
  rec.created_unix_ns = NowNs();
  rec.expires_unix_ns = ttl_ns != 0 ? rec.created_unix_ns + ttl_ns : 0;
  rec.access_unix_s = static_cast<uint32_t>(rec.created_unix_ns / 1'000'000'000ULL);
  std::vector<Extent> released;  // (FindLive removed an expired version: none)
  uint64_t lsn = 0;
  GOBLIN_ASSIGN_OR_RETURN(uint64_t gen, index_->Commit(std::move(rec), &released, &lsn));
  (void)gen;
  FreeWhenDurable(std::move(released), lsn);
  const ObjectRecord* r = index_->Find(key);
  policy_.Insert(r->key);
  if (r->expires_unix_ns != 0) expiries_.emplace(r->expires_unix_ns, r->key);
  ++stats_.vivified;
  Event(ObjectEvent::kSet, key);
  if (r->expires_unix_ns != 0) Event(ObjectEvent::kExpire, key);
  stats_.objects = index_->size();
  return r;
}

Result<const ObjectRecord*> Store::FindForRead(const HashedKey& hashed, const AccessRequest* access,
                                               AccessMarks* marks) {
  const std::string_view key = hashed.key;
  uint64_t now = 0;
  GOBLIN_ASSIGN_OR_RETURN(const ObjectRecord* r, FindLive(hashed, &now));
  bool won = false;
  if (r == nullptr) {
    if (access == nullptr || !access->vivify) return r;
    GOBLIN_ASSIGN_OR_RETURN(r, Vivify(key, access->vivify_ttl_ns));
    if (r == nullptr) return r;
    won = true;  // (memcached's order: created, then neither R nor Z applies)
    now = NowNs();
  }
  const auto now_s = static_cast<uint32_t>(now / 1'000'000'000ULL);
  uint8_t m = 0;
  if ((r->read_marks & kMarkFetched) != 0) m |= kAccessFetched;
  const bool sent = (r->read_marks & kMarkTokenSent) != 0;
  if (!won && !sent && access != nullptr && access->recache_ns != 0 && r->expires_unix_ns != 0) {
    // Time left as memcached counts it (and mg t shows it): whole seconds, rounded up.
    const uint64_t left_s = (r->expires_unix_ns - now + 999'999'999ULL) / 1'000'000'000ULL;
    if (left_s < access->recache_ns / 1'000'000'000ULL ||
        (left_s == access->recache_ns / 1'000'000'000ULL &&
         left_s * 1'000'000'000ULL < access->recache_ns)) {
      won = true;
    }
  }
  if (sent) m |= kAccessTokenSent;
  if ((r->marks & kMarkStale) != 0) {
    m |= kAccessStale;
    if (!sent && access != nullptr && access->meta) won = true;  // (its first mg recaches it)
  }
  if (won) {
    m |= kAccessWon;
    r->read_marks |= kMarkTokenSent;
  }
  if (marks != nullptr) {
    marks->marks = m;
    marks->idle_s = now_s > r->access_unix_s ? now_s - r->access_unix_s : 0;
  }
  if (access == nullptr || access->bump) {
    r->read_marks |= kMarkFetched;
    r->access_unix_s = now_s;
  }
  return r;
}

Result<bool> Store::DeleteIfGeneration(std::string_view key, uint64_t generation) {
  const ObjectRecord* r = index_->Find(key);
  if (r == nullptr || Expired(*r, NowNs())) return false;
  if (r->generation != generation) {
    return Err(StatusCode::kFailedPrecondition, "'{}' is at generation {}, not {}", key,
               r->generation, generation);
  }
  GOBLIN_ASSIGN_OR_RETURN(bool removed, DeleteCommitted(key));
  if (removed) Event(ObjectEvent::kDel, key);
  return removed;
}

Result<uint64_t> Store::Invalidate(std::string_view key, uint64_t if_generation, bool set_ttl,
                                   uint64_t ttl_ns) {
  bool pending = false;  // (see Delete)
  if (if_generation == 0) {
    if (auto f = filling_.find(key); f != filling_.end()) {
      pending = fills_.at(f->second).MarkStaleAfterCommit(set_ttl, ttl_ns);
    }
  }
  const ObjectRecord* r = index_->Find(key);
  const uint64_t now = NowNs();
  if (r == nullptr || Expired(*r, now)) return pending ? kStalePending : uint64_t{0};
  if (if_generation != 0 && r->generation != if_generation) {
    return Err(StatusCode::kFailedPrecondition, "'{}' is at generation {}, not {}", key,
               r->generation, if_generation);
  }
  const uint64_t old = r->generation;
  const uint64_t expires = set_ttl && ttl_ns != 0 ? now + ttl_ns : 0;
  GOBLIN_ASSIGN_OR_RETURN(uint64_t gen, index_->Invalidate(key, set_ttl, expires));
  Reissued(index_->Find(key)->key, old, gen);
  if (set_ttl && expires != 0) expiries_.emplace(expires, std::string(key));
  ++stats_.invalidated;
  return gen;
}

Result<std::optional<Store::Touched>> Store::Refresh(std::string_view key, uint64_t if_generation,
                                                     std::string metadata, uint64_t ttl_ns) {
  const ObjectRecord* r = index_->Find(key);
  const uint64_t now = NowNs();
  if (r == nullptr || Expired(*r, now)) return std::optional<Touched>();
  if (if_generation != 0 && r->generation != if_generation) {
    return Err(StatusCode::kFailedPrecondition, "'{}' is at generation {}, not {}", key,
               r->generation, if_generation);
  }
  const uint64_t old = r->generation;
  const uint64_t expires = ttl_ns != 0 ? now + ttl_ns : 0;
  GOBLIN_ASSIGN_OR_RETURN(uint64_t gen, index_->Refresh(key, std::move(metadata), now, expires));
  Reissued(index_->Find(key)->key, old, gen);
  if (expires != 0) expiries_.emplace(expires, std::string(key));
  ++stats_.refreshed;
  return std::optional<Touched>(Touched{gen, expires});
}

void Store::Reissued(const std::string& key, uint64_t old, uint64_t gen) {
  // The same bytes under the new generation: the RAM head and the loans on the old one are
  // the new one's (their extents are the record's own list, which stayed where it was; the
  // loans are counted in the record's VersionLoans slot, which it keeps).
  if (auto h = heads_.find(key); h != heads_.end() && h->second.generation == old) {
    Withdraw(h->second);  // (local readers come back to the core and learn the new version)
    h->second.generation = gen;
  }
  if (const ObjectRecord* r = index_->Find(key)) versions_.Reissue(r->loan_handle, old, gen);
}

Store::ScanPage Store::Scan(uint64_t cursor, size_t count, size_t max_key_bytes) const {
  ScanPage page;
  const uint64_t now = NowNs();
  size_t bytes = 0;
  page.next_cursor = index_->Scan(cursor, count, [&](std::span<const ObjectRecord* const> records) {
    size_t need = 0;
    for (const ObjectRecord* r : records) need += r->key.size() + 2;
    // A bucket that does not fit waits for the next page, unless the page is empty: then
    // what fits of it is taken (only a bucket of several keys of tens of KiB gets here).
    if (bytes + need > max_key_bytes && !page.keys.empty()) return false;
    for (const ObjectRecord* r : records) {
      if (Expired(*r, now) || bytes + r->key.size() + 2 > max_key_bytes) continue;
      bytes += r->key.size() + 2;
      page.keys.push_back(r->key);
    }
    return true;
  });
  return page;
}

Result<std::optional<Store::Touched>> Store::Touch(std::string_view key, uint64_t ttl_ns,
                                                   TouchCondition condition) {
  const ObjectRecord* r = index_->Find(key);
  const uint64_t now = NowNs();
  if (r == nullptr || Expired(*r, now)) return std::optional<Touched>();
  const uint64_t expires = ttl_ns != 0 ? now + ttl_ns : 0;
  // (0 is "never": later than any time)
  const uint64_t current = r->expires_unix_ns == 0 ? UINT64_MAX : r->expires_unix_ns;
  const uint64_t wanted = expires == 0 ? UINT64_MAX : expires;
  if ((condition.if_no_expiry && r->expires_unix_ns != 0) ||
      (condition.if_expiry && r->expires_unix_ns == 0) ||
      (condition.if_later && !(wanted > current)) || (condition.if_sooner && !(wanted < current))) {
    return std::optional<Touched>();
  }
  if (condition.delete_now) {
    const uint64_t generation = r->generation;
    GOBLIN_ASSIGN_OR_RETURN(bool removed, DeleteCommitted(key));
    if (!removed) return std::optional<Touched>();
    Event(ObjectEvent::kDel, key);
    return std::optional<Touched>(Touched{generation, 0});
  }
  const bool had_expiry = r->expires_unix_ns != 0;
  GOBLIN_ASSIGN_OR_RETURN(bool found, index_->Touch(key, expires));
  if (!found) return std::optional<Touched>();
  r = index_->Find(key);
  if (!condition.no_bump) {  // (memcached: a touch is a read of the item)
    r->read_marks |= kMarkFetched;
    r->access_unix_s = static_cast<uint32_t>(now / 1'000'000'000ULL);
  }
  if (expires != 0) expiries_.emplace(expires, r->key);
  if (auto h = heads_.find(r->key); h != heads_.end()) Withdraw(h->second);
  ++stats_.touches;
  if (expires != 0) {
    Event(ObjectEvent::kExpire, key);
  } else if (had_expiry) {
    Event(ObjectEvent::kPersist, key);
  }
  return std::optional<Touched>(Touched{r->generation, expires});
}

}  // namespace goblin::store
