#include "goblin/ring/spsc_ring.h"

#include <bit>

namespace goblin::ring {

VoidResult ValidateCapacity(uint64_t capacity) {
  if (capacity < kMinCapacity || capacity > kMaxCapacity || !std::has_single_bit(capacity)) {
    return Err(StatusCode::kInvalidArgument,
               "ring capacity {} must be a power of two between {} and {}", capacity, kMinCapacity,
               kMaxCapacity);
  }
  return {};
}

void InitRing(RingControl* ctl, uint32_t capacity) {
  ctl->magic = kRingMagic;
  ctl->capacity = capacity;
  ctl->tail.store(0, std::memory_order_relaxed);
  ctl->head.store(0, std::memory_order_relaxed);
  ctl->consumer_waiting.store(0, std::memory_order_relaxed);
  ctl->producer_waiting.store(0, std::memory_order_relaxed);
}

}  // namespace goblin::ring
