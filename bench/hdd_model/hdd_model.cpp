#include "bench/hdd_model/hdd_model.h"

#include <algorithm>
#include <cmath>

namespace goblin::bench {

namespace {
constexpr uint64_t kNoUnit = UINT64_MAX;
}

HddModel::HddModel(const HddParams& p) : p_(p), revolution_ns_(60e9 / p.rpm), rng_(p.seed) {}

uint64_t HddModel::Place(uint64_t file, uint64_t offset) {
  std::vector<uint64_t>& units = layout_[file];
  const uint64_t unit = offset / p_.unit_bytes;
  if (units.size() <= unit) units.resize(unit + 1, kNoUnit);
  if (units[unit] == kNoUnit) {
    units[unit] = next_free_;
    next_free_ += p_.unit_bytes;
  }
  return units[unit] + offset % p_.unit_bytes;
}

uint64_t HddModel::TransferNanos(uint64_t bytes) const {
  return static_cast<uint64_t>(static_cast<double>(bytes) * 1e3 / p_.media_mb_s);
}

uint64_t HddModel::SeekNanos(uint64_t from, uint64_t to) const {
  const uint64_t distance = from > to ? from - to : to - from;
  const double share =
      std::min(1.0, static_cast<double>(distance) / static_cast<double>(p_.capacity));
  const double ms = p_.seek_min_ms + (p_.seek_max_ms - p_.seek_min_ms) * std::sqrt(share);
  return static_cast<uint64_t>(ms * 1e6);
}

uint64_t HddModel::PositioningNanos(uint64_t file, uint64_t offset) {
  const uint64_t at = Place(file, offset);
  if (at >= head_ && at - head_ <= p_.track_bytes) return TransferNanos(at - head_);
  return SeekNanos(head_, at);
}

HddAccess HddModel::Access(uint64_t file, uint64_t offset, uint64_t len) {
  HddAccess a;
  while (len > 0) {
    const uint64_t at = Place(file, offset);
    const uint64_t piece = std::min(len, p_.unit_bytes - offset % p_.unit_bytes);
    if (at >= head_ && at - head_ <= p_.track_bytes) {
      a.nanos += TransferNanos(at - head_);  // (the platter turns to it under the head)
    } else {
      std::uniform_real_distribution<double> turn(0, revolution_ns_);
      a.nanos += SeekNanos(head_, at) + static_cast<uint64_t>(turn(rng_));
      ++a.seeks;
    }
    a.nanos += TransferNanos(piece);
    head_ = at + piece;
    offset += piece;
    len -= piece;
  }
  return a;
}

}  // namespace goblin::bench
