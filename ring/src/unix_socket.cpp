#include "goblin/ring/unix_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "goblin/common/clock.h"
#include "goblin/sbe/framing.h"

namespace goblin::ring {
namespace {

constexpr size_t kMaxFds = 8;

Result<sockaddr_un> MakeAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return Err(StatusCode::kInvalidArgument,
               "unix socket path '{}' is empty or longer than {} bytes", path,
               sizeof(addr.sun_path) - 1);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

void CollectFds(msghdr& mh, std::vector<UniqueFd>* fds) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    auto* p = reinterpret_cast<int*>(CMSG_DATA(c));
    for (size_t i = 0; i < n; ++i) {
      if (fds != nullptr) {
        fds->emplace_back(p[i]);
      } else {
        close(p[i]);  // nobody wants them: never leak
      }
    }
  }
}

// Waits until `sock` is readable or the deadline passes.
VoidResult WaitReadable(int sock, uint64_t deadline) {
  for (;;) {
    uint64_t now = MonotonicNanos();
    if (now >= deadline) return Err(StatusCode::kTimeout, "timed out waiting for the peer");
    pollfd p{sock, POLLIN, 0};
    int n = poll(&p, 1, static_cast<int>((deadline - now + 999'999) / 1'000'000));
    if (n > 0) return {};
    if (n < 0 && errno != EINTR) return ErrnoErr("poll", errno);
  }
}

}  // namespace

Result<UniqueFd> ListenUnix(const std::string& path, int backlog) {
  GOBLIN_ASSIGN_OR_RETURN(sockaddr_un addr, MakeAddress(path));
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Err(StatusCode::kAlreadyExists, "{} exists and is not a socket; not replacing it",
                 path);
    }
    UniqueFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (probe && connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      return Err(StatusCode::kAlreadyExists, "a server is already listening on {}", path);
    }
    unlink(path.c_str());  // stale: its server is gone
  }
  // Bind and listen under a temporary name, then rename into place: whoever sees the path
  // can connect at once (no window between bind and listen where connect is refused).
  std::string tmp = fmt::format("{}.{}.tmp", path, getpid());
  GOBLIN_ASSIGN_OR_RETURN(sockaddr_un tmp_addr, MakeAddress(tmp));
  unlink(tmp.c_str());
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return ErrnoErr("socket(AF_UNIX)", errno);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&tmp_addr), sizeof tmp_addr) != 0) {
    return ErrnoErr(fmt::format("bind({})", tmp), errno);
  }
  if (listen(fd.get(), backlog) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return ErrnoErr(fmt::format("listen({})", path), err);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return ErrnoErr(fmt::format("rename({} -> {})", tmp, path), err);
  }
  return fd;
}

Result<UniqueFd> ConnectUnix(const std::string& path, std::chrono::milliseconds timeout) {
  GOBLIN_ASSIGN_OR_RETURN(sockaddr_un addr, MakeAddress(path));
  const uint64_t deadline = MonotonicNanos() + static_cast<uint64_t>(timeout.count()) * 1'000'000;
  for (;;) {
    UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return ErrnoErr("socket(AF_UNIX)", errno);
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
    int err = errno;
    // A full backlog (EAGAIN) is worth retrying until the deadline; anything else is final.
    if (err != EAGAIN || MonotonicNanos() >= deadline) {
      return Err(ErrnoStatus(fmt::format("connect({})", path), err));
    }
    usleep(1000);
  }
}

VoidResult SendFrame(int sock, std::span<const uint8_t> msg, std::span<const int> fds) {
  if (fds.size() > kMaxFds) return Err(StatusCode::kInvalidArgument, "too many fds to pass");
  uint8_t prefix[sbe::kFrameHeaderSize];
  sbe::WriteFrameHeader(prefix, static_cast<uint32_t>(msg.size()));
  iovec iov[2] = {{prefix, sizeof prefix}, {const_cast<uint8_t*>(msg.data()), msg.size()}};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msghdr mh{};
  mh.msg_iov = iov;
  mh.msg_iovlen = 2;
  if (!fds.empty()) {
    mh.msg_control = control;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  size_t total = sizeof prefix + msg.size();
  ssize_t n;
  do {
    n = sendmsg(sock, &mh, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoErr("sendmsg", errno);
  if (static_cast<size_t>(n) != total) {
    return Err(StatusCode::kUnavailable, "short send on the handshake socket ({} of {})", n, total);
  }
  return {};
}

Result<size_t> ReadSome(int sock, std::span<uint8_t> buf, std::vector<UniqueFd>* fds) {
  iovec iov{buf.data(), buf.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Err(StatusCode::kTimeout, "");
    return ErrnoErr("recvmsg", errno);
  }
  CollectFds(mh, fds);
  if (mh.msg_flags & MSG_CTRUNC) {
    return Err(StatusCode::kInvalidArgument, "peer passed more file descriptors than expected");
  }
  return static_cast<size_t>(n);
}

VoidResult RecvFrame(int sock, uint32_t max_bytes, std::chrono::milliseconds timeout,
                     std::vector<uint8_t>* out, std::vector<UniqueFd>* fds) {
  const uint64_t deadline = MonotonicNanos() + static_cast<uint64_t>(timeout.count()) * 1'000'000;
  std::vector<uint8_t> acc;
  acc.reserve(256);
  uint8_t chunk[4096];
  for (;;) {
    auto split = sbe::SplitFrame(acc, max_bytes);
    switch (split.kind) {
      case sbe::FrameSplit::Kind::kFrame:
        if (split.consumed != acc.size()) {
          return Err(StatusCode::kInvalidArgument, "peer sent more than one handshake frame");
        }
        out->assign(split.message.begin(), split.message.end());
        return {};
      case sbe::FrameSplit::Kind::kTooLarge:
        return Err(StatusCode::kInvalidArgument, "peer announced a frame over {} bytes", max_bytes);
      case sbe::FrameSplit::Kind::kTooSmall:
        return Err(StatusCode::kInvalidArgument, "peer announced a frame shorter than a header");
      case sbe::FrameSplit::Kind::kNeedMore:
        break;
    }
    GOBLIN_RETURN_IF_ERROR(WaitReadable(sock, deadline));
    size_t want = std::min(sizeof chunk, split.consumed - acc.size());
    auto n = ReadSome(sock, std::span<uint8_t>(chunk, want), fds);
    if (!n) {
      if (n.error().code() == StatusCode::kTimeout) continue;
      return Err(n.error());
    }
    if (*n == 0) return Err(StatusCode::kUnavailable, "peer closed the connection");
    acc.insert(acc.end(), chunk, chunk + *n);
  }
}

}  // namespace goblin::ring
