// Journal: the store's append-only, checksummed redo log. Each record carries a sequence
// number (LSN, consecutive) and an XXH3 checksum over its header and payload; the file
// starts with a header naming the first LSN it holds. Replay() hands back every valid
// record in order and stops at the first one that is torn or damaged (a crash mid-append),
// truncating the file there so new records follow the last good one: a committed record
// is never lost and a half-written one never appears. Append() buffers; Sync() writes and
// fdatasyncs (call it before acknowledging a commit); after a failed Sync() the journal
// refuses everything (fail-stop) until the process restarts and replays it. A checkpoint that
// captured state up to LSN n calls Restart(n + 1) to begin an empty journal atomically. Threading:
// one owner thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "goblin/common/fd.h"
#include "goblin/common/status.h"

namespace goblin::store {

inline constexpr uint32_t kJournalMaxPayload = 64u << 20;

struct ReplayStats {
  uint64_t records = 0;
  uint64_t next_lsn = 0;         // the LSN the next Append() gets
  uint64_t discarded_bytes = 0;  // a torn or damaged tail that was cut off
};

class Journal {
 public:
  // Opens (creating when absent, with first LSN `base_lsn_if_new`) the journal at `path`.
  // An existing file must be replayed before appending.
  static Result<Journal> Open(const std::string& path, uint64_t base_lsn_if_new = 1);

  // Calls fn(lsn, type, payload) for each valid record, then positions for appending.
  Result<ReplayStats> Replay(
      const std::function<void(uint64_t, uint16_t, std::span<const uint8_t>)>& fn);

  // Buffers a record; returns its LSN. Fails for payloads over kJournalMaxPayload.
  Result<uint64_t> Append(uint16_t type, std::span<const uint8_t> payload);
  // Writes what is buffered and makes it durable.
  VoidResult Sync();
  // Replaces the journal with an empty one starting at `base_lsn` (after a checkpoint),
  // atomically (write + fsync a new file, rename over the old, fsync the directory).
  VoidResult Restart(uint64_t base_lsn);

  uint64_t next_lsn() const { return next_lsn_; }
  uint64_t base_lsn() const { return base_lsn_; }
  uint64_t file_bytes() const { return file_end_ + pending_.size(); }
  const std::string& path() const { return path_; }

 private:
  Journal() = default;
  std::string path_;
  UniqueFd fd_;
  uint64_t base_lsn_ = 1;
  uint64_t next_lsn_ = 1;
  uint64_t file_end_ = 0;  // bytes durable-or-written in the file
  bool replayed_ = false;
  Status broken_;  // set by a failed Sync(): every later call fails with it
  std::vector<uint8_t> pending_;
};

// Crash-injection hook for tests: when set, Sync() writes only this many bytes of what is
// pending, then fails as if the process died (the journal object must be dropped).
void SetJournalCrashAfterBytesForTest(int64_t bytes);

}  // namespace goblin::store
