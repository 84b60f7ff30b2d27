// StableQueue: a FIFO whose elements stay at one address from push to pop (an io_uring
// write in flight points into them, short strings included), and whose slots are reused:
// once it has grown to a connection's depth, pushing and popping allocate nothing (a
// std::deque frees and allocates a block every few elements as it moves along).
// Threading: like any container.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace goblin::gateway {

template <class T>
class StableQueue {
 public:
  bool empty() const { return count_ == 0; }
  size_t size() const { return count_; }
  T& front() { return *slots_[head_]; }
  T& back() { return (*this)[count_ - 1]; }
  T& operator[](size_t i) { return *slots_[(head_ + i) % slots_.size()]; }
  // (moved into a slot: what the slot's element held is released by the move)
  T& push_back(T&& v) {
    if (count_ == slots_.size()) Grow();
    T& slot = (*this)[count_];
    slot = std::move(v);
    ++count_;
    return slot;
  }
  void pop_front() {
    *slots_[head_] = T{};
    head_ = (head_ + 1) % slots_.size();
    --count_;
  }
  void pop_back() {
    back() = T{};
    --count_;
  }
  void clear() {
    while (!empty()) pop_front();
    head_ = 0;
  }

 private:
  void Grow() {
    // The pointers move; the elements do not. Re-laid out from the head.
    std::vector<std::unique_ptr<T>> next;
    size_t n = slots_.empty() ? 4 : slots_.size() * 2;
    next.reserve(n);
    for (size_t i = 0; i < slots_.size(); ++i)
      next.push_back(std::move(slots_[(head_ + i) % slots_.size()]));
    while (next.size() < n) next.push_back(std::make_unique<T>());
    slots_ = std::move(next);
    head_ = 0;
  }

  std::vector<std::unique_ptr<T>> slots_;
  size_t head_ = 0, count_ = 0;
};

}  // namespace goblin::gateway
