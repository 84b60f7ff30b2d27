#include "goblin/store/object_io.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace goblin::store {
namespace {

uint32_t RoundUp4K(uint32_t n) {
  return (n + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment;
}

}  // namespace

ObjectWriter::ObjectWriter(IoRouter* io, Tiers tiers, uint64_t tier0_bytes)
    : io_(io),
      buffers_(&io->buffers()),
      tiers_(tiers.begin(), tiers.end()),
      tier0_bytes_(tiers.size() > 1 ? tier0_bytes : UINT64_MAX) {
  client_ = io_->Register(this);
}

ObjectWriter::~ObjectWriter() {
  if (!done_) Abort();
  io_->Unregister(client_);
}

void ObjectWriter::OnIoComplete(uint32_t tag, int32_t result) {
  --in_flight_;
  buffers_->Release(in_buffer_[tag]);
  in_buffer_[tag] = IoRouter::kNoBuffer;
  const Extent& e = extents_[tag];
  uint32_t want = RoundUp4K(static_cast<uint32_t>(e.length));
  tiers_[e.tier]->NoteIo(/*write=*/true, result, want);
  if (result != static_cast<int32_t>(want) && !failed_) {
    failed_ = true;
    error_ = result < 0 ? ErrnoStatus(fmt::format("write to {} extent file {}",
                                                  tiers_[e.tier]->dir().path(), e.file),
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

uint32_t ObjectWriter::CurrentLimit() const {
  uint32_t ext = tiers_[0]->extent_bytes();
  if (cur_start_ < tier0_bytes_ && tier0_bytes_ - cur_start_ < ext)
    return static_cast<uint32_t>(tier0_bytes_ - cur_start_);
  return ext;
}

VoidResult ObjectWriter::SubmitCurrent() {
  if (!cur_buf_ || cur_len_ == 0) return {};
  TierSpace* tier = tiers_[cur_start_ < tier0_bytes_ ? 0 : 1];
  auto one = tier->Allocate(cur_len_);
  // At the tier's capacity the store evicts; a file system that runs out first is an error.
  while (!one && tier->at_capacity() && make_room_ && make_room_(tier->tier_no())) {
    one = tier->Allocate(cur_len_);
  }
  if (!one) return Err(one.error());
  Extent e = (*one)[0];
  uint8_t* buf = buffers_->Buffer(*cur_buf_);
  e.checksum = XXH3_64bits(buf, cur_len_);
  uint32_t padded = RoundUp4K(cur_len_);
  if (padded > cur_len_) std::memset(buf + cur_len_, 0, padded - cur_len_);
  uint32_t tag = static_cast<uint32_t>(extents_.size());
  extents_.push_back(e);
  starts_.push_back(cur_start_);
  in_buffer_.push_back(*cur_buf_);
  IoRequest r{tier->FileFd(e.file), e.offset, buf, padded, true, 0};
  while (!io_->Submit(client_, tag, r, *cur_buf_)) {
    if (auto w = io_->Poll(1); !w) {
      tier->Free(e);
      extents_.pop_back();
      starts_.pop_back();
      in_buffer_.pop_back();
      return Err(w.error());
    }
  }
  ++in_flight_;
  cur_start_ += cur_len_;
  cur_buf_.reset();
  cur_len_ = 0;
  return io_->Flush();
}

VoidResult ObjectWriter::Append(std::span<const uint8_t> data) {
  if (failed_) return Err(error_);
  while (!data.empty()) {
    if (!cur_buf_) {
      cur_buf_ = buffers_->Acquire();
      while (!cur_buf_) {
        // Every buffer is out: wait for any stream's I/O to give one back.
        if (io_->in_flight() == 0) {
          return Err(StatusCode::kResourceExhausted,
                     "no free I/O buffer (all {} are lent to readers)", buffers_->count());
        }
        GOBLIN_RETURN_IF_ERROR(io_->Poll(1));
        cur_buf_ = buffers_->Acquire();
      }
    }
    uint32_t limit = CurrentLimit();
    uint32_t take = static_cast<uint32_t>(std::min<uint64_t>(data.size(), limit - cur_len_));
    std::memcpy(buffers_->Buffer(*cur_buf_) + cur_len_, data.data(), take);
    cur_len_ += take;
    bytes_ += take;
    data = data.subspan(take);
    if (cur_len_ == limit) {
      if (auto r = SubmitCurrent(); !r) {
        failed_ = true;
        error_ = r.error();
        return r;
      }
    }
    if (failed_) return Err(error_);
  }
  return {};
}

ObjectWriter::Location ObjectWriter::Locate(uint64_t offset) const {
  if (cur_buf_ && offset >= cur_start_ && offset < cur_start_ + cur_len_) {
    return {{buffers_->Buffer(*cur_buf_) + (offset - cur_start_), cur_start_ + cur_len_ - offset},
            SIZE_MAX};
  }
  // The extent holding `offset`: the last one starting at or before it.
  auto it = std::upper_bound(starts_.begin(), starts_.end(), offset);
  if (it == starts_.begin()) return {};
  size_t i = static_cast<size_t>(it - starts_.begin()) - 1;
  if (offset >= starts_[i] + extents_[i].length) return {};
  if (in_buffer_[i] != IoRouter::kNoBuffer) {
    uint64_t end = starts_[i] + extents_[i].length;
    return {{buffers_->Buffer(in_buffer_[i]) + (offset - starts_[i]), end - offset}, SIZE_MAX};
  }
  return {{}, i};
}

Result<std::vector<Extent>> ObjectWriter::Finish() {
  if (!failed_) {
    if (auto r = SubmitCurrent(); !r) {
      failed_ = true;
      error_ = r.error();
    }
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
  if (cur_buf_) buffers_->Release(*cur_buf_);
  cur_buf_.reset();
  for (const Extent& e : extents_) tiers_[e.tier]->Free(e);
  extents_.clear();
  starts_.clear();
  in_buffer_.clear();
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
  tiers_[e.tier]->NoteIo(/*write=*/false, result, RoundUp4K(static_cast<uint32_t>(e.length)));
  window_[i].done = true;
  window_[i].result = result;
  if (i == 0 && ready_) ready_();
}

void ExtentReader::Fill() {
  bool submitted = false;
  // Until the first extent has arrived, only it is in flight: the first byte (a head read
  // back from disk) does not share the disk with the read-ahead behind it.
  const size_t depth = next_deliver_ == 0 ? 1 : read_ahead_;
  while (next_submit_ < extents_.size() && window_.size() < depth &&
         (window_.empty() || buffers_->free_count() > keep_free_)) {
    auto b = buffers_->Acquire();
    if (!b) break;
    const Extent& e = extents_[next_submit_];
    IoRequest r{tiers_[e.tier]->FileFd(e.file),
                e.offset,
                buffers_->Buffer(*b),
                RoundUp4K(static_cast<uint32_t>(e.length)),
                false,
                0};
    if (!io_->Submit(client_, static_cast<uint32_t>(next_submit_), r, *b)) {
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
    return s.result < 0 ? Err(ErrnoStatus(fmt::format("read of extent file {}", e.file), -s.result))
                        : Err(StatusCode::kIoError, "short read of extent file {} ({} of {} bytes)",
                              e.file, s.result, e.length);
  }
  if (XXH3_64bits(buffers_->Buffer(s.buffer), e.length) != e.checksum) {
    buffers_->Release(s.buffer);
    return Err(StatusCode::kCorruption, "checksum mismatch in tier {} extent file {} at offset {}",
               tiers_[e.tier]->dir().path(), e.file, e.offset);
  }
  *out = Chunk{s.buffer, static_cast<uint32_t>(e.length), offset_};
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
