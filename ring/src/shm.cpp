#include "goblin/ring/shm.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace goblin::ring {

SharedMemory& SharedMemory::operator=(SharedMemory&& o) noexcept {
  if (this != &o) {
    if (addr_ != nullptr) munmap(addr_, size_);
    fd_ = std::move(o.fd_);
    addr_ = std::exchange(o.addr_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

SharedMemory::~SharedMemory() {
  if (addr_ != nullptr) munmap(addr_, size_);
}

Result<SharedMemory> SharedMemory::MapShared(UniqueFd fd, size_t size) {
  void* addr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.get(), 0);
  if (addr == MAP_FAILED) return ErrnoErr("mmap(memfd)", errno);
  SharedMemory m;
  m.fd_ = std::move(fd);
  m.addr_ = addr;
  m.size_ = size;
  return m;
}

Result<SharedMemory> SharedMemory::Create(const char* name, size_t size) {
  UniqueFd fd(memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return ErrnoErr("memfd_create", errno);
  if (ftruncate(fd.get(), static_cast<off_t>(size)) != 0)
    return ErrnoErr("ftruncate(memfd)", errno);
  // The peer may rely on the size: forbid shrinking (a SIGBUS weapon) and resizing.
  if (fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return ErrnoErr("fcntl(F_ADD_SEALS)", errno);
  }
  return MapShared(std::move(fd), size);
}

Result<SharedMemory> SharedMemory::Map(UniqueFd fd, size_t size) {
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return ErrnoErr("fstat(memfd)", errno);
  if (static_cast<size_t>(st.st_size) < size) {
    return Err(StatusCode::kInvalidArgument, "shared memory is {} bytes, expected {}", st.st_size,
               size);
  }
  int seals = fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return Err(StatusCode::kFailedPrecondition, "shared memory is not sealed against shrinking");
  }
  return MapShared(std::move(fd), size);
}

Result<EventFd> EventFd::Create() {
  UniqueFd fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!fd) return ErrnoErr("eventfd", errno);
  return EventFd(std::move(fd));
}

void EventFd::Notify() const {
  uint64_t one = 1;
  ssize_t n;
  do {
    n = write(fd_.get(), &one, sizeof one);
  } while (n < 0 && errno == EINTR);
  // EAGAIN means the counter is saturated: the sleeper is already woken.
}

void EventFd::Drain() const {
  uint64_t v;
  while (read(fd_.get(), &v, sizeof v) < 0 && errno == EINTR) {
  }
}

}  // namespace goblin::ring
