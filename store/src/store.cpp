#include "goblin/store/store.h"

#include <time.h>

#include <algorithm>
#include <cstring>
#include <unordered_set>
#include <utility>

#include <xxhash.h>

#include "goblin/common/clock.h"
#include "goblin/common/log.h"
#include "goblin/common/units.h"
#include "tier_drives.h"

namespace goblin::store {
namespace {
constexpr std::string_view kLog = "store";
constexpr int kMaxDemotionsPerAllocation = 64;
constexpr size_t kExpiriesPerPoll = 16;
}  // namespace

namespace {
uint64_t RealtimeNs(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}
}  // namespace

uint64_t Store::NowNs() const { return RealtimeNs(CLOCK_REALTIME); }

uint64_t Store::CoarseNowNs() const { return RealtimeNs(CLOCK_REALTIME_COARSE); }

Result<std::unique_ptr<Store>> Store::Open(const StoreOptions& o) {
  if (o.tier_dirs.empty())
    return Err(StatusCode::kInvalidArgument, "the store needs a disk tier (--ssd-dir)");
  if (o.tier_dirs.size() > 2) {
    return Err(StatusCode::kInvalidArgument, "at most two disk tiers (--ssd-dir, --hdd-dir)");
  }
  if (o.ram_head == 0 || o.ram_head > o.pool.block) {
    return Err(StatusCode::kInvalidArgument, "--ram-head {} must be between 1 and --block {}",
               FormatSize(o.ram_head), FormatSize(o.pool.block));
  }
  std::unique_ptr<Store> s(new Store());
  s->options_ = o;
  const uint64_t index_t0 = MonotonicNanos();
  GOBLIN_ASSIGN_OR_RETURN(OpenedTiers opened,
                          OpenTiersAndIndex(o.tier_dirs, o.tier_capacity, o.tier));
  const uint64_t index_ns = MonotonicNanos() - index_t0;
  s->index_ = std::move(opened.index);
  for (auto& t : opened.tiers) {
    s->tier_ptrs_.push_back(t.get());
    s->tiers_.push_back(std::move(t));
  }
  // Each drive's own queue: with several drives, a drive's reads take at most half the
  // engine's depth, so one slow or hung drive cannot hold every slot the others need.
  size_t all_drives = 0;
  for (const auto& t : s->tiers_) all_drives += t->drives().size();
  if (all_drives > 1) {
    for (const auto& t : s->tiers_) {
      for (const auto& d : t->drives()) d->set_read_limit(std::max<uint32_t>(2, o.io_depth / 2));
    }
  }
  // Rebuild each tier's free space from the index; a record that does not fit its tier is
  // damaged and dropped (counted and logged), never served; one with bytes on a drive that
  // is gone is dropped with it. A record on a tier that is not configured now is a
  // configuration error, not damage: refuse to start rather than drop.
  std::vector<std::string> damaged, on_lost_drive;
  uint64_t missing_tier = 0;
  s->index_->ForEach([&](const ObjectRecord& r) {
    for (const Extent& e : r.extents) {
      if (e.tier >= s->tiers_.size()) {
        ++missing_tier;
        return;
      }
    }
    for (const Extent& e : r.extents) {
      if (s->tiers_[e.tier]->drive(e.drive) == nullptr) {
        for (LostDrive& l : s->tiers_[e.tier]->lost()) {
          if (l.number == e.drive) ++l.objects_dropped;
        }
        on_lost_drive.push_back(r.key);
        return;
      }
    }
    for (size_t i = 0; i < r.extents.size(); ++i) {
      if (!s->tiers_[r.extents[i].tier]->MarkUsed(r.extents[i])) {
        for (size_t j = 0; j < i; ++j) s->tiers_[r.extents[j].tier]->Free(r.extents[j]);
        damaged.push_back(r.key);
        return;
      }
    }
  });
  if (missing_tier > 0) {
    return Err(StatusCode::kFailedPrecondition,
               "{} objects in {} have bytes on a second tier: start with the same --hdd-dir",
               missing_tier, opened.index_dir);
  }
  for (const auto& t : s->tiers_) {
    for (const LostDrive& l : t->lost()) {
      GOBLIN_LOG_ERROR(
          kLog, "tier {}: {} is gone{}: {} objects that had bytes on it dropped", t->tier_no(),
          l.number < 0 ? std::string("a drive") : fmt::format("drive {}", l.number),
          l.dir.empty() ? "" : fmt::format(" ({}: {})", l.dir, l.error), l.objects_dropped);
      ++s->stats_.drives_lost;
    }
  }
  for (const auto& key : on_lost_drive) {
    GOBLIN_RETURN_IF_ERROR(s->index_->Delete(key, nullptr));
    ++s->stats_.lost_drive_objects;
  }
  for (const auto& key : damaged) {
    GOBLIN_LOG_WARN(kLog, "dropping '{}': its extents do not fit the tier", key);
    GOBLIN_RETURN_IF_ERROR(s->index_->Delete(key, nullptr));
    ++s->stats_.corrupt_dropped;
  }
  // Oldest first into the eviction order; TTLs into the expiry queue.
  std::vector<std::pair<uint64_t, std::string>> by_generation;
  s->index_->ForEach([&](const ObjectRecord& r) {
    by_generation.emplace_back(r.generation, r.key);
    if (r.expires_unix_ns != 0) s->expiries_.emplace(r.expires_unix_ns, r.key);
  });
  std::sort(by_generation.begin(), by_generation.end());
  for (const auto& [gen, key] : by_generation) s->policy_.Insert(key);

  GOBLIN_ASSIGN_OR_RETURN(s->pool_, HeadPool::Create(o.pool));
  // Tails leave a sixteenth of the pool (at least one block) free for new heads.
  s->tail_reserve_blocks_ = std::max<uint64_t>(1, s->pool_->stats().blocks_total / 16);
  const bool strict = !o.pool.allow_promotion;
  GOBLIN_ASSIGN_OR_RETURN(s->head_table_,
                          HeadTable::Create(o.head_descriptors, o.pool.numa_node, strict));
  GOBLIN_ASSIGN_OR_RETURN(s->engine_, IoEngine::Create(o.io, o.io_depth));
  GOBLIN_ASSIGN_OR_RETURN(s->buffers_, IoBufferPool::Create(o.io_buffers, o.tier.extent_bytes,
                                                            o.pool.numa_node, strict));
  // Fixed buffers: the I/O buffers' pages are pinned once instead of on every extent.
  if (auto reg = s->engine_->RegisterBuffers(
          s->buffers_->Buffer(0), uint64_t{s->buffers_->count()} * s->buffers_->buffer_bytes());
      !reg) {
    GOBLIN_LOG_WARN(kLog, "store: I/O buffers not registered with the engine ({}); pinning per I/O",
                    reg.error().ToString());
  }
  s->io_ = std::make_unique<IoRouter>(s->engine_.get(), s->buffers_.get());
  s->io_->set_staging_limit(o.fill_staging_bytes);
  s->stats_.objects = s->index_->size();
  s->pending_free_slots_.assign(s->tiers_.size(), 0);
  if (o.group_commit) {
    // From here on changes are synced in groups on the store's worker thread.
    GOBLIN_RETURN_IF_ERROR(s->index_->StartWorker());
    s->index_->set_checkpoint_policy(o.checkpoint);
  }
  const auto& rec = s->index_->recovery();
  std::string drives;  // "1 tier(s)", or with drives: "tier 0 on 2 drives"
  for (const auto& t : s->tiers_) {
    drives += fmt::format("{}tier {} on {} drive{}", drives.empty() ? "" : ", ", t->tier_no(),
                          t->drives().size(), t->drives().size() == 1 ? "" : "s");
  }
  GOBLIN_LOG_INFO(
      kLog,
      "store: {} objects ({} from the checkpoint, {} journal records, {} torn bytes cut; "
      "index loaded in {:.1f} ms), {}, I/O via {}{}",
      s->stats_.objects, rec.from_checkpoint, rec.journal_records, rec.discarded_bytes,
      static_cast<double>(index_ns) / 1e6, drives, IoBackendName(s->engine_->backend()),
      s->engine_->buffers_registered() ? " (registered buffers)" : "");
  return s;
}

Store::~Store() {
  DropParked(0);
  for (Stream* s : spare_streams_) delete s;
  for (auto& [id, f] : fills_) {
    for (Stream* st : f.followers) st->fill_ = 0;
    if (f.writer) f.writer->Abort();
  }
  if (index_) {
    if (auto r = index_->SyncNow(); !r) GOBLIN_LOG_ERROR(kLog, "store: final sync: {}", r.error());
  }
}

VoidResult Store::CheckFits(std::string_view key, uint64_t expected_size) const {
  if (expected_size == UINT64_MAX) return {};
  // An object larger than a tier could never be stored: refuse it before evicting anything.
  Placement p = Place(expected_size, options_.ram_head, options_.ssd_prefix, tiers_.size() > 1);
  for (size_t i = 0; i < tiers_.size(); ++i) {
    uint64_t bytes = i == 0 ? p.tier0_bytes : p.tier1_bytes;
    if (tiers_[i]->SlotsFor(bytes) > tiers_[i]->capacity_slots()) {
      return Err(
          StatusCode::kResourceExhausted, "'{}' ({}) does not fit disk tier {} ({} capacity)", key,
          FormatSize(expected_size), tiers_[i]->path(), FormatSize(tiers_[i]->capacity_bytes()));
    }
  }
  return {};
}

Result<std::pair<Store::FillStart, Store::FillId>> Store::BeginFill(
    std::string_view key, uint64_t ttl_ns, std::string_view metadata, uint64_t expected_size,
    bool head_pending, PutCondition condition) {
  if (key.empty()) return Err(StatusCode::kInvalidArgument, "empty object key");
  if (auto it = filling_.find(key); it != filling_.end()) {
    ++stats_.fills_refused;
    return std::pair{FillStart::kInProgress, it->second};
  }
  if (auto c = CheckCondition(key, condition); !c) {
    ++stats_.puts_refused_by_condition;
    return Err(c.error());
  }
  if (head_pending) {
    ttl_ns = 0;
    metadata = {};
    expected_size = UINT64_MAX;
  }
  if (auto fits = CheckFits(key, expected_size); !fits) {
    ++stats_.fills_refused;
    return Err(fits.error());
  }
  FillId id = next_fill_++;
  Fill f;
  f.key = std::string(key);
  f.ttl_ns = ttl_ns;
  f.expected_size = expected_size;
  f.metadata = std::string(metadata);
  f.started_unix_ns = NowNs();
  f.last_data_ns = MonotonicNanos();
  f.head_pending = head_pending;
  f.condition = condition;
  Placement place = Place(UINT64_MAX, options_.ram_head, options_.ssd_prefix, tiers_.size() > 1);
  f.writer =
      std::make_unique<ObjectWriter>(io_.get(), tiers(), place.tier0_bytes, options_.ram_head);
  f.writer->SetMakeRoom([this](uint16_t tier) { return MakeRoom(tier); });
  filling_[f.key] = id;
  fills_.emplace(id, std::move(f));
  ++stats_.fills_started;
  return std::pair{FillStart::kGranted, id};
}

VoidResult Store::SetFillHead(FillId id, uint64_t expected_size, uint64_t ttl_ns,
                              std::string_view metadata) {
  auto it = fills_.find(id);
  if (it == fills_.end()) return Err(StatusCode::kNotFound, "no fill {}", id);
  Fill& f = it->second;
  if (!f.head_pending)
    return Err(StatusCode::kFailedPrecondition, "fill {} is not waiting for its head", id);
  if (f.writer->bytes() > expected_size) {
    return Err(StatusCode::kInvalidArgument, "fill {} has {} bytes, more than its head's {}", id,
               f.writer->bytes(), expected_size);
  }
  GOBLIN_RETURN_IF_ERROR(CheckFits(f.key, expected_size));
  f.expected_size = expected_size;
  f.ttl_ns = ttl_ns;
  f.metadata = std::string(metadata);
  f.head_pending = false;
  f.last_data_ns = MonotonicNanos();
  return {};
}

VoidResult Store::SetFillTags(FillId id, std::string_view tags) {
  auto it = fills_.find(id);
  if (it == fills_.end()) return Err(StatusCode::kNotFound, "no fill {}", id);
  it->second.tags.assign(tags);
  return {};
}

VoidResult Store::SetFillVariant(FillId id) {
  auto it = fills_.find(id);
  if (it == fills_.end()) return Err(StatusCode::kNotFound, "no fill {}", id);
  if (it->second.key.find('\0') == std::string::npos) {
    return Err(StatusCode::kInvalidArgument, "a variant's key names its object before a NUL");
  }
  it->second.variant = true;
  return {};
}

bool Store::FillAwaitingHead(std::string_view key) const {
  auto it = filling_.find(key);
  return it != filling_.end() && fills_.at(it->second).head_pending;
}

bool Store::FillCommitting(std::string_view key) const {
  auto it = filling_.find(key);
  return it != filling_.end() && fills_.at(it->second).committing;
}

VoidResult Store::Append(FillId id, std::span<const uint8_t> data) {
  auto it = fills_.find(id);
  if (it == fills_.end()) return Err(StatusCode::kNotFound, "no fill {}", id);
  Fill& f = it->second;
  if (f.committing) return Err(StatusCode::kFailedPrecondition, "fill {} is being committed", id);
  f.last_data_ns = MonotonicNanos();
  // The head goes to RAM as it arrives (and to disk with the rest).
  if (f.head_len < options_.ram_head && !data.empty()) {
    if (!f.head && f.head_len == 0) {
      f.head = AllocateHead(options_.ram_head);
      if (!f.head) ++stats_.heads_not_cached;
    }
    if (f.head) {
      uint64_t take = std::min<uint64_t>(data.size(), options_.ram_head - f.head_len);
      std::memcpy(pool_->At(f.head->offset + f.head_len), data.data(), take);
      f.head_len += take;
    }
  }
  // Bytes past a head in RAM go to the RAM tail too while the pool has blocks to spare.
  if (options_.ram_tails && f.head && !f.tail_closed && f.head_len == options_.ram_head) {
    const uint64_t block = pool_->block_size();
    uint64_t at = f.writer->bytes();  // object offset of data[0]
    size_t done = at < options_.ram_head ? options_.ram_head - at : 0;
    while (done < data.size()) {
      uint64_t in_block = f.tail_len % block;
      if (in_block == 0) {
        auto slot = AllocateTailBlock(/*displace_colder_than=*/-1);
        if (!slot) {
          f.tail_closed = true;  // the tail ends here: the rest only on disk
          break;
        }
        f.tail.push_back(*slot);
        ++stats_.tail_blocks_filled;
      }
      uint64_t take = std::min<uint64_t>(data.size() - done, block - in_block);
      std::memcpy(pool_->At(f.tail.back().offset + in_block), data.data() + done, take);
      f.tail_len += take;
      done += take;
    }
  }
  if (auto r = f.writer->Append(data); !r) {
    Abort(id);
    return r;
  }
  for (Stream* s : f.followers) s->Wake();
  return {};
}

std::optional<ObjectWriter::Placed> Store::PlaceAppend(FillId id, uint64_t offset,
                                                       uint32_t length) {
  auto it = fills_.find(id);
  if (it == fills_.end() || it->second.committing) return std::nullopt;
  return it->second.writer->Place(offset, length);
}

VoidResult Store::CheckCondition(std::string_view key, const PutCondition& c) const {
  using Kind = PutCondition::Kind;
  if (c.kind == Kind::kNone) return {};
  const ObjectRecord* r = index_->Find(key);
  if (r != nullptr && Expired(*r, NowNs())) r = nullptr;
  switch (c.kind) {
    case Kind::kAbsent:
      if (r != nullptr) return Err(StatusCode::kAlreadyExists, "'{}' is stored", key);
      return {};
    case Kind::kPresent:
      if (r == nullptr) return Err(StatusCode::kNotFound, "'{}' is not stored", key);
      return {};
    case Kind::kGeneration:
      if (r == nullptr) return Err(StatusCode::kNotFound, "'{}' is not stored", key);
      // (a CAS of 0 names no version: never current, never older)
      if (r->generation != c.generation &&
          !(c.stale_if_older && c.generation != 0 && c.generation < r->generation)) {
        return Err(StatusCode::kFailedPrecondition, "'{}' is at generation {}, not {}", key,
                   r->generation, c.generation);
      }
      return {};
    case Kind::kNone:
      break;
  }
  return {};
}

Result<Store::Fill*> Store::CommittableFill(FillId id, uint64_t expected_size) {
  auto it = fills_.find(id);
  if (it == fills_.end() || it->second.committing)
    return Err(StatusCode::kNotFound, "no fill {}", id);
  Fill& f = it->second;
  uint64_t size = f.writer->bytes();
  if (expected_size != UINT64_MAX && expected_size != size) {
    auto err = Err(StatusCode::kInvalidArgument, "fill of '{}' received {} bytes, announced {}",
                   f.key, size, expected_size);
    Abort(id);  // destroys `f`
    return err;
  }
  if (auto c = CheckCondition(f.key, f.condition); !c) {  // (it may have changed meanwhile)
    ++stats_.puts_refused_by_condition;
    Abort(id);
    return Err(c.error());
  }
  return &f;
}

Result<uint64_t> Store::Commit(FillId id, uint64_t expected_size) {
  GOBLIN_RETURN_IF_ERROR(CommittableFill(id, expected_size));
  return CommitWritten(id);  // (Finish waits for the writes here)
}

VoidResult Store::CommitAsync(FillId id, uint64_t expected_size,
                              std::function<void(Result<uint64_t>)> done) {
  GOBLIN_ASSIGN_OR_RETURN(Fill * fill, CommittableFill(id, expected_size));
  Fill& f = *fill;
  f.committing = true;
  f.on_commit = std::move(done);
  if (auto r = f.writer->FinishAsync([this, id] { commits_written_.push_back(id); }); !r) {
    f.on_commit = nullptr;
    Abort(id);
    return r;
  }
  return {};
}

Result<uint64_t> Store::CommitWritten(FillId id) {
  auto it = fills_.find(id);
  if (it == fills_.end()) return Err(StatusCode::kNotFound, "no fill {}", id);
  Fill& f = it->second;
  uint64_t size = f.writer->bytes();
  auto extents = f.writer->Finish();
  if (!extents) {
    Abort(id);
    return Err(extents.error());
  }
  ObjectRecord rec;
  rec.key = f.key;
  rec.size = size;
  rec.created_unix_ns = NowNs();
  rec.expires_unix_ns = f.ttl_ns ? rec.created_unix_ns + f.ttl_ns : 0;
  rec.metadata = std::move(f.metadata);
  rec.tags = std::move(f.tags);
  rec.marks = f.variant ? kMarkVariant : 0;
  rec.extents = *extents;
  rec.access_unix_s = static_cast<uint32_t>(rec.created_unix_ns / 1'000'000'000ULL);
  const ObjectRecord* old = index_->Find(f.key);
  if (old != nullptr && Expired(*old, rec.created_unix_ns)) old = nullptr;
  // A cas older than the current version, allowed to be (ms I): stored as stale.
  const bool stale = old != nullptr && f.condition.stale_if_older &&
                     f.condition.kind == PutCondition::Kind::kGeneration &&
                     f.condition.generation != old->generation;
  if ((f.condition.keep_expiry || stale) && old != nullptr) {
    rec.expires_unix_ns = old->expires_unix_ns;
  }
  if (stale) {
    rec.marks |= kMarkStale;
    rec.read_marks = old->read_marks & kMarkTokenSent;
  }
  if (f.condition.keep_marks && old != nullptr) {
    rec.marks = old->marks | (rec.marks & kMarkVariant);
    rec.read_marks = old->read_marks;
    rec.access_unix_s = old->access_unix_s;
  }
  uint64_t old_generation = old ? old->generation : 0;
  const uint64_t old_loans = old ? old->loan_handle : 0;
  std::vector<Extent> released;
  uint64_t lsn = 0;
  auto gen = index_->Commit(std::move(rec), &released, &lsn);
  if (!gen) {
    for (const Extent& e : *extents) tiers_[e.tier]->Free(e);
    Abort(id);
    return Err(gen.error());
  }
  if (old_generation) Retire(f.key, old_generation, old_loans, std::move(released), lsn);
  // A small object keeps a slot of its own size, not a full head slot.
  std::optional<PoolSlot> head = f.head;
  uint64_t head_alloc = options_.ram_head;  // the length `head` was allocated for
  if (head && size > 0 && size < options_.ram_head) {
    auto small = pool_->Allocate(size);
    if (small && small->capacity < head->capacity) {
      std::memcpy(pool_->At(small->offset), pool_->At(head->offset), size);
      pool_->Free(*head, options_.ram_head);
      head = small;
      head_alloc = size;
    } else if (small) {
      pool_->Free(*small, size);  // same size class: keep the slot we have
    }
  }
  if (head && size > 0) {
    Resident r{*gen, *head, std::min(size, options_.ram_head), head_alloc};
    if (!f.tail.empty() && f.tail_len > 0) {
      if (r.length + f.tail_len == size) ShrinkTailEnd(&f.tail, f.tail_len);
      r.tail = std::move(f.tail);
      r.tail_bytes = f.tail_len;
      stats_.tail_bytes_in_ram += f.tail_len;
      AddToTailClock(f.key);
    }
    AddResident(f.key, std::move(r));
  } else if (head) {
    pool_->Free(*head, head_alloc);
  }
  FreeTail(&f.tail, 0);  // (a tail that did not go to a resident head)
  const ObjectRecord* committed = index_->Find(f.key);
  policy_.Insert(f.key);
  if (committed->expires_unix_ns != 0) expiries_.emplace(committed->expires_unix_ns, f.key);
  std::vector<Stream*> followers = std::move(f.followers);
  const bool purged = f.delete_after_commit;
  const bool stale_after = f.stale_after_commit && !purged;
  const bool stale_set_ttl = f.stale_set_ttl;
  const uint64_t stale_ttl_ns = f.stale_ttl_ns;
  const bool keep_expiry = f.condition.keep_expiry || stale;
  const std::string key = f.key;
  filling_.erase(f.key);
  stats_.fill_disk_waits += f.writer->disk_waits();
  fills_.erase(it);
  ++stats_.fills_committed;
  for (Stream* s : followers) s->FillEnded(committed);  // (they hold loans: purge-safe)
  if (purged) {
    if (auto d = DeleteCommitted(key); !d) {
      GOBLIN_LOG_ERROR(kLog, "deleting '{}' purged while it committed: {}", key, d.error());
    }
  }
  uint64_t generation = *gen;
  if (stale_after) {  // soft-purged while it committed: stale from its first read on
    auto inv = Invalidate(key, 0, stale_set_ttl, stale_ttl_ns);
    if (!inv) {
      GOBLIN_LOG_ERROR(kLog, "marking '{}' stale, purged while it committed: {}", key, inv.error());
    } else if (*inv != 0 && *inv != kStalePending) {
      generation = *inv;  // (the version as it is now: a revalidation names this one)
    }
  }
  if (!purged && event_sink_) {
    // (an expiry kept from the version replaced is no new one: Redis's SET KEEPTTL says "set")
    const ObjectRecord* now = index_->Find(key);
    Event(ObjectEvent::kSet, key);
    if (now != nullptr && now->expires_unix_ns != 0 && !keep_expiry) {
      Event(ObjectEvent::kExpire, key);
    }
  }
  if (!purged && options_.max_variants != 0) TrimVariants(key);
  while (options_.max_objects != 0 && index_->size() > options_.max_objects) {
    if (!EvictOne(-1)) break;
  }
  stats_.objects = index_->size();
  return generation;
}

void Store::TrimVariants(const std::string& key) {
  const ObjectRecord* r = index_->Find(key);
  if (r == nullptr || (r->marks & kMarkVariant) == 0) return;
  std::vector<const ObjectRecord*> v =
      index_->Variants(std::string_view(key).substr(0, key.find('\0')));
  if (v.size() <= options_.max_variants) return;
  // The least recently used first (last access to the second, then creation); never the
  // one just stored. A head read by a gateway's local hits counts as read now (its touch is
  // handed on to eviction as DemoteOneHead would).
  std::erase(v, r);
  const auto now_s = static_cast<uint32_t>(NowNs() / 1'000'000'000ULL);
  for (const ObjectRecord* x : v) {
    if (auto h = heads_.find(x->key); h != heads_.end() && TakeTouch(h->second)) {
      policy_.Touch(x->key);
      h->second.referenced = true;
      x->access_unix_s = now_s;
    }
  }
  std::sort(v.begin(), v.end(), [](const ObjectRecord* a, const ObjectRecord* b) {
    return std::tie(a->access_unix_s, a->created_unix_ns) <
           std::tie(b->access_unix_s, b->created_unix_ns);
  });
  std::vector<std::string> drop;
  for (size_t i = 0; i + options_.max_variants <= v.size(); ++i) drop.push_back(v[i]->key);
  for (const std::string& k : drop) {
    auto d = DeleteCommitted(k);
    if (!d) {
      GOBLIN_LOG_ERROR(kLog, "dropping variant '{}': {}", k, d.error());
      return;
    }
    if (*d) {
      ++stats_.variants_evicted;
      Event(ObjectEvent::kEvicted, k);
    }
  }
}

void Store::Abort(FillId id) {
  auto it = fills_.find(id);
  if (it == fills_.end()) return;
  Fill& f = it->second;
  f.writer->Abort();
  if (f.head) pool_->Free(*f.head, options_.ram_head);
  FreeTail(&f.tail, 0);
  std::vector<Stream*> followers = std::move(f.followers);
  auto on_commit = std::move(f.on_commit);
  filling_.erase(f.key);
  stats_.fill_disk_waits += f.writer->disk_waits();
  fills_.erase(it);
  ++stats_.fills_aborted;
  for (Stream* s : followers) s->FillEnded(nullptr);
  if (on_commit) on_commit(Err(StatusCode::kAborted, "the fill was aborted"));
}

void Store::AddResident(const std::string& key, Resident r) {
  if (auto h = heads_.find(key); h != heads_.end()) Withdraw(h->second);
  heads_[key] = std::move(r);
  head_clock_.push_back(key);
  ++stats_.heads_in_ram;
  if (head_clock_.size() > 2 * heads_.size() + 64) {
    // Drop stale entries, and a key written again is kept once, where it was last added
    // (else a store whose keys are rewritten keeps every occurrence "live" and compacts on
    // every commit, in time growing with the writes: seen at 100% CPU, 200 sets/s).
    std::deque<std::string> live;
    std::unordered_set<std::string_view> seen;
    for (auto it = head_clock_.rbegin(); it != head_clock_.rend(); ++it) {
      if (auto h = heads_.find(*it); h != heads_.end() && seen.insert(h->first).second) {
        live.push_front(std::move(*it));
      }
    }
    head_clock_ = std::move(live);
  }
}

void Store::Retire(const std::string& key, uint64_t generation, uint64_t loan_handle,
                   std::vector<Extent> extents, uint64_t lsn) {
  std::optional<PoolSlot> head;
  uint64_t head_len = 0, head_bytes = 0, tail_bytes = 0;
  std::vector<PoolSlot> tail;
  if (auto h = heads_.find(key); h != heads_.end() && h->second.generation == generation) {
    head = h->second.slot;
    head_len = h->second.alloc_len;
    head_bytes = h->second.length;
    tail = std::move(h->second.tail);
    tail_bytes = h->second.tail_bytes;
    Withdraw(h->second);
    heads_.erase(h);
  }
  if (VersionLoans::Version* v = versions_.Find(loan_handle, generation)) {
    v->retired = std::make_unique<VersionLoans::Retired>(VersionLoans::Retired{
        lsn, std::move(extents), head, head_len, std::move(tail), head_bytes, tail_bytes});
    return;
  }
  FreeWhenDurable(std::move(extents), lsn);
  if (head) FreeHead(*head, head_len);  // (RAM: nothing to wait for)
  FreeTail(&tail, tail_bytes);
}

void Store::FreeWhenDurable(std::vector<Extent> extents, uint64_t lsn) {
  if (extents.empty()) return;
  if (lsn <= index_->durable_lsn()) {
    for (const Extent& e : extents) tiers_[e.tier]->Free(e);
    return;
  }
  for (const Extent& e : extents) ++pending_free_slots_[e.tier];
  pending_frees_.push_back({lsn, std::move(extents)});
}

void Store::FreeDurable() {
  if (pending_frees_.empty()) return;
  const uint64_t durable = index_->durable_lsn();
  auto keep = std::partition(pending_frees_.begin(), pending_frees_.end(),
                             [&](const PendingFree& p) { return p.lsn > durable; });
  for (auto it = keep; it != pending_frees_.end(); ++it) {
    for (const Extent& e : it->extents) {
      tiers_[e.tier]->Free(e);
      --pending_free_slots_[e.tier];
    }
  }
  pending_frees_.erase(keep, pending_frees_.end());
}

void Store::FinishDurability() {
  const uint64_t durable = index_->durable_lsn();
  if (durable == finished_lsn_) return;  // (called every loop round: nothing new)
  finished_lsn_ = durable;
  FreeDurable();
  while (!durable_waiters_.empty() && durable_waiters_.front().first <= durable) {
    auto done = std::move(durable_waiters_.front().second);
    durable_waiters_.pop_front();
    done(Status());
  }
}

void Store::WhenDurable(std::function<void(const Status&)> done) {
  const uint64_t lsn = index_->last_lsn();
  if (lsn <= index_->durable_lsn() && durable_waiters_.empty()) {
    done(Status());
    return;
  }
  durable_waiters_.emplace_back(lsn, std::move(done));
}

VoidResult Store::SyncNow() {
  auto r = index_->SyncNow();
  if (!r) {
    auto waiters = std::move(durable_waiters_);
    durable_waiters_.clear();
    for (auto& [lsn, done] : waiters) done(r.error());
    return r;
  }
  FinishDurability();
  return {};
}

VoidResult Store::Close() {
  GOBLIN_RETURN_IF_ERROR(SyncNow());
  if (index_->journal_records() > 0) {
    GOBLIN_RETURN_IF_ERROR(index_->Checkpoint());
    GOBLIN_LOG_INFO(kLog, "store: checkpoint of {} objects written at shutdown", index_->size());
  }
  return {};
}

bool Store::MakeRoom(uint16_t tier) {
  // Space that waits for a durable record is the cheapest to get back: one sync.
  if (pending_free_slots_[tier] == 0) {
    // Evict a batch now (S3-FIFO order), so that one sync makes room for many extents.
    const uint64_t batch = std::max<uint64_t>(1, tiers_[tier]->capacity_slots() / 64);
    bool any = false;
    while (pending_free_slots_[tier] < batch) {
      if (!EvictOne(tier)) break;
      any = true;
      if (!tiers_[tier]->at_capacity()) return true;  // freed at once (already durable)
    }
    if (!any) return false;
    if (pending_free_slots_[tier] == 0) return true;  // (held by loans: evict more next time)
  }
  ++stats_.inline_syncs;
  if (auto r = SyncNow(); !r) {
    GOBLIN_LOG_ERROR(kLog, "store: sync to make room on tier {}: {}", tier, r.error());
    return false;
  }
  return true;
}

std::optional<PoolSlot> Store::AllocateHead(uint64_t len) {
  auto slot = pool_->Allocate(len);
  // Tails are the first to give their blocks back, then cold heads.
  for (int i = 0; !slot && i < kMaxDemotionsPerAllocation && DropOneTail(); ++i) {
    slot = pool_->Allocate(len);
  }
  for (int i = 0; !slot && i < kMaxDemotionsPerAllocation && DemoteOneHead(); ++i) {
    slot = pool_->Allocate(len);
  }
  return slot;
}

std::optional<PoolSlot> Store::AllocateTailBlock(int displace_colder_than) {
  if (pool_->stats().blocks_free <= tail_reserve_blocks_ &&
      !(displace_colder_than >= 0 && DropOneTail(displace_colder_than))) {
    return std::nullopt;
  }
  if (pool_->stats().blocks_free <= tail_reserve_blocks_) return std::nullopt;
  return pool_->Allocate(pool_->block_size());
}

Store::PoolUse Store::PoolUseByKind() const {
  PoolUse u;
  for (const auto& [key, r] : heads_) {
    if (r.length < options_.ram_head) {
      ++u.whole_objects;
      u.whole_object_bytes += r.length;
    } else {
      ++u.large_heads;
      u.large_head_bytes += r.length;
    }
    if (r.tail_bytes > 0) {
      ++u.tails;
      u.tail_bytes += r.tail_bytes;
    }
  }
  return u;
}

void Store::ShrinkTailEnd(std::vector<PoolSlot>* tail, uint64_t bytes) {
  // The last block of a complete tail is mostly empty on average (half a block per large
  // object): its bytes move to a slot of their size class. Not with stable blocks (a tail
  // slot must be alone in its block to be sent by reference).
  const uint64_t block = pool_->block_size();
  const uint64_t rest = bytes % block;
  if (rest == 0 || pool_->stable_blocks()) return;
  auto small = pool_->Allocate(rest);
  if (!small) return;
  if (small->capacity >= block) {
    pool_->Free(*small, rest);
    return;
  }
  std::memcpy(pool_->At(small->offset), pool_->At(tail->back().offset), rest);
  pool_->Free(tail->back(), block);
  tail->back() = *small;
}

void Store::FreeTail(std::vector<PoolSlot>* tail, uint64_t bytes) {
  const uint64_t block = pool_->block_size();
  for (size_t i = 0; i < tail->size(); ++i) {
    const PoolSlot& s = (*tail)[i];
    // (a last slot smaller than a block holds what ShrinkTailEnd moved there)
    const uint64_t len = s.capacity < block ? bytes - i * block : block;
    pool_->Free(s, len);
  }
  tail->clear();
  stats_.tail_bytes_in_ram -= bytes;
}

uint32_t Store::Reads(Resident& r) {
  if (r.reads_epoch != read_epoch_) {
    const uint32_t halvings = read_epoch_ - r.reads_epoch;
    r.reads = halvings >= 8 ? 0 : static_cast<uint8_t>(r.reads >> halvings);
    r.reads_epoch = read_epoch_;
  }
  return r.reads;
}

bool Store::DropOneTail(int colder_than) {
  for (size_t budget = 2 * tail_clock_.size() + 1; budget > 0 && !tail_clock_.empty(); --budget) {
    std::string key = std::move(tail_clock_.front());
    tail_clock_.pop_front();
    auto h = heads_.find(key);
    if (h == heads_.end() || h->second.tail.empty()) continue;  // stale
    Resident& r = h->second;
    if (r.tail_referenced || Lent(key, r.generation)) {
      r.tail_referenced = false;
      tail_clock_.push_back(std::move(key));
      continue;
    }
    if (colder_than >= 0 && Reads(r) >= static_cast<uint32_t>(colder_than)) {
      tail_clock_.push_back(std::move(key));  // as hot as the reader: it stays
      return false;
    }
    FreeTail(&r.tail, r.tail_bytes);
    r.tail_bytes = 0;
    ++stats_.tails_dropped;
    return true;
  }
  return false;
}

std::span<const uint8_t> Store::TailBytes(const Loan& loan, uint64_t pos) {
  const std::vector<PoolSlot>* tail = nullptr;
  uint64_t start = 0, bytes = 0;
  if (auto h = heads_.find(loan.info.key);
      h != heads_.end() && h->second.generation == loan.info.generation) {
    h->second.tail_referenced = true;
    tail = &h->second.tail;
    start = h->second.length;
    bytes = h->second.tail_bytes;
  } else if (const uint64_t* held = loan_ids_.Find(loan.id)) {
    if (const VersionLoans::Version* v = versions_.Find(*held); v != nullptr && v->retired) {
      tail = &v->retired->tail;
      start = v->retired->head_bytes;
      bytes = v->retired->tail_bytes;
    }
  }
  if (tail == nullptr || pos < start || pos >= start + bytes) return {};
  const uint64_t block = pool_->block_size();
  uint64_t off = pos - start;
  const PoolSlot& slot = (*tail)[off / block];
  uint64_t n = std::min(block - off % block, start + bytes - pos);
  return {pool_->At(slot.offset + off % block), n};
}

void Store::AdoptTail(const Loan& loan, uint64_t offset, std::span<const uint8_t> data) {
  if (!options_.ram_tails) return;
  auto h = heads_.find(loan.info.key);
  if (h == heads_.end() || h->second.generation != loan.info.generation) return;
  Resident& r = h->second;
  if (r.length < options_.ram_head) return;  // (a small object is whole in its head)
  const uint64_t block = pool_->block_size();
  if (!r.tail.empty() && r.tail.back().capacity < block) return;  // (complete, shrunk)
  uint64_t prefix = r.length + r.tail_bytes;  // the first object byte not in RAM
  if (offset > prefix || offset + data.size() <= prefix) return;
  const bool had_tail = !r.tail.empty();
  // The reads before this one (MakeLoan counted this one).
  const int past_reads = static_cast<int>(Reads(r)) - 1;
  size_t done = prefix - offset;
  while (done < data.size()) {
    uint64_t in_block = r.tail_bytes % block;
    if (in_block == 0) {
      auto slot = AllocateTailBlock(std::max(past_reads, 0));
      if (!slot) break;
      // (dropping a tail never drops this one: it is being read, so its version has a loan)
      r.tail.push_back(*slot);
      ++stats_.tail_blocks_adopted;
    }
    uint64_t take = std::min<uint64_t>(data.size() - done, block - in_block);
    std::memcpy(pool_->At(r.tail.back().offset + in_block), data.data() + done, take);
    r.tail_bytes += take;
    stats_.tail_bytes_in_ram += take;
    done += take;
  }
  if (!had_tail && !r.tail.empty()) AddToTailClock(loan.info.key);
}

void Store::AddToTailClock(const std::string& key) {
  tail_clock_.push_back(key);
  if (tail_clock_.size() > 2 * heads_.size() + 64) {  // drop entries of tails gone meanwhile
    std::deque<std::string> live;
    std::unordered_set<std::string_view> seen;  // (a key whose tail came back: once)
    for (auto& k : tail_clock_) {
      if (auto h = heads_.find(k);
          h != heads_.end() && !h->second.tail.empty() && seen.insert(h->first).second) {
        live.push_back(std::move(k));
      }
    }
    tail_clock_ = std::move(live);
  }
}

bool Store::DemoteOneHead() {
  // CLOCK: a head read since the hand last passed gets another round; heads with loans stay.
  for (size_t budget = 2 * head_clock_.size() + 1; budget > 0 && !head_clock_.empty(); --budget) {
    std::string key = std::move(head_clock_.front());
    head_clock_.pop_front();
    auto h = heads_.find(key);
    if (h == heads_.end()) continue;      // stale
    bool touched = TakeTouch(h->second);  // (read where the core did not see it)
    if (touched) policy_.Touch(key);
    if (touched || h->second.referenced || Lent(key, h->second.generation)) {
      h->second.referenced = false;
      head_clock_.push_back(std::move(key));
      continue;
    }
    Withdraw(h->second);
    FreeHead(h->second.slot, h->second.alloc_len);
    if (!h->second.tail.empty()) ++stats_.tails_dropped;  // (a tail goes with its head)
    FreeTail(&h->second.tail, h->second.tail_bytes);
    heads_.erase(h);
    ++stats_.heads_demoted;
    return true;
  }
  return false;
}

bool Store::EvictOne(int tier) {
  auto victim = policy_.Evict(
      [&](const std::string& key) {
        const ObjectRecord* r = index_->Find(key);
        if (r == nullptr) return true;  // stale: nothing to keep
        if (Lent(*r)) return false;
        // A head read where the core did not see it (a gateway's local hit): another round.
        if (auto h = heads_.find(key); h != heads_.end() && TakeTouch(h->second)) {
          h->second.referenced = true;
          return false;
        }
        if (tier < 0) return true;
        return std::any_of(r->extents.begin(), r->extents.end(),
                           [&](const Extent& e) { return e.tier == tier; });
      },
      [&](const std::string& key) -> uint8_t {
        // (the hits OpenStream counted in the record since the policy last judged it)
        const ObjectRecord* r = index_->Find(key);
        if (r == nullptr) return 0;
        return std::exchange(r->policy_reads, 0);
      });
  if (!victim) {
    ++stats_.eviction_failures;
    return false;
  }
  auto removed = DeleteCommitted(*victim);
  if (!removed) {
    GOBLIN_LOG_ERROR(kLog, "evicting '{}': {}", *victim, removed.error());
    return false;
  }
  if (*removed) {
    ++stats_.evicted;
    Event(ObjectEvent::kEvicted, *victim);
  }
  return true;
}

Result<const ObjectRecord*> Store::FindLive(const HashedKey& hashed, uint64_t* now) {
  const std::string_view key = hashed.key;
  const ObjectRecord* r = index_->Find(hashed);
  if (r == nullptr) {
    ++stats_.misses;
    return r;
  }
  // (exact where the expiry is judged by it; else only a read's access stamp takes it)
  *now = r->expires_unix_ns != 0 ? NowNs() : CoarseNowNs();
  if (Expired(*r, *now)) {
    ++stats_.expired;
    ++stats_.misses;
    GOBLIN_RETURN_IF_ERROR(DeleteCommitted(key));
    Event(ObjectEvent::kExpired, key);
    return static_cast<const ObjectRecord*>(nullptr);
  }
  ++stats_.hits;
  return r;
}

Result<std::optional<ObjectInfo>> Store::Head(std::string_view key, const AccessRequest* access,
                                              AccessMarks* marks) {
  GOBLIN_ASSIGN_OR_RETURN(const ObjectRecord* r, FindForRead(HashedKey(key), access, marks));
  if (r == nullptr) return std::optional<ObjectInfo>();
  return std::optional<ObjectInfo>(ObjectInfo{r->key, r->size, r->generation, r->created_unix_ns,
                                              r->expires_unix_ns, r->metadata});
}

Result<Store::Resident> Store::RefillHead(const ObjectRecord& rec) {
  uint64_t len = std::min(rec.size, options_.ram_head);
  uint64_t alloc = std::max<uint64_t>(len, 1);
  auto slot = AllocateHead(alloc);
  if (!slot) return Err(StatusCode::kResourceExhausted, "head pool full");
  std::span<uint8_t> out(pool_->At(slot->offset), len);
  if (auto r = ReadRange(rec.extents, 0, out); !r) {
    pool_->Free(*slot, alloc);
    return Err(r.error());
  }
  ++stats_.head_refills;
  return Resident{rec.generation, *slot, len, alloc};
}

void Store::AdoptHead(Loan& loan, std::span<const uint8_t> data) {
  uint64_t len = std::min(loan.info.size, options_.ram_head);
  if (loan.head || len == 0 || data.size() < len) return;
  const ObjectRecord* cur = index_->Find(loan.info.key);
  if (cur == nullptr || cur->generation != loan.info.generation) return;
  if (heads_.count(loan.info.key)) return;
  auto slot = AllocateHead(len);
  if (!slot) return;
  std::memcpy(pool_->At(slot->offset), data.data(), len);
  ++stats_.head_refills;
  AddResident(loan.info.key, Resident{loan.info.generation, *slot, len, len});
}

void Store::MakeLoan(const ObjectRecord& rec, Loan* loan) {
  MakeLoan(rec, loan, HashedKey(rec.key));
}

void Store::MakeLoan(const ObjectRecord& rec, Loan* loan, const HashedKey& key) {
  ObjectInfo& info = loan->info;
  info.key.assign(rec.key);
  info.size = rec.size;
  info.generation = rec.generation;
  info.created_unix_ns = rec.created_unix_ns;
  info.expires_unix_ns = rec.expires_unix_ns;
  info.metadata.assign(rec.metadata);
  loan->extents = rec.extents;
  loan->head.reset();
  loan->head_bytes = 0;
  if (auto h = heads_.find(key); h != heads_.end() && h->second.generation == rec.generation) {
    CountHeadRead(h->second);
    loan->head = h->second.slot;
    loan->head_bytes = h->second.length;
  }
  loan->id = LendVersion(rec);
}

void Store::CountHeadRead(Resident& r) {
  r.referenced = true;
  if (Reads(r) < UINT8_MAX) ++r.reads;
  if (++loans_this_epoch_ >= 4 * std::max<uint64_t>(heads_.size(), 16)) {
    ++read_epoch_;  // (every resident's count halves, lazily, in Reads())
    loans_this_epoch_ = 0;
  }
}

uint64_t Store::LendVersion(const ObjectRecord& rec) {
  ++stats_.loans_out;
  return loan_ids_.Add(versions_.Lend(&rec.loan_handle, rec.generation));
}

VoidResult Store::EnsureHead(const ObjectRecord& rec) {
  if (heads_.count(rec.key) || rec.size == 0) return {};
  auto refilled = RefillHead(rec);
  if (refilled) {
    AddResident(rec.key, *refilled);
  } else if (refilled.error().code() == StatusCode::kCorruption) {
    DropCorrupt(rec.key, rec.generation, refilled.error());
    return Err(refilled.error());
  }
  return {};  // else: pool full, the head is read from disk like the tail
}

Result<std::optional<Loan>> Store::Get(std::string_view key) {
  GOBLIN_ASSIGN_OR_RETURN(auto info, Head(key));
  if (!info) return std::optional<Loan>();
  policy_.Touch(key);
  GOBLIN_RETURN_IF_ERROR(EnsureHead(*index_->Find(key)));
  std::optional<Loan> loan(std::in_place);
  MakeLoan(*index_->Find(key), &*loan);
  return loan;
}

Result<std::optional<HeadDescription>> Store::Describe(std::string_view key, DiskRead disk,
                                                       StreamPtr* refill) {
  GOBLIN_ASSIGN_OR_RETURN(auto info, Head(key));
  if (!info) return std::optional<HeadDescription>();
  policy_.Touch(key);
  const ObjectRecord& rec = *index_->Find(key);
  if (disk == DiskRead::kBlock) {
    GOBLIN_RETURN_IF_ERROR(EnsureHead(rec));
  } else if (disk == DiskRead::kAsync && refill != nullptr && rec.size > 0 &&
             !heads_.count(rec.key)) {
    // The head's first extent read like any stream's; its arrival adopts the head.
    StreamPtr st = NewStream();
    MakeLoan(rec, &st->loan_);
    st->pos_ = 0;
    st->end_ = std::min(rec.size, options_.ram_head);
    *refill = std::move(st);
  }
  HeadDescription d;
  d.info = std::move(*info);
  if (auto p = PublishHead(d.info.key, d.info.generation)) {
    d.entry = p->first;
    d.head = p->second;
  }
  return d;
}

std::optional<std::pair<uint32_t, sbe::HeadTableEntry>> Store::PublishHead(const std::string& key,
                                                                           uint64_t generation) {
  auto h = heads_.find(key);
  if (h == heads_.end() || h->second.generation != generation) return std::nullopt;
  Resident& r = h->second;
  r.referenced = true;
  if (r.entry == sbe::kNoHeadEntry) {
    sbe::HeadTableEntry e;
    e.offset = r.slot.offset;
    e.length = r.length;
    e.checksum = XXH3_64bits(pool_->At(r.slot.offset), r.length);
    if (auto i = head_table_->Publish(e)) {
      r.entry = *i;
      ++stats_.heads_described;
    }
  }
  if (r.entry == sbe::kNoHeadEntry) return std::nullopt;
  return std::pair{r.entry, head_table_->Read(r.entry)};
}

void Store::ReleasePin(uint64_t id) {
  const uint64_t* held = loan_ids_.Find(id);
  if (held == nullptr) return;  // released twice: ignore
  const uint64_t version = *held;
  loan_ids_.Remove(id);
  --stats_.loans_out;
  versions_.Return(version, [&](VersionLoans::Retired& last) {
    FreeWhenDurable(std::move(last.extents), last.lsn);
    if (last.head) FreeHead(*last.head, last.head_len);
    FreeTail(&last.tail, last.tail_bytes);
  });
}

bool Store::Lent(const std::string& key, uint64_t generation) {
  const ObjectRecord* r = index_->Find(key);
  return r != nullptr && r->generation == generation && Lent(*r);
}

Loan Store::Retain(const Loan& loan) {
  Loan copy = loan;
  copy.id = Pin(loan);
  return copy;
}

uint64_t Store::Pin(const Loan& loan) {
  uint64_t version;
  if (const uint64_t* held = loan_ids_.Find(loan.id)) {
    version = *held;
    versions_.LendAgain(version);
  } else {
    // The loan's own id was given up (a stream's pin taken): its version by its record while
    // that is current; else (replaced, deleted) a count of its own, which holds nothing.
    const ObjectRecord* r = index_->Find(loan.info.key);
    uint64_t unlinked = 0;
    version = versions_.Lend(
        r != nullptr && r->generation == loan.info.generation ? &r->loan_handle : &unlinked,
        loan.info.generation);
  }
  const uint64_t id = loan_ids_.Add(version);
  ++stats_.loans_out;
  return id;
}

// `key` by value: a caller may pass the record's own key (EnsureHead), which the delete frees.
void Store::DropCorrupt(std::string key, uint64_t generation, const Status& why) {
  const ObjectRecord* cur = index_->Find(key);
  if (cur == nullptr || cur->generation != generation) return;
  ++stats_.corrupt_dropped;
  GOBLIN_LOG_WARN(kLog, "dropping '{}': {}", key, why);
  (void)DeleteCommitted(key);
}

VoidResult Store::ReadRange(std::span<const Extent> extents, uint64_t offset,
                            std::span<uint8_t> out) {
  // The extents that overlap [offset, offset + out.size()).
  std::vector<Extent> need;
  uint64_t pos = 0, first_start = 0;
  for (const Extent& e : extents) {
    uint64_t end = pos + e.length;
    if (end > offset && pos < offset + out.size()) {
      if (need.empty()) first_start = pos;
      need.push_back(e);
    }
    pos = end;
  }
  if (offset + out.size() > pos) return Err(StatusCode::kOutOfRange, "read beyond the object");
  ExtentReader reader(io_.get(), tiers(), std::move(need), first_start, options_.read_ahead);
  for (;;) {
    GOBLIN_ASSIGN_OR_RETURN(auto chunk, reader.Next());
    if (!chunk) break;
    uint64_t at = chunk->object_offset;
    uint64_t lo = std::max(at, offset), hi = std::min(at + chunk->length, offset + out.size());
    if (hi > lo)
      std::memcpy(out.data() + (lo - offset), buffers_->Buffer(chunk->buffer) + (lo - at), hi - lo);
    reader.Release(*chunk);
  }
  return {};
}

VoidResult Store::Read(const Loan& loan, uint64_t offset, std::span<uint8_t> out) {
  if (offset > loan.info.size || out.size() > loan.info.size - offset) {
    return Err(StatusCode::kOutOfRange, "read of [{}, {}) beyond a {}-byte object", offset,
               offset + out.size(), loan.info.size);
  }
  uint64_t done = 0;
  if (loan.head && offset < loan.head_bytes) {
    done = std::min<uint64_t>(out.size(), loan.head_bytes - offset);
    std::memcpy(out.data(), pool_->At(loan.head->offset + offset), done);
  }
  if (done == out.size()) return {};
  auto r = ReadRange(loan.extents, offset + done, out.subspan(done));
  if (!r && r.error().code() == StatusCode::kCorruption)
    DropCorrupt(loan.info.key, loan.info.generation, r.error());
  return r;
}

std::string_view ObjectEventName(ObjectEvent e) {
  switch (e) {
    case ObjectEvent::kSet:
      return "set";
    case ObjectEvent::kDel:
      return "del";
    case ObjectEvent::kExpire:
      return "expire";
    case ObjectEvent::kPersist:
      return "persist";
    case ObjectEvent::kExpired:
      return "expired";
    case ObjectEvent::kEvicted:
      return "evicted";
  }
  return "?";
}

Result<bool> Store::Delete(std::string_view key) {
  // A fill of the key whose bytes are all in (committing) is deleted as soon as its record
  // is written: a purge never loses to a commit that was already on its way.
  bool pending = false;
  if (auto f = filling_.find(key); f != filling_.end()) {
    Fill& fill = fills_.at(f->second);
    if (fill.committing) pending = fill.delete_after_commit = true;
  }
  // A record past its expiry that ExpireDue has not reaped yet is gone already for a reader:
  // it expires now, and the delete finds nothing (memcached's NOT_FOUND, Redis's 0), as a
  // read would (FindLive). It answered DELETED when the delete came first.
  const ObjectRecord* r = index_->Find(key);
  if (r == nullptr) return pending;
  if (Expired(*r, NowNs())) {
    ++stats_.expired;
    GOBLIN_RETURN_IF_ERROR(DeleteRecord(key, *r));
    Event(ObjectEvent::kExpired, key);
    return pending;
  }
  GOBLIN_ASSIGN_OR_RETURN(bool removed, DeleteRecord(key, *r));
  if (removed) Event(ObjectEvent::kDel, key);
  return removed || pending;
}

Result<bool> Store::DeleteCommitted(std::string_view key) {
  const ObjectRecord* r = index_->Find(key);
  if (r == nullptr) return false;
  return DeleteRecord(key, *r);
}

Result<bool> Store::DeleteRecord(std::string_view key, const ObjectRecord& r) {
  const uint64_t gen = r.generation, loans = r.loan_handle;
  std::vector<Extent> released;
  uint64_t lsn = 0;
  GOBLIN_ASSIGN_OR_RETURN(bool removed, index_->Delete(key, &released, &lsn));
  if (removed) {
    policy_.Remove(key);
    Retire(std::string(key), gen, loans, std::move(released), lsn);
  }
  stats_.objects = index_->size();
  return removed;
}

Result<uint64_t> Store::DeletePrefix(std::string_view prefix) {
  std::vector<std::string> keys;
  index_->ForEach([&](const ObjectRecord& r) {
    if (std::string_view(r.key).starts_with(prefix)) keys.push_back(r.key);
  });
  uint64_t n = 0;
  for (auto& [id, f] : fills_) {  // (see Delete)
    if (f.committing && !f.delete_after_commit && std::string_view(f.key).starts_with(prefix) &&
        index_->Find(f.key) == nullptr) {
      f.delete_after_commit = true;
      ++n;
    }
  }
  quiet_ = true;
  for (const std::string& k : keys) {
    auto removed = Delete(k);
    if (!removed) {
      quiet_ = false;
      return std::unexpected(removed.error());
    }
    n += *removed ? 1 : 0;
  }
  quiet_ = false;
  return n;
}

Result<uint64_t> Store::InvalidatePrefix(std::string_view prefix) {
  std::vector<std::string> keys;
  const uint64_t now = NowNs();
  index_->ForEach([&](const ObjectRecord& r) {
    if (std::string_view(r.key).starts_with(prefix) && (r.marks & kMarkStale) == 0 &&
        !Expired(r, now))
      keys.push_back(r.key);
  });
  uint64_t n = 0;
  for (auto& [id, f] : fills_) {  // (see DeletePrefix; a committed one is counted below)
    if (!f.stale_after_commit && std::string_view(f.key).starts_with(prefix) &&
        f.MarkStaleAfterCommit(false, 0)) {
      const ObjectRecord* r = index_->Find(f.key);
      n += r == nullptr || Expired(*r, now) ? 1 : 0;
    }
  }
  for (const std::string& k : keys) {
    GOBLIN_ASSIGN_OR_RETURN(uint64_t gen, Invalidate(k, 0, false, 0));
    n += gen != 0 ? 1 : 0;
  }
  return n;
}

Result<Store::Opened> Store::OpenStream(std::string_view key, uint64_t offset, uint64_t length,
                                        bool follow_fill, const AccessRequest* access,
                                        AccessMarks* marks, bool lend_head) {
  Opened o;
  const HashedKey hashed(key);  // (one hash: the fills, the index and the heads take it)
  if (follow_fill) {
    // (a committing fill that was purged is gone for new readers already)
    // (a reserved fill without its head yet cannot be followed: read past it)
    if (auto f = filling_.find(hashed); f != filling_.end() &&
                                        !fills_.at(f->second).delete_after_commit &&
                                        !fills_.at(f->second).head_pending) {
      Fill& fill = fills_.at(f->second);
      // Every byte of a committing fill is in and checksummed: a hit (its record is on the
      // way), of the size it has.
      o.status = fill.committing ? Lookup::kHit : Lookup::kFilling;
      // (soft-purged while it commits: stale to its readers, as its record will be)
      if (fill.stale_after_commit && marks != nullptr) marks->marks |= kAccessStale;
      StreamPtr s = NewStream();
      s->fill_ = f->second;
      ObjectInfo& info = s->loan_.info;
      info.key.assign(fill.key);
      info.size = fill.committing ? fill.writer->bytes() : fill.expected_size;
      info.generation = 0;
      info.created_unix_ns = fill.started_unix_ns;
      info.expires_unix_ns = 0;
      info.metadata.assign(fill.metadata);
      o.info = &s->loan_.info;
      s->pos_ = offset;
      s->end_ = length > UINT64_MAX - offset ? UINT64_MAX : offset + length;
      if (fill.expected_size != UINT64_MAX) {
        s->end_ = std::min(s->end_, fill.expected_size);
        s->pos_ = std::min(s->pos_, s->end_);
      }
      fill.followers.push_back(s.get());
      ++stats_.fill_followers;
      o.stream = std::move(s);
      return o;
    }
  }
  GOBLIN_ASSIGN_OR_RETURN(const ObjectRecord* rec,
                          FindForRead(hashed, access, marks));  // (no copy of its info)
  if (rec == nullptr) return o;
  if (rec->policy_reads < 3) ++rec->policy_reads;  // (the policy takes it when it judges it)
  o.status = Lookup::kHit;
  const uint64_t size = rec->size;
  const uint64_t pos = std::min(offset, size);
  const uint64_t end = length > size - pos ? size : pos + length;
  if (lend_head && pos < end) {
    if (auto h = heads_.find(hashed);
        h != heads_.end() && h->second.generation == rec->generation && end <= h->second.length) {
      CountHeadRead(h->second);
      stats_.head_bytes_served += end - pos;
      o.lent =
          HeadLoan{rec, {pool_->At(h->second.slot.offset + pos), end - pos}, LendVersion(*rec)};
      return o;
    }
  }
  StreamPtr s = NewStream();
  MakeLoan(*rec, &s->loan_, hashed);
  o.info = &s->loan_.info;
  s->pos_ = pos;
  s->end_ = end;
  o.stream = std::move(s);
  return o;
}

void Store::ExpireDue(uint64_t now, size_t max) {
  while (max-- > 0 && !expiries_.empty() && expiries_.top().first <= now) {
    Due due = expiries_.top();
    expiries_.pop();
    const ObjectRecord* r = index_->Find(due.second);
    if (r == nullptr || r->expires_unix_ns != due.first) continue;  // replaced or deleted
    ++stats_.expired;
    if (auto d = DeleteCommitted(due.second); !d) {
      GOBLIN_LOG_ERROR(kLog, "expiring '{}': {}", due.second, d.error());
      return;
    }
    Event(ObjectEvent::kExpired, due.second);
  }
}

uint64_t Store::HeadBytesInRam(const ObjectRecord& rec) const {
  auto h = heads_.find(rec.key);
  return h != heads_.end() && h->second.generation == rec.generation ? h->second.length : 0;
}

void Store::ForEachObject(
    const std::function<void(const ObjectRecord&, uint64_t head_in_ram)>& fn) const {
  index_->ForEach([&](const ObjectRecord& r) { fn(r, HeadBytesInRam(r)); });
}

int Store::MillisUntilDue() const {
  if (index_->checkpoint_encoding()) return 0;  // (its next slice: Poll at once)
  int ms = -1;
  if (!expiries_.empty()) {
    uint64_t due = expiries_.top().first, now = NowNs();
    ms = due <= now
             ? 0
             : static_cast<int>(std::min<uint64_t>((due - now + 999'999) / 1'000'000, 60'000));
  }
  if (options_.fill_timeout_ns != 0 && !fills_.empty()) {
    uint64_t now = MonotonicNanos();
    int stall = next_stall_check_ <= now
                    ? 0
                    : static_cast<int>((next_stall_check_ - now + 999'999) / 1'000'000);
    ms = ms < 0 ? stall : std::min(ms, stall);
  }
  return ms;
}

void Store::AbortStalledFills(uint64_t now) {
  // Checked a few times per timeout: a stalled fill goes within ~1.25x the timeout.
  next_stall_check_ = now + std::max<uint64_t>(options_.fill_timeout_ns / 4, 1'000'000);
  std::vector<FillId> stalled;
  for (const auto& [id, f] : fills_) {
    if (!f.committing && now - f.last_data_ns >= options_.fill_timeout_ns) stalled.push_back(id);
  }
  for (FillId id : stalled) {
    GOBLIN_LOG_WARN(kLog, "fill of '{}' received nothing for {}: aborted", fills_.at(id).key,
                    FormatDuration(std::chrono::nanoseconds(options_.fill_timeout_ns)));
    Abort(id);
    ++stats_.fills_timed_out;
    timed_out_.push_back(id);
  }
}

void Store::WakeAll(std::vector<Stream*>* list) {
  // Through waking_, whose capacity stays: a stream that waits again goes back on `list`
  // (the other buffer), and neither is reallocated round after round.
  if (!waking_.empty()) {  // (called again from a ready callback: a list of its own)
    std::vector<Stream*> nested;
    nested.swap(*list);
    for (Stream* s : nested) s->Wake();
    return;
  }
  waking_.swap(*list);
  for (Stream* s : waking_) s->Wake();
  waking_.clear();
}

VoidResult Store::Poll() {
  size_t reaped = 0;
  if (io_->in_flight() > 0) {
    GOBLIN_ASSIGN_OR_RETURN(reaped, io_->Poll(0));
  }
  // Streams waiting for room in a drive's queue: after completions (one of them may have
  // made it), or when nothing is in flight at all (they were reaped elsewhere). Not every
  // round: a hung drive must not turn the loop into a spin.
  if (!drive_waiters_.empty() && (reaped > 0 || io_->in_flight() == 0)) {
    WakeAll(&drive_waiters_);
  }
  // Commits whose writes have landed: the record now (visible), the answer once durable.
  while (!commits_written_.empty()) {
    std::vector<FillId> ready = std::move(commits_written_);
    commits_written_.clear();
    for (FillId id : ready) {
      auto it = fills_.find(id);
      if (it == fills_.end()) continue;  // aborted meanwhile (it was told)
      auto done = std::move(it->second.on_commit);
      auto gen = CommitWritten(id);
      if (!gen) {
        if (done) done(Err(gen.error()));
        continue;
      }
      if (done) {
        WhenDurable([done = std::move(done), g = *gen](const Status& s) {
          done(s.ok() ? Result<uint64_t>(g) : Result<uint64_t>(Err(s)));
        });
      }
    }
  }
  if (auto r = index_->Poll(); !r) {
    // The journal stopped: nothing more becomes durable. Everyone waiting is told.
    auto waiters = std::move(durable_waiters_);
    durable_waiters_.clear();
    for (auto& [lsn, done] : waiters) done(r.error());
    return r;
  }
  FinishDurability();
  const bool every_64th = (++polls_ & 63) == 0;  // (the loop polls in a tight spin)
  if (!parked_.empty()) {
    if (!starved_.empty() && buffers_->free_count() == 0) {
      DropParked(0);  // (a reader waiting for a buffer comes before a chunk nobody may want)
    } else if (every_64th) {
      DropParked(MonotonicNanos() - kParkedNs);
    }
  }
  if (!starved_.empty() && buffers_->free_count() > 0) WakeAll(&starved_);
  if (!expiries_.empty()) ExpireDue(NowNs(), kExpiriesPerPoll);
  if (options_.fill_timeout_ns != 0 && !fills_.empty() && every_64th) {
    uint64_t now = MonotonicNanos();  // (every 64th round: the loop polls in a tight spin)
    if (now >= next_stall_check_) AbortStalledFills(now);
  }
  return {};
}

// ---- Stream ----

namespace {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr size_t kKeptStreams = 0;
#else
constexpr size_t kKeptStreams = 4096;  // per store (one shard's loop)
#endif
}  // namespace

Store::StreamPtr Store::NewStream() {
  ++stats_.streams_open;
  if (!spare_streams_.empty()) {
    Stream* s = spare_streams_.back();
    spare_streams_.pop_back();
    return StreamPtr(s);
  }
  return StreamPtr(new Stream(this));
}

void Store::StreamDeleter::operator()(Stream* s) const { Store::ReturnStream(s); }

void Store::ReturnStream(Stream* s) {
  s->Close();
  Store* store = s->store_;
  if (store->spare_streams_.size() < kKeptStreams) {
    store->spare_streams_.push_back(s);
  } else {
    delete s;
  }
}

void Store::Stream::Close() {
  if (chunk_ && fill_ == 0 && pos_ < chunk_->object_offset + chunk_->length) {
    store_->Park(*chunk_);  // (for whoever reads on from here)
    chunk_.reset();
  }
  DropReader();
  for (auto* list : {&store_->starved_, &store_->drive_waiters_}) {
    list->erase(std::remove(list->begin(), list->end(), this), list->end());
  }
  if (fill_ != 0) {
    if (auto f = store_->fills_.find(fill_); f != store_->fills_.end()) {
      auto& v = f->second.followers;
      v.erase(std::remove(v.begin(), v.end(), this), v.end());
    }
  } else if (loan_.id != 0) {
    store_->Release(loan_);
  }
  --store_->stats_.streams_open;
  // As new, keeping the strings' capacity.
  loan_.id = 0;
  loan_.info.key.clear();
  loan_.info.metadata.clear();
  loan_.info.size = loan_.info.generation = 0;
  loan_.info.created_unix_ns = loan_.info.expires_unix_ns = 0;
  loan_.head.reset();
  loan_.head_bytes = 0;
  loan_.extents = {};
  fill_ = 0;
  pos_ = end_ = 0;
  failed_ = Status();
  reader_first_ = 0;
  where_ = Where::kPrivate;
  stable_ = false;
  ready_ = nullptr;
}

void Store::Park(const ExtentReader::Chunk& c) {
  parked_.push_back({c, MonotonicNanos()});
  ++stats_.chunks_parked;
  const size_t most = std::max<size_t>(1, buffers_->count() / 4);
  while (parked_.size() > most) {
    buffers_->Release(parked_.front().chunk.buffer);
    parked_.pop_front();
  }
}

std::optional<ExtentReader::Chunk> Store::Unpark(const Extent& e, uint64_t object_offset) {
  for (auto it = parked_.rbegin(); it != parked_.rend(); ++it) {
    // (the same extent: the same bytes, its checksum verified when it was read)
    if (it->chunk.extent == e && it->chunk.object_offset == object_offset) {
      ExtentReader::Chunk c = it->chunk;
      parked_.erase(std::next(it).base());
      ++stats_.chunks_unparked;
      return c;
    }
  }
  return std::nullopt;
}

void Store::DropParked(uint64_t older_than_ns) {
  while (!parked_.empty() && (older_than_ns == 0 || parked_.front().parked_ns < older_than_ns)) {
    buffers_->Release(parked_.front().chunk.buffer);
    parked_.pop_front();
  }
}

void Store::Stream::DropReader() {
  if (chunk_) {
    store_->buffers_->Release(chunk_->buffer);
    chunk_.reset();
  }
  reader_.reset();
}

void Store::Stream::FillEnded(const ObjectRecord* rec) {
  fill_ = 0;
  if (rec == nullptr) {
    failed_ =
        Status(StatusCode::kAborted, fmt::format("the fill of '{}' was abandoned", loan_.info.key));
    DropReader();
  } else {
    // Continue on the committed object; its extents are the ones the fill wrote, so a
    // reader in progress stays valid.
    store_->MakeLoan(*rec, &loan_);
    end_ = std::min(end_, rec->size);
    pos_ = std::min(pos_, end_);
  }
  Wake();
}

uint32_t Store::Stream::DetachChunk() {
  uint32_t b = chunk_->buffer;
  if (fill_ == 0 && end_ < chunk_->object_offset + chunk_->length) {
    // The range ends inside the chunk: parked as well, for whoever reads on from here (the
    // loan and the parked entry each own the buffer).
    store_->buffers_->Share(b);
    store_->Park(*chunk_);
  }
  chunk_.reset();
  where_ = Where::kPrivate;
  return b;
}

void Store::Stream::Consume(uint64_t n) {
  StoreStats& st = store_->stats_;
  if (fill_ != 0) {
    st.fill_bytes_served += n;
  } else if (where_ == Where::kHeadPool) {
    (pos_ >= loan_.head_bytes ? st.tail_bytes_served : st.head_bytes_served) += n;
  } else if (where_ == Where::kIoBuffer) {
    st.disk_bytes_served += n;
  }
  pos_ += n;
  if (chunk_ && pos_ >= chunk_->object_offset + chunk_->length) {
    store_->buffers_->Release(chunk_->buffer);
    chunk_.reset();
  }
}

Result<Store::Stream::Step> Store::Stream::PeekDisk(std::span<const Extent> extents,
                                                    size_t durable_end,
                                                    std::span<const uint8_t>* out) {
  auto from_chunk = [&] {
    where_ = Where::kIoBuffer;
    const uint8_t* b = store_->buffers_->Buffer(chunk_->buffer);
    uint64_t chunk_end = chunk_->object_offset + chunk_->length;
    *out = {b + (pos_ - chunk_->object_offset), std::min(chunk_end, end_) - pos_};
  };
  if (chunk_ && pos_ >= chunk_->object_offset && pos_ < chunk_->object_offset + chunk_->length) {
    from_chunk();
    return Step::kData;
  }
  if (chunk_) {
    store_->buffers_->Release(chunk_->buffer);
    chunk_.reset();
  }
  // The extent holding pos_.
  size_t i = 0;
  uint64_t start = 0;
  while (i < extents.size() && start + extents[i].length <= pos_) start += extents[i++].length;
  if (i >= durable_end) return Err(StatusCode::kInternal, "stream position beyond the extents");
  if (!reader_ || reader_->next_offset() != start || reader_->remaining_extents() == 0) {
    reader_.reset();
    if (auto parked = store_->Unpark(extents[i], start)) {  // read by a stream before this one
      chunk_ = *parked;
      from_chunk();
      return Step::kData;
    }
    // Only the extents the range covers: nothing is read ahead past its end (a reader of
    // pieces, as the memcache front, opens a stream per piece).
    size_t last = i + 1;
    for (uint64_t at = start + extents[i].length; last < durable_end && at < end_; ++last)
      at += extents[last].length;
    std::vector<Extent> todo(extents.begin() + static_cast<ptrdiff_t>(i),
                             extents.begin() + static_cast<ptrdiff_t>(last));
    // Readers leave a quarter of the buffers for writers.
    reader_ =
        std::make_unique<ExtentReader>(store_->io_.get(), store_->tiers(), std::move(todo), start,
                                       store_->options_.read_ahead, store_->buffers_->count() / 4);
    reader_->SetReadyCallback([this] { Wake(); });
    reader_first_ = i;
  }
  ExtentReader::Chunk c;
  auto step = reader_->TryNext(&c);
  if (!step) {
    if (step.error().code() == StatusCode::kCorruption && fill_ == 0) {
      store_->DropCorrupt(loan_.info.key, loan_.info.generation, step.error());
    }
    failed_ = step.error();
    DropReader();
    return Err(failed_);
  }
  if (*step == ExtentReader::Step::kWait) {
    if (reader_->starved()) store_->starved_.push_back(this);
    if (reader_->waiting_for_drive()) store_->drive_waiters_.push_back(this);
    return Step::kWait;
  }
  if (*step == ExtentReader::Step::kEnd)
    return Err(StatusCode::kInternal, "stream reader ended early");
  chunk_ = c;
  if (fill_ == 0) {
    std::span<const uint8_t> bytes{store_->buffers_->Buffer(c.buffer), c.length};
    if (c.object_offset == 0) store_->AdoptHead(loan_, bytes);
    store_->AdoptTail(loan_, c.object_offset, bytes);
  }
  from_chunk();
  return Step::kData;
}

Result<Store::Stream::Step> Store::Stream::Peek(std::span<const uint8_t>* out) {
  if (!failed_.ok()) return Err(failed_);
  if (pos_ >= end_) return Step::kEnd;
  if (fill_ != 0) {
    Fill& f = store_->fills_.at(fill_);
    if (f.head && pos_ < f.head_len) {
      where_ = Where::kPrivate;  // the fill's slot may move at its commit
      *out = {store_->pool_->At(f.head->offset + pos_), std::min(f.head_len, end_) - pos_};
      return Step::kData;
    }
    if (chunk_ && pos_ >= chunk_->object_offset && pos_ < chunk_->object_offset + chunk_->length)
      return PeekDisk(f.writer->extents(), f.writer->extents().size(), out);
    if (pos_ >= f.writer->bytes()) return Step::kWait;  // Append, Commit or Abort wakes us
    ObjectWriter::Location loc = f.writer->Locate(pos_);
    if (!loc.memory.empty()) {
      where_ = Where::kPrivate;
      *out = loc.memory.first(std::min<uint64_t>(loc.memory.size(), end_ - pos_));
      return Step::kData;
    }
    size_t durable = loc.extent + 1;
    while (durable < f.writer->extents().size() && f.writer->extent_on_disk(durable)) ++durable;
    return PeekDisk(f.writer->extents(), durable, out);
  }
  if (loan_.head && pos_ < loan_.head_bytes) {
    where_ = Where::kHeadPool;
    stable_ = store_->pool_->Stable(*loan_.head);
    *out = {store_->pool_->At(loan_.head->offset + pos_), std::min(loan_.head_bytes, end_) - pos_};
    return Step::kData;
  }
  if (loan_.head) {  // past the head: its RAM tail, as far as it goes
    if (auto t = store_->TailBytes(loan_, pos_); !t.empty()) {
      if (chunk_) {  // (a disk chunk read before the tail grew past it)
        store_->buffers_->Release(chunk_->buffer);
        chunk_.reset();
      }
      where_ = Where::kHeadPool;
      stable_ = store_->pool_->stable_blocks();  // (a tail block is alone in its block)
      *out = t.first(std::min<uint64_t>(t.size(), end_ - pos_));
      return Step::kData;
    }
  }
  return PeekDisk(loan_.extents, loan_.extents.size(), out);
}

}  // namespace goblin::store
