#include "goblin/store/disk_io.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <deque>

#include "goblin/common/config.h"
#include "goblin/common/log.h"
#include "goblin/common/topology.h"
#include "goblin/common/units.h"
#if GOBLIN_HAVE_URING
#include <liburing.h>
#endif

namespace goblin::store {
namespace {

constexpr std::string_view kLog = "disk";

bool Aligned(const IoRequest& r) {
  return r.offset % kDirectAlignment == 0 && r.len % kDirectAlignment == 0 && r.len > 0 &&
         reinterpret_cast<uintptr_t>(r.buf) % kDirectAlignment == 0;
}

// Synchronous engine: Submit queues, Flush performs the queued requests one by one.
class SyncEngine final : public IoEngine {
 public:
  explicit SyncEngine(uint32_t depth) { depth_ = depth; }
  IoBackend backend() const override { return IoBackend::kSync; }

  bool Submit(const IoRequest& r) override {
    if (in_flight_ >= depth_) return false;
    ++in_flight_;
    if (!Aligned(r)) {
      done_.push_back({r.user_data, -EINVAL});
    } else {
      queued_.push_back(r);
    }
    return true;
  }

  VoidResult Flush() override {
    for (const IoRequest& r : queued_) {
      ssize_t n;
      do {
        n = r.write ? pwrite(r.fd, r.buf, r.len, static_cast<off_t>(r.offset))
                    : pread(r.fd, r.buf, r.len, static_cast<off_t>(r.offset));
      } while (n < 0 && errno == EINTR);
      done_.push_back({r.user_data, n < 0 ? -errno : static_cast<int32_t>(n)});
    }
    if (!done_.empty()) SignalEvents();
    queued_.clear();
    return {};
  }

  Result<size_t> Reap(std::span<IoCompletion> out, uint32_t min_complete) override {
    if (!queued_.empty()) GOBLIN_RETURN_IF_ERROR(Flush());
    size_t n = 0;
    while (n < out.size() && !done_.empty()) {
      out[n++] = done_.front();
      done_.pop_front();
      --in_flight_;
    }
    return n;
  }

 private:
  std::vector<IoRequest> queued_;
  std::deque<IoCompletion> done_;
};

#if GOBLIN_HAVE_URING
class UringEngine final : public IoEngine {
 public:
  ~UringEngine() override {
    if (ready_) io_uring_queue_exit(&ring_);
  }
  static Result<std::unique_ptr<UringEngine>> Create(uint32_t depth) {
    auto e = std::make_unique<UringEngine>();
    e->depth_ = depth;
    int rc = io_uring_queue_init(depth, &e->ring_, 0);
    if (rc < 0) return Err(ErrnoStatus("io_uring_queue_init", -rc));
    e->ready_ = true;
    GOBLIN_RETURN_IF_ERROR(e->InitEventFd());
    rc = io_uring_register_eventfd(&e->ring_, e->event_fd());
    if (rc < 0) return Err(ErrnoStatus("io_uring_register_eventfd", -rc));
    return e;
  }
  IoBackend backend() const override { return IoBackend::kIoUring; }

  bool Submit(const IoRequest& r) override {
    if (in_flight_ >= depth_) return false;
    if (!Aligned(r)) {
      ++in_flight_;
      rejected_.push_back({r.user_data, -EINVAL});
      SignalEvents();
      return true;
    }
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return false;
    auto* p = static_cast<uint8_t*>(r.buf);
    int index = FixedIndex(p, r.len);
    if (index >= 0 && r.write) {
      io_uring_prep_write_fixed(sqe, r.fd, r.buf, r.len, r.offset, index);
    } else if (index >= 0) {
      io_uring_prep_read_fixed(sqe, r.fd, r.buf, r.len, r.offset, index);
    } else if (r.write) {
      io_uring_prep_write(sqe, r.fd, r.buf, r.len, r.offset);
    } else {
      io_uring_prep_read(sqe, r.fd, r.buf, r.len, r.offset);
    }
    io_uring_sqe_set_data64(sqe, r.user_data);
    ++in_flight_;
    ++unsubmitted_;
    return true;
  }

  VoidResult RegisterBuffers(void* base, uint64_t bytes) override {
    if (registered_bytes_ > 0) return Err(StatusCode::kFailedPrecondition, "already registered");
    // The kernel takes at most 1 GiB per registered buffer: one iovec per GiB.
    std::vector<iovec> iov;
    for (uint64_t off = 0; off < bytes; off += kFixedChunk) {
      iov.push_back({static_cast<uint8_t*>(base) + off, std::min(kFixedChunk, bytes - off)});
    }
    int rc = io_uring_register_buffers(&ring_, iov.data(), static_cast<unsigned>(iov.size()));
    if (rc < 0) return Err(ErrnoStatus("io_uring_register_buffers", -rc));
    registered_base_ = static_cast<uint8_t*>(base);
    registered_bytes_ = bytes;
    return {};
  }

  VoidResult Flush() override {
    while (unsubmitted_ > 0) {
      int rc = io_uring_submit(&ring_);
      if (rc < 0) {
        if (rc == -EINTR || rc == -EAGAIN) continue;
        return Err(ErrnoStatus("io_uring_submit", -rc));
      }
      unsubmitted_ -= std::min<uint32_t>(unsubmitted_, static_cast<uint32_t>(rc));
    }
    return {};
  }

  Result<size_t> Reap(std::span<IoCompletion> out, uint32_t min_complete) override {
    GOBLIN_RETURN_IF_ERROR(Flush());
    size_t n = 0;
    while (n < out.size() && !rejected_.empty()) {
      out[n++] = rejected_.front();
      rejected_.pop_front();
      --in_flight_;
    }
    uint32_t want = std::min<uint32_t>(min_complete, static_cast<uint32_t>(n) + in_flight_);
    while (n < out.size()) {
      io_uring_cqe* cqe = nullptr;
      int rc = n < want ? io_uring_wait_cqe(&ring_, &cqe) : io_uring_peek_cqe(&ring_, &cqe);
      if (rc == -EAGAIN || (rc == 0 && cqe == nullptr)) break;
      if (rc == -EINTR) continue;
      if (rc < 0) return Err(ErrnoStatus("io_uring_wait_cqe", -rc));
      out[n++] = {io_uring_cqe_get_data64(cqe), cqe->res};
      io_uring_cqe_seen(&ring_, cqe);
      --in_flight_;
    }
    return n;
  }

 private:
  static constexpr uint64_t kFixedChunk = 1ull << 30;
  // The registered buffer holding all of [p, p + len), or -1.
  int FixedIndex(const uint8_t* p, uint32_t len) const {
    if (registered_bytes_ == 0 || p < registered_base_ ||
        p + len > registered_base_ + registered_bytes_)
      return -1;
    uint64_t off = static_cast<uint64_t>(p - registered_base_);
    if (off / kFixedChunk != (off + len - 1) / kFixedChunk) return -1;
    return static_cast<int>(off / kFixedChunk);
  }
  io_uring ring_{};
  bool ready_ = false;
  uint32_t unsubmitted_ = 0;
  std::deque<IoCompletion> rejected_;
};
#endif

}  // namespace

std::string_view IoBackendName(IoBackend b) {
  return b == IoBackend::kIoUring ? "io_uring" : "pread/pwrite";
}

Result<IoChoice> ParseIoChoice(std::string_view text) {
  if (text == "auto") return IoChoice::kAuto;
  if (text == "uring") return IoChoice::kIoUring;
  if (text == "sync") return IoChoice::kSync;
  return Err(StatusCode::kInvalidArgument, "--io '{}': use auto, uring or sync", text);
}

Result<std::unique_ptr<IoEngine>> IoEngine::Create(IoChoice choice, uint32_t depth) {
  if (depth == 0 || depth > 4096)
    return Err(StatusCode::kInvalidArgument, "I/O depth {} not in 1..4096", depth);
  if (choice != IoChoice::kSync) {
#if GOBLIN_HAVE_URING
    auto e = UringEngine::Create(depth);
    if (e) return std::unique_ptr<IoEngine>(std::move(*e));
    if (choice == IoChoice::kIoUring) return Err(e.error().WithContext("--io uring"));
    GOBLIN_LOG_WARN(kLog, "io_uring unavailable ({}); using pread/pwrite", e.error());
#else
    if (choice == IoChoice::kIoUring) {
      return Err(StatusCode::kUnimplemented, "--io uring: this build has no liburing");
    }
#endif
  }
  auto sync = std::make_unique<SyncEngine>(depth);
  GOBLIN_RETURN_IF_ERROR(sync->InitEventFd());
  return std::unique_ptr<IoEngine>(std::move(sync));
}

VoidResult IoEngine::InitEventFd() {
  event_fd_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!event_fd_) return ErrnoErr("eventfd(io completions)", errno);
  return {};
}

void IoEngine::SignalEvents() const {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(event_fd_.get(), &one, sizeof one);
}

void IoEngine::DrainEvents() const {
  uint64_t v;
  [[maybe_unused]] ssize_t n = read(event_fd_.get(), &v, sizeof v);
}

Result<std::unique_ptr<IoBufferPool>> IoBufferPool::Create(uint32_t count, uint32_t buffer_bytes,
                                                           int numa_node, bool strict) {
  if (count == 0 || buffer_bytes == 0 || buffer_bytes % kDirectAlignment != 0) {
    return Err(StatusCode::kInvalidArgument, "I/O buffers: {} x {} (size must be a multiple of 4K)",
               count, buffer_bytes);
  }
  std::unique_ptr<IoBufferPool> p(new IoBufferPool());
  p->count_ = count;
  p->buffer_bytes_ = buffer_bytes;
  p->bytes_ = static_cast<uint64_t>(count) * buffer_bytes;
  p->fd_ = UniqueFd(memfd_create("goblin-io-buffers", MFD_CLOEXEC));
  if (!p->fd_) return ErrnoErr("memfd_create(io buffers)", errno);
  if (ftruncate(p->fd_.get(), static_cast<off_t>(p->bytes_)) != 0) {
    return ErrnoErr("ftruncate(io buffers)", errno);
  }
  void* a = mmap(nullptr, p->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd_.get(), 0);
  if (a == MAP_FAILED) return ErrnoErr("mmap(io buffers)", errno);
  p->base_ = static_cast<uint8_t*>(a);
  // On the pool's node, bound before the first touch; then every page populated.
  if (auto r = BindMemoryToNode(p->base_, p->bytes_, numa_node, strict); !r) {
    return Err(r.error().WithContext("I/O buffers"));
  }
  if (madvise(p->base_, p->bytes_, MADV_POPULATE_WRITE) != 0) {
    if (errno != EINVAL) return ErrnoErr("madvise(MADV_POPULATE_WRITE, io buffers)", errno);
    for (uint64_t off = 0; off < p->bytes_; off += 4096) p->base_[off] = 0;  // older kernels
  }
  p->free_.reserve(count);
  for (uint32_t i = count; i-- > 0;) p->free_.push_back(i);
  p->pins_.assign(count, 0);
  p->shares_.assign(count, 0);
  p->released_pinned_.assign(count, false);
  return p;
}

IoBufferPool::~IoBufferPool() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

std::optional<uint32_t> IoBufferPool::Acquire() {
  if (free_.empty()) return std::nullopt;
  uint32_t i = free_.back();
  free_.pop_back();
  return i;
}

void IoBufferPool::Release(uint32_t index) {
  if (shares_[index] > 0) {  // (another owner still holds it)
    --shares_[index];
    return;
  }
  if (pins_[index] > 0) {
    released_pinned_[index] = true;
    return;
  }
  free_.push_back(index);
}

void IoBufferPool::Unpin(uint32_t index) {
  if (pins_[index] == 0 || --pins_[index] > 0 || !released_pinned_[index]) return;
  released_pinned_[index] = false;
  free_.push_back(index);
}

Result<ExtentFile> ExtentFile::Open(const std::string& path, uint64_t bytes, bool allow_buffered) {
  ExtentFile f;
  f.path_ = path;
  bool created = access(path.c_str(), F_OK) != 0;
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_DIRECT, 0640);
  if (fd < 0 && errno == EINVAL) {
    if (!allow_buffered) {
      return Err(StatusCode::kFailedPrecondition,
                 "{}: the file system does not support O_DIRECT (tmpfs?); put tiers on a disk",
                 path);
    }
    fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
    f.direct_ = false;
  }
  if (fd < 0) return ErrnoErr(fmt::format("open({})", path), errno);
  f.fd_ = UniqueFd(fd);
  struct stat st {};
  if (fstat(fd, &st) != 0) return ErrnoErr(fmt::format("fstat({})", path), errno);
  if (static_cast<uint64_t>(st.st_size) < bytes) {
    int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (rc != 0) {
      if (created) unlink(path.c_str());
      Status s = ErrnoStatus(fmt::format("allocate {} for {}", FormatSize(bytes), path), rc);
      return Err(rc == ENOSPC ? Status(StatusCode::kResourceExhausted, s.message()) : s);
    }
  }
  f.size_ = std::max<uint64_t>(bytes, static_cast<uint64_t>(st.st_size));
  return f;
}

}  // namespace goblin::store
