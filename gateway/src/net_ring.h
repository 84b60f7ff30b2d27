// NetRing: the io_uring behind --net async. Client sockets are read (recv into a
// per-connection buffer) and written (writev of the response pieces, straight from lent pool
// memory) through it; completions are reaped in the loop, woken by the ring's eventfd in the
// epoll set. Cancelling a socket's requests is by fd, so Cancel() submits at once: the fd
// must still be open when the kernel looks it up.
// Threading: the HTTP front's loop thread.
#pragma once

#include <sys/eventfd.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstdint>

#include "goblin/common/config.h"
#include "goblin/common/fd.h"
#include "goblin/common/status.h"

#if GOBLIN_HAVE_URING
#include <liburing.h>
#endif

namespace goblin::gateway {

class NetRing {
 public:
  NetRing() = default;
  NetRing(const NetRing&) = delete;
  NetRing& operator=(const NetRing&) = delete;
  ~NetRing() {
#if GOBLIN_HAVE_URING
    if (ready_) io_uring_queue_exit(&ring_);
#endif
  }
  VoidResult Init(unsigned entries) {
#if GOBLIN_HAVE_URING
    int rc = io_uring_queue_init(entries, &ring_, 0);
    if (rc < 0) return Err(ErrnoStatus("io_uring_queue_init (--net async)", -rc));
    ready_ = true;
    efd_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!efd_) return ErrnoErr("eventfd", errno);
    rc = io_uring_register_eventfd(&ring_, efd_.get());
    if (rc < 0) return Err(ErrnoStatus("io_uring_register_eventfd", -rc));
    return {};
#else
    (void)entries;
    return Err(StatusCode::kUnimplemented, "--net async: this build has no liburing");
#endif
  }
  int event_fd() const { return efd_.get(); }
#if GOBLIN_HAVE_URING
  void Recv(int fd, void* buf, size_t len, uint64_t ud) {
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_recv(sqe, fd, buf, len, 0);
    io_uring_sqe_set_data64(sqe, ud);
  }
  void Writev(int fd, const iovec* iov, unsigned n, uint64_t ud) {
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_writev(sqe, fd, iov, n, 0);
    io_uring_sqe_set_data64(sqe, ud);
  }
  // Cancels every request on `fd` and submits now (before the caller closes the fd).
  void Cancel(int fd, uint64_t ud) {
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_cancel_fd(sqe, fd, IORING_ASYNC_CANCEL_ALL);
    io_uring_sqe_set_data64(sqe, ud);
    Submit();
  }
  void Submit() {
    if (unsubmitted_ > 0) {
      io_uring_submit(&ring_);
      unsubmitted_ = 0;
    }
  }
  template <typename Fn>
  size_t Reap(Fn&& fn) {
    uint64_t v;
    [[maybe_unused]] ssize_t r = read(efd_.get(), &v, sizeof v);
    size_t n = 0;
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe != nullptr) {
      uint64_t ud = io_uring_cqe_get_data64(cqe);
      int32_t res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      fn(ud, res);
      ++n;
    }
    return n;
  }

 private:
  io_uring_sqe* Sqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {
      io_uring_submit(&ring_);
      unsubmitted_ = 0;
      sqe = io_uring_get_sqe(&ring_);
    }
    ++unsubmitted_;
    return sqe;
  }
  io_uring ring_{};
#else
 private:
#endif
  bool ready_ = false;
  unsigned unsubmitted_ = 0;
  UniqueFd efd_;
};

}  // namespace goblin::gateway
