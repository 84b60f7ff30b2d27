#include "goblin/store/object_io.h"

#include <xxhash.h>

#include <cstring>

namespace goblin::store {
namespace {

uint32_t RoundUp4K(uint32_t n) {
  return (n + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment;
}

}  // namespace

ObjectWriter::ObjectWriter(IoEngine* engine, IoBufferPool* buffers, TierSpace* tier)
    : engine_(engine), buffers_(buffers), tier_(tier) {}

ObjectWriter::~ObjectWriter() {
  if (!done_) Abort();
}

VoidResult ObjectWriter::WaitFor(uint32_t max_in_flight) {
  while (in_flight_ > max_in_flight) {
    IoCompletion c[16];
    auto n = engine_->Reap(c, 1);
    if (!n) return Err(n.error());
    for (size_t i = 0; i < *n; ++i) {
      --in_flight_;
      buffers_->Release(buffer_of_[c[i].user_data]);
      const Extent& e = extents_[c[i].user_data];
      uint32_t want = RoundUp4K(static_cast<uint32_t>(e.length));
      if (c[i].result != static_cast<int32_t>(want) && !failed_) {
        failed_ = true;
        error_ = c[i].result < 0
                     ? ErrnoStatus(
                           fmt::format("write to {} extent file {}", tier_->dir().path(), e.file),
                           -c[i].result)
                     : Status(StatusCode::kIoError,
                              fmt::format("short write ({} of {} bytes)", c[i].result, want));
      }
    }
  }
  return {};
}

VoidResult ObjectWriter::SubmitCurrent() {
  if (!cur_buf_ || cur_len_ == 0) return {};
  GOBLIN_ASSIGN_OR_RETURN(std::vector<Extent> one, tier_->Allocate(cur_len_));
  Extent e = one[0];
  uint8_t* buf = buffers_->Buffer(*cur_buf_);
  e.checksum = XXH3_64bits(buf, cur_len_);
  uint32_t padded = RoundUp4K(cur_len_);
  if (padded > cur_len_) std::memset(buf + cur_len_, 0, padded - cur_len_);
  extents_.push_back(e);
  buffer_of_.push_back(*cur_buf_);
  IoRequest r{tier_->FileFd(e.file), e.offset, buf, padded, true, extents_.size() - 1};
  while (!engine_->Submit(r)) GOBLIN_RETURN_IF_ERROR(WaitFor(engine_->in_flight() - 1));
  ++in_flight_;
  GOBLIN_RETURN_IF_ERROR(engine_->Flush());
  cur_buf_.reset();
  cur_len_ = 0;
  return {};
}

VoidResult ObjectWriter::Append(std::span<const uint8_t> data) {
  if (failed_) return Err(error_);
  const uint32_t ext = tier_->extent_bytes();
  while (!data.empty()) {
    if (!cur_buf_) {
      cur_buf_ = buffers_->Acquire();
      while (!cur_buf_) {
        if (in_flight_ == 0) return Err(StatusCode::kResourceExhausted, "no free I/O buffer");
        GOBLIN_RETURN_IF_ERROR(WaitFor(in_flight_ - 1));
        cur_buf_ = buffers_->Acquire();
      }
    }
    uint32_t take = static_cast<uint32_t>(std::min<uint64_t>(data.size(), ext - cur_len_));
    std::memcpy(buffers_->Buffer(*cur_buf_) + cur_len_, data.data(), take);
    cur_len_ += take;
    bytes_ += take;
    data = data.subspan(take);
    if (cur_len_ == ext) {
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
  return std::move(extents_);
}

void ObjectWriter::Abort() {
  (void)WaitFor(0);
  if (cur_buf_) buffers_->Release(*cur_buf_);
  cur_buf_.reset();
  for (const Extent& e : extents_) tier_->Free(e);
  extents_.clear();
  done_ = true;
}

ObjectReader::ObjectReader(IoEngine* engine, IoBufferPool* buffers, const TierSpace* tier,
                           std::vector<Extent> extents, uint32_t read_ahead)
    : engine_(engine),
      buffers_(buffers),
      tier_(tier),
      extents_(std::move(extents)),
      read_ahead_(std::max<uint32_t>(1, read_ahead)) {}

ObjectReader::~ObjectReader() {
  // Wait for reads still in flight, then give back every buffer we hold.
  while (std::any_of(window_.begin(), window_.end(),
                     [](const Slot& s) { return s.submitted && !s.done; })) {
    IoCompletion c[16];
    auto n = engine_->Reap(c, 1);
    if (!n) break;
    for (size_t i = 0; i < *n; ++i) window_[c[i].user_data - next_deliver_].done = true;
  }
  for (const Slot& s : window_) buffers_->Release(s.buffer);
}

void ObjectReader::Fill() {
  while (next_submit_ < extents_.size() && window_.size() < read_ahead_) {
    auto b = buffers_->Acquire();
    if (!b) break;
    const Extent& e = extents_[next_submit_];
    IoRequest r{tier_->FileFd(e.file),
                e.offset,
                buffers_->Buffer(*b),
                RoundUp4K(static_cast<uint32_t>(e.length)),
                false,
                next_submit_};
    if (!engine_->Submit(r)) {
      buffers_->Release(*b);
      break;
    }
    window_.push_back({*b, true, false, 0});
    ++next_submit_;
  }
  (void)engine_->Flush();
}

Result<std::optional<ObjectReader::Chunk>> ObjectReader::Next() {
  if (next_deliver_ == extents_.size()) return std::optional<Chunk>();
  Fill();
  if (window_.empty())
    return Err(StatusCode::kResourceExhausted, "no free I/O buffer to read into");
  while (!window_.front().done) {
    IoCompletion c[16];
    GOBLIN_ASSIGN_OR_RETURN(size_t n, engine_->Reap(c, 1));
    for (size_t i = 0; i < n; ++i) {
      Slot& s = window_[c[i].user_data - next_deliver_];
      s.done = true;
      s.result = c[i].result;
    }
  }
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
               tier_->dir().path(), e.file, e.offset);
  }
  Chunk c{s.buffer, static_cast<uint32_t>(e.length), offset_};
  offset_ += e.length;
  Fill();  // keep the read-ahead full while the caller sends this chunk
  return std::optional<Chunk>(c);
}

}  // namespace goblin::store
