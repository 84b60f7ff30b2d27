// Disk I/O for the tiers: aligned, asynchronous reads and writes on large preallocated
// extent files opened with O_DIRECT. The engine is chosen once at start: io_uring where the
// kernel allows it (probed), otherwise a synchronous pread/pwrite engine with the same
// interface and the same tests ("--io uring" forces io_uring and fails if it is missing).
// Buffers come from IoBufferPool: a bounded shared-memory pool of aligned buffers that
// local readers can map, so tail data is handed over as descriptors, not copies.
// Threading: an engine, its files and its buffer pool belong to one thread (a core shard).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "goblin/common/fd.h"
#include "goblin/common/status.h"

namespace goblin::store {

inline constexpr uint32_t kDirectAlignment = 4096;

enum class IoBackend : uint8_t { kIoUring, kSync };
std::string_view IoBackendName(IoBackend b);

enum class IoChoice : uint8_t { kAuto, kIoUring, kSync };
Result<IoChoice> ParseIoChoice(std::string_view text);  // "auto" | "uring" | "sync"

struct IoRequest {
  int fd = -1;
  uint64_t offset = 0;  // multiple of kDirectAlignment
  void* buf = nullptr;  // aligned to kDirectAlignment
  uint32_t len = 0;     // multiple of kDirectAlignment
  bool write = false;
  uint64_t user_data = 0;
};

struct IoCompletion {
  uint64_t user_data = 0;
  int32_t result = 0;  // bytes transferred, or -errno
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;
  // io_uring when `choice` allows and the kernel provides it; the sync engine otherwise
  // (kIoUring fails instead of falling back). `depth` bounds the requests in flight.
  static Result<std::unique_ptr<IoEngine>> Create(IoChoice choice, uint32_t depth);

  virtual IoBackend backend() const = 0;
  uint32_t depth() const { return depth_; }
  uint32_t in_flight() const { return in_flight_; }

  // Queues a request; false when `depth` requests are already in flight (back-pressure).
  // Misaligned requests are not queued: they complete at once with -EINVAL.
  virtual bool Submit(const IoRequest& r) = 0;
  // Hands queued requests to the kernel (one system call for the batch).
  virtual VoidResult Flush() = 0;
  // Registers [base, base + bytes) once (io_uring fixed buffers: the pages are pinned now,
  // not on every request); requests whose buffer lies inside it then skip per-I/O page
  // pinning. Engines without the notion accept and ignore it. Fails (and changes nothing)
  // when the kernel refuses, e.g. over RLIMIT_MEMLOCK; requests still work unregistered.
  virtual VoidResult RegisterBuffers(void* base, uint64_t bytes) {
    (void)base;
    (void)bytes;
    return {};
  }
  bool buffers_registered() const { return registered_bytes_ > 0; }
  // Collects up to out.size() completions, waiting until at least `min_complete` (capped at
  // what is in flight) have arrived.
  virtual Result<size_t> Reap(std::span<IoCompletion> out, uint32_t min_complete) = 0;

  // An eventfd that becomes readable when completions are waiting (for an event loop's
  // epoll); the loop clears it (DrainEvents) when epoll reports it, then reaps.
  int event_fd() const { return event_fd_.get(); }
  void DrainEvents() const;

 protected:
  VoidResult InitEventFd();
  void SignalEvents() const;  // engines that complete in user space (sync) call this
  uint32_t depth_ = 0;
  uint32_t in_flight_ = 0;
  uint8_t* registered_base_ = nullptr;
  uint64_t registered_bytes_ = 0;
  UniqueFd event_fd_;
};

// A bounded pool of `count` buffers of `buffer_bytes` (a multiple of 4 KiB) in one memfd.
class IoBufferPool {
 public:
  // `numa_node` >= 0: the buffers' pages on that node (strict: never elsewhere).
  static Result<std::unique_ptr<IoBufferPool>> Create(uint32_t count, uint32_t buffer_bytes,
                                                      int numa_node = -1, bool strict = false);
  ~IoBufferPool();
  IoBufferPool(const IoBufferPool&) = delete;
  IoBufferPool& operator=(const IoBufferPool&) = delete;

  // A free buffer's index, or nullopt when all are lent (back-pressure).
  std::optional<uint32_t> Acquire();
  // Every acquired buffer is released exactly once by each of its owners (one, plus one per
  // Share). A pinned buffer (a transport is still receiving into it) goes back to the free
  // list at its last Unpin.
  void Release(uint32_t index);
  void Share(uint32_t index) { ++shares_[index]; }  // one more owner, who Releases it too
  void Pin(uint32_t index) { ++pins_[index]; }
  void Unpin(uint32_t index);
  uint32_t pins(uint32_t index) const { return pins_[index]; }
  uint8_t* Buffer(uint32_t index) const {
    return base_ + static_cast<uint64_t>(index) * buffer_bytes_;
  }
  uint64_t OffsetOf(uint32_t index) const { return static_cast<uint64_t>(index) * buffer_bytes_; }
  uint32_t buffer_bytes() const { return buffer_bytes_; }
  uint32_t count() const { return count_; }
  uint32_t free_count() const { return static_cast<uint32_t>(free_.size()); }
  int fd() const { return fd_.get(); }

 private:
  IoBufferPool() = default;
  UniqueFd fd_;
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  uint32_t buffer_bytes_ = 0;
  uint32_t count_ = 0;
  std::vector<uint32_t> free_;
  std::vector<uint32_t> pins_;
  std::vector<uint32_t> shares_;       // owners beyond the first
  std::vector<bool> released_pinned_;  // released while pinned: freed at the last Unpin
};

// A preallocated extent file opened for O_DIRECT I/O.
class ExtentFile {
 public:
  // Creates (or reopens) `path` with at least `bytes` allocated on disk (fallocate). Fails
  // with ResourceExhausted when the file system cannot hold it, leaving no file behind if
  // this call created it. Filesystems without O_DIRECT (tmpfs) fail unless `allow_buffered`.
  static Result<ExtentFile> Open(const std::string& path, uint64_t bytes,
                                 bool allow_buffered = false);

  int fd() const { return fd_.get(); }
  uint64_t size() const { return size_; }
  bool direct() const { return direct_; }
  const std::string& path() const { return path_; }

 private:
  UniqueFd fd_;
  uint64_t size_ = 0;
  bool direct_ = true;
  std::string path_;
};

}  // namespace goblin::store
