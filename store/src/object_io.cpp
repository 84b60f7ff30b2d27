#include "goblin/store/object_io.h"

#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace goblin::store {
namespace {

uint32_t RoundUp4K(uint32_t n) {
  return (n + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment;
}

// errno values of a read that mean the bytes are gone, not that the read could not be made.
bool BytesAreLost(int err) {
  return err == EIO || err == EBADMSG || err == EUCLEAN || err == ENODATA || err == ENXIO;
}

}  // namespace

ObjectWriter::ObjectWriter(IoRouter* io, Tiers tiers, uint64_t tier0_bytes, uint64_t head_cut)
    : io_(io),
      buffers_(&io->buffers()),
      tiers_(tiers.begin(), tiers.end()),
      tier0_bytes_(tiers.size() > 1 ? tier0_bytes : UINT64_MAX),
      head_cut_(head_cut) {
  client_ = io_->Register(this);
}

ObjectWriter::~ObjectWriter() {
  if (!done_) Abort();
  io_->Unregister(client_);
}

void ObjectWriter::OnIoComplete(uint32_t tag, int32_t result) {
  --in_flight_;
  if (in_buffer_[tag] != IoRouter::kNoBuffer) buffers_->Release(in_buffer_[tag]);
  in_buffer_[tag] = IoRouter::kNoBuffer;
  if (staging_[tag]) {
    staging_[tag].reset();
    io_->GiveStaging(staging_cap_[tag]);
  }
  in_memory_[tag] = nullptr;
  const Extent& e = extents_[tag];
  uint32_t want = RoundUp4K(static_cast<uint32_t>(e.length));
  tiers_[e.tier]->NoteIo(e, /*write=*/true, result, want);
  if (result != static_cast<int32_t>(want) && !failed_) {
    failed_ = true;
    error_ = result < 0 ? ErrnoStatus(fmt::format("write to {} extent file {}",
                                                  tiers_[e.tier]->DrivePath(e), e.file),
                                      -result)
                        : Status(StatusCode::kIoError,
                                 fmt::format("short write ({} of {} bytes)", result, want));
  }
  if (in_flight_ == 0 && finished_) std::exchange(finished_, nullptr)();
}

VoidResult ObjectWriter::FinishAsync(std::function<void()> done) {
  if (!failed_) {
    if (auto r = SubmitCurrent(); !r) {
      failed_ = true;
      error_ = r.error();
    }
    DropCurrent();  // (buffers Place() took for bytes that never came)
  }
  if (failed_) return Err(error_);
  if (in_flight_ == 0) {
    done();
  } else {
    finished_ = std::move(done);
  }
  return {};
}

VoidResult ObjectWriter::WaitFor(uint32_t max_in_flight) {
  while (in_flight_ > max_in_flight) GOBLIN_RETURN_IF_ERROR(io_->Poll(1));
  return {};
}

uint32_t ObjectWriter::LimitAt(uint64_t start) const {
  uint64_t ext = tiers_[0]->extent_bytes();
  for (uint64_t cut : {head_cut_, tier0_bytes_}) {  // (extents end at each)
    if (start < cut && cut - start < ext) ext = cut - start;
  }
  return static_cast<uint32_t>(ext);
}

void ObjectWriter::DropCurrent() {
  if (cur_buf_) buffers_->Release(*cur_buf_);
  cur_buf_.reset();
  for (uint32_t b : ahead_) buffers_->Release(b);
  ahead_.clear();
  if (cur_staging_) {
    cur_staging_.reset();
    io_->GiveStaging(cur_staging_cap_);
  }
  cur_staging_cap_ = 0;
}

VoidResult ObjectWriter::GrowStaging(uint32_t need, uint32_t limit) {
  if (need <= cur_staging_cap_) return {};
  uint32_t cap = std::max<uint32_t>(cur_staging_cap_ * 2, 16 << 10);
  cap = std::min(std::max(cap, RoundUp4K(need)), RoundUp4K(limit));
  if (!io_->TakeStaging(cap - cur_staging_cap_)) {
    return Err(StatusCode::kResourceExhausted,
               "too many fills at once: all {} I/O buffers are out and {} of staging is used",
               buffers_->count(), io_->staging_limit());
  }
  StagingBuffer b(static_cast<uint8_t*>(std::aligned_alloc(kDirectAlignment, cap)));
  if (!b) {
    io_->GiveStaging(cap - cur_staging_cap_);
    return Err(StatusCode::kResourceExhausted, "out of memory for a {}-byte staging buffer", cap);
  }
  if (cur_len_ > 0) std::memcpy(b.get(), cur_staging_.get(), cur_len_);
  cur_staging_ = std::move(b);
  cur_staging_cap_ = cap;
  return {};
}

VoidResult ObjectWriter::SubmitCurrent() {
  if (cur_len_ == 0) {
    DropCurrent();  // (a buffer Place() took for bytes that never came)
    return {};
  }
  TierSpace* tier = tiers_[cur_start_ < tier0_bytes_ ? 0 : 1];
  auto one = tier->AllocateOne(cur_len_);
  // At the tier's capacity the store evicts; a file system that runs out first is an error.
  while (!one && tier->at_capacity() && make_room_ && make_room_(tier->tier_no())) {
    one = tier->AllocateOne(cur_len_);
  }
  if (!one) return Err(one.error());
  Extent e = *one;
  uint8_t* buf = current();
  e.checksum = XXH3_64bits(buf, cur_len_);
  uint32_t padded = RoundUp4K(cur_len_);
  if (cur_staging_ && padded > cur_staging_cap_) {  // (staging grows in 4 KiB steps: cannot be)
    tier->Free(e);
    return Err(StatusCode::kInternal, "staging buffer smaller than its padded extent");
  }
  if (padded > cur_len_) std::memset(buf + cur_len_, 0, padded - cur_len_);
  uint32_t tag = static_cast<uint32_t>(extents_.size());
  const uint32_t pool_buf = cur_buf_ ? *cur_buf_ : IoRouter::kNoBuffer;
  extents_.push_back(e);
  starts_.push_back(cur_start_);
  in_buffer_.push_back(pool_buf);
  in_memory_.push_back(buf);
  staging_.emplace_back();
  staging_cap_.push_back(0);
  IoRequest r{tier->FileFd(e), e.offset, buf, padded, true, 0};
  uint32_t* drive_queue = tier->drive(e.drive)->io_in_flight();
  while (!io_->Submit(client_, tag, r, pool_buf, drive_queue)) {
    if (auto w = io_->Poll(1); !w) {
      tier->Free(e);
      extents_.pop_back();
      starts_.pop_back();
      in_buffer_.pop_back();
      in_memory_.pop_back();
      staging_.pop_back();
      staging_cap_.pop_back();
      return Err(w.error());
    }
  }
  ++in_flight_;
  cur_start_ += cur_len_;
  if (cur_staging_) {  // it lives until the write lands
    staging_[tag] = std::move(cur_staging_);
    staging_cap_[tag] = cur_staging_cap_;
    cur_staging_cap_ = 0;
  }
  cur_buf_.reset();
  if (!ahead_.empty()) {  // (taken by Place for the extent that begins now)
    cur_buf_ = ahead_.front();
    ahead_.pop_front();
  }
  cur_len_ = 0;
  return io_->Flush();
}

VoidResult ObjectWriter::Append(std::span<const uint8_t> data) {
  if (failed_) return Err(error_);
  while (!data.empty()) {
    // An I/O buffer for the extent, or (every one is out: many fills at once, or readers)
    // a staging buffer of the writer's own, grown as the bytes come. The disk is the limit
    // only when it falls behind: a writer that already has kOwnWritesBeforeWaiting writes
    // on their way, or finds the staging allowance spent, waits for a write to land (the
    // loop holds that long; the sender backs up behind it) instead of failing the fill.
    if (!has_current()) cur_buf_ = buffers_->Acquire();
    uint32_t limit = CurrentLimit();
    uint32_t take = static_cast<uint32_t>(std::min<uint64_t>(data.size(), limit - cur_len_));
    while (!cur_buf_) {
      if (!has_current() && in_flight_ >= kOwnWritesBeforeWaiting) {
        ++disk_waits_;
        if (auto w = WaitFor(in_flight_ - 1); !w) return Fail(w.error());
        cur_buf_ = buffers_->Acquire();
        continue;
      }
      auto g = GrowStaging(cur_len_ + take, limit);
      if (g) break;
      if (g.error().code() != StatusCode::kResourceExhausted || io_->in_flight() == 0)
        return Fail(g.error());
      ++disk_waits_;
      if (auto w = io_->Poll(1); !w) return Fail(w.error());  // someone's write lands
      if (!has_current()) cur_buf_ = buffers_->Acquire();
    }
    uint8_t* to = current() + cur_len_;
    if (to != data.data()) std::memcpy(to, data.data(), take);  // (equal: placed there)
    cur_len_ += take;
    bytes_ += take;
    data = data.subspan(take);
    if (cur_len_ == limit) {
      if (auto r = SubmitCurrent(); !r) return Fail(r.error());
    }
    if (failed_) return Err(error_);
  }
  return {};
}

std::optional<ObjectWriter::Placed> ObjectWriter::Place(uint64_t offset, uint32_t length) {
  if (failed_ || done_ || finished_ || length == 0 || offset < bytes_) return std::nullopt;
  if (cur_staging_) return std::nullopt;
  // The extent holding `offset` (extents are full but for the last: their starts are known;
  // cur_start_ == bytes_ while there is no current buffer).
  uint64_t start = cur_start_;
  uint32_t limit = LimitAt(start);
  size_t k = 0;  // 0: the current buffer, else ahead_[k - 1]
  while (offset >= start + limit) {
    start += limit;
    limit = LimitAt(start);
    if (++k > kPlaceAhead) return std::nullopt;
  }
  if (offset + length > start + limit) return std::nullopt;
  // A buffer it does not hold yet only while the disk keeps up: past twice the writes
  // Append lets one writer keep in flight, the bytes come by Append, which waits.
  // (Measured, 256 MiB puts over UCX tcp and shared memory: with Append's own bound of 4,
  // 12% of the pieces came unplaced behind a virtual disk's write latency; with 8, 1.6%.
  // A writer then holds at most 8 writes, its current buffer and kPlaceAhead more.)
  const bool holds = k == 0 ? cur_buf_.has_value() : ahead_.size() >= k;
  if (!holds && in_flight_ >= 2 * kOwnWritesBeforeWaiting) return std::nullopt;
  if (!cur_buf_) {
    cur_buf_ = buffers_->Acquire();
    if (!cur_buf_) return std::nullopt;
  }
  while (ahead_.size() < k) {
    auto b = buffers_->Acquire();
    if (!b) return std::nullopt;
    ahead_.push_back(*b);
  }
  const uint32_t b = k == 0 ? *cur_buf_ : ahead_[k - 1];
  buffers_->Pin(b);
  return Placed{buffers_->Buffer(b) + (offset - start), b};
}

VoidResult ObjectWriter::Fail(Status s) {
  failed_ = true;
  error_ = s;
  return Err(std::move(s));
}

ObjectWriter::Location ObjectWriter::Locate(uint64_t offset) const {
  if (has_current() && offset >= cur_start_ && offset < cur_start_ + cur_len_) {
    return {{current() + (offset - cur_start_), cur_start_ + cur_len_ - offset}, SIZE_MAX};
  }
  // The extent holding `offset`: the last one starting at or before it.
  auto it = std::upper_bound(starts_.begin(), starts_.end(), offset);
  if (it == starts_.begin()) return {};
  size_t i = static_cast<size_t>(it - starts_.begin()) - 1;
  if (offset >= starts_[i] + extents_[i].length) return {};
  if (in_memory_[i] != nullptr) {
    uint64_t end = starts_[i] + extents_[i].length;
    return {{in_memory_[i] + (offset - starts_[i]), end - offset}, SIZE_MAX};
  }
  return {{}, i};
}

Result<std::vector<Extent>> ObjectWriter::Finish() {
  if (!failed_) {
    if (auto r = SubmitCurrent(); !r) {
      failed_ = true;
      error_ = r.error();
    }
    DropCurrent();  // (buffers Place() took for bytes that never came)
  }
  if (auto r = WaitFor(0); !r && !failed_) {
    failed_ = true;
    error_ = r.error();
  }
  if (failed_) {
    Abort();
    return Err(error_);
  }
  done_ = true;
  return extents_;
}

void ObjectWriter::Abort() {
  (void)WaitFor(0);
  DropCurrent();
  for (const Extent& e : extents_) tiers_[e.tier]->Free(e);
  extents_.clear();
  starts_.clear();
  in_buffer_.clear();
  in_memory_.clear();
  staging_.clear();  // (all written by now: WaitFor(0))
  staging_cap_.clear();
  done_ = true;
}

ExtentReader::ExtentReader(IoRouter* io, Tiers tiers, std::vector<Extent> extents,
                           uint64_t first_offset, uint32_t read_ahead, uint32_t keep_free)
    : io_(io),
      buffers_(&io->buffers()),
      tiers_(tiers.begin(), tiers.end()),
      extents_(std::move(extents)),
      read_ahead_(std::max<uint32_t>(1, read_ahead)),
      keep_free_(keep_free),
      offset_(first_offset) {
  client_ = io_->Register(this);
}

ExtentReader::~ExtentReader() {
  // Reads still in flight land later: the router releases their buffers then.
  io_->Unregister(client_);
  for (const Slot& s : window_) {
    if (s.done) buffers_->Release(s.buffer);
  }
}

void ExtentReader::OnIoComplete(uint32_t tag, int32_t result) {
  size_t i = tag - next_deliver_;
  if (tag < next_deliver_ || i >= window_.size()) return;
  const Extent& e = extents_[tag];
  tiers_[e.tier]->NoteIo(e, /*write=*/false, result, RoundUp4K(static_cast<uint32_t>(e.length)));
  window_[i].done = true;
  window_[i].result = result;
  if (i == 0 && ready_) ready_();
}

void ExtentReader::Fill() {
  bool submitted = false;
  drive_full_ = false;
  // Until the first extent has arrived, only it is in flight: the first byte (a head read
  // back from disk) does not share the disk with the read-ahead behind it.
  const size_t depth = next_deliver_ == 0 ? 1 : read_ahead_;
  while (next_submit_ < extents_.size() && window_.size() < depth &&
         (window_.empty() || buffers_->free_count() > keep_free_)) {
    const Extent& e = extents_[next_submit_];
    DriveSpace* drive = tiers_[e.tier]->drive(e.drive);
    if (drive != nullptr && !drive->CanRead()) {  // its queue is full: a completion there
      drive_full_ = true;
      break;
    }
    auto b = buffers_->Acquire();
    if (!b) break;
    IoRequest r{tiers_[e.tier]->FileFd(e),
                e.offset,
                buffers_->Buffer(*b),
                RoundUp4K(static_cast<uint32_t>(e.length)),
                false,
                0};
    if (!io_->Submit(client_, static_cast<uint32_t>(next_submit_), r, *b,
                     drive != nullptr ? drive->io_in_flight() : nullptr)) {
      buffers_->Release(*b);
      break;
    }
    window_.push_back({*b, false, 0});
    ++next_submit_;
    submitted = true;
  }
  if (submitted) (void)io_->Flush();
}

Result<ExtentReader::Step> ExtentReader::TryNext(Chunk* out) {
  if (next_deliver_ == extents_.size()) return Step::kEnd;
  Fill();
  if (window_.empty() || !window_.front().done) return Step::kWait;
  Slot s = window_.front();
  window_.pop_front();
  const Extent& e = extents_[next_deliver_];
  ++next_deliver_;
  if (s.result < 0 || static_cast<uint64_t>(s.result) < e.length) {
    buffers_->Release(s.buffer);
    // The drive cannot give these bytes back (a bad sector, a file cut short): as lost as a
    // checksum mismatch, and the caller drops the object. Other errors (no memory, a
    // cancelled read) say nothing about the bytes.
    if (s.result >= 0) {
      return Err(StatusCode::kCorruption, "short read of tier {} extent file {} ({} of {} bytes)",
                 tiers_[e.tier]->DrivePath(e), e.file, s.result, e.length);
    }
    const Status why = ErrnoStatus(fmt::format("read of tier {} extent file {} at offset {}",
                                               tiers_[e.tier]->DrivePath(e), e.file, e.offset),
                                   -s.result);
    if (BytesAreLost(-s.result)) return Err(StatusCode::kCorruption, "{}", why.message());
    return Err(why);
  }
  if (XXH3_64bits(buffers_->Buffer(s.buffer), e.length) != e.checksum) {
    buffers_->Release(s.buffer);
    return Err(StatusCode::kCorruption, "checksum mismatch in tier {} extent file {} at offset {}",
               tiers_[e.tier]->DrivePath(e), e.file, e.offset);
  }
  *out = Chunk{s.buffer, static_cast<uint32_t>(e.length), offset_, e};
  offset_ += e.length;
  Fill();  // keep the read-ahead full while the caller sends this chunk
  return Step::kChunk;
}

Result<std::optional<ExtentReader::Chunk>> ExtentReader::Next() {
  for (;;) {
    Chunk c;
    GOBLIN_ASSIGN_OR_RETURN(Step step, TryNext(&c));
    if (step == Step::kChunk) return std::optional<Chunk>(c);
    if (step == Step::kEnd) return std::optional<Chunk>();
    if (window_.empty()) {
      // No buffer to read into: wait for any I/O to return one, else give up.
      if (io_->in_flight() == 0 && buffers_->free_count() == 0)
        return Err(StatusCode::kResourceExhausted, "no free I/O buffer to read into");
    }
    GOBLIN_RETURN_IF_ERROR(io_->Poll(1));
  }
}

}  // namespace goblin::store
