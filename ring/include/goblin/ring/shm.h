// Owners of the kernel objects behind the ring plane: an anonymous shared memory file
// (memfd) with its mapping, and an eventfd used as a doorbell. Move-only RAII; creating and
// mapping are slow-path calls. Threading: like any value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "goblin/common/fd.h"
#include "goblin/common/status.h"

namespace goblin::ring {

class SharedMemory {
 public:
  SharedMemory() = default;
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;
  SharedMemory(SharedMemory&& o) noexcept
      : fd_(std::move(o.fd_)),
        addr_(std::exchange(o.addr_, nullptr)),
        size_(std::exchange(o.size_, 0)) {}
  SharedMemory& operator=(SharedMemory&& o) noexcept;
  ~SharedMemory();

  // A new zero-filled memfd of `size` bytes, sealed against shrinking, mapped read-write.
  static Result<SharedMemory> Create(const char* name, size_t size);
  // Maps a memfd received from a peer; checks that it is at least `size` bytes.
  static Result<SharedMemory> Map(UniqueFd fd, size_t size);

  uint8_t* data() const { return static_cast<uint8_t*>(addr_); }
  size_t size() const { return size_; }
  int fd() const { return fd_.get(); }

 private:
  static Result<SharedMemory> MapShared(UniqueFd fd, size_t size);

  UniqueFd fd_;
  void* addr_ = nullptr;
  size_t size_ = 0;
};

// Doorbell: an eventfd the sleeper polls and the peer writes. Notify() is one write(2);
// callers only ring when the peer said it sleeps (the waiting flags in RingControl).
class EventFd {
 public:
  EventFd() = default;
  explicit EventFd(UniqueFd fd) : fd_(std::move(fd)) {}
  static Result<EventFd> Create();

  int fd() const { return fd_.get(); }
  bool valid() const { return fd_.valid(); }
  void Notify() const;
  // Clears pending notifications (non-blocking).
  void Drain() const;

 private:
  UniqueFd fd_;
};

}  // namespace goblin::ring
