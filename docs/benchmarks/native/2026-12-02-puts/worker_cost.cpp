// What one UCX worker costs: `g++ -O2 -o worker_cost worker_cost.cpp -lucp -lucs && ./worker_cost
// 100` (one context with the core's features, N workers in single-thread mode; RSS from
// /proc/self/statm, then the fd count and /dev/shm use).
#include <ucp/api/ucp.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>
static long rss() {
  std::ifstream f("/proc/self/statm");
  long a, b;
  f >> a >> b;
  return b * 4;
}
int main(int argc, char** argv) {
  int n = atoi(argv[1]);
  setenv("UCX_TCP_PUT_ENABLE", "n", 0);
  ucp_config_t* cfg;
  ucp_config_read(nullptr, nullptr, &cfg);
  ucp_params_t p{};
  p.field_mask = UCP_PARAM_FIELD_FEATURES;
  p.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  ucp_context_h ctx;
  ucp_init(&p, cfg, &ctx);
  long r0 = rss();
  std::vector<ucp_worker_h> w(n);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; i++) {
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (ucp_worker_create(ctx, &wp, &w[i]) != UCS_OK) {
      printf("fail at %d\n", i);
      n = i;
      break;
    }
    int fd;
    ucp_worker_get_efd(w[i], &fd);
  }
  auto t1 = std::chrono::steady_clock::now();
  printf("%d workers: %.1f us each, rss +%ld KiB (%.0f KiB each)\n", n,
         std::chrono::duration<double, std::micro>(t1 - t0).count() / n, rss() - r0,
         (rss() - r0) / (double)n);
  system(
      ("ls /proc/" + std::to_string(getpid()) + "/fd | wc -l; du -sh /dev/shm; ls /dev/shm | wc -l")
          .c_str());
  for (auto x : w) ucp_worker_destroy(x);
}
