#include "goblin/store/store.h"

#include <time.h>

#include <algorithm>
#include <cstring>

#include "goblin/common/log.h"
#include "goblin/common/units.h"

namespace goblin::store {
namespace {
constexpr std::string_view kLog = "store";
}

uint64_t Store::NowNs() const {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

Result<std::unique_ptr<Store>> Store::Open(const StoreOptions& o) {
  if (o.tier_dirs.empty())
    return Err(StatusCode::kInvalidArgument, "the store needs a disk tier (--ssd-dir)");
  if (o.tier_dirs.size() > 1) {
    return Err(StatusCode::kUnimplemented,
               "a second disk tier (--hdd-dir) is not supported by this store yet");
  }
  if (o.ram_head == 0 || o.ram_head > o.pool.block) {
    return Err(StatusCode::kInvalidArgument, "--ram-head {} must be between 1 and --block {}",
               FormatSize(o.ram_head), FormatSize(o.pool.block));
  }
  std::unique_ptr<Store> s(new Store());
  s->options_ = o;
  GOBLIN_ASSIGN_OR_RETURN(TierDir dir, TierDir::Open(o.tier_dirs[0]));
  GOBLIN_ASSIGN_OR_RETURN(s->tier_, TierSpace::Open(std::move(dir), 0, o.tier));
  GOBLIN_ASSIGN_OR_RETURN(s->index_, Index::Open(o.tier_dirs[0]));
  // Rebuild the tier's free space from the index; a record that does not fit the tier is
  // damaged and dropped (counted and logged), never served.
  std::vector<std::string> damaged;
  s->index_->ForEach([&](const ObjectRecord& r) {
    for (const Extent& e : r.extents) {
      if (!s->tier_->MarkUsed(e)) {
        damaged.push_back(r.key);
        return;
      }
    }
  });
  for (const auto& key : damaged) {
    GOBLIN_LOG_WARN(kLog, "dropping '{}': its extents do not fit the tier", key);
    GOBLIN_RETURN_IF_ERROR(s->index_->Delete(key, nullptr));
    ++s->stats_.corrupt_dropped;
  }
  GOBLIN_ASSIGN_OR_RETURN(s->pool_, HeadPool::Create(o.pool));
  GOBLIN_ASSIGN_OR_RETURN(s->engine_, IoEngine::Create(o.io, o.io_depth));
  GOBLIN_ASSIGN_OR_RETURN(s->buffers_, IoBufferPool::Create(o.io_buffers, o.tier.extent_bytes));
  s->stats_.objects = s->index_->size();
  const auto& rec = s->index_->recovery();
  GOBLIN_LOG_INFO(
      kLog,
      "store: {} objects ({} from the checkpoint, {} journal records, {} torn bytes cut), "
      "I/O via {}",
      s->stats_.objects, rec.from_checkpoint, rec.journal_records, rec.discarded_bytes,
      IoBackendName(s->engine_->backend()));
  return s;
}

Store::~Store() {
  for (auto& [id, f] : fills_) {
    if (f.writer) f.writer->Abort();
  }
}

Result<std::pair<Store::FillStart, Store::FillId>> Store::BeginFill(std::string_view key,
                                                                    uint64_t ttl_ns,
                                                                    std::string_view metadata) {
  if (key.empty()) return Err(StatusCode::kInvalidArgument, "empty object key");
  if (auto it = filling_.find(std::string(key)); it != filling_.end()) {
    ++stats_.fills_refused;
    return std::pair{FillStart::kInProgress, it->second};
  }
  FillId id = next_fill_++;
  Fill f;
  f.key = std::string(key);
  f.ttl_ns = ttl_ns;
  f.metadata = std::string(metadata);
  f.writer = std::make_unique<ObjectWriter>(engine_.get(), buffers_.get(), tier_.get());
  filling_[f.key] = id;
  fills_.emplace(id, std::move(f));
  ++stats_.fills_started;
  return std::pair{FillStart::kGranted, id};
}

VoidResult Store::Append(FillId id, std::span<const uint8_t> data) {
  auto it = fills_.find(id);
  if (it == fills_.end()) return Err(StatusCode::kNotFound, "no fill {}", id);
  Fill& f = it->second;
  // The head goes to RAM as it arrives (and to disk with the rest).
  if (f.head_len < options_.ram_head && !data.empty()) {
    if (!f.head) {
      f.head = pool_->Allocate(options_.ram_head);
      if (!f.head) ++stats_.heads_not_cached;
    }
    if (f.head) {
      uint64_t take = std::min<uint64_t>(data.size(), options_.ram_head - f.head_len);
      std::memcpy(pool_->At(f.head->offset + f.head_len), data.data(), take);
      f.head_len += take;
    }
  }
  if (auto r = f.writer->Append(data); !r) {
    Abort(id);
    return r;
  }
  return {};
}

Result<uint64_t> Store::Commit(FillId id, uint64_t expected_size) {
  auto it = fills_.find(id);
  if (it == fills_.end()) return Err(StatusCode::kNotFound, "no fill {}", id);
  Fill& f = it->second;
  uint64_t size = f.writer->bytes();
  if (expected_size != UINT64_MAX && expected_size != size) {
    auto err = Err(StatusCode::kInvalidArgument, "fill of '{}' received {} bytes, announced {}",
                   f.key, size, expected_size);
    Abort(id);  // destroys `f`
    return err;
  }
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
  rec.extents = *extents;
  const ObjectRecord* old = index_->Find(f.key);
  uint64_t old_generation = old ? old->generation : 0;
  std::vector<Extent> released;
  auto gen = index_->Commit(std::move(rec), &released);
  if (!gen) {
    for (const Extent& e : *extents) tier_->Free(e);
    Abort(id);
    return Err(gen.error());
  }
  if (old_generation) Retire(f.key, old_generation, std::move(released));
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
    heads_[f.key] = Resident{*gen, *head, std::min(size, options_.ram_head), head_alloc};
    ++stats_.heads_in_ram;
  } else if (head) {
    pool_->Free(*head, head_alloc);
  }
  filling_.erase(f.key);
  fills_.erase(it);
  ++stats_.fills_committed;
  stats_.objects = index_->size();
  return *gen;
}

void Store::Abort(FillId id) {
  auto it = fills_.find(id);
  if (it == fills_.end()) return;
  Fill& f = it->second;
  f.writer->Abort();
  if (f.head) pool_->Free(*f.head, options_.ram_head);
  filling_.erase(f.key);
  fills_.erase(it);
  ++stats_.fills_aborted;
}

void Store::Retire(const std::string& key, uint64_t generation, std::vector<Extent> extents) {
  std::optional<PoolSlot> head;
  uint64_t head_len = 0;
  if (auto h = heads_.find(key); h != heads_.end() && h->second.generation == generation) {
    head = h->second.slot;
    head_len = h->second.alloc_len;
    heads_.erase(h);
  }
  if (auto l = loaned_.find(generation); l != loaned_.end()) {
    l->second.retired = true;
    l->second.extents = std::move(extents);
    l->second.head = head;
    l->second.head_len = head_len;
    return;
  }
  for (const Extent& e : extents) tier_->Free(e);
  if (head) FreeHead(*head, head_len);
}

Result<std::optional<ObjectInfo>> Store::Head(std::string_view key) {
  const ObjectRecord* r = index_->Find(key);
  if (r == nullptr) {
    ++stats_.misses;
    return std::optional<ObjectInfo>();
  }
  if (r->expires_unix_ns != 0 && NowNs() >= r->expires_unix_ns) {
    ++stats_.expired;
    ++stats_.misses;
    GOBLIN_RETURN_IF_ERROR(Delete(key));
    return std::optional<ObjectInfo>();
  }
  ++stats_.hits;
  return std::optional<ObjectInfo>(ObjectInfo{r->key, r->size, r->generation, r->created_unix_ns,
                                              r->expires_unix_ns, r->metadata});
}

Result<Store::Resident> Store::RefillHead(const ObjectRecord& rec) {
  uint64_t len = std::min(rec.size, options_.ram_head);
  auto slot = pool_->Allocate(std::max<uint64_t>(len, 1));
  if (!slot) return Err(StatusCode::kResourceExhausted, "head pool full");
  std::span<uint8_t> out(pool_->At(slot->offset), len);
  if (auto r = ReadRange(rec.extents, 0, out); !r) {
    pool_->Free(*slot, std::max<uint64_t>(len, 1));
    return Err(r.error());
  }
  ++stats_.head_refills;
  ++stats_.heads_in_ram;
  return Resident{rec.generation, *slot, len, std::max<uint64_t>(len, 1)};
}

Result<std::optional<Loan>> Store::Get(std::string_view key) {
  GOBLIN_ASSIGN_OR_RETURN(auto info, Head(key));
  if (!info) return std::optional<Loan>();
  const ObjectRecord* rec = index_->Find(key);
  Loan loan;
  loan.info = std::move(*info);
  loan.extents = rec->extents;
  auto h = heads_.find(loan.info.key);
  if (h == heads_.end() && rec->size > 0) {
    auto refilled = RefillHead(*rec);
    if (refilled) {
      h = heads_.emplace(loan.info.key, *refilled).first;
    } else if (refilled.error().code() == StatusCode::kCorruption) {
      ++stats_.corrupt_dropped;
      GOBLIN_LOG_WARN(kLog, "dropping '{}': {}", loan.info.key, refilled.error());
      (void)Delete(loan.info.key);
      return Err(refilled.error());
    }
    // else: pool full, the head is read from disk like the tail
  }
  if (h != heads_.end()) {
    loan.head = h->second.slot;
    loan.head_bytes = h->second.length;
  }
  loan.id = next_loan_++;
  ++loaned_[loan.info.generation].count;
  loan_generation_[loan.id] = loan.info.generation;
  ++stats_.loans_out;
  return std::optional<Loan>(std::move(loan));
}

void Store::Release(const Loan& loan) {
  auto lg = loan_generation_.find(loan.id);
  if (lg == loan_generation_.end()) return;  // released twice: ignore
  uint64_t gen = lg->second;
  loan_generation_.erase(lg);
  --stats_.loans_out;
  auto it = loaned_.find(gen);
  if (it == loaned_.end() || --it->second.count > 0) return;
  if (it->second.retired) {
    for (const Extent& e : it->second.extents) tier_->Free(e);
    if (it->second.head) FreeHead(*it->second.head, it->second.head_len);
  }
  loaned_.erase(it);
}

VoidResult Store::ReadRange(const std::vector<Extent>& extents, uint64_t offset,
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
  ObjectReader reader(engine_.get(), buffers_.get(), tier_.get(), std::move(need), 4);
  uint64_t at = first_start;
  for (;;) {
    GOBLIN_ASSIGN_OR_RETURN(auto chunk, reader.Next());
    if (!chunk) break;
    uint64_t lo = std::max(at, offset), hi = std::min(at + chunk->length, offset + out.size());
    if (hi > lo)
      std::memcpy(out.data() + (lo - offset), buffers_->Buffer(chunk->buffer) + (lo - at), hi - lo);
    at += chunk->length;
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
  if (!r && r.error().code() == StatusCode::kCorruption) {
    const ObjectRecord* cur = index_->Find(loan.info.key);
    if (cur && cur->generation == loan.info.generation) {
      ++stats_.corrupt_dropped;
      GOBLIN_LOG_WARN(kLog, "dropping '{}': {}", loan.info.key, r.error());
      (void)Delete(loan.info.key);
    }
  }
  return r;
}

Result<bool> Store::Delete(std::string_view key) {
  const ObjectRecord* r = index_->Find(key);
  if (r == nullptr) return false;
  uint64_t gen = r->generation;
  std::vector<Extent> released;
  GOBLIN_ASSIGN_OR_RETURN(bool removed, index_->Delete(key, &released));
  if (removed) Retire(std::string(key), gen, std::move(released));
  stats_.objects = index_->size();
  return removed;
}

}  // namespace goblin::store
