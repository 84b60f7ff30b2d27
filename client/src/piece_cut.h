// How a put sent by reference is cut into PutData pieces: at most `max` bytes each and,
// given the core's disk extent size as `align` (Welcome.putAlignment), none crossing a
// multiple of it, so every piece lands whole in its extent's write buffer on the core. The
// pieces of one extent are of equal size (as few as `max` allows: a 4 MiB extent with 1 MiB
// messages takes 5 pieces of ~820 KiB, not 4 full ones and a sliver).
// Threading: a value; any thread.
#pragma once

#include <algorithm>
#include <cstdint>

namespace goblin::client {

class PieceCut {
 public:
  PieceCut(uint64_t max, uint64_t align) : align_(align) {
    max = std::max<uint64_t>(max, 1);
    if (align_ == 0) {
      piece_ = max;
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
    if (align_ != 0) end = std::min(end, (offset / align_ + 1) * align_);
    return end - offset;
  }

 private:
  uint64_t align_;
  uint64_t piece_;
};

}  // namespace goblin::client
