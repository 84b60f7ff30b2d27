// A spinning disk's service times, for benchmarks on machines that have none (issue #23:
// memcached + extstore against goblin "on the same HDD"). One actuator over a virtual platter:
// files are laid out on it in allocation units as they grow; an access costs a seek (by
// distance), a rotational wait (random within a revolution) and the transfer at the media
// rate, except that an access continuing where the head is, or a little ahead of it on the
// same track, pays only for the platter turning to it. hdd_fuse serves a directory through
// it. Not thread-safe: one owner (hdd_fuse's disk thread).
#pragma once

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

namespace goblin::bench {

struct HddParams {
  uint64_t capacity = 4'000'000'000'000;  // the platter, bytes: a seek's distance is a share of it
  double rpm = 7200;
  double media_mb_s = 200;         // transfer rate under the head, 10^6 bytes/s
  double seek_min_ms = 0.6;        // the shortest seek (track to track, with settling)
  double seek_max_ms = 14;         // a full stroke
  uint64_t track_bytes = 1 << 20;  // a gap ahead of the head up to this is waited out, not sought
  uint64_t unit_bytes = 8 << 20;   // a file grows in units this size, each contiguous
  uint64_t seed = 1;               // the rotational waits' sequence
};

// What one access did, for the statistics.
struct HddAccess {
  uint64_t nanos = 0;  // seek + rotation + transfer
  uint32_t seeks = 0;  // pieces that moved the arm
};

class HddModel {
 public:
  explicit HddModel(const HddParams& p = {});

  // Accesses `len` bytes of file `file` at `offset` (growing its layout as needed) and moves
  // the head to the end of them. A range over units that are not adjacent on the platter is
  // accessed piece by piece.
  HddAccess Access(uint64_t file, uint64_t offset, uint64_t len);

  // What reaching `offset` of `file` would cost now without the rotational wait (seek or
  // forward gap): the scheduler's estimate, which serves the nearest request first (as a
  // disk's command queue does). Lays the unit out if it is new.
  uint64_t PositioningNanos(uint64_t file, uint64_t offset);

  // The file is gone (unlinked): its units are forgotten (never reused: the platter is big).
  void Forget(uint64_t file) { layout_.erase(file); }

  // Where byte `offset` of `file` lies on the platter (laying its unit out if new).
  uint64_t Place(uint64_t file, uint64_t offset);

  uint64_t head() const { return head_; }
  const HddParams& params() const { return p_; }

 private:
  uint64_t SeekNanos(uint64_t from, uint64_t to) const;
  uint64_t TransferNanos(uint64_t bytes) const;

  HddParams p_;
  double revolution_ns_;
  uint64_t head_ = 0;
  uint64_t next_free_ = 0;
  std::unordered_map<uint64_t, std::vector<uint64_t>> layout_;  // file -> unit -> platter byte
  std::mt19937_64 rng_;
};

}  // namespace goblin::bench
