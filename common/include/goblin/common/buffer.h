// ByteBuffer: a fixed-size heap byte buffer that is not zero-filled, so its pages become
// resident only as they are written (a 1 MiB scratch area costs what it is used for, not
// 1 MiB of RSS at start). Threading: owned by one thread, like a vector.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace goblin {

class ByteBuffer {
 public:
  ByteBuffer() = default;
  explicit ByteBuffer(size_t size)
      : bytes_(std::make_unique_for_overwrite<uint8_t[]>(size)), size_(size) {}
  uint8_t* data() { return bytes_.get(); }
  const uint8_t* data() const { return bytes_.get(); }
  size_t size() const { return size_; }

 private:
  std::unique_ptr<uint8_t[]> bytes_;
  size_t size_ = 0;
};

}  // namespace goblin
