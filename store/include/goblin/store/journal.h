// Journal: the store's append-only, checksummed redo log. Each record carries a sequence
// number (LSN, consecutive) and an XXH3 checksum over its header and payload; the file
// starts with a header naming the first LSN it holds. Replay() hands back every valid
// record in order and stops at the first one that is torn or damaged (a crash mid-append),
// truncating the file there so new records follow the last good one: a committed record
// is never lost and a half-written one never appears. Append() buffers. Durability, two ways:
// - Sync() writes and fdatasyncs on the calling thread (start-up, tests, no worker);
// - group commit: SyncJob() takes everything appended since the last sync as one job (a
//   single write + fdatasync) for a SyncWorker, FinishSync() records its outcome; records
//   appended meanwhile wait for the next job. durable_lsn() says how far the disk has it.
// After a failed sync the journal refuses everything (fail-stop) until the process restarts
// and replays it. A checkpoint that captured state up to LSN n restarts the journal after it:
// Restart(n + 1) in place (blocking), or in the background: Mark(n) first (records after n
// are kept aside as they are appended), then RestartJob() writes a new file holding exactly
// them, FinishRestart() switches to it.
// Threading: one owner thread; jobs run on the worker and touch only what they were given.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
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
  // Writes what is buffered and makes it durable, here and now (no job may be in flight).
  VoidResult Sync();
  // Replaces the journal with an empty one starting at `base_lsn` (after a checkpoint),
  // atomically (write + fsync a new file, rename over the old, fsync the directory).
  VoidResult Restart(uint64_t base_lsn);

  // ---- group commit ----
  // A job writing and syncing everything appended since the last one (empty when nothing
  // waits, a job is in flight, or a restart is). Run it on a worker, then FinishSync().
  std::function<Status()> SyncJob();
  VoidResult FinishSync(const Status& job_result);
  uint64_t durable_lsn() const { return durable_lsn_; }
  uint64_t last_lsn() const { return next_lsn_ - 1; }
  bool job_in_flight() const { return sync_in_flight_ || restart_in_flight_; }
  bool has_pending() const { return !pending_.empty(); }

  // ---- background restart after a checkpoint up to `checkpoint_lsn` ----
  void Mark(uint64_t checkpoint_lsn);
  void Unmark();  // the checkpoint failed: keep the journal as it is
  // The job that writes the new journal (base checkpoint_lsn + 1, then every record appended
  // since Mark) and renames it over the old one; nothing else may be in flight.
  std::function<Status()> RestartJob();
  VoidResult FinishRestart(const Status& job_result);

  uint64_t next_lsn() const { return next_lsn_; }
  uint64_t base_lsn() const { return base_lsn_; }
  uint64_t file_bytes() const { return file_end_ + pending_.size(); }
  uint64_t records_in_file() const { return next_lsn_ - base_lsn_; }
  const std::string& path() const { return path_; }
  const Status& broken() const { return broken_; }

 private:
  Journal() = default;
  Status Fail(Status s);  // fail-stop
  std::string path_;
  UniqueFd fd_;
  uint64_t base_lsn_ = 1;
  uint64_t next_lsn_ = 1;
  uint64_t file_end_ = 0;     // bytes durable-or-written in the file
  uint64_t durable_lsn_ = 0;  // records up to this LSN are on disk
  bool replayed_ = false;
  Status broken_;  // set by a failed sync: every later call fails with it
  std::vector<uint8_t> pending_;
  // The job in flight.
  bool sync_in_flight_ = false, restart_in_flight_ = false;
  uint64_t inflight_bytes_ = 0, inflight_last_lsn_ = 0;
  // Background restart: records after mark_lsn_ as appended (their bytes), the new fd.
  bool marked_ = false;
  uint64_t mark_lsn_ = 0;
  std::vector<uint8_t> since_mark_;
  size_t restart_len_ = 0, restart_pending_ = 0;  // the restart job's share of both buffers
  std::shared_ptr<int> restart_fd_;
};

// Crash-injection hook for tests: when set, the next sync writes only this many bytes of what
// is pending, then fails as if the process died (the journal object must be dropped).
void SetJournalCrashAfterBytesForTest(int64_t bytes);

}  // namespace goblin::store
