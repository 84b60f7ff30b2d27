#include "preloader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "goblin/client/connection.h"
#include "goblin/common/clock.h"
#include "goblin/common/fd.h"
#include "goblin/common/log.h"
#include "goblin/common/units.h"

namespace goblin::core {
namespace {

constexpr std::string_view kLog = "preload";
namespace fs = std::filesystem;

// Characters an HTTP client leaves as they are in a path (RFC 3986 pchar and "/").
bool PathChar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("-._~!$&'()*+,;=:@/").find(static_cast<char>(c)) !=
             std::string_view::npos;
}

std::string_view ContentTypeFor(std::string_view path) {
  const size_t dot = path.rfind('.');
  const size_t slash = path.rfind('/');
  if (dot == std::string_view::npos || (slash != std::string_view::npos && dot < slash)) {
    return "application/octet-stream";
  }
  std::string ext(path.substr(dot + 1));
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static constexpr std::pair<std::string_view, std::string_view> kTypes[] = {
      {"html", "text/html"},
      {"htm", "text/html"},
      {"css", "text/css"},
      {"js", "application/javascript"},
      {"mjs", "application/javascript"},
      {"json", "application/json"},
      {"txt", "text/plain"},
      {"xml", "text/xml"},
      {"csv", "text/csv"},
      {"md", "text/markdown"},
      {"png", "image/png"},
      {"jpg", "image/jpeg"},
      {"jpeg", "image/jpeg"},
      {"gif", "image/gif"},
      {"webp", "image/webp"},
      {"avif", "image/avif"},
      {"svg", "image/svg+xml"},
      {"ico", "image/x-icon"},
      {"woff", "font/woff"},
      {"woff2", "font/woff2"},
      {"ttf", "font/ttf"},
      {"otf", "font/otf"},
      {"mp4", "video/mp4"},
      {"m4s", "video/iso.segment"},
      {"webm", "video/webm"},
      {"ts", "video/mp2t"},
      {"m3u8", "application/vnd.apple.mpegurl"},
      {"mpd", "application/dash+xml"},
      {"mp3", "audio/mpeg"},
      {"ogg", "audio/ogg"},
      {"wav", "audio/wav"},
      {"pdf", "application/pdf"},
      {"zip", "application/zip"},
      {"gz", "application/gzip"},
      {"tar", "application/x-tar"},
      {"zst", "application/zstd"},
      {"wasm", "application/wasm"},
      {"bin", "application/octet-stream"},
      {"iso", "application/octet-stream"},
      {"img", "application/octet-stream"},
  };
  for (const auto& [e, type] : kTypes) {
    if (e == ext) return type;
  }
  return "application/octet-stream";
}

std::string HttpDateOf(int64_t unix_s) {
  time_t t = static_cast<time_t>(unix_s);
  tm g{};
  gmtime_r(&t, &g);
  char buf[64];
  size_t n = strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &g);
  return std::string(buf, n);
}

std::string EtagOf(uint64_t size, int64_t mtime_s) {
  return fmt::format("\"{:x}-{:x}\"", static_cast<uint64_t>(mtime_s), size);
}

}  // namespace

std::string Preloader::KeyFor(const std::string& prefix, const std::string& relative_path) {
  std::string key = prefix;
  key.push_back('/');
  for (unsigned char c : relative_path) {
    if (PathChar(c)) {
      key.push_back(static_cast<char>(c));
    } else {
      key += fmt::format("%{:02X}", c);
    }
  }
  return key;
}

std::string Preloader::HttpMetadata(const std::string& path, uint64_t size, int64_t mtime_s) {
  return fmt::format("Content-Type: {}\r\nLast-Modified: {}\r\nETag: {}\r\n", ContentTypeFor(path),
                     HttpDateOf(mtime_s), EtagOf(size, mtime_s));
}

Result<std::unique_ptr<Preloader>> Preloader::Create(PreloadOptions options) {
  struct stat st {};
  if (stat(options.dir.c_str(), &st) != 0) {
    return ErrnoErr(fmt::format("--source {}", options.dir), errno);
  }
  if (!S_ISDIR(st.st_mode)) {
    return Err(StatusCode::kInvalidArgument, "--source {} is not a directory", options.dir);
  }
  options.threads = std::clamp<uint32_t>(options.threads, 1, 64);
  return std::unique_ptr<Preloader>(new Preloader(std::move(options)));
}

void Preloader::Start() {
  started_ns_ = MonotonicNanos();
  runner_ = std::thread([this] { Run(); });
}

Preloader::~Preloader() {
  stop_.store(true);
  if (runner_.joinable()) runner_.join();
}

void Preloader::Run() {
  // The tree, in path order (regular files, symlinks to them followed; directories are not
  // followed through symlinks, so a loop cannot trap the walk).
  std::error_code ec;
  // (Keys are the paths as found under DIR, not where symlinks lead: lexically relative.)
  fs::path base = fs::path(options_.dir).lexically_normal();
  if (!base.has_filename()) base = base.parent_path();  // ("src/" -> "src")
  fs::recursive_directory_iterator it(base, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator() && !stop_.load(); it.increment(ec)) {
    std::error_code fe;
    if (!it->is_regular_file(fe)) continue;
    struct stat st {};
    if (stat(it->path().c_str(), &st) != 0) {
      ++progress_.errors;
      continue;
    }
    File f;
    f.path = it->path().string();
    f.key = KeyFor(options_.prefix, it->path().lexically_relative(base).string());
    f.size = static_cast<uint64_t>(st.st_size);
    f.mtime_s = st.st_mtim.tv_sec;
    progress_.bytes_total += f.size;
    files_.push_back(std::move(f));
  }
  if (ec) GOBLIN_LOG_ERROR(kLog, "walking {}: {}", options_.dir, ec.message());
  std::sort(files_.begin(), files_.end(),
            [](const File& a, const File& b) { return a.path < b.path; });
  progress_.files_total = files_.size();
  progress_.listed = true;
  GOBLIN_LOG_INFO(kLog, "preloading {}: {} files, {} (keys {}/..., {} connections)", options_.dir,
                  files_.size(), FormatSize(progress_.bytes_total.load()), options_.prefix,
                  options_.threads);
  std::vector<std::thread> workers;
  for (uint32_t i = 0; i < options_.threads; ++i) workers.emplace_back([this] { Work(); });
  // Progress every 5 s while the workers run.
  uint64_t next_log = MonotonicNanos() + 5'000'000'000ULL;
  for (;;) {
    const uint64_t done = progress_.files_stored + progress_.files_skipped + progress_.errors;
    if (done >= files_.size() || stop_.load()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (MonotonicNanos() >= next_log) {
      Log(false);
      next_log += 5'000'000'000ULL;
    }
  }
  for (auto& w : workers) w.join();
  progress_.finished = true;
  Log(true);
}

void Preloader::Log(bool final) const {
  const double s = static_cast<double>(MonotonicNanos() - started_ns_) / 1e9;
  const uint64_t bytes = progress_.bytes_stored;
  GOBLIN_LOG_INFO(kLog,
                  "{}{} of {} files stored, {} already stored, {} errors; {} of {} in "
                  "{:.1f} s ({:.0f} MB/s)",
                  final ? (stop_.load() ? "preload stopped: " : "preload done: ") : "preload: ",
                  progress_.files_stored.load(), progress_.files_total.load(),
                  progress_.files_skipped.load(), progress_.errors.load(), FormatSize(bytes),
                  FormatSize(progress_.bytes_total.load()), s,
                  s > 0 ? static_cast<double>(bytes) / 1e6 / s : 0.0);
}

void Preloader::Work() {
  client::ConnectOptions co;
  co.name = "goblin-core preload";
  co.zero_copy = false;
  co.timeout = std::chrono::seconds(30);  // (silence: a commit waits for a group sync)
  auto c = client::Connection::Open(options_.target, co);
  if (!c) {
    GOBLIN_LOG_ERROR(kLog, "cannot reach the core at {}: {}", options_.target,
                     c.error().ToString());
    stop_.store(true);
    return;
  }
  for (;;) {
    if (stop_.load()) return;
    const size_t i = next_.fetch_add(1);
    if (i >= files_.size()) return;
    if (!StoreOne(**c, files_[i])) {
      stop_.store(true);
      return;
    }
  }
}

bool Preloader::StoreOne(client::Connection& c, const File& f) {
  const std::string meta =
      options_.http_metadata ? HttpMetadata(f.path, f.size, f.mtime_s) : std::string();
  // Already stored as it is now (same size and, with HTTP metadata, same ETag): skip.
  if (auto head = c.Head(f.key); head && head->found && head->size == f.size &&
                                 (!options_.http_metadata || head->metadata == meta)) {
    ++progress_.files_skipped;
    return true;
  }
  UniqueFd fd(open(f.path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    ++progress_.errors;
    GOBLIN_LOG_WARN(kLog, "{}: {}", f.path, std::strerror(errno));
    return true;
  }
  uint64_t sent = 0;
  auto source = [&](std::span<uint8_t> buf) -> Result<size_t> {
    if (stop_.load()) return Err(StatusCode::kAborted, "the core is stopping");
    ssize_t n = read(fd.get(), buf.data(), buf.size());
    if (n < 0) return ErrnoErr(f.path, errno);
    sent += static_cast<uint64_t>(n);
    return static_cast<size_t>(n);
  };
  auto r = c.Put(f.key, source, f.size, options_.ttl_ns, meta);
  if (r) {
    ++progress_.files_stored;
    progress_.bytes_stored += f.size;
    return true;
  }
  if (stop_.load()) return false;
  if (r.error().code() == StatusCode::kAlreadyExists) {  // being filled (a mirror's miss)
    ++progress_.files_skipped;
    return true;
  }
  ++progress_.errors;
  GOBLIN_LOG_WARN(kLog, "{} -> {}: {}", f.path, f.key, r.error().ToString());
  // A core that is gone (or refuses every request) ends the preload; a file that changed
  // size under us or a key being filled by someone else does not.
  return r.error().code() != StatusCode::kUnavailable;
}

}  // namespace goblin::core
