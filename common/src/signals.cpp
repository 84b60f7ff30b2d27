#include "goblin/common/signals.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

namespace goblin {
namespace {

std::atomic<int> g_event_fd{-1};
std::atomic<int> g_count{0};
std::atomic<int> g_signo{0};

void Notify() {
  uint64_t one = 1;
  int fd = g_event_fd.load();
  if (fd >= 0) {
    [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof one);  // async-signal-safe
  }
}

void OnSignal(int signo) {
  if (g_count.fetch_add(1) >= 1) _exit(130);  // second signal: the user means it
  g_signo.store(signo);
  Notify();
}

}  // namespace

Result<ShutdownSignal*> ShutdownSignal::Install() {
  static ShutdownSignal instance;
  if (g_event_fd.load() >= 0) return &instance;
  int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return ErrnoErr("eventfd", errno);
  g_event_fd.store(fd);
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGINT, &sa, nullptr) != 0 || sigaction(SIGTERM, &sa, nullptr) != 0) {
    return ErrnoErr("sigaction", errno);
  }
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  sigaction(SIGPIPE, &ign, nullptr);
  return &instance;
}

bool ShutdownSignal::requested() const { return g_count.load() > 0; }
int ShutdownSignal::fd() const { return g_event_fd.load(); }
int ShutdownSignal::signal_number() const { return g_signo.load(); }

void ShutdownSignal::Request() {
  if (g_count.fetch_add(1) == 0) Notify();
}

bool ShutdownSignal::Wait(std::chrono::milliseconds timeout) const {
  if (requested()) return true;
  pollfd p{fd(), POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (r < 0 && errno == EINTR && !requested());
  return requested();
}

}  // namespace goblin
