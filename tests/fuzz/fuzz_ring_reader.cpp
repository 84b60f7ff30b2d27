// Fuzz target: the ring consumer facing hostile shared memory. The input sets the head and
// tail positions and the bytes of a 4 KiB data area; Poll() must deliver only records that
// lie inside the ring and report anything else as corruption.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "goblin/ring/spsc_ring.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace goblin::ring;
  constexpr uint32_t kCap = 4096;
  auto ctl = std::make_unique<RingControl>();
  InitRing(ctl.get(), kCap);
  uint64_t head = 0, tail = 0;
  if (size >= 16) {
    std::memcpy(&head, data, 8);
    std::memcpy(&tail, data + 8, 8);
    data += 16;
    size -= 16;
  }
  // Keep positions plausible half the time so the record walk is reached.
  if (head & 1) {
    head = (head >> 1) & 0xffff;
    tail = head + ((tail >> 1) % (kCap + 64));
  }
  ctl->head.store(head);
  ctl->tail.store(tail);
  std::vector<uint8_t> ring(kCap);
  std::memcpy(ring.data(), data, size < kCap ? size : kCap);
  RingConsumer c(ctl.get(), ring.data(), kCap);
  uint64_t sum = 0;
  for (int round = 0; round < 4; ++round) {
    PollResult r = c.Poll([&](int32_t type, std::span<const uint8_t> m) {
      const uint8_t* lo = ring.data();
      const uint8_t* hi = ring.data() + kCap;
      if (m.data() < lo || m.data() + m.size() > hi) std::abort();
      for (uint8_t b : m) sum += b;
      sum += static_cast<uint32_t>(type);
    });
    if (r.corrupt || r.records == 0) break;
  }
  return static_cast<int>(sum & 0);
}
