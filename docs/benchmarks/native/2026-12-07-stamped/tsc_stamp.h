// THROW-AWAY instrumentation: rdtsc stamps per correlation id.
#pragma once
#include <x86intrin.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
namespace goblin::stamp {
inline constexpr uint64_t kSlots = 1 << 20;
struct Table {
  uint64_t t[kSlots][16];
};
inline Table* table() {
  static Table* t = [] {
    auto* p = static_cast<Table*>(calloc(1, sizeof(Table)));
    std::atexit([] {
      if (const char* path = std::getenv("GOBLIN_STAMPS")) {
        FILE* f = fopen(path, "w");
        if (f) {
          fwrite(table(), sizeof(Table), 1, f);
          fclose(f);
        }
      }
    });
    return p;
  }();
  return t;
}
inline uint64_t g_pending[16];
inline void Mark(uint64_t corr, int i) { table()->t[corr & (kSlots - 1)][i] = __rdtsc(); }
inline void Set(uint64_t corr, int i, uint64_t v) { table()->t[corr & (kSlots - 1)][i] = v; }
inline uint16_t Template(const void* m) {
  uint16_t t;
  std::memcpy(&t, static_cast<const uint8_t*>(m) + 2, 2);
  return t;
}
inline uint64_t Corr(const void* m) {
  uint64_t c;
  std::memcpy(&c, static_cast<const uint8_t*>(m) + 8, 8);
  return c;
}
}  // namespace goblin::stamp
