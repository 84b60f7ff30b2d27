// Single-producer/single-consumer byte ring in shared memory, Aeron-style: one control block
// (positions on separate 128-byte lines, static_asserted), a power-of-two data area, records
// of [int32 length][int32 type][payload] aligned to 8 bytes, and a padding record at the wrap
// so every record is contiguous. Producer and consumer may live in different processes.
// Threading: exactly one thread produces and one thread consumes; neither blocks, allocates
// or makes system calls here (waiting lives in doorbell.h).
// Trust: the consumer validates every record header and position it reads from shared
// memory, so a buggy or hostile producer can make Poll() report corruption, never read
// outside the ring.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "goblin/common/status.h"

namespace goblin::ring {

inline constexpr size_t kRecordHeaderSize = 8;
inline constexpr size_t kRecordAlignment = 8;
inline constexpr uint32_t kMinCapacity = 4096;
inline constexpr uint32_t kMaxCapacity = 1u << 30;
inline constexpr uint32_t kDefaultCapacity = 4096;
inline constexpr int32_t kPaddingType = -1;
inline constexpr uint32_t kRingMagic = 0x474f4252;  // "GOBR"

inline constexpr uint32_t AlignRecord(uint64_t payload_len) {
  return static_cast<uint32_t>((kRecordHeaderSize + payload_len + kRecordAlignment - 1) &
                               ~uint64_t{kRecordAlignment - 1});
}

// The shared control block of one ring. Initialised by the creator, then mapped by both
// sides; only the atomics change afterwards.
struct RingControl {
  uint32_t magic;
  uint32_t capacity;  // bytes of the data area, a power of two >= kMinCapacity
  uint8_t pad0_[120];
  std::atomic<uint64_t> tail;  // bytes ever published by the producer
  uint8_t pad1_[120];
  std::atomic<uint64_t> head;  // bytes ever consumed (space the producer may reuse)
  uint8_t pad2_[120];
  std::atomic<uint32_t> consumer_waiting;  // consumer is (about to be) asleep on its doorbell
  std::atomic<uint32_t> producer_waiting;  // producer is (about to be) asleep waiting for space
  uint8_t pad3_[120];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(offsetof(RingControl, tail) == 128);
static_assert(offsetof(RingControl, head) == 256);
static_assert(offsetof(RingControl, consumer_waiting) == 384);
static_assert(offsetof(RingControl, producer_waiting) == 388);
static_assert(sizeof(RingControl) == 512);

// Checks a capacity: power of two within [kMinCapacity, kMaxCapacity].
VoidResult ValidateCapacity(uint64_t capacity);

// Initialises a control block in (zeroed or reused) memory.
void InitRing(RingControl* ctl, uint32_t capacity);

// Largest payload a ring of `capacity` carries: a record must fit the data area whole.
inline constexpr uint32_t MaxPayload(uint32_t capacity) {
  return capacity - static_cast<uint32_t>(kRecordHeaderSize);
}

class RingProducer {
 public:
  RingProducer() = default;
  // `capacity` is what the creator set up (never re-read from shared memory).
  RingProducer(RingControl* ctl, uint8_t* data, uint32_t capacity)
      : ctl_(ctl),
        data_(data),
        capacity_(capacity),
        mask_(capacity - 1),
        tail_(ctl->tail.load(std::memory_order_relaxed)),
        head_cache_(ctl->head.load(std::memory_order_acquire)) {}

  uint32_t capacity() const { return capacity_; }
  uint32_t max_payload() const { return MaxPayload(capacity_); }

  // Reserves a record of up to `max_len` payload bytes and returns where to write it;
  // nullptr when the ring has no room now (back-pressure). After a failure call Publish()
  // before waiting for space: a padding record may have been written, and the consumer
  // must see it to free the space behind it.
  // Requires max_len <= max_payload(): check before, and reject larger messages.
  uint8_t* Reserve(uint32_t max_len) {
    uint32_t record = AlignRecord(max_len);
    uint32_t offset = static_cast<uint32_t>(tail_) & mask_;
    uint32_t to_end = capacity_ - offset;
    if (record > to_end) {
      // Pad to the end so the record starts contiguous at offset 0.
      if (!HasRoom(to_end)) return nullptr;
      WriteHeader(offset, static_cast<int32_t>(to_end), kPaddingType);
      tail_ += to_end;
      offset = 0;
    }
    if (!HasRoom(record)) return nullptr;
    reserved_offset_ = offset;
    return data_ + offset + kRecordHeaderSize;
  }

  // Completes the record from the last Reserve() with its real length (<= the reserved).
  void Complete(uint32_t len, int32_t type) {
    WriteHeader(reserved_offset_, static_cast<int32_t>(kRecordHeaderSize + len), type);
    tail_ += AlignRecord(len);
  }

  // Copies one record in; false when the ring is full now.
  bool TryWrite(int32_t type, std::span<const uint8_t> payload) {
    uint8_t* p = Reserve(static_cast<uint32_t>(payload.size()));
    if (p == nullptr) return false;
    if (!payload.empty()) std::memcpy(p, payload.data(), payload.size());
    Complete(static_cast<uint32_t>(payload.size()), type);
    return true;
  }

  // Makes every completed record visible. Returns true when the consumer said it is going
  // to sleep, i.e. the caller must ring the consumer's doorbell; the announcement is taken
  // with it, so a burst of records rings once per sleep, not once per record (the woken
  // consumer reads every record before it announces again). A pure busy-poll pair never
  // sleeps and skips the check (and its full fence) with check_sleeper = false.
  bool Publish(bool check_sleeper = true) {
    ctl_->tail.store(tail_, std::memory_order_release);
    if (!check_sleeper) return false;
    // Pairs with the consumer's store of consumer_waiting + reload of tail (Dekker): one of
    // the two sides sees the other's store, so a wake-up is never lost.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (ctl_->consumer_waiting.load(std::memory_order_relaxed) == 0) return false;
    return ctl_->consumer_waiting.exchange(0, std::memory_order_relaxed) != 0;
  }

  // Bytes of free space as last seen (refreshes the consumer position).
  uint32_t FreeSpace() {
    head_cache_ = ctl_->head.load(std::memory_order_acquire);
    return capacity_ - static_cast<uint32_t>(tail_ - head_cache_);
  }

  // Announces that the producer waits for space; then re-check room before sleeping.
  void SetWaiting(bool waiting) {
    ctl_->producer_waiting.store(waiting ? 1 : 0, std::memory_order_seq_cst);
  }

 private:
  bool HasRoom(uint32_t bytes) {
    if (capacity_ - (tail_ - head_cache_) >= bytes) return true;
    head_cache_ = ctl_->head.load(std::memory_order_acquire);
    return capacity_ - (tail_ - head_cache_) >= bytes;
  }
  void WriteHeader(uint32_t offset, int32_t length, int32_t type) {
    std::memcpy(data_ + offset, &length, 4);
    std::memcpy(data_ + offset + 4, &type, 4);
  }

  RingControl* ctl_ = nullptr;
  uint8_t* data_ = nullptr;
  uint32_t capacity_ = 0;
  uint32_t mask_ = 0;
  uint64_t tail_ = 0;        // completed, possibly unpublished
  uint64_t head_cache_ = 0;  // last consumer position seen
  uint32_t reserved_offset_ = 0;
};

struct PollResult {
  size_t records = 0;     // records handed to the callback (padding not counted)
  bool advanced = false;  // space was freed (records or padding consumed)
  bool corrupt = false;   // the shared state broke an invariant: stop using this ring
};

class RingConsumer {
 public:
  RingConsumer() = default;
  // `capacity` is what the creator set up (never re-read from shared memory).
  RingConsumer(RingControl* ctl, uint8_t* data, uint32_t capacity)
      : ctl_(ctl),
        data_(data),
        capacity_(capacity),
        mask_(capacity - 1),
        head_(ctl->head.load(std::memory_order_relaxed)) {}

  // True when at least one record (or padding) is published and not yet consumed.
  bool HasData() const { return ctl_->tail.load(std::memory_order_acquire) != head_; }

  // Calls fn(int32_t type, std::span<const uint8_t> payload) for up to `max` records. The
  // payload view is valid only during the call (the space is released after the batch);
  // a consumer that does not trust the producer copies it before parsing. Afterwards, if
  // ProducerWaiting(), ring the producer's doorbell.
  template <typename Fn>
  PollResult Poll(Fn&& fn, size_t max = SIZE_MAX) {
    PollResult r;
    uint64_t tail = ctl_->tail.load(std::memory_order_acquire);
    uint64_t avail = tail - head_;
    if (avail == 0) return r;
    // head_ started from shared memory: it must be record-aligned like everything after it.
    if (avail > capacity_ || ((avail | head_) & (kRecordAlignment - 1)) != 0) {
      r.corrupt = true;
      return r;
    }
    uint64_t pos = head_;
    while (pos != tail && r.records < max) {
      uint32_t offset = static_cast<uint32_t>(pos) & mask_;
      int32_t length, type;
      std::memcpy(&length, data_ + offset, 4);  // read once: the producer may change it
      std::memcpy(&type, data_ + offset + 4, 4);
      uint64_t left = tail - pos;
      uint32_t to_end = capacity_ - offset;
      if (length < static_cast<int32_t>(kRecordHeaderSize) ||
          static_cast<uint32_t>(length) > to_end) {
        r.corrupt = true;
        break;
      }
      uint32_t record = AlignRecord(static_cast<uint32_t>(length) - kRecordHeaderSize);
      if (record > left || record > to_end) {
        r.corrupt = true;
        break;
      }
      if (type != kPaddingType) {
        fn(type, std::span<const uint8_t>(data_ + offset + kRecordHeaderSize,
                                          static_cast<size_t>(length) - kRecordHeaderSize));
        ++r.records;
      }
      pos += record;
    }
    r.advanced = pos != head_;
    head_ = pos;
    ctl_->head.store(head_, std::memory_order_release);
    return r;
  }

  // After freeing space: true when the producer sleeps waiting for it (ring its doorbell).
  bool ProducerWaiting() const {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return ctl_->producer_waiting.load(std::memory_order_relaxed) != 0;
  }

  // Announces that the consumer is going to sleep; then re-check HasData() before sleeping.
  void SetWaiting(bool waiting) {
    ctl_->consumer_waiting.store(waiting ? 1 : 0, std::memory_order_seq_cst);
  }

  uint32_t capacity() const { return capacity_; }

 private:
  RingControl* ctl_ = nullptr;
  uint8_t* data_ = nullptr;
  uint32_t capacity_ = 0;
  uint32_t mask_ = 0;
  uint64_t head_ = 0;
};

}  // namespace goblin::ring
