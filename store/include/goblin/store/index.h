// Index: the durable map from object key to object record (size, generation, times, the
// gateway's metadata blob, and the disk extents that hold the object whole with a checksum
// each). Every change is a journal record. Without a worker (tests, tools) each change is
// synced before it is applied. With StartWorker() (goblin-core) changes apply at once and
// are made durable off the owner's thread by group commit: one write + fdatasync covers
// every record appended since the previous one, and durable_lsn() says how far the disk
// has them (the store acknowledges a commit only then). Checkpoint() writes the whole map
// atomically and restarts the journal; with a worker Poll() does it in the background when
// the journal passes the checkpoint policy (the map is encoded on the owner's thread a
// slice per Poll, the file written on the worker, then the journal restarted holding only
// what came after the LSN the encoding began at).
// Keys are looked up by their XXH3-128 digest and compared in full, so digest collisions
// cost a probe, never a wrong object.
// Threading: one owner thread (a core shard); the worker touches only the jobs it is given.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "goblin/common/status.h"
#include "goblin/common/string_hash.h"
#include "goblin/store/journal.h"
#include "goblin/store/sync_worker.h"

namespace goblin::store {

struct KeyDigest {
  uint64_t hi = 0, lo = 0;
  static KeyDigest Of(std::string_view key);
  friend bool operator==(const KeyDigest&, const KeyDigest&) = default;
};

// Extent files per drive: the journal and checkpoint keep an extent's drive in the bits of
// its file number above these (a store written before drives existed has drive 0 only).
inline constexpr uint32_t kMaxDriveFiles = 1u << 16;

struct Extent {
  uint16_t tier = 0;      // 0: first disk tier, 1: second
  uint16_t drive = 0;     // the tier's drive (its number, kept in the drive's DRIVE label)
  uint32_t file = 0;      // extent file number within the drive (< kMaxDriveFiles)
  uint64_t offset = 0;    // byte offset in that file
  uint64_t length = 0;    // bytes of object data
  uint64_t checksum = 0;  // XXH3-64 of those bytes
  friend bool operator==(const Extent&, const Extent&) = default;
};

// ObjectRecord::marks
inline constexpr uint8_t kMarkStale = 1u << 0;      // invalidated (memcache md I / ms I): kept
inline constexpr uint8_t kMarkTokenSent = 1u << 1;  // a reader won the recache (RAM only)
inline constexpr uint8_t kMarkFetched = 1u << 2;    // read since it was written (RAM only)
// A variant of an HTTP object (kPutVariant): its key's part before the first NUL names the
// object; the index groups such records by it (Index::Variants).
inline constexpr uint8_t kMarkVariant = 1u << 3;
inline constexpr uint8_t kDurableMarks = kMarkStale | kMarkVariant;

struct ObjectRecord {
  std::string key;
  uint64_t size = 0;
  uint64_t generation = 0;  // assigned by the index at commit, strictly increasing
  uint64_t created_unix_ns = 0;
  uint64_t expires_unix_ns = 0;  // 0: never
  std::string metadata;
  std::vector<Extent> extents;
  // memcache meta state. Only kDurableMarks are journaled; the rest, and the last access
  // (unix seconds), are bookkeeping of reads, updated through a const record (mutable).
  uint8_t marks = 0;
  mutable uint8_t read_marks = 0;  // kMarkTokenSent | kMarkFetched
  // Reads not yet handed to the eviction policy (saturating at 3, S3-FIFO's cap): a hit
  // counts here, in the record it found, and the policy takes them when it judges the
  // object (S3Fifo::Evict's take_reads), instead of a lookup of its own per hit.
  mutable uint8_t policy_reads = 0;
  // Tags (an HTTP response's surrogate keys), space-separated: purge by tag finds the
  // objects carrying one (Index::KeysWithTag). Journaled with the record.
  std::string tags;
  mutable uint32_t access_unix_s = 0;
  // The store's VersionLoans slot for this version's loans (0, or a slot whose loans all came
  // back: none out). Never journaled, never copied into a new version (Index::Apply clears it).
  mutable uint64_t loan_handle = 0;
  // Equal as stored: read bookkeeping aside.
  friend bool operator==(const ObjectRecord& a, const ObjectRecord& b) {
    return a.key == b.key && a.size == b.size && a.generation == b.generation &&
           a.created_unix_ns == b.created_unix_ns && a.expires_unix_ns == b.expires_unix_ns &&
           a.metadata == b.metadata && a.extents == b.extents && a.marks == b.marks &&
           a.tags == b.tags;
  }
};

// The serialized form used in journal and checkpoint records (bounds-checked decode).
std::vector<uint8_t> EncodeRecord(const ObjectRecord& r);
Result<ObjectRecord> DecodeRecord(std::span<const uint8_t> bytes);

struct IndexRecovery {
  uint64_t from_checkpoint = 0;  // objects loaded from the checkpoint
  uint64_t journal_records = 0;  // journal records applied after it
  uint64_t discarded_bytes = 0;  // torn journal tail cut off
};

struct CheckpointPolicy {
  uint64_t journal_bytes = 64ull << 20;  // checkpoint once the journal file is this large
  uint64_t journal_records = 100000;     // ... or holds this many records (0: no limit)
};

struct IndexStats {
  uint64_t group_syncs = 0, synced_records = 0;  // group-commit jobs and the records they carried
  uint64_t checkpoints = 0, checkpoint_failures = 0;
  uint64_t last_checkpoint_objects = 0, last_checkpoint_bytes = 0;
  uint64_t last_checkpoint_encode_ns = 0;  // on the owner's thread, all its slices
  uint64_t last_checkpoint_slice_ns = 0;   // the longest of those slices
};

class Index {
 public:
  // Loads `dir`/index.checkpoint (if present) and replays `dir`/index.journal. A damaged
  // checkpoint or a journal that does not continue it is a Corruption error: the core
  // refuses to start rather than serve a silently shrunken cache.
  static Result<std::unique_ptr<Index>> Open(const std::string& dir);

  // Records `record` (generation assigned here) and makes it visible, replacing any object
  // with the same key. `released` receives the replaced object's extents (their space may be
  // reused once the record is durable and the caller has no loans on them): the record's own
  // list, moved, when `released` is empty, so loans pointing into it stay valid. `*lsn` (if
  // given): the record's LSN, durable once durable_lsn() reaches it (at once without a worker).
  Result<uint64_t> Commit(ObjectRecord record, std::vector<Extent>* released,
                          uint64_t* lsn = nullptr);
  // Removes `key`; false when it was not present (nothing recorded then).
  Result<bool> Delete(std::string_view key, std::vector<Extent>* released, uint64_t* lsn = nullptr);

  // Sets `key`'s expiry (0: never) in place, journaled; false when it is not present.
  Result<bool> Touch(std::string_view key, uint64_t expires_unix_ns, uint64_t* lsn = nullptr);
  // Gives `key`'s record the next generation and kMarkStale (its bytes, extents and
  // creation time unchanged; expires_unix_ns if `set_expiry`), journaled as a put; its
  // read marks are cleared but for kMarkFetched. Returns the new generation, 0 when absent.
  Result<uint64_t> Invalidate(std::string_view key, bool set_expiry, uint64_t expires_unix_ns,
                              uint64_t* lsn = nullptr);
  // Gives `key`'s record the next generation with new metadata, creation time and expiry
  // (0: never), its bytes, extents and marks unchanged but kMarkStale (cleared), journaled
  // as a put (an HTTP revalidation answered 304). Returns the new generation, 0 when absent.
  Result<uint64_t> Refresh(std::string_view key, std::string metadata, uint64_t created_unix_ns,
                           uint64_t expires_unix_ns, uint64_t* lsn = nullptr);
  const ObjectRecord* Find(std::string_view key) const;
  const ObjectRecord* Find(const HashedKey& key) const;  // (its digest computed already)
  // The digests of the records carrying `tag` (each record's tags are indexed when it is
  // recorded and dropped when it leaves; 16 bytes each: a snapshot of 100,000 is a copy of
  // 1.6 MB), and the keys of those of `digests` that still carry it: a purge takes the
  // snapshot at once and resolves it slice by slice, costing what it finds.
  std::vector<KeyDigest> TagMembers(std::string_view tag) const;
  void KeysWithTag(std::span<const KeyDigest> digests, std::string_view tag,
                   std::vector<std::string>* keys) const;
  size_t tags() const { return by_tag_.size(); }  // distinct tags
  // The records carrying kMarkVariant whose key starts with `object` + NUL (the variants
  // of one HTTP object), and how many objects have any.
  std::vector<const ObjectRecord*> Variants(std::string_view object) const;
  size_t variant_objects() const { return by_object_.size(); }
  size_t size() const { return size_; }
  size_t expiring() const { return expiring_; }  // records with an expiry
  void ForEach(const std::function<void(const ObjectRecord&)>& fn) const;
  // A page of a cursor walk over the keys (RESP SCAN): buckets of a power-of-two table of
  // digests, visited in reverse-binary order (Redis's dictScan), so a walk from cursor 0
  // until 0 comes back meets every key present all along at least once, however the table
  // grows meanwhile. Visits buckets from `cursor` until about `count` records were offered;
  // `take` gets each non-empty bucket's records and returns false when it will not take
  // them (its page is full): the returned cursor then starts at that bucket.
  uint64_t Scan(uint64_t cursor, size_t count,
                const std::function<bool(std::span<const ObjectRecord* const>)>& take) const;

  // Writes every live record to a new checkpoint (tmp + fsync + rename), then restarts the
  // journal after it. Blocking (waits for the worker's jobs first).
  VoidResult Checkpoint();

  // ---- durability off the owner's thread ----
  VoidResult StartWorker();
  void set_checkpoint_policy(const CheckpointPolicy& p) { policy_ = p; }
  // Reaps finished jobs, starts the next group sync when records wait, and a background
  // checkpoint when the journal is past the policy. Never blocks. An error: a sync failed
  // and the journal has stopped (every later change fails too).
  VoidResult Poll();
  // Blocks until every record appended so far is durable.
  VoidResult SyncNow();
  uint64_t last_lsn() const { return journal_.last_lsn(); }
  uint64_t durable_lsn() const { return journal_.durable_lsn(); }
  int event_fd() const { return worker_ ? worker_->event_fd() : -1; }
  bool checkpoint_running() const { return checkpoint_stage_ != CheckpointStage::kNone; }
  // A background checkpoint is being encoded: Poll again at once (its next slice).
  bool checkpoint_encoding() const { return checkpoint_stage_ == CheckpointStage::kEncoding; }
  const IndexStats& stats() const { return stats_; }

  const IndexRecovery& recovery() const { return recovery_; }
  uint64_t journal_bytes() const { return journal_.file_bytes(); }
  uint64_t journal_records() const { return journal_.records_in_file(); }

 private:
  explicit Index(Journal j) : journal_(std::move(j)) {}
  struct DigestHash {
    size_t operator()(const KeyDigest& d) const {
      return static_cast<size_t>(d.lo ^ (d.hi * 0x9e3779b97f4a7c15ULL));
    }
  };
  void Apply(ObjectRecord r, std::vector<Extent>* released);
  bool Remove(std::string_view key, std::vector<Extent>* released);
  ObjectRecord* FindMutable(std::string_view key);
  ObjectRecord* FindMutable(std::string_view key, const KeyDigest& digest);
  void SetExpiry(ObjectRecord* r, uint64_t expires_unix_ns);
  // Journals `next` (r's record under the next generation) as a put; r then takes its
  // generation. The caller updates the rest of r in place (its extents keep their address).
  Result<uint64_t> Reissue(ObjectRecord* r, ObjectRecord& next, uint64_t* lsn_out);
  void ScanAdd(const KeyDigest& d);
  void ScanRemove(const KeyDigest& d);
  std::vector<uint8_t> EncodeCheckpoint();  // (all slices at once: the blocking Checkpoint)
  // Durable before visible without a worker; with one the record waits for a group sync.
  VoidResult AfterAppend();
  enum class JobKind : uint8_t { kSync, kCheckpointFile, kJournalRestart };
  void Submit(JobKind kind, SyncWorker::Job job);
  VoidResult OnJobDone(JobKind kind, const Status& s);
  void MaybeStartCheckpoint();

  std::string dir_;
  Journal journal_;
  // Buckets by digest; a bucket holds more than one record only on a digest collision.
  absl::node_hash_map<KeyDigest, std::vector<ObjectRecord>, DigestHash> map_;
  // A set of digests kept dense: a snapshot of it is one copy of contiguous memory (a tag
  // purge's of 100,000 members: well under a millisecond, where walking a node-based set
  // took 36 ms), a member is found by a scan up to kLinear members and through a position
  // map beyond, and leaves by swap-and-pop.
  class DigestSet {
   public:
    void Insert(const KeyDigest& d);
    void Erase(const KeyDigest& d);
    bool empty() const { return v_.empty(); }
    const std::vector<KeyDigest>& members() const { return v_; }

   private:
    static constexpr size_t kLinear = 16;
    size_t Find(const KeyDigest& d) const;
    std::vector<KeyDigest> v_;
    std::unordered_map<KeyDigest, uint32_t, DigestHash> at_;  // (past kLinear members)
  };
  // Tag -> the digests of map_'s records carrying it.
  std::unordered_map<std::string, DigestSet, StringHash, std::equal_to<>> by_tag_;
  // An object (a variant key's part before its NUL) -> the digests of its variants.
  std::unordered_map<std::string, DigestSet, StringHash, std::equal_to<>> by_object_;
  // Index a record's tags and variant object (Attach) and forget them (Detach).
  void Attach(const ObjectRecord& r, const KeyDigest& d);
  void Detach(const ObjectRecord& r, const KeyDigest& d);
  size_t size_ = 0;
  size_t expiring_ = 0;
  // The digests of map_ by (hi & mask): Scan's table (doubles past 4 digests a bucket).
  std::vector<std::vector<KeyDigest>> scan_ = std::vector<std::vector<KeyDigest>>(16);
  uint64_t next_generation_ = 1;
  uint64_t applied_lsn_ = 0;
  IndexRecovery recovery_;
  std::unique_ptr<SyncWorker> worker_;
  std::deque<std::pair<uint64_t, JobKind>> jobs_;  // submitted, not reaped (in order)
  CheckpointPolicy policy_;
  // A background checkpoint: encoded on the owner's thread a slice per Poll (kEncoding),
  // written by the worker, then the journal restarted after the LSN it began at.
  enum class CheckpointStage : uint8_t { kNone, kEncoding, kWritingFile, kRestartingJournal };
  CheckpointStage checkpoint_stage_ = CheckpointStage::kNone;
  uint64_t checkpoint_objects_ = 0, checkpoint_bytes_ = 0;
  uint64_t next_checkpoint_try_ = 0;  // MonotonicNanos: after a failure, wait before retrying
  // kEncoding: the file so far and the Scan cursor of the next slice (the map changes
  // between slices: the file is fuzzy, and exact once the journal from its LSN is replayed
  // over it, as Open does: every journal record sets its key's state).
  std::vector<uint8_t> encoding_;
  uint64_t encode_cursor_ = 0, encode_count_ = 0, encode_ns_ = 0, encode_slice_max_ns_ = 0;
  static constexpr size_t kEncodeSlice = 4096;  // records per slice
  void BeginEncoding();                         // the header; the cursor at 0
  bool EncodeSome();   // one slice; true once the file is complete (in encoding_)
  void EncodeSlice();  // one slice; once complete, the worker writes it
  IndexStats stats_;
};

}  // namespace goblin::store
