// The access log's rings and writer thread. See access_log.h.
#include "goblin/gateway/access_log.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "goblin/common/log.h"

namespace goblin::gateway {
namespace {
constexpr std::string_view kLog = "gateway";
std::atomic<AccessLog*> g_reopen_target{nullptr};

void OnSigusr1(int) {
  if (AccessLog* log = g_reopen_target.load(std::memory_order_relaxed)) log->Reopen();
}

Result<UniqueFd> OpenLogFile(const std::string& path) {
  if (path == "-") {
    int fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return ErrnoErr("access log: dup(stdout)", errno);
    return UniqueFd(fd);
  }
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoErr(fmt::format("access log '{}'", path), errno);
  return UniqueFd(fd);
}
}  // namespace

AccessLog::Ring::Ring(size_t bytes) : buf_(new char[bytes]), size_(bytes) {}

bool AccessLog::Ring::Append(std::string_view line) {
  const uint64_t head = head_.load(std::memory_order_relaxed);
  const uint64_t used = head - tail_.load(std::memory_order_acquire);
  const size_t n = line.size() + 1;
  if (used + n > size_) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  const size_t off = head % size_;
  const size_t first = std::min(line.size(), size_ - off);
  std::memcpy(buf_.get() + off, line.data(), first);
  std::memcpy(buf_.get(), line.data() + first, line.size() - first);
  buf_[(head + line.size()) % size_] = '\n';
  head_.store(head + n, std::memory_order_release);
  appended_.store(appended_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (used + n > size_ / 2) owner_->Wake();  // (rare: the writer drains every 100 ms)
  return true;
}

Result<std::unique_ptr<AccessLog>> AccessLog::Open(const std::string& path, size_t workers,
                                                   size_t ring_bytes) {
  auto fd = OpenLogFile(path);
  if (!fd) return std::unexpected(fd.error());
  std::unique_ptr<AccessLog> log(new AccessLog());
  log->path_ = path;
  log->fd_ = std::move(*fd);
  for (size_t i = 0; i < workers; ++i) {
    log->rings_.push_back(std::make_unique<Ring>(ring_bytes));
    log->rings_.back()->owner_ = log.get();
  }
  log->thread_ = std::thread([l = log.get()] { l->Run(); });
  return log;
}

AccessLog::~AccessLog() {
  if (g_reopen_target.load() == this) ReopenOnSigusr1(nullptr);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void AccessLog::ReopenOnSigusr1(AccessLog* log) {
  g_reopen_target.store(log);
  struct sigaction sa {};
  sa.sa_handler = log != nullptr ? &OnSigusr1 : SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
}

uint64_t AccessLog::dropped() const {
  uint64_t n = 0;
  for (const auto& r : rings_) n += r->dropped();
  return n;
}

uint64_t AccessLog::lines_written() const {
  uint64_t n = 0;
  for (const auto& r : rings_) n += r->appended_.load(std::memory_order_relaxed);
  return n - dropped();
}

void AccessLog::Wake() {
  if (woken_.exchange(true, std::memory_order_relaxed)) return;
  cv_.notify_one();
}

void AccessLog::Run() {
  bool warned = false;
  for (;;) {
    bool stop;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(100),
                   [&] { return stop_ || woken_.load(std::memory_order_relaxed); });
      stop = stop_;
    }
    woken_.store(false, std::memory_order_relaxed);
    if (!Drain() && !warned) {
      // (a full disk or a closed pipe: the lines are dropped, said once; serving goes on)
      GOBLIN_LOG_WARN(kLog, "access log '{}': {}: lines are dropped", path_, std::strerror(errno));
      warned = true;
    }
    if (reopen_.exchange(false, std::memory_order_relaxed)) {
      if (auto fd = OpenLogFile(path_)) {
        fd_ = std::move(*fd);
        warned = false;
        GOBLIN_LOG_INFO(kLog, "access log '{}' reopened", path_);
      } else {
        GOBLIN_LOG_WARN(kLog, "{}", fd.error());
      }
    }
    if (stop) {
      (void)Drain();
      return;
    }
  }
}

bool AccessLog::Drain() {
  bool ok = true;
  for (auto& r : rings_) {
    const uint64_t tail = r->tail_.load(std::memory_order_relaxed);
    const uint64_t head = r->head_.load(std::memory_order_acquire);
    if (head == tail) continue;
    const size_t off = tail % r->size_;
    const size_t n = head - tail;
    const size_t first = std::min(n, r->size_ - off);
    size_t done = 0;
    while (ok && done < n) {
      iovec v[2];
      int cnt = 0;
      if (done < first) v[cnt++] = {r->buf_.get() + off + done, first - done};
      if (n > first) {
        const size_t skip = done > first ? done - first : 0;
        v[cnt++] = {r->buf_.get() + skip, n - first - skip};
      }
      ssize_t w = writev(fd_.get(), v, cnt);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        ok = false;
        break;
      }
      done += static_cast<size_t>(w);
    }
    r->tail_.store(head, std::memory_order_release);  // (written or dropped)
  }
  return ok;
}

void AppendLogField(std::string* out, std::string_view s) {
  if (s.empty()) {
    out->push_back('-');
    return;
  }
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (u < 0x20 || u > 0x7e || ch == '"' || ch == '\\') {
      out->append("\\x");
      out->push_back(kHex[u >> 4]);
      out->push_back(kHex[u & 15]);
    } else {
      out->push_back(ch);
    }
  }
}

}  // namespace goblin::gateway
