#include "goblin/store/tier_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace goblin::store {
namespace {

constexpr char kMagic[8] = {'G', 'O', 'B', 'T', 'I', 'E', 'R', '\n'};
// Layout (little-endian): magic[8] version u32 reserved u32 id_hi u64 id_lo u64
// created_ns u64 crc32 u32 (over everything before it) pad u32 = 48 bytes.
constexpr size_t kRecordSize = 48;

void Put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
void Put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
uint64_t Get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

uint32_t Crc(const uint8_t* p, size_t n) {
  return static_cast<uint32_t>(crc32(0L, p, static_cast<uInt>(n)));
}

Result<bool> DirIsEmpty(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return ErrnoErr(fmt::format("opendir({})", dir), errno);
  bool empty = true;
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      empty = false;
      break;
    }
  }
  closedir(d);
  return empty;
}

Result<TierIdentity> ReadIdentity(int fd, const std::string& file) {
  uint8_t buf[kRecordSize + 1];
  ssize_t n = pread(fd, buf, sizeof buf, 0);
  if (n < 0) return ErrnoErr(fmt::format("read({})", file), errno);
  if (n != static_cast<ssize_t>(kRecordSize) || std::memcmp(buf, kMagic, 8) != 0 ||
      Get32(buf + 40) != Crc(buf, 40)) {
    return Err(StatusCode::kCorruption,
               "{} is damaged or not a Goblin tier identity; refusing to use this directory", file);
  }
  TierIdentity id;
  id.format_version = Get32(buf + 8);
  id.id_hi = Get64(buf + 16);
  id.id_lo = Get64(buf + 24);
  id.created_unix_ns = Get64(buf + 32);
  if (id.format_version > kTierFormatVersion) {
    return Err(StatusCode::kFailedPrecondition,
               "{} has tier format {}, newer than this goblin-core understands ({})", file,
               id.format_version, kTierFormatVersion);
  }
  return id;
}

}  // namespace

std::string TierIdentity::IdString() const { return fmt::format("{:016x}{:016x}", id_hi, id_lo); }

Result<TierIdentity> PrepareTier(const std::string& dir) {
  if (mkdir(dir.c_str(), 0750) != 0 && errno != EEXIST) {
    return ErrnoErr(fmt::format("mkdir({})", dir), errno);
  }
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return ErrnoErr(fmt::format("stat({})", dir), errno);
  if (!S_ISDIR(st.st_mode)) return Err(StatusCode::kInvalidArgument, "{} is not a directory", dir);
  const std::string file = dir + "/" + kTierIdentityFile;
  if (access(file.c_str(), F_OK) == 0) {
    GOBLIN_ASSIGN_OR_RETURN(TierDir t, TierDir::Open(dir));
    return t.identity();  // already prepared: nothing to do
  }
  GOBLIN_ASSIGN_OR_RETURN(bool empty, DirIsEmpty(dir));
  if (!empty) {
    return Err(StatusCode::kFailedPrecondition,
               "{} is not empty and is not a Goblin tier; refusing to prepare it (choose an empty "
               "directory: Goblin never adopts or erases data it did not write)",
               dir);
  }
  TierIdentity id;
  id.format_version = kTierFormatVersion;
  if (getrandom(&id.id_hi, 8, 0) != 8 || getrandom(&id.id_lo, 8, 0) != 8) {
    return ErrnoErr("getrandom", errno);
  }
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  id.created_unix_ns =
      static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
  uint8_t buf[kRecordSize] = {};
  std::memcpy(buf, kMagic, 8);
  Put32(buf + 8, id.format_version);
  Put64(buf + 16, id.id_hi);
  Put64(buf + 24, id.id_lo);
  Put64(buf + 32, id.created_unix_ns);
  Put32(buf + 40, Crc(buf, 40));
  // Write a temporary file, fsync it, rename it into place, fsync the directory: a crash
  // leaves either no identity or a whole one.
  const std::string tmp = file + ".tmp";
  UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640));
  if (!fd) return ErrnoErr(fmt::format("create({})", tmp), errno);
  if (pwrite(fd.get(), buf, sizeof buf, 0) != static_cast<ssize_t>(sizeof buf) ||
      fsync(fd.get()) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return ErrnoErr(fmt::format("write({})", tmp), err);
  }
  if (rename(tmp.c_str(), file.c_str()) != 0)
    return ErrnoErr(fmt::format("rename({})", file), errno);
  UniqueFd dfd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd) fsync(dfd.get());
  return id;
}

Result<TierDir> TierDir::Open(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return ErrnoErr(fmt::format("tier directory {}", dir), errno);
  if (!S_ISDIR(st.st_mode)) return Err(StatusCode::kInvalidArgument, "{} is not a directory", dir);
  const std::string file = dir + "/" + kTierIdentityFile;
  UniqueFd fd(open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) {
      return Err(StatusCode::kFailedPrecondition,
                 "{} is not a prepared Goblin tier (no {}); prepare it once with: goblin-core "
                 "--prepare {}",
                 dir, kTierIdentityFile, dir);
    }
    return ErrnoErr(fmt::format("open({})", file), errno);
  }
  GOBLIN_ASSIGN_OR_RETURN(TierIdentity id, ReadIdentity(fd.get(), file));
  if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return Err(StatusCode::kUnavailable, "tier {} is in use by another goblin-core", dir);
    }
    return ErrnoErr(fmt::format("flock({})", file), errno);
  }
  TierDir t;
  t.path_ = dir;
  t.identity_ = id;
  t.lock_ = std::move(fd);
  return t;
}

Result<std::optional<uint16_t>> TierShardLayout(const std::string& dir) {
  const std::string file = dir + "/" + kTierShardsFile;
  if (access(file.c_str(), F_OK) == 0) {
    UniqueFd fd(open(file.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return ErrnoErr(fmt::format("open({})", file), errno);
    char buf[32] = {};
    ssize_t n = pread(fd.get(), buf, sizeof buf - 1, 0);
    if (n < 0) return ErrnoErr(fmt::format("read({})", file), errno);
    char* end = nullptr;
    unsigned long v = std::strtoul(buf, &end, 10);
    if (end == buf || v < 2 || v > 4096) {
      return Err(StatusCode::kCorruption, "{}: '{}' is not a shard count", file,
                 std::string(buf, static_cast<size_t>(n)));
    }
    return std::optional<uint16_t>(static_cast<uint16_t>(v));
  }
  DIR* d = opendir(dir.c_str());
  if (d == nullptr && errno == ENOENT) return std::optional<uint16_t>();
  if (d == nullptr) return ErrnoErr(fmt::format("opendir({})", dir), errno);
  bool data = false;
  while (dirent* e = readdir(d)) {
    std::string_view name = e->d_name;
    if (name == "." || name == ".." || name == kTierIdentityFile || name.starts_with("shard-"))
      continue;
    data = true;
  }
  closedir(d);
  if (data) return std::optional<uint16_t>(1);
  return std::optional<uint16_t>();
}

namespace {

Status WrongLayout(const std::string& dir, uint16_t has, uint16_t wants) {
  return Status(StatusCode::kFailedPrecondition,
                fmt::format("tier {} holds a store laid out for {} shard{} and this goblin-core "
                            "runs {}; start it with --cores {} (its objects are kept), or give "
                            "it an empty, prepared tier",
                            dir, has, has == 1 ? "" : "s", wants, has));
}

// Writes dir/name as a whole: a temporary file, fsync, rename, fsync of the directory.
VoidResult WriteDirFile(const std::string& dir, const char* name, const std::string& text) {
  const std::string file = dir + "/" + name, tmp = file + ".tmp";
  UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640));
  if (!fd) return ErrnoErr(fmt::format("create({})", tmp), errno);
  if (pwrite(fd.get(), text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
      fsync(fd.get()) != 0) {
    return ErrnoErr(fmt::format("write({})", tmp), errno);
  }
  if (rename(tmp.c_str(), file.c_str()) != 0)
    return ErrnoErr(fmt::format("rename({})", file), errno);
  UniqueFd dfd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd) fsync(dfd.get());
  return {};
}

// The label's text without its checksum line.
std::string DriveLabelBody(const DriveLabel& l) {
  return fmt::format("goblin-drive 1\nstore {}\ntier {}\ndrive {}\n", l.store_id, l.tier, l.number);
}

}  // namespace

Result<std::vector<std::string>> ParseDriveList(const std::string& list) {
  std::vector<std::string> out;
  if (list.empty()) return out;
  for (size_t from = 0;;) {
    const size_t comma = list.find(',', from);
    std::string dir =
        list.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    if (dir.empty()) {
      return Err(StatusCode::kInvalidArgument, "'{}': an empty drive directory in the list", list);
    }
    if (std::find(out.begin(), out.end(), dir) != out.end()) {
      return Err(StatusCode::kInvalidArgument, "'{}' lists {} twice", list, dir);
    }
    out.push_back(std::move(dir));
    if (comma == std::string::npos) return out;
    from = comma + 1;
  }
}

Result<std::optional<DriveLabel>> ReadDriveLabel(const std::string& dir) {
  const std::string file = dir + "/" + kDriveLabelFile;
  UniqueFd fd(open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return std::optional<DriveLabel>();
    return ErrnoErr(fmt::format("open({})", file), errno);
  }
  char buf[256] = {};
  ssize_t n = pread(fd.get(), buf, sizeof buf - 1, 0);
  if (n < 0) return ErrnoErr(fmt::format("read({})", file), errno);
  char store[33] = {};
  unsigned tier = 0, number = 0, crc = 0;
  DriveLabel l;
  if (std::sscanf(buf, "goblin-drive 1\nstore %32[0-9a-f]\ntier %u\ndrive %u\ncrc %x", store, &tier,
                  &number, &crc) != 4 ||
      std::strlen(store) != 32 || tier > 1 || number >= 65536) {
    return Err(StatusCode::kCorruption, "{} is damaged", file);
  }
  l.store_id = store;
  l.tier = static_cast<uint16_t>(tier);
  l.number = static_cast<uint16_t>(number);
  const std::string body = DriveLabelBody(l);
  if (Crc(reinterpret_cast<const uint8_t*>(body.data()), body.size()) != crc) {
    return Err(StatusCode::kCorruption, "{} is damaged (checksum)", file);
  }
  return std::optional<DriveLabel>(l);
}

VoidResult WriteDriveLabel(const std::string& dir, const DriveLabel& label) {
  const std::string body = DriveLabelBody(label);
  return WriteDirFile(dir, kDriveLabelFile,
                      fmt::format("{}crc {:08x}\n", body,
                                  Crc(reinterpret_cast<const uint8_t*>(body.data()), body.size())));
}

Result<ShardedTier> OpenShardedTier(const std::string& dir, uint16_t shards) {
  if (shards == 0) return Err(StatusCode::kInvalidArgument, "no shards");
  ShardedTier out;
  if (shards == 1) {
    // The store opens (and locks) the tier itself; only check it is not a sharded one.
    struct stat st {};
    if (stat((dir + "/" + kTierIdentityFile).c_str(), &st) == 0) {
      GOBLIN_ASSIGN_OR_RETURN(std::optional<uint16_t> has, TierShardLayout(dir));
      if (has && *has != 1) return Err(WrongLayout(dir, *has, 1));
    }
    out.shard_dirs = {dir};
    return out;
  }
  GOBLIN_ASSIGN_OR_RETURN(TierDir parent, TierDir::Open(dir));
  GOBLIN_ASSIGN_OR_RETURN(std::optional<uint16_t> has, TierShardLayout(dir));
  if (has && *has != shards) return Err(WrongLayout(dir, *has, shards));
  for (uint16_t i = 0; i < shards; ++i) {
    std::string sub = fmt::format("{}/shard-{}", dir, i);
    GOBLIN_RETURN_IF_ERROR_CTX(PrepareTier(sub), fmt::format("shard {} of tier {}", i, dir));
    out.shard_dirs.push_back(std::move(sub));
  }
  if (!has) {  // first start: record the layout (after the shard directories exist)
    GOBLIN_RETURN_IF_ERROR(WriteDirFile(dir, kTierShardsFile, fmt::format("{}\n", shards)));
  }
  out.parent = std::move(parent);
  return out;
}

}  // namespace goblin::store
