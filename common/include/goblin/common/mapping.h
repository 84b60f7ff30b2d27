// Mapping: the move-only owner of one mmap(2) region; unmaps it exactly once. MapShared
// maps `bytes` of an fd (another process's memfd, say) MAP_SHARED with the given
// protection; the fd may be closed afterwards (the mapping keeps the memory alive).
// Threading: like any value.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "goblin/common/status.h"

namespace goblin {

class Mapping {
 public:
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  Mapping(Mapping&& o) noexcept
      : base_(std::exchange(o.base_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  Mapping& operator=(Mapping&& o) noexcept {
    if (this != &o) {
      Reset();
      base_ = std::exchange(o.base_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~Mapping() { Reset(); }

  // `prot`: PROT_READ, PROT_READ | PROT_WRITE, ...
  static Result<Mapping> MapShared(int fd, size_t bytes, int prot, std::string_view what);

  uint8_t* data() const { return static_cast<uint8_t*>(base_); }
  size_t size() const { return bytes_; }
  explicit operator bool() const { return base_ != nullptr; }
  void Reset() {
    if (base_ != nullptr) munmap(base_, bytes_);
    base_ = nullptr;
    bytes_ = 0;
  }

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace goblin
