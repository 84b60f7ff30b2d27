// How a put sent by reference is cut into PutData pieces: at most `max` bytes each and,
// given the core's disk extent size as `align` (Welcome.putAlignment) and where its first
// extent ends as `head_cut` (Welcome.putHeadCut: the RAM head's end), none crossing an
// extent boundary, so every piece lands whole in its extent's write buffer on the core.
// The boundaries are the store's (ObjectWriter::LimitAt): multiples of `align` up to
// `head_cut`, `head_cut` itself, then every `align` bytes from it. The pieces of one extent
// are of equal size (as few as `max` allows: a 4 MiB extent with 1 MiB messages takes 5
// pieces of ~820 KiB, not 4 full ones and a sliver).
// Threading: a value; any thread.
#pragma once

#include <algorithm>
#include <cstdint>

namespace goblin::client {

class PieceCut {
 public:
  PieceCut(uint64_t max, uint64_t align, uint64_t head_cut = 0) : align_(align), cut_(head_cut) {
    max = std::max<uint64_t>(max, 1);
    if (align_ == 0) {
      piece_ = max;
      cut_ = 0;
    } else if (align_ <= max) {
      piece_ = align_;
    } else {
      const uint64_t n = (align_ + max - 1) / max;  // pieces per extent
      piece_ = (align_ + n - 1) / n;                // (<= max)
      const uint64_t line = (piece_ + 63) / 64 * 64;
      if (line <= max) piece_ = line;
    }
  }
  // The length of the piece starting at `offset` of an object of `size` bytes.
  uint64_t Length(uint64_t offset, uint64_t size) const {
    uint64_t end = std::min(size, offset + piece_);
    if (align_ != 0) {
      const uint64_t next = offset < cut_ ? std::min((offset / align_ + 1) * align_, cut_)
                                          : cut_ + ((offset - cut_) / align_ + 1) * align_;
      end = std::min(end, next);
    }
    return end - offset;
  }

 private:
  uint64_t align_;
  uint64_t cut_;
  uint64_t piece_;
};

}  // namespace goblin::client
