// The HTTP front's access log (`--access-log FILE|-|none`): one line per request, NCSA
// combined (as Apache, nginx and varnishncsa write it) and four fields after it:
//
//   HOST - - [TIME] "METHOD TARGET PROTOCOL" STATUS BODY_BYTES "REFERER" "USER_AGENT"
//       CACHE TTFB DURATION BYTES
//
// TIME is when the request was received (varnishncsa's %t), in UTC; BODY_BYTES the
// response's body bytes written to the client, BYTES all its bytes (head and body; under TLS
// before encryption, under HTTP/2 the HTTP/1.1 head the HEADERS frame was made of); CACHE
// HIT, MISS, PASS (not cacheable: proxied), PURGE, SYNTH (answered by the gateway itself:
// errors, limits), REVALIDATED (a stale object the origin answered 304 for, served from the
// cache) or STALE (served past its freshness: grace, stale-if-error); TTFB the seconds from the
// request to its response head, DURATION to its last byte written (or the connection's end). A line
// is written when the response's last byte has left the gateway (or the client went away: its bytes
// so far, status 499 if no head went out). Quotes, backslashes and non-printable bytes in the
// request's fields are written as \xHH (nginx's escape=default).
//
// Off the hot path: each HTTP worker formats its lines into a ring of its own (no lock, no
// system call; a line that does not fit is counted as dropped, never waited for), and one
// writer thread drains the rings into the file every 100 ms (sooner when a ring is half
// full). Reopen() (SIGUSR1, as nginx) makes the writer open the path again: rotation is
// `mv access.log access.log.1; kill -USR1 <gateway pid>`.
// Threading: Ring::Append from its one worker thread only; the rest from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "goblin/common/fd.h"
#include "goblin/common/status.h"

namespace goblin::gateway {

class AccessLog {
 public:
  // One worker's lines: a single-producer, single-consumer byte ring.
  class Ring {
   public:
    explicit Ring(size_t bytes);
    // Copies `line` (with its newline) in; false (and counted) if it does not fit.
    bool Append(std::string_view line);
    uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

   private:
    friend class AccessLog;
    std::unique_ptr<char[]> buf_;
    size_t size_;
    alignas(64) std::atomic<uint64_t> head_{0};       // written by the worker
    alignas(64) std::atomic<uint64_t> tail_{0};       // advanced by the writer thread
    std::atomic<uint64_t> dropped_{0}, appended_{0};  // (written by the worker)
    AccessLog* owner_ = nullptr;
  };

  // Opens `path` for appending ("-": standard output) and starts the writer thread, with
  // one ring of `ring_bytes` per worker.
  static Result<std::unique_ptr<AccessLog>> Open(const std::string& path, size_t workers,
                                                 size_t ring_bytes = 4 << 20);
  ~AccessLog();  // drains every ring, then stops the writer
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  Ring* ring(size_t worker) { return rings_[worker].get(); }
  // The file is opened again by the writer thread (after its next drain). Async-signal-safe.
  void Reopen() { reopen_.store(true, std::memory_order_relaxed); }
  // Installs SIGUSR1 as Reopen() of `log` (process-wide; nullptr uninstalls).
  static void ReopenOnSigusr1(AccessLog* log);
  uint64_t dropped() const;
  uint64_t lines_written() const;  // appended to the rings (the writer may not have drained them)
  const std::string& path() const { return path_; }

 private:
  AccessLog() = default;
  void Run();
  bool Drain();  // true if anything was written
  void Wake();
  std::string path_;
  UniqueFd fd_;
  std::vector<std::unique_ptr<Ring>> rings_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<bool> reopen_{false}, woken_{false};
};

// Appends `s` to `out` as the log writes a quoted field: '"', '\\' and bytes outside
// 0x20-0x7e as \xHH; "-" when empty.
void AppendLogField(std::string* out, std::string_view s);

}  // namespace goblin::gateway
