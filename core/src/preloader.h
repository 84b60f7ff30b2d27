// Preloader: `goblin-core --source DIR` stores a directory tree at start (the seed system's
// preloader). Every regular file under DIR becomes the object PREFIX + "/" + its relative
// path (each byte outside a URL path's characters percent-encoded, as an HTTP client sends
// it), with HTTP metadata (Content-Type from the extension, Last-Modified, and an ETag of
// mtime and size, as nginx makes them), so a mirror in front of the same tree serves the
// files as hits from the first request (goblin-store --source sets PREFIX to the Host
// clients use). A key that already holds the file (same ETag) is skipped: a restart stores
// only what changed. It is a client of its own core (libgoblin over the core's unix socket,
// `threads` connections), so every file takes the normal path: its shard by key, the
// journal, eviction, one fill per key. Progress: a log line every 5 s and at the end, and
// counters the admin API reads (`goblinctl stats`: preload_*).
// Threading: Start/RequestStop/the destructor on one thread; progress() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "goblin/common/status.h"

namespace goblin::client {
class Connection;
}

namespace goblin::core {

struct PreloadOptions {
  std::string dir;
  std::string prefix;         // key = prefix + "/" + path
  std::string target;         // the core, as libgoblin names it ("unix:/run/...")
  bool http_metadata = true;  // false: no metadata (plain objects)
  uint32_t threads = 2;       // connections putting files at once
  uint64_t ttl_ns = 0;        // 0: never expire
};

struct PreloadProgress {
  std::atomic<uint64_t> files_total{0}, bytes_total{0};  // found under the directory
  std::atomic<uint64_t> files_stored{0}, bytes_stored{0};
  std::atomic<uint64_t> files_skipped{0};  // already stored with the same ETag, or being filled
  std::atomic<uint64_t> errors{0};         // files that could not be read or stored
  std::atomic<bool> listed{false}, finished{false};
};

class Preloader {
 public:
  // Checks the directory; nothing runs before Start().
  static Result<std::unique_ptr<Preloader>> Create(PreloadOptions options);
  // Walks the tree and stores it on threads of its own (call once the core serves).
  void Start();
  ~Preloader();  // stops (a file being stored is abandoned, its fill aborted) and joins
  Preloader(const Preloader&) = delete;
  Preloader& operator=(const Preloader&) = delete;

  // Stop taking files; a put in progress aborts at its next piece.
  void RequestStop() { stop_.store(true); }
  const PreloadProgress& progress() const { return progress_; }

  // The key and HTTP metadata a file gets (exposed for tests).
  static std::string KeyFor(const std::string& prefix, const std::string& relative_path);
  static std::string HttpMetadata(const std::string& path, uint64_t size, int64_t mtime_s);

 private:
  struct File {
    std::string path, key;
    uint64_t size = 0;
    int64_t mtime_s = 0;
  };
  explicit Preloader(PreloadOptions o) : options_(std::move(o)) {}
  void Run();
  void Work();
  // Stores (or skips) one file; false when the core is gone (the worker stops).
  bool StoreOne(client::Connection& c, const File& f);
  void Log(bool final) const;

  PreloadOptions options_;
  PreloadProgress progress_;
  std::vector<File> files_;
  std::atomic<size_t> next_{0};
  std::atomic<bool> stop_{false};
  uint64_t started_ns_ = 0;
  std::thread runner_;
};

}  // namespace goblin::core
