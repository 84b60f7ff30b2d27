// loopback_send: what one byte costs the sender and the receiver of a TCP connection on this
// host, by how the sender writes. A sender thread writes a source region (--bytes, every
// page touched, bigger than the CPU's caches by default) round and round into --connections
// loopback connections, each write at most --chunk bytes, and a receiver thread reads them
// into a 1 MiB buffer; both are epoll loops, on any CPU (--pin: sender on CPU 0, receiver on
// CPU 1). Modes:
//   copy      send() from anonymous memory (transparent huge pages asked for): the copy into
//             the socket that goblin-gateway, Varnish and memcached make;
//   sendfile  sendfile() from a memfd, or from --file (e.g. on a tmpfs mounted huge=always):
//             the socket references the pages, nginx's way.
// --send-buffer sets SO_SNDBUF on the sending sockets (0: the kernel's autotuning).
// Prints Gbit/s received and each side's CPU seconds (user + system of its thread) per GB.
//   loopback_send --mode copy --connections 16 --seconds 3 --chunk 1M --send-buffer 512K
// For docs/benchmarks/concurrency.md ("Send buffers"); not a test.
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "goblin/common/cli.h"
#include "goblin/common/clock.h"
#include "goblin/common/fd.h"

namespace {

using namespace goblin;

double ThreadCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

void Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"loopback_send: a TCP sender's and receiver's CPU per byte on this host"};
  std::string mode = "copy", file;
  int connections = 16;
  double seconds = 3;
  uint64_t chunk = 1 << 20, send_buffer = 0, bytes = 1536ull << 20;
  bool pin = false;
  app.add_option("--mode", mode, "copy | sendfile")->check(CLI::IsMember({"copy", "sendfile"}));
  app.add_option("--connections", connections)->check(CLI::Range(1, 100000));
  app.add_option("--seconds", seconds);
  AddSizeOption(app, "--chunk", &chunk, "Largest write");
  AddSizeOption(app, "--send-buffer", &send_buffer, "SO_SNDBUF (0: autotuned)", true);
  AddSizeOption(app, "--bytes", &bytes, "The source region, written round and round");
  app.add_option("--file", file, "sendfile: the source file (default: a memfd)");
  app.add_flag("--pin", pin, "Sender on CPU 0, receiver on CPU 1");
  CLI11_PARSE(app, argc, argv);

  const bool copy = mode == "copy";
  UniqueFd src;
  void* mem = nullptr;
  if (copy) {
    mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem != MAP_FAILED) madvise(mem, bytes, MADV_HUGEPAGE);
  } else {
    src.Reset(file.empty() ? memfd_create("loopback_send", MFD_CLOEXEC)
                           : open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!src || ftruncate(src.get(), static_cast<off_t>(bytes)) != 0) {
      perror("source file");
      return 1;
    }
    mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, src.get(), 0);
    if (mem != MAP_FAILED) madvise(mem, bytes, MADV_HUGEPAGE);
  }
  if (mem == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  auto* base = static_cast<char*>(mem);
  for (uint64_t i = 0; i < bytes; i += 64) base[i] = static_cast<char>(i >> 6);

  UniqueFd listener(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  if (bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      listen(listener.get(), 4096) != 0 ||
      getsockname(listener.get(), reinterpret_cast<sockaddr*>(&a), &alen) != 0) {
    perror("listen");
    return 1;
  }
  std::vector<UniqueFd> senders, receivers;
  for (int i = 0; i < connections; ++i) {
    UniqueFd r(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (connect(r.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      perror("connect");
      return 1;
    }
    UniqueFd s(accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!s) {
      perror("accept");
      return 1;
    }
    fcntl(r.get(), F_SETFL, O_NONBLOCK);
    if (send_buffer > 0) {
      int v = static_cast<int>(send_buffer);
      setsockopt(s.get(), SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
    }
    senders.push_back(std::move(s));
    receivers.push_back(std::move(r));
  }

  std::atomic<bool> stop{false};
  uint64_t received = 0;
  double receiver_cpu = 0;
  std::thread receiver([&] {
    if (pin) Pin(1);
    UniqueFd ep(epoll_create1(EPOLL_CLOEXEC));
    for (int i = 0; i < connections; ++i) {
      epoll_event e{EPOLLIN, {.u64 = static_cast<uint64_t>(i)}};
      epoll_ctl(ep.get(), EPOLL_CTL_ADD, receivers[i].get(), &e);
    }
    std::vector<char> buf(1 << 20);
    epoll_event ev[64];
    const double cpu0 = ThreadCpuSeconds();
    while (!stop.load(std::memory_order_relaxed)) {
      int n = epoll_wait(ep.get(), ev, 64, 100);
      for (int j = 0; j < n; ++j) {
        for (;;) {
          ssize_t r = recv(receivers[ev[j].data.u64].get(), buf.data(), buf.size(), 0);
          if (r <= 0) break;
          received += static_cast<uint64_t>(r);
        }
      }
    }
    receiver_cpu = ThreadCpuSeconds() - cpu0;
  });

  if (pin) Pin(0);
  UniqueFd ep(epoll_create1(EPOLL_CLOEXEC));
  for (int i = 0; i < connections; ++i) {
    epoll_event e{EPOLLOUT, {.u64 = static_cast<uint64_t>(i)}};
    epoll_ctl(ep.get(), EPOLL_CTL_ADD, senders[i].get(), &e);
  }
  std::vector<uint64_t> offset(connections, 0);
  epoll_event ev[64];
  const double sender_cpu0 = ThreadCpuSeconds();
  const uint64_t t0 = MonotonicNanos();
  const auto end = t0 + static_cast<uint64_t>(seconds * 1e9);
  while (MonotonicNanos() < end) {
    int n = epoll_wait(ep.get(), ev, 64, 100);
    for (int j = 0; j < n; ++j) {
      const size_t i = ev[j].data.u64;
      for (;;) {
        const size_t len = std::min<uint64_t>(chunk, bytes - offset[i]);
        ssize_t w;
        if (copy) {
          w = send(senders[i].get(), base + offset[i], len, MSG_DONTWAIT);
        } else {
          off_t off = static_cast<off_t>(offset[i]);
          w = sendfile(senders[i].get(), src.get(), &off, len);
        }
        if (w <= 0) break;
        offset[i] = (offset[i] + static_cast<uint64_t>(w)) % bytes;
      }
    }
  }
  const double sender_cpu = ThreadCpuSeconds() - sender_cpu0;
  stop = true;
  receiver.join();
  const double elapsed = static_cast<double>(MonotonicNanos() - t0) / 1e9;
  const double gb = static_cast<double>(received) / 1e9;
  std::printf(
      "mode %s connections %d chunk %llu send_buffer %llu: %.2f Gbit/s, CPU s/GB sender %.3f "
      "receiver %.3f\n",
      mode.c_str(), connections, static_cast<unsigned long long>(chunk),
      static_cast<unsigned long long>(send_buffer), gb * 8 / elapsed, sender_cpu / gb,
      receiver_cpu / gb);
  munmap(mem, bytes);
  return 0;
}
