#include "goblin/store/journal.h"

#include <fcntl.h>
#include <libgen.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace goblin::store {
namespace {

constexpr char kMagic[8] = {'G', 'O', 'B', 'J', 'R', 'N', 'L', '1'};
constexpr size_t kFileHeader = 32;    // magic[8] version u32 pad u32 base_lsn u64 hash u64
constexpr size_t kRecordHeader = 24;  // len u32 type u16 flags u16 lsn u64 hash u64
constexpr uint32_t kVersion = 1;
int64_t g_crash_after = -1;

template <typename T>
void Put(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
}
template <typename T>
T Get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The payload hashed with the header's hash as seed: covers both, no hashing state to keep.
uint64_t RecordHash(const uint8_t* header16, std::span<const uint8_t> payload) {
  return XXH3_64bits_withSeed(payload.data(), payload.size(), XXH3_64bits(header16, 16));
}

void EncodeFileHeader(uint8_t* h, uint64_t base_lsn) {
  std::memset(h, 0, kFileHeader);
  std::memcpy(h, kMagic, 8);
  Put<uint32_t>(h + 8, kVersion);
  Put<uint64_t>(h + 16, base_lsn);
  Put<uint64_t>(h + 24, XXH3_64bits(h, 24));
}

VoidResult WriteAll(int fd, const uint8_t* p, size_t n, uint64_t off, const std::string& what) {
  while (n > 0) {
    ssize_t w = pwrite(fd, p, n, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoErr(fmt::format("write({})", what), errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
    off += static_cast<uint64_t>(w);
  }
  return {};
}

VoidResult FsyncDir(const std::string& path) {
  std::string copy = path;
  std::string dir = dirname(copy.data());
  UniqueFd d(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d) return ErrnoErr(fmt::format("open({})", dir), errno);
  if (fsync(d.get()) != 0) return ErrnoErr(fmt::format("fsync({})", dir), errno);
  return {};
}

// Creates `path` holding just a header for `base_lsn`, durably and atomically.
VoidResult CreateEmpty(const std::string& path, uint64_t base_lsn) {
  std::string tmp = path + ".new";
  UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640));
  if (!fd) return ErrnoErr(fmt::format("create({})", tmp), errno);
  uint8_t h[kFileHeader];
  EncodeFileHeader(h, base_lsn);
  GOBLIN_RETURN_IF_ERROR(WriteAll(fd.get(), h, sizeof h, 0, tmp));
  if (fsync(fd.get()) != 0) return ErrnoErr(fmt::format("fsync({})", tmp), errno);
  if (rename(tmp.c_str(), path.c_str()) != 0)
    return ErrnoErr(fmt::format("rename({})", path), errno);
  return FsyncDir(path);
}

}  // namespace

void SetJournalCrashAfterBytesForTest(int64_t bytes) { g_crash_after = bytes; }

Result<Journal> Journal::Open(const std::string& path, uint64_t base_lsn_if_new) {
  if (access(path.c_str(), F_OK) != 0) {
    if (errno != ENOENT) return ErrnoErr(fmt::format("access({})", path), errno);
    GOBLIN_RETURN_IF_ERROR(CreateEmpty(path, base_lsn_if_new));
  }
  Journal j;
  j.path_ = path;
  j.fd_ = UniqueFd(open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!j.fd_) return ErrnoErr(fmt::format("open({})", path), errno);
  uint8_t h[kFileHeader];
  ssize_t n = pread(j.fd_.get(), h, sizeof h, 0);
  if (n != static_cast<ssize_t>(kFileHeader) || std::memcmp(h, kMagic, 8) != 0 ||
      Get<uint64_t>(h + 24) != XXH3_64bits(h, 24)) {
    return Err(StatusCode::kCorruption, "{} is not a Goblin journal or its header is damaged",
               path);
  }
  if (Get<uint32_t>(h + 8) != kVersion) {
    return Err(StatusCode::kFailedPrecondition, "{}: journal version {} is not supported", path,
               Get<uint32_t>(h + 8));
  }
  j.base_lsn_ = Get<uint64_t>(h + 16);
  j.next_lsn_ = j.base_lsn_;
  j.file_end_ = kFileHeader;
  return j;
}

Result<ReplayStats> Journal::Replay(
    const std::function<void(uint64_t, uint16_t, std::span<const uint8_t>)>& fn) {
  struct stat st {};
  if (fstat(fd_.get(), &st) != 0) return ErrnoErr(fmt::format("fstat({})", path_), errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  ReplayStats stats;
  uint64_t pos = kFileHeader;
  uint64_t lsn = base_lsn_;
  std::vector<uint8_t> buf;
  while (pos + kRecordHeader <= size) {
    uint8_t h[kRecordHeader];
    if (pread(fd_.get(), h, sizeof h, static_cast<off_t>(pos)) != static_cast<ssize_t>(sizeof h)) {
      break;
    }
    uint32_t len = Get<uint32_t>(h);
    if (len > kJournalMaxPayload || Get<uint64_t>(h + 8) != lsn ||
        pos + kRecordHeader + len > size) {
      break;
    }
    buf.resize(len);
    if (len > 0 && pread(fd_.get(), buf.data(), len, static_cast<off_t>(pos + kRecordHeader)) !=
                       static_cast<ssize_t>(len)) {
      break;
    }
    if (RecordHash(h, buf) != Get<uint64_t>(h + 16)) break;
    fn(lsn, Get<uint16_t>(h + 4), buf);
    ++stats.records;
    ++lsn;
    pos += kRecordHeader + len;
  }
  stats.next_lsn = lsn;
  stats.discarded_bytes = size > pos ? size - pos : 0;
  if (stats.discarded_bytes > 0) {
    // Cut the torn tail so the next record follows the last good one.
    if (ftruncate(fd_.get(), static_cast<off_t>(pos)) != 0 || fdatasync(fd_.get()) != 0) {
      return ErrnoErr(fmt::format("truncate({})", path_), errno);
    }
  }
  next_lsn_ = lsn;
  durable_lsn_ = lsn - 1;
  file_end_ = pos;
  replayed_ = true;
  return stats;
}

Result<uint64_t> Journal::Append(uint16_t type, std::span<const uint8_t> payload) {
  if (!broken_.ok()) return Err(broken_);
  if (!replayed_) return Err(StatusCode::kFailedPrecondition, "{}: replay before appending", path_);
  if (payload.size() > kJournalMaxPayload) {
    return Err(StatusCode::kInvalidArgument, "journal record of {} bytes is over the limit",
               payload.size());
  }
  uint8_t h[kRecordHeader];
  Put<uint32_t>(h, static_cast<uint32_t>(payload.size()));
  Put<uint16_t>(h + 4, type);
  Put<uint16_t>(h + 6, 0);
  Put<uint64_t>(h + 8, next_lsn_);
  Put<uint64_t>(h + 16, RecordHash(h, payload));
  pending_.insert(pending_.end(), h, h + sizeof h);
  pending_.insert(pending_.end(), payload.begin(), payload.end());
  if (marked_) {
    since_mark_.insert(since_mark_.end(), h, h + sizeof h);
    since_mark_.insert(since_mark_.end(), payload.begin(), payload.end());
  }
  return next_lsn_++;
}

Status Journal::Fail(Status s) {
  // After a failed write nobody knows what reached the disk: fail-stop. Replay after a
  // restart decides (whole records survive, a torn one is cut).
  broken_ =
      Status(s.code(), fmt::format("{} (the journal stops here; restart to recover)", s.message()));
  return broken_;
}

namespace {
// Writes `bytes` at `offset` of `fd` and fdatasyncs (honouring the crash-injection hook).
Status WriteAndSync(int fd, const std::vector<uint8_t>& bytes, uint64_t offset,
                    const std::string& path, int64_t crash_after) {
  size_t n = bytes.size();
  if (crash_after >= 0) {
    size_t cut = std::min(n, static_cast<size_t>(crash_after));
    (void)WriteAll(fd, bytes.data(), cut, offset, path);
    fdatasync(fd);
    return Status(StatusCode::kAborted, fmt::format("injected crash after {} of {} bytes", cut, n));
  }
  if (auto r = WriteAll(fd, bytes.data(), n, offset, path); !r) return r.error();
  if (fdatasync(fd) != 0) return ErrnoStatus(fmt::format("fdatasync({})", path), errno);
  return Status();
}
}  // namespace

VoidResult Journal::Sync() {
  if (!broken_.ok()) return Err(broken_);
  if (job_in_flight())
    return Err(StatusCode::kFailedPrecondition, "{}: a sync job is in flight", path_);
  if (pending_.empty()) return {};
  if (Status st = WriteAndSync(fd_.get(), pending_, file_end_, path_, g_crash_after); !st.ok())
    return Err(Fail(st));
  file_end_ += pending_.size();
  pending_.clear();
  durable_lsn_ = next_lsn_ - 1;
  return {};
}

std::function<Status()> Journal::SyncJob() {
  if (!broken_.ok() || pending_.empty() || job_in_flight()) return {};
  auto bytes = std::make_shared<std::vector<uint8_t>>(std::move(pending_));
  pending_.clear();
  sync_in_flight_ = true;
  inflight_bytes_ = bytes->size();
  inflight_last_lsn_ = next_lsn_ - 1;
  int fd = fd_.get();
  uint64_t offset = file_end_;
  int64_t crash = g_crash_after;
  return [fd, offset, bytes, path = path_, crash]() {
    return WriteAndSync(fd, *bytes, offset, path, crash);
  };
}

VoidResult Journal::FinishSync(const Status& job_result) {
  sync_in_flight_ = false;
  if (!job_result.ok()) return Err(Fail(job_result));
  file_end_ += inflight_bytes_;
  durable_lsn_ = inflight_last_lsn_;
  return {};
}

void Journal::Mark(uint64_t checkpoint_lsn) {
  marked_ = true;
  mark_lsn_ = checkpoint_lsn;
  since_mark_.clear();
}

void Journal::Unmark() {
  marked_ = false;
  since_mark_.clear();
  since_mark_.shrink_to_fit();
}

std::function<Status()> Journal::RestartJob() {
  if (!broken_.ok() || !marked_ || job_in_flight()) return {};
  restart_in_flight_ = true;
  inflight_last_lsn_ = next_lsn_ - 1;
  // What the new journal holds: the header, then every record after the checkpoint. Records
  // still pending are in it; they leave pending_ when the job succeeds.
  auto bytes = std::make_shared<std::vector<uint8_t>>(kFileHeader + since_mark_.size());
  EncodeFileHeader(bytes->data(), mark_lsn_ + 1);
  std::copy(since_mark_.begin(), since_mark_.end(), bytes->begin() + kFileHeader);
  restart_pending_ = pending_.size();  // (the pending prefix the new file carries)
  restart_len_ = since_mark_.size();
  restart_fd_ = std::make_shared<int>(-1);
  return [bytes, path = path_, out = restart_fd_]() -> Status {
    std::string tmp = path + ".new";
    UniqueFd fd(open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0640));
    if (!fd) return ErrnoStatus(fmt::format("create({})", tmp), errno);
    if (auto r = WriteAll(fd.get(), bytes->data(), bytes->size(), 0, tmp); !r) return r.error();
    if (fsync(fd.get()) != 0) return ErrnoStatus(fmt::format("fsync({})", tmp), errno);
    if (rename(tmp.c_str(), path.c_str()) != 0)
      return ErrnoStatus(fmt::format("rename({})", path), errno);
    if (auto r = FsyncDir(path); !r) return r.error();
    *out = fd.Release();
    return Status();
  };
}

VoidResult Journal::FinishRestart(const Status& job_result) {
  restart_in_flight_ = false;
  int fd = restart_fd_ ? *restart_fd_ : -1;
  restart_fd_.reset();
  if (!job_result.ok()) {
    if (fd >= 0) close(fd);
    return Err(Fail(job_result));
  }
  fd_ = UniqueFd(fd);
  base_lsn_ = mark_lsn_ + 1;
  file_end_ = kFileHeader + restart_len_;
  // Records appended while the job ran are still pending (and not in the new file).
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(restart_pending_));
  durable_lsn_ = inflight_last_lsn_;
  Unmark();
  return {};
}

VoidResult Journal::Restart(uint64_t base_lsn) {
  GOBLIN_RETURN_IF_ERROR(Sync());
  GOBLIN_RETURN_IF_ERROR(CreateEmpty(path_, base_lsn));
  UniqueFd fd(open(path_.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd) return ErrnoErr(fmt::format("open({})", path_), errno);
  fd_ = std::move(fd);
  base_lsn_ = next_lsn_ = base_lsn;
  durable_lsn_ = base_lsn - 1;
  file_end_ = kFileHeader;
  replayed_ = true;
  Unmark();
  return {};
}

}  // namespace goblin::store
