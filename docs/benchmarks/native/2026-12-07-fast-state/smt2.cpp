#include <time.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
static uint64_t now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}
int main(int argc, char** argv) {
  uint64_t e = argc > 1 ? now() + atoll(argv[1]) * 1000000ull : 0;
  uint64_t a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint64_t t0 = now();
  uint64_t iters = 0;
  do {
    for (int i = 0; i < 20000000; i++) {
      for (int k = 0; k < 8; k++) a[k] = a[k] * 6364136223846793005ull + k;
    }
    iters++;
    asm volatile("" ::"r"(a) : "memory");
  } while (e && now() < e);
  if (!e) printf("%.1f ms (%llu)\n", (now() - t0) / 1e6, (unsigned long long)(a[3] & 1));
}
