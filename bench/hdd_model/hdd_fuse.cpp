// hdd_fuse: a directory served through a modelled spinning disk (bench/hdd_model/hdd_model.h),
// for benchmarks that compare servers "on the same HDD" on a machine without one (issue #23).
// A FUSE file system passing every call through to BACKING (keep it on tmpfs: the model
// supplies the disk's time, the backing store only holds the bytes); every read and write
// waits for one actuator, which serves the queued request nearest the head first (as a
// disk's command queue does; one waiting 200 ms goes next) and takes the model's seek,
// rotation and transfer time. Page cache and O_DIRECT behave as the kernel gives them to
// any FUSE file system: a buffered reader's cache hits never reach the disk.
//   hdd_fuse [--rpm=N] [--mb-s=N] [--seek-min-ms=X] [--seek-max-ms=X] [--stats=FILE]
//            [--trace=FILE] [--faults=FILE] BACKING MOUNTPOINT [-f] [FUSE options]
// --stats: a line of counters (requests, seeks, bytes, busy time) rewritten at most once a
// second while busy, within 100 ms of going idle and at unmount. --trace: a line per access
// as served (start us, r/w, file inode, offset, length, seeks, service us). --faults: calls
// that fail (Faults below), for tests of what a server does with a failing disk. Runs until
// unmounted (fusermount3 -u MOUNTPOINT) or signalled.
#define FUSE_USE_VERSION 31
#include <dirent.h>
#include <fcntl.h>
#include <fuse.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench/hdd_model/hdd_model.h"

namespace {

using goblin::bench::HddModel;
using goblin::bench::HddParams;

uint64_t Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

// The actuator: FUSE's threads queue their accesses, one thread serves them in turn.
class Disk {
 public:
  Disk(const HddParams& p, std::string stats_path, const std::string& trace_path)
      : model_(p), stats_path_(std::move(stats_path)), started_(Now()) {
    if (!trace_path.empty()) trace_ = std::fopen(trace_path.c_str(), "w");
  }
  ~Disk() {
    if (trace_ != nullptr) std::fclose(trace_);
  }

  void Start() {
    thread_ = std::thread([this] { Serve(); });
  }
  void Stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    work_.notify_all();
    if (thread_.joinable()) thread_.join();
    WriteStats();
  }

  // Blocks until the disk has spent the access's time.
  void Access(uint64_t file, uint64_t offset, uint64_t len, bool write) {
    if (len == 0) return;
    Request r{file, offset, len, write, Now(), false};
    std::unique_lock lock(mu_);
    queue_.push_back(&r);
    work_.notify_one();
    done_.wait(lock, [&] { return r.done || stopping_; });
  }

  void Forget(uint64_t file) {
    std::lock_guard lock(mu_);
    model_.Forget(file);
  }
  void Allocate(uint64_t file, uint64_t offset, uint64_t len) {  // (fallocate: laid out now)
    std::lock_guard lock(mu_);
    const uint64_t unit = model_.params().unit_bytes;
    for (uint64_t at = offset - offset % unit; at < offset + len; at += unit)
      model_.Place(file, at);
  }

 private:
  struct Request {
    uint64_t file, offset, len;
    bool write;
    uint64_t since;
    bool done;
  };
  static constexpr uint64_t kAgedNs = 200'000'000;

  Request* Next() {  // (mu_ held, queue_ not empty)
    size_t best = 0;
    uint64_t best_cost = UINT64_MAX;
    const uint64_t now = Now();
    for (size_t i = 0; i < queue_.size(); ++i) {
      if (now - queue_[i]->since >= kAgedNs) {  // (the oldest of the aged: they are in order)
        best = i;
        break;
      }
      uint64_t cost = model_.PositioningNanos(queue_[i]->file, queue_[i]->offset);
      if (cost < best_cost) best_cost = cost, best = i;
    }
    Request* r = queue_[best];
    queue_.erase(queue_.begin() + static_cast<long>(best));
    return r;
  }

  void Serve() {
    prctl(PR_SET_TIMERSLACK, 1UL);
    std::unique_lock lock(mu_);
    for (;;) {
      // (counters a benchmark reads after its run: written within 100 ms of going idle)
      if (!work_.wait_for(lock, std::chrono::milliseconds(100),
                          [&] { return stopping_ || !queue_.empty(); })) {
        if (stats_dirty_) WriteStats();
        continue;
      }
      if (stopping_) break;
      Request* r = Next();
      const uint64_t start = Now();
      const goblin::bench::HddAccess a = model_.Access(r->file, r->offset, r->len);
      ++requests_;
      seeks_ += a.seeks;
      (r->write ? written_ : read_) += r->len;
      busy_ns_ += a.nanos;
      if (trace_ != nullptr) {
        std::fprintf(trace_, "%llu %c %llu %llu %llu %u %llu\n",
                     static_cast<unsigned long long>((start - started_) / 1000),
                     r->write ? 'w' : 'r', static_cast<unsigned long long>(r->file),
                     static_cast<unsigned long long>(r->offset),
                     static_cast<unsigned long long>(r->len), a.seeks,
                     static_cast<unsigned long long>(a.nanos / 1000));
      }
      lock.unlock();
      const uint64_t until = start + a.nanos;
      timespec ts{static_cast<time_t>(until / 1'000'000'000),
                  static_cast<long>(until % 1'000'000'000)};
      while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
      }
      stats_dirty_ = true;
      if (Now() - stats_written_ >= 1'000'000'000) WriteStats();
      lock.lock();
      r->done = true;
      done_.notify_all();
    }
    for (Request* r : queue_) r->done = true;
    done_.notify_all();
  }

  void WriteStats() {
    stats_written_ = Now();
    stats_dirty_ = false;
    if (stats_path_.empty()) return;
    const std::string tmp = stats_path_ + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) return;
    std::fprintf(f,
                 "requests %llu seeks %llu read_bytes %llu written_bytes %llu busy_ms %llu "
                 "elapsed_ms %llu\n",
                 static_cast<unsigned long long>(requests_),
                 static_cast<unsigned long long>(seeks_), static_cast<unsigned long long>(read_),
                 static_cast<unsigned long long>(written_),
                 static_cast<unsigned long long>(busy_ns_ / 1'000'000),
                 static_cast<unsigned long long>((Now() - started_) / 1'000'000));
    std::fclose(f);
    std::rename(tmp.c_str(), stats_path_.c_str());
  }

  HddModel model_;
  std::string stats_path_;
  uint64_t started_;
  std::mutex mu_;
  std::condition_variable work_, done_;
  std::deque<Request*> queue_;
  bool stopping_ = false;
  std::thread thread_;
  // (written by the disk thread; read by Stop after it is joined)
  uint64_t requests_ = 0, seeks_ = 0, read_ = 0, written_ = 0, busy_ns_ = 0;
  uint64_t stats_written_ = 0;
  bool stats_dirty_ = false;
  FILE* trace_ = nullptr;  // (the disk thread's)
};

// Injected faults (--faults=FILE, for tests): FILE's lines, re-read when it changes, say
// which calls fail and how: "read EIO extent-" fails every read of a path containing
// "extent-" with EIO; "write ENOSPC *" every write. An empty or missing FILE: no faults.
class Faults {
 public:
  explicit Faults(std::string path) : path_(std::move(path)) {}

  // 0, or the errno the call on `path` fails with.
  int Check(std::string_view op, std::string_view path) {
    if (path_.empty()) return 0;
    std::lock_guard lock(mu_);
    Reload();
    for (const Rule& r : rules_) {
      if (r.op == op && (r.match == "*" || path.find(r.match) != std::string_view::npos)) {
        return r.error;
      }
    }
    return 0;
  }

 private:
  struct Rule {
    std::string op, match;
    int error;
  };
  void Reload() {
    struct stat st {};
    const bool exists = stat(path_.c_str(), &st) == 0;
    const std::pair<int64_t, int64_t> stamp{
        exists ? st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec : -1,
        exists ? st.st_size : -1};
    if (stamp == stamp_) return;
    stamp_ = stamp;
    rules_.clear();
    FILE* f = exists ? std::fopen(path_.c_str(), "r") : nullptr;
    if (f == nullptr) return;
    char op[16], err[16], match[256];
    while (std::fscanf(f, "%15s %15s %255s", op, err, match) == 3) {
      const std::string_view e = err;
      const int code = e == "EIO" ? EIO : e == "ENOSPC" ? ENOSPC : e == "EROFS" ? EROFS : 0;
      if (code != 0) rules_.push_back({op, match, code});
    }
    std::fclose(f);
  }
  std::string path_;
  std::mutex mu_;
  std::pair<int64_t, int64_t> stamp_{-2, -2};
  std::vector<Rule> rules_;
};

std::string g_backing;
Disk* g_disk = nullptr;
Faults* g_faults = nullptr;

std::string Full(const char* path) { return g_backing + path; }
int Errno(int r) { return r < 0 ? -errno : r; }

uint64_t InodeOf(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

void* Init(fuse_conn_info* conn, fuse_config* cfg) {
  cfg->use_ino = 1;
  conn->max_write = 1 << 20;  // (also lets a direct read go in 1 MiB requests)
  g_disk->Start();
  return nullptr;
}
void Destroy(void*) { g_disk->Stop(); }

int GetAttr(const char* path, struct stat* st, fuse_file_info* fi) {
  if (fi != nullptr) return Errno(fstat(static_cast<int>(fi->fh), st));
  return Errno(lstat(Full(path).c_str(), st));
}
int Access(const char* path, int mask) { return Errno(access(Full(path).c_str(), mask)); }
int ReadDir(const char* path, void* buf, fuse_fill_dir_t fill, off_t, fuse_file_info*,
            fuse_readdir_flags) {
  DIR* d = opendir(Full(path).c_str());
  if (d == nullptr) return -errno;
  while (dirent* e = readdir(d))
    fill(buf, e->d_name, nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  closedir(d);
  return 0;
}
int MkDir(const char* path, mode_t mode) { return Errno(mkdir(Full(path).c_str(), mode)); }
int RmDir(const char* path) { return Errno(rmdir(Full(path).c_str())); }
void ForgetPath(const std::string& full) {
  struct stat st;
  if (lstat(full.c_str(), &st) == 0 && st.st_nlink <= 1) g_disk->Forget(st.st_ino);
}
int Unlink(const char* path) {
  ForgetPath(Full(path));
  return Errno(unlink(Full(path).c_str()));
}
int Rename(const char* from, const char* to, unsigned int flags) {
  if (flags != 0) return -EINVAL;
  ForgetPath(Full(to));
  return Errno(rename(Full(from).c_str(), Full(to).c_str()));
}
int Truncate(const char* path, off_t size, fuse_file_info* fi) {
  if (fi != nullptr) return Errno(ftruncate(static_cast<int>(fi->fh), size));
  return Errno(truncate(Full(path).c_str(), size));
}
int Chmod(const char* path, mode_t mode, fuse_file_info*) {
  return Errno(chmod(Full(path).c_str(), mode));
}
int Chown(const char* path, uid_t uid, gid_t gid, fuse_file_info*) {
  return Errno(lchown(Full(path).c_str(), uid, gid));
}
int Utimens(const char* path, const timespec tv[2], fuse_file_info*) {
  return Errno(utimensat(AT_FDCWD, Full(path).c_str(), tv, AT_SYMLINK_NOFOLLOW));
}
// (the backing store takes no O_DIRECT: tmpfs; the kernel already sends direct I/O uncached)
int OpenFlags(int flags) { return flags & ~(O_DIRECT | O_NOATIME); }
int Create(const char* path, mode_t mode, fuse_file_info* fi) {
  int fd = open(Full(path).c_str(), OpenFlags(fi->flags) | O_CREAT, mode);
  if (fd < 0) return -errno;
  fi->fh = static_cast<uint64_t>(fd);
  return 0;
}
int Open(const char* path, fuse_file_info* fi) {
  int fd = open(Full(path).c_str(), OpenFlags(fi->flags));
  if (fd < 0) return -errno;
  fi->fh = static_cast<uint64_t>(fd);
  return 0;
}
int Read(const char* path, char* buf, size_t size, off_t off, fuse_file_info* fi) {
  if (int e = g_faults->Check("read", path); e != 0) return -e;
  const int fd = static_cast<int>(fi->fh);
  struct stat st;
  if (fstat(fd, &st) != 0) return -errno;
  const uint64_t end =
      std::min<uint64_t>(static_cast<uint64_t>(st.st_size), static_cast<uint64_t>(off) + size);
  if (end > static_cast<uint64_t>(off)) {  // (nothing past the end reaches the platter)
    g_disk->Access(st.st_ino, static_cast<uint64_t>(off), end - static_cast<uint64_t>(off), false);
  }
  return Errno(static_cast<int>(pread(fd, buf, size, off)));
}
int Write(const char* path, const char* buf, size_t size, off_t off, fuse_file_info* fi) {
  if (int e = g_faults->Check("write", path); e != 0) return -e;
  const int fd = static_cast<int>(fi->fh);
  g_disk->Access(InodeOf(fd), static_cast<uint64_t>(off), size, true);
  return Errno(static_cast<int>(pwrite(fd, buf, size, off)));
}
int StatFs(const char*, struct statvfs* st) { return Errno(statvfs(g_backing.c_str(), st)); }
int Flush(const char*, fuse_file_info*) { return 0; }
int Release(const char*, fuse_file_info* fi) { return Errno(close(static_cast<int>(fi->fh))); }
int Fsync(const char*, int, fuse_file_info*) { return 0; }  // (the model has no write cache)
int Fallocate(const char*, int mode, off_t off, off_t len, fuse_file_info* fi) {
  const int fd = static_cast<int>(fi->fh);
  if (fallocate(fd, mode, off, len) != 0) return -errno;
  g_disk->Allocate(InodeOf(fd), static_cast<uint64_t>(off), static_cast<uint64_t>(len));
  return 0;
}

bool TakeOption(std::string_view arg, std::string_view name, std::string* value) {
  if (!arg.starts_with(name) || arg.size() <= name.size() || arg[name.size()] != '=') return false;
  *value = std::string(arg.substr(name.size() + 1));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  HddParams p;
  std::string stats, trace, faults, v;
  std::vector<char*> rest{argv[0]};
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (TakeOption(a, "--rpm", &v)) {
      p.rpm = std::atof(v.c_str());
    } else if (TakeOption(a, "--mb-s", &v)) {
      p.media_mb_s = std::atof(v.c_str());
    } else if (TakeOption(a, "--seek-min-ms", &v)) {
      p.seek_min_ms = std::atof(v.c_str());
    } else if (TakeOption(a, "--seek-max-ms", &v)) {
      p.seek_max_ms = std::atof(v.c_str());
    } else if (TakeOption(a, "--stats", &v)) {
      stats = v;
    } else if (TakeOption(a, "--trace", &v)) {
      trace = v;
    } else if (TakeOption(a, "--faults", &v)) {
      faults = v;
    } else if (a.starts_with("-")) {
      rest.push_back(argv[i]);
      if ((a == "-o") && i + 1 < argc) rest.push_back(argv[++i]);
    } else if (g_backing.empty()) {
      g_backing = a;
    } else {
      rest.push_back(argv[i]);  // the mount point
    }
  }
  if (g_backing.empty() || rest.size() < 2 || p.rpm <= 0 || p.media_mb_s <= 0) {
    std::fprintf(stderr,
                 "usage: hdd_fuse [--rpm=N] [--mb-s=N] [--seek-min-ms=X] [--seek-max-ms=X] "
                 "[--stats=FILE] [--trace=FILE] [--faults=FILE] BACKING MOUNTPOINT [-f] [FUSE "
                 "options]\n");
    return 2;
  }
  while (g_backing.size() > 1 && g_backing.back() == '/') g_backing.pop_back();
  Disk disk(p, stats, trace);
  g_disk = &disk;
  Faults injected(faults);
  g_faults = &injected;
  fuse_operations ops{};
  ops.init = Init;
  ops.destroy = Destroy;
  ops.getattr = GetAttr;
  ops.access = Access;
  ops.readdir = ReadDir;
  ops.mkdir = MkDir;
  ops.rmdir = RmDir;
  ops.unlink = Unlink;
  ops.rename = Rename;
  ops.truncate = Truncate;
  ops.chmod = Chmod;
  ops.chown = Chown;
  ops.utimens = Utimens;
  ops.create = Create;
  ops.open = Open;
  ops.read = Read;
  ops.write = Write;
  ops.statfs = StatFs;
  ops.flush = Flush;
  ops.release = Release;
  ops.fsync = Fsync;
  ops.fallocate = Fallocate;
  return fuse_main(static_cast<int>(rest.size()), rest.data(), &ops, nullptr);
}
