// Store: positional caching for one core shard. An object is stored whole on disk
// (checksummed extents, recorded in the durable Index) and its first `ram_head` bytes are
// also kept in the HeadPool, so a read starts from RAM while the tail is read from disk.
// With two tiers, object bytes [0, ram_head + ssd_prefix) go to the first and the rest to
// the second. Fills are exclusive per key (a second writer is told a fill is in progress)
// and become visible only at Commit; a reader may follow an in-progress fill (OpenStream
// with follow_fill) and continues on the committed object, or fails if the fill is
// abandoned. After a restart every committed object is still there; its head is copied back
// into RAM on its first read.
// Reads: Get() lends a Loan (descriptors of the head slot and the extents; every loan is
// released); OpenStream() gives a Stream that hands out the bytes in order without copying
// them (head from the pool, tail from I/O buffers read ahead asynchronously) for event
// loops: Poll() dispatches disk completions (wake on event_fd()).
// Space: S3-FIFO over whole objects evicts when a tier is full or there are more than
// max_objects; a full head pool first drops RAM tails, then demotes cold heads (the object
// stays on disk). TTLs expire lazily on lookup and actively in Poll().
// Idle RAM (ram_tails): while the pool has blocks to spare, an object keeps more than its
// head in RAM: whole blocks of the bytes after it ("its RAM tail"), taken as a fill writes
// them or as a stream reads them from disk, so the object's RAM prefix grows past the head;
// a stream serves those bytes from the pool like the head. Tails only take blocks beyond a
// reserve kept for heads, and are the first thing given back when a head needs room.
// Threading: one owner thread (a core shard).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "goblin/common/status.h"
#include "goblin/common/string_hash.h"
#include "goblin/store/disk_io.h"
#include "goblin/store/eviction.h"
#include "goblin/store/head_pool.h"
#include "goblin/store/head_table.h"
#include "goblin/store/index.h"
#include "goblin/store/io_router.h"
#include "goblin/store/loan_slots.h"
#include "goblin/store/object_io.h"
#include "goblin/store/tier_space.h"
#include "goblin/store/version_loans.h"

namespace goblin::store {

struct StoreOptions {
  PoolOptions pool;
  uint64_t ram_head = 256 << 10;
  // Per tier (1 or 2), its drives' prepared directories (tier_space.h); the index is on the
  // tier-0 drive that holds it (the first listed when the store is new).
  std::vector<std::vector<std::string>> tier_dirs;
  uint64_t ssd_prefix = 0;              // with two tiers: bytes after the head on the first
  std::vector<uint64_t> tier_capacity;  // per tier, all its drives (0 or missing: file systems)
  TierOptions tier;
  IoChoice io = IoChoice::kAuto;
  uint32_t io_depth = 32;
  uint32_t io_buffers = 32;  // each tier.extent_bytes large
  uint32_t read_ahead = 4;   // extents in flight per stream
  uint64_t max_objects = 0;  // 0: no limit but space
  // Variants kept per HTTP object (versions filled as variants: SetFillVariant); when one
  // more commits, the least recently used of the others goes (ATS's max_alts). 0: no limit.
  uint32_t max_variants = 0;
  uint32_t head_descriptors = 65536;  // head table entries (heads describable at once)
  // Keep bytes past the head in RAM while the pool has room (see the header).
  bool ram_tails = true;
  // A fill that receives no data for this long is aborted by the store itself (its followers
  // see Aborted, the key is free again); 0: never. The owner learns of it from
  // TakeTimedOutFills().
  uint64_t fill_timeout_ns = 0;
  // Group commit: changes are acknowledged (WhenDurable) once a background sync covering
  // them is done, one sync for everything written since the last; space they free is reused
  // only then. false: every change syncs on the caller's thread before it returns.
  bool group_commit = false;
  // Heap memory fills may stage extents in when every I/O buffer is out (many fills at
  // once); past it (or with a few writes of its own on the way) a fill waits for the disk.
  uint64_t fill_staging_bytes = 256ull << 20;
  CheckpointPolicy checkpoint;  // background checkpoints (with group_commit)
};

struct StoreStats {
  uint64_t objects = 0;
  uint64_t fills_started = 0, fills_committed = 0, fills_aborted = 0, fills_refused = 0;
  uint64_t puts_refused_by_condition = 0;  // PutCondition failed (at begin or at commit)
  uint64_t vivified = 0;                   // empty versions a read created (memcache mg N)
  uint64_t invalidated = 0;                // versions marked stale (memcache md I)
  uint64_t refreshed = 0;                  // versions given new metadata and TTL (HTTP 304)
  uint64_t touches = 0;                    // Touch calls that found the object
  uint64_t fills_timed_out = 0;
  uint64_t inline_syncs = 0;     // a fill needed space that only a sync could give back
  uint64_t fill_disk_waits = 0;  // a fill's Append waited for a write to land (disk behind)
  uint64_t hits = 0, misses = 0, expired = 0;
  uint64_t heads_in_ram = 0, head_refills = 0, heads_not_cached = 0, heads_demoted = 0;
  uint64_t evicted = 0, eviction_failures = 0;
  uint64_t variants_evicted = 0;  // variants dropped for a newer one (max_variants)
  uint64_t corrupt_dropped = 0;
  uint64_t drives_lost = 0, lost_drive_objects = 0;  // at open: drives gone, objects dropped
  uint64_t loans_out = 0;
  uint64_t streams_open = 0, fill_followers = 0;
  uint64_t heads_described = 0, descriptors_withdrawn = 0;
  uint64_t heads_touched = 0;  // reads of described heads that readers served themselves
  // RAM tails: bytes held now, blocks taken as fills wrote them or streams read them from
  // disk, tails given back for heads (or lost with their head), bytes streams served from them.
  uint64_t tail_bytes_in_ram = 0, tail_blocks_filled = 0, tail_blocks_adopted = 0;
  uint64_t tails_dropped = 0, tail_bytes_served = 0;
  // Bytes streams handed out, by where they came from: RAM heads (the pool), RAM tails
  // (tail_bytes_served), disk (I/O buffers), fills in progress (followers).
  uint64_t head_bytes_served = 0, disk_bytes_served = 0, fill_bytes_served = 0;
  // Disk chunks a stream left unfinished (a piece or range ending inside an extent), kept
  // for the next stream that reads on from there; taken up by one, dropped unused.
  uint64_t chunks_parked = 0, chunks_unparked = 0;
};

// What a lookup returns: enough to answer HEAD and to plan a read.
struct ObjectInfo {
  std::string key;
  uint64_t size = 0;  // UINT64_MAX: an in-progress fill of unknown size
  uint64_t generation = 0;
  uint64_t created_unix_ns = 0;
  uint64_t expires_unix_ns = 0;
  std::string metadata;
};

// A read of one object: the head in the pool (if cached) and the extents behind it.
struct Loan {
  uint64_t id = 0;
  ObjectInfo info;
  std::optional<PoolSlot> head;  // pool slot holding object bytes [0, head_bytes)
  uint64_t head_bytes = 0;
  // The whole object on disk (head included): the committed record's own list, not a copy.
  // A record's list stays at one address while loans on its version are out (the index
  // moves it, never copies it, when the version is replaced or deleted, and the store keeps
  // it until the last loan's release), so a loan costs no allocation.
  std::span<const Extent> extents;
};

// A resident head described for one-sided reads (Store::Describe).
struct HeadDescription {
  ObjectInfo info;
  uint32_t entry = sbe::kNoHeadEntry;  // kNoHeadEntry: not readable one-sided (head not in RAM)
  sbe::HeadTableEntry head;            // what the table entry holds while it is current
};

// A conditional put (memcache add / replace / cas): what must hold of the key's committed,
// unexpired version when the fill begins and again when it commits (CommitAsync/Commit).
// Refusals: AlreadyExists (kAbsent), NotFound (kPresent; kGeneration with nothing stored),
// FailedPrecondition (kGeneration and another version is current).
// keep_expiry (RESP SET KEEPTTL): the new version takes the expiry of the committed,
// unexpired version it replaces at commit (the fill's ttl when there is none).
// stale_if_older (memcache ms I with C): a kGeneration put whose generation is older than
// the current version's is stored all the same, as a stale version (kMarkStale) keeping the
// replaced one's expiry and won mark. keep_marks (an incr in place): the new version keeps
// the replaced one's marks and last access.
struct PutCondition {
  enum class Kind : uint8_t { kNone, kAbsent, kPresent, kGeneration } kind = Kind::kNone;
  uint64_t generation = 0;  // kGeneration: the version the put replaces
  bool keep_expiry = false;
  bool stale_if_older = false;
  bool keep_marks = false;
};

// A read's memcache meta bookkeeping (Head / OpenStream). Every read of a committed version
// sets its "fetched" mark and last access unless !bump (mg u); `recache_ns` (mg R): the
// reader wins the recache when the version's time left, in whole seconds, is below it;
// `vivify` (mg N): a miss creates an empty version (vivify_ttl_ns; 0: none) the reader wins.
// A stale version's first meta reader wins too; a version has one winner until it is
// replaced or invalidated again.
struct AccessRequest {
  bool meta = false;  // a meta read (mg): the only kind that wins a stale version
  bool bump = true;
  uint64_t recache_ns = 0;
  bool vivify = false;
  uint64_t vivify_ttl_ns = 0;
};
// What the read found, as before it (AccessMarks::marks bits).
inline constexpr uint8_t kAccessFetched = 1u << 0;    // read before
inline constexpr uint8_t kAccessStale = 1u << 1;      // invalidated
inline constexpr uint8_t kAccessTokenSent = 1u << 2;  // another reader had won
inline constexpr uint8_t kAccessWon = 1u << 3;        // this reader won
struct AccessMarks {
  uint8_t marks = 0;
  uint32_t idle_s = 0;  // seconds since its last read or write
};

// Conditions of a Touch on the current expiry (Redis's EXPIRE NX / XX / GT / LT; a version
// without an expiry counts as expiring never), and `delete_now`: the new expiry has passed,
// so the version is deleted when the conditions hold (EXPIRE with a time in the past).
// A touch counts as a read of the version (its fetched mark and last access) unless no_bump.
struct TouchCondition {
  bool if_no_expiry = false, if_expiry = false, if_later = false, if_sooner = false;
  bool delete_now = false;
  bool no_bump = false;
};

// What changed a key's committed version, for keyspace notifications (Redis's event names):
// kSet a commit (then kExpire when it has an expiry); kDel Delete, DeleteIfGeneration or a
// touch into the past; kExpire / kPersist a touch giving an expiry / taking it away;
// kExpired found expired (on access or by the sweep); kEvicted evicted for space. Purges
// (DeletePrefix: Redis's FLUSHALL reports nothing either) and damaged objects dropped report
// nothing.
enum class ObjectEvent : uint8_t { kSet, kDel, kExpire, kPersist, kExpired, kEvicted };
std::string_view ObjectEventName(ObjectEvent e);

class Store {
 public:
  static Result<std::unique_ptr<Store>> Open(const StoreOptions& options);
  // Called on the store's thread, after the change is visible (not yet durable).
  using EventSink = std::function<void(ObjectEvent, std::string_view key)>;
  void set_event_sink(EventSink sink) { event_sink_ = std::move(sink); }
  ~Store();

  class Stream;
  // Owns a stream; giving it back returns it to its store (which keeps it whole for the next
  // one, see Stream). On the store's thread, before the store is destroyed.
  struct StreamDeleter {
    void operator()(Stream* s) const;
  };
  using StreamPtr = std::unique_ptr<Stream, StreamDeleter>;
  using FillId = uint64_t;
  enum class FillStart { kGranted, kInProgress };
  using PutCondition = store::PutCondition;
  // Starts a fill of `key`. kInProgress: another fill of the key runs (follow it, try again
  // later, or read the committed version). ttl_ns 0: no expiry. `expected_size` (UINT64_MAX
  // if unknown) is what followers are told.
  // `head_pending`: a reservation made before the head is known (SetFillHead gives it);
  // until then followers cannot open the fill (OpenStream reads past it) and
  // FillAwaitingHead says so.
  Result<std::pair<FillStart, FillId>> BeginFill(std::string_view key, uint64_t ttl_ns,
                                                 std::string_view metadata,
                                                 uint64_t expected_size = UINT64_MAX,
                                                 bool head_pending = false,
                                                 PutCondition condition = {});
  // The head of a reserved fill: what followers are told. ResourceExhausted (the fill left
  // as it is; the caller aborts it) when `expected_size` could never be stored.
  VoidResult SetFillHead(FillId fill, uint64_t expected_size, uint64_t ttl_ns,
                         std::string_view metadata);
  // The tags the fill's version will carry (space-separated; ObjectRecord::tags).
  VoidResult SetFillTags(FillId fill, std::string_view tags);
  // The fill's version is a variant of the HTTP object its key names before its first NUL
  // (kMarkVariant; InvalidArgument without a NUL): at most max_variants of them are kept.
  VoidResult SetFillVariant(FillId fill);
  // A purge's snapshot of a tag, and its keys slice by slice (Index::TagMembers).
  std::vector<KeyDigest> TagMembers(std::string_view tag) const { return index_->TagMembers(tag); }
  void KeysWithTag(std::span<const KeyDigest> digests, std::string_view tag,
                   std::vector<std::string>* keys) const {
    index_->KeysWithTag(digests, tag, keys);
  }
  // A reserved fill of `key` whose head has not come yet.
  bool FillAwaitingHead(std::string_view key) const;
  // A fill of `key` whose every byte is in and whose record is on the way (CommitAsync).
  bool FillCommitting(std::string_view key) const;
  // Any fill of `key` in progress (reserved, filling or committing).
  bool Filling(std::string_view key) const { return filling_.find(key) != filling_.end(); }
  // A committed, unexpired version of `key` (no lookup counted, nothing copied).
  bool Committed(std::string_view key) const { return CommittedGeneration(key) != 0; }
  // Its generation (0: none).
  uint64_t CommittedGeneration(std::string_view key) const {
    const ObjectRecord* r = index_->Find(key);
    return r != nullptr && !Expired(*r, NowNs()) ? r->generation : 0;
  }
  VoidResult Append(FillId fill, std::span<const uint8_t> data);
  // Memory where fill `fill`'s bytes [offset, offset + length) will lie in its disk write's
  // buffer, lent so a transport can receive them there (an RDMA read of the client's
  // memory lands in the buffer the disk write is made from); Append() of that span then
  // copies it only into the head pool and RAM tail. Every placement is released once, with
  // ReleasePlacement(buffer), when the transport no longer writes there, whatever became of
  // the fill (the buffer is not reused before). nullopt: receive it elsewhere and Append it.
  std::optional<ObjectWriter::Placed> PlaceAppend(FillId fill, uint64_t offset, uint32_t length);
  void ReleasePlacement(uint32_t buffer) { io_->buffers().Unpin(buffer); }

  // What the head pool holds, by kind (object bytes): objects whole in their head slot
  // (shorter than ram_head), heads of larger objects, RAM tails. Walks the residents: for
  // the admin plane, not the data path.
  struct PoolUse {
    uint64_t whole_objects = 0, whole_object_bytes = 0;
    uint64_t large_heads = 0, large_head_bytes = 0;
    uint64_t tails = 0, tail_bytes = 0;
  };
  PoolUse PoolUseByKind() const;
  // Makes the object visible (replacing an older version), waiting here for its last disk
  // write; returns its generation. `expected_size` (if not UINT64_MAX) must equal what was
  // appended. Durable at return without group_commit; with it, see WhenDurable.
  Result<uint64_t> Commit(FillId fill, uint64_t expected_size = UINT64_MAX);
  // The same without waiting on this thread: the last write is started, the object becomes
  // visible from a later Poll() once its writes have landed, and `done` runs once its
  // record is durable (the generation) or the commit failed. An error returned here: it
  // failed at once (`done` does not run).
  VoidResult CommitAsync(FillId fill, uint64_t expected_size,
                         std::function<void(Result<uint64_t>)> done);
  void Abort(FillId fill);

  // nullopt: not stored (or expired, which also removes it). `access` / `marks`: see
  // AccessRequest (none: a plain read, bumped).
  Result<std::optional<ObjectInfo>> Head(std::string_view key,
                                         const AccessRequest* access = nullptr,
                                         AccessMarks* marks = nullptr);
  // A loan on the object, its head in RAM when possible (refilled from disk if needed).
  Result<std::optional<Loan>> Get(std::string_view key);
  void Release(const Loan& loan) { ReleasePin(loan.id); }
  // A second loan on the same object version (its own id; released separately).
  Loan Retain(const Loan& loan);
  // A second hold on the loan's object version by id alone (what a lent piece keeps: no
  // copy of the loan); ReleasePin(id) ends it, as Release does a loan.
  uint64_t Pin(const Loan& loan);
  void ReleasePin(uint64_t id);
  // Returns an I/O buffer a stream handed out (Stream::DetachChunk).
  void ReleaseBuffer(uint32_t buffer) { buffers_->Release(buffer); }
  // Copies object bytes [offset, offset + out.size()) through a loan (blocking): head bytes
  // from the pool, the rest from disk with checksums verified. A damaged extent drops the
  // object and returns Corruption.
  VoidResult Read(const Loan& loan, uint64_t offset, std::span<uint8_t> out);
  // Deletes `key`'s committed version, and a fill of it that is already committing (all
  // its bytes in) once its record is written; true if either was there. Fills still
  // receiving bytes are not touched (they become the next version).
  Result<bool> Delete(std::string_view key);
  // Deletes `key`'s committed version if it is version `generation` (a memcache md C, a RESP
  // GETDEL): false when nothing unexpired is stored, FailedPrecondition when another version
  // is current. A committing fill is not touched (it is a newer version).
  Result<bool> DeleteIfGeneration(std::string_view key, uint64_t generation);
  // Marks `key`'s committed version stale under a new generation (memcache md I): its bytes
  // stay, readers' loans and RAM copies carry over, its won mark is cleared (the next reader
  // wins the recache), local readers are sent back to the core. `if_generation` (non-zero):
  // only that version, else FailedPrecondition. `set_ttl`: a new time to live too (ttl_ns
  // from now; 0: none). Returns the new generation; 0: nothing unexpired stored. Without
  // `if_generation`, a fill of the key committing (every byte in, its record on the way) is
  // marked stale too, as soon as its record is written (a soft purge never loses to a commit
  // already on its way, as Delete); when that is all there is, returns kStalePending.
  static constexpr uint64_t kStalePending = UINT64_MAX;
  Result<uint64_t> Invalidate(std::string_view key, uint64_t if_generation, bool set_ttl,
                              uint64_t ttl_ns);
  // Describes `key`'s head for one-sided readers (publishing it in the head table on first
  // use); nullopt: not stored. The entry stays current until the head leaves RAM or the
  // version leaves the index. A head not in RAM is brought in first, as `disk` says:
  //   kBlock: read here (blocking; tools and tests);
  //   kAsync: not read here: the description has no entry and `*refill` gets a stream of the
  //           head; Peek it (its first chunk from disk brings the head into RAM; kWait means
  //           its ready callback runs later), then Describe again with kNever;
  //   kNever: the description has no entry (the head is read two-sided).
  enum class DiskRead { kBlock, kAsync, kNever };
  Result<std::optional<HeadDescription>> Describe(std::string_view key,
                                                  DiskRead disk = DiskRead::kBlock,
                                                  StreamPtr* refill = nullptr);
  // The head table entry of `key`'s head if version `generation` of it is resident,
  // published on first use (no disk read; nullopt: not in RAM, or the table is full).
  std::optional<std::pair<uint32_t, sbe::HeadTableEntry>> PublishHead(const std::string& key,
                                                                      uint64_t generation);
  // Gives `key`'s committed version a new time to live (ttl_ns from now; 0: none),
  // journaled; its bytes and generation stay (a memcache touch keeps the CAS). Local readers
  // holding its head table entry are sent back to the core (the entry is withdrawn), so
  // they learn the new expiry. nullopt: no unexpired version.
  struct Touched {
    uint64_t generation = 0, expires_unix_ns = 0;
  };
  // With a condition that does not hold: nullopt, nothing changed. `delete_now`: the
  // version is deleted (Touched with expires_unix_ns 0).
  Result<std::optional<Touched>> Touch(std::string_view key, uint64_t ttl_ns,
                                       TouchCondition condition = {});
  // Gives `key`'s committed version new metadata, a new time to live (ttl_ns from now; 0:
  // none) and now as its creation time, under a new generation, without rewriting its
  // bytes (an HTTP revalidation answered 304): loans and RAM copies carry over as for
  // Invalidate, local readers are sent back to the core. `if_generation` (non-zero): only
  // that version, else FailedPrecondition. nullopt: nothing unexpired stored.
  Result<std::optional<Touched>> Refresh(std::string_view key, uint64_t if_generation,
                                         std::string metadata, uint64_t ttl_ns);
  // A page of the keys (Index::Scan; expired keys are left out).
  struct ScanPage {
    std::vector<std::string> keys;
    uint64_t next_cursor = 0;
  };
  ScanPage Scan(uint64_t cursor, size_t count, size_t max_key_bytes) const;
  // Deletes every object whose key starts with `prefix` ("" = all); returns how many.
  // O(objects): an administrative operation, not for the request path.
  Result<uint64_t> DeletePrefix(std::string_view prefix);
  // Marks every unexpired object whose key starts with `prefix` stale (Invalidate: an HTTP
  // soft purge: kept, revalidated before it is served fresh again); returns how many were
  // not stale yet (fills committing under the prefix included, as Invalidate marks them).
  // O(objects), as DeletePrefix.
  Result<uint64_t> InvalidatePrefix(std::string_view prefix);

  enum class Lookup { kHit, kMiss, kFilling };
  // A hit's range lent whole from its RAM head, without a stream (OpenStream's `lend_head`).
  struct HeadLoan {
    const ObjectRecord* record = nullptr;  // its index record: valid until the store changes
    std::span<const uint8_t> bytes;        // the range, in the head pool
    uint64_t pin = 0;                      // holds them until ReleasePin(pin)
  };
  struct Opened {
    Lookup status = Lookup::kMiss;
    const ObjectInfo* info = nullptr;  // the stream's (lives as long as it; not copied)
    StreamPtr stream;                  // for kHit and kFilling
    std::optional<HeadLoan> lent;      // (lend_head: a kHit lent instead; no stream, no info)
  };
  // A stream of object bytes [offset, offset + length) (clamped to the object). With
  // `follow_fill`, a key being filled (and not yet committed) streams that fill.
  // `access` / `marks` as Head's (a fill followed is no committed version: no marks).
  // With `lend_head`, a hit whose (non-empty) range lies whole in its resident RAM head comes
  // as `lent` instead of a stream: the same lookup, counts and marks, none of a stream's
  // set-up (the hot small get of a reader that maps the pools).
  Result<Opened> OpenStream(std::string_view key, uint64_t offset = 0, uint64_t length = UINT64_MAX,
                            bool follow_fill = false, const AccessRequest* access = nullptr,
                            AccessMarks* marks = nullptr, bool lend_head = false);

  // Dispatches disk completions and does due background work (TTL expiry). Never blocks.
  VoidResult Poll();
  // Milliseconds until Poll() has background work due (-1: none scheduled), so the owner's
  // loop wakes for it (an expired object must leave even when no request comes, a stalled
  // fill must be aborted even when nothing else happens; 0 while a background checkpoint
  // is encoded a slice per Poll).
  int MillisUntilDue() const;
  // Fills Poll() aborted since the last call because they received nothing for
  // fill_timeout_ns (their owner still thinks they run: tell it).
  std::vector<FillId> TakeTimedOutFills() { return std::exchange(timed_out_, {}); }
  int event_fd() const { return io_->event_fd(); }
  // With group_commit: readable when a background sync or checkpoint finished (-1 without).
  int sync_event_fd() const { return index_->event_fd(); }

  // Runs `done` once every change made so far (commits, deletes, purges, evictions) is
  // durable: at once when it already is, else from a later Poll(); with an error if the
  // journal failed. Callbacks run in the order they were registered.
  void WhenDurable(std::function<void(const Status&)> done);
  // Blocks until everything changed so far is durable (shutdown, tools).
  VoidResult SyncNow();
  // Clean shutdown: everything durable, and a checkpoint if the journal holds anything, so
  // the next start replays nothing.
  VoidResult Close();

  const StoreStats& stats() const { return stats_; }
  // Administrative reads (O(objects) for the walk): every committed object with the bytes of
  // its head in RAM (0: read from disk); one object's record (nullptr: not stored).
  void ForEachObject(
      const std::function<void(const ObjectRecord&, uint64_t head_in_ram)>& fn) const;
  const ObjectRecord* Record(std::string_view key) const { return index_->Find(key); }
  uint64_t HeadBytesInRam(const ObjectRecord& rec) const;

  const HeadPool& pool() const { return *pool_; }
  uint64_t expiring_objects() const { return index_->expiring(); }
  // Entries of the heads' CLOCK (tests: bounded by twice the resident heads, plus slack).
  size_t head_clock_entries() const { return head_clock_.size(); }
  const HeadTable& head_table() const { return *head_table_; }
  const TierSpace& tier(size_t i = 0) const { return *tiers_[i]; }
  size_t tier_count() const { return tiers_.size(); }
  const IoBufferPool& buffers() const { return *buffers_; }
  // Bytes of an object kept in RAM; its first extent on disk ends there too.
  uint64_t ram_head() const { return options_.ram_head; }
  const S3Fifo& eviction() const { return policy_; }
  const Index& index() const { return *index_; }
  VoidResult Checkpoint() { return index_->Checkpoint(); }

 private:
  friend class Stream;
  struct Fill {
    std::string key;
    uint64_t ttl_ns = 0;
    uint64_t expected_size = UINT64_MAX;
    std::string metadata;
    std::string tags;
    bool variant = false;  // SetFillVariant
    std::unique_ptr<ObjectWriter> writer;
    std::optional<PoolSlot> head;
    uint64_t head_len = 0;  // bytes copied into the head slot so far
    // The RAM tail taken as the bytes came (whole blocks; none once a block was refused).
    std::vector<PoolSlot> tail;
    uint64_t tail_len = 0;
    bool tail_closed = false;
    uint64_t started_unix_ns = 0;
    uint64_t last_data_ns = 0;  // MonotonicNanos of BeginFill or the last Append
    bool head_pending = false;  // reserved; SetFillHead not yet called
    PutCondition condition;
    std::vector<Stream*> followers;
    // CommitAsync: the last writes are in flight; then the record, then `on_commit`.
    bool committing = false;
    bool delete_after_commit = false;  // deleted (purged) while committing
    // Invalidated (soft-purged) while committing: marked stale once its record is written,
    // with a new time to live if `stale_set_ttl` (Invalidate's set_ttl, stale_ttl_ns).
    bool stale_after_commit = false, stale_set_ttl = false;
    uint64_t stale_ttl_ns = 0;
    // Invalidate and InvalidatePrefix: marks the fill stale after its commit if it is
    // committing and was not deleted meanwhile (false: it is not such a fill).
    bool MarkStaleAfterCommit(bool set_ttl, uint64_t ttl_ns) {
      if (!committing || delete_after_commit) return false;
      stale_after_commit = true;
      stale_set_ttl = set_ttl;
      stale_ttl_ns = ttl_ns;
      return true;
    }
    uint64_t commit_size = UINT64_MAX;
    std::function<void(Result<uint64_t>)> on_commit;
  };
  // Deletes the committed version only (eviction, expiry, damage).
  Result<bool> DeleteCommitted(std::string_view key);
  // The same for the record `r` of `key` the caller found (not null).
  Result<bool> DeleteRecord(std::string_view key, const ObjectRecord& r);
  VoidResult CheckCondition(std::string_view key, const PutCondition& c) const;
  // Commit's first half: the fill, if it may commit with `expected_size` (else aborted).
  Result<Fill*> CommittableFill(FillId id, uint64_t expected_size);
  // Commit's second half, once every write of `id` has landed.
  Result<uint64_t> CommitWritten(FillId id);
  struct Resident {  // in-memory only: the head slot of the current version of a key
    uint64_t generation = 0;
    PoolSlot slot;
    uint64_t length = 0;                 // object bytes in the slot
    uint64_t alloc_len = 0;              // the length the slot was allocated for (pool accounting)
    bool referenced = true;              // CLOCK bit for head demotion
    uint32_t entry = sbe::kNoHeadEntry;  // its head table entry, once described
    // Object bytes [length, length + tail_bytes) in RAM too: whole pool blocks, in order.
    std::vector<PoolSlot> tail;
    uint64_t tail_bytes = 0;
    bool tail_referenced = false;  // CLOCK bit for dropping tails (read since the hand passed)
    uint8_t reads = 0;             // loans made on it (saturating; aged, see Reads())
    uint32_t reads_epoch = 0;
  };
  Store() = default;
  // The committed record of `key`, counted as a hit; nullptr (a miss) when there is none or
  // it has expired (then deleted).
  // `*now`: the time when the key is there (the clock read once for all of a request's
  // checks; not at all for a miss): NowNs() for a record that expires; for one that never
  // does, whose time only goes into access stamps (whole seconds), CoarseNowNs().
  Result<const ObjectRecord*> FindLive(const HashedKey& key, uint64_t* now);
  // FindLive for a read: vivifies a miss and does the read's bookkeeping (AccessRequest).
  Result<const ObjectRecord*> FindForRead(const HashedKey& key, const AccessRequest* access,
                                          AccessMarks* marks);
  Result<const ObjectRecord*> Vivify(std::string_view key, uint64_t ttl_ns);
  // A version of `key` left the index (replaced or deleted): free its extents and head now,
  // or at the last release of its loans (`loan_handle`: its record's, read before it left).
  void Retire(const std::string& key, uint64_t generation, uint64_t loan_handle,
              std::vector<Extent> extents, uint64_t lsn);
  // `rec`'s version has loans out.
  bool Lent(const ObjectRecord& rec) {
    return versions_.Find(rec.loan_handle, rec.generation) != nullptr;
  }
  // The record of `key` at `generation` has loans out (a resident head's or tail's veto).
  bool Lent(const std::string& key, uint64_t generation);
  // Extents of a version that left the index at record `lsn`: free once it is durable (a
  // crash before that replays the version, whose bytes must still be there).
  void FreeWhenDurable(std::vector<Extent> extents, uint64_t lsn);
  void FreeDurable();  // frees what has become durable
  // A writer found tier `tier` full: frees space (waiting for a sync if that is what holds
  // it back, evicting a batch otherwise). False: nothing more can be freed.
  bool MakeRoom(uint16_t tier);
  // ResourceExhausted when an object of `expected_size` could never fit a tier.
  VoidResult CheckFits(std::string_view key, uint64_t expected_size) const;
  void FinishDurability();  // after Poll: waiters and frees up to the durable LSN
  // A resident head leaves RAM or its version leaves the index: readers of its descriptor
  // must see it stale from now on, before the slot can be freed and reused.
  // `key`'s version `old` is now version `gen` with the same bytes (Invalidate, Refresh).
  void Reissued(const std::string& key, uint64_t old, uint64_t gen);
  void Withdraw(Resident& r) {
    if (r.entry == sbe::kNoHeadEntry) return;
    head_table_->Withdraw(r.entry);
    r.entry = sbe::kNoHeadEntry;
    ++stats_.descriptors_withdrawn;
  }
  // A reader that serves described heads itself (goblin-gateway's local hits) read `r`'s
  // since the last look (its touch byte, cleared): counts as a read for demotion and eviction.
  bool TakeTouch(Resident& r) {
    if (r.entry == sbe::kNoHeadEntry || !head_table_->TakeTouch(r.entry)) return false;
    ++stats_.heads_touched;
    return true;
  }
  void FreeHead(const PoolSlot& slot, uint64_t len) {
    pool_->Free(slot, len);
    --stats_.heads_in_ram;
  }
  // A pool slot of `len` bytes, dropping RAM tails, then demoting cold heads to make room;
  // nullopt if none can be.
  std::optional<PoolSlot> AllocateHead(uint64_t len);
  bool DemoteOneHead();
  // RAM tails. A block for a tail if the pool has one beyond the heads' reserve; else, for
  // a read (`displace_colder_than` >= 0: the reader's reads before this one), the tail the
  // CLOCK hand stops at is dropped for it if it was read less often (TinyLFU's admission:
  // a scan or a uniform sweep over more than RAM holds keeps the tails it has instead of
  // copying every disk byte into the pool to drop it again; a hot object gets in). Fills
  // never displace (a flood of new objects never pushes out the tails of read ones).
  std::optional<PoolSlot> AllocateTailBlock(int displace_colder_than);
  void FreeTail(std::vector<PoolSlot>* tail, uint64_t bytes);
  void ShrinkTailEnd(std::vector<PoolSlot>* tail, uint64_t bytes);
  // CLOCK over objects with tails, not one with loans out; with `colder_than` >= 0 only a
  // victim read fewer times than that goes (else it stays, and nothing is dropped).
  bool DropOneTail(int colder_than = -1);
  // A resident's reads, aged: every read_epoch_ (4 loans per resident head) halves them.
  uint32_t Reads(Resident& r);
  void AddToTailClock(const std::string& key);  // (and sheds stale entries now and then)
  // Object bytes at `pos` from `loan`'s RAM tail (its version's, current or retired):
  // empty if that byte is not in RAM.
  std::span<const uint8_t> TailBytes(const Loan& loan, uint64_t pos);
  // A stream read object bytes [offset, offset + data.size()) of `loan`'s object from disk:
  // those that extend its RAM prefix (head + tail) go to RAM too while there is room.
  void AdoptTail(const Loan& loan, uint64_t offset, std::span<const uint8_t> data);
  // Evicts one object (S3-FIFO order; not one with readers; with `tier` >= 0 one that has
  // bytes on that tier); false if none could go.
  bool EvictOne(int tier);
  // After `key` committed as a variant: drops the least recently used others of its object
  // past max_variants.
  void TrimVariants(const std::string& key);
  Result<Resident> RefillHead(const ObjectRecord& rec);
  // Brings `rec`'s head into RAM if it is not (a full pool is not an error: the head is then
  // read from disk); Corruption drops the object.
  VoidResult EnsureHead(const ObjectRecord& rec);
  // Pins `rec`'s generation for a new loan (Get and streams).
  // A loan on `rec`'s version, written into `*loan` (whose strings keep their capacity).
  void MakeLoan(const ObjectRecord& rec, Loan* loan);
  // (the same, `key` being rec.key with its hash computed already)
  void MakeLoan(const ObjectRecord& rec, Loan* loan, const HashedKey& key);
  // A loan made on a resident head: its CLOCK bit and read count (demotion keeps the read).
  void CountHeadRead(Resident& r);
  // A new pin on `rec`'s version (a loan id; ReleasePin gives it back).
  uint64_t LendVersion(const ObjectRecord& rec);
  void AddResident(const std::string& key, Resident r);
  // A stream read object bytes [0, data.size()) of `loan`'s object from disk: keep them as
  // its head if it has none in RAM (a restart's lazy refill, without an extra read).
  void AdoptHead(Loan& loan, std::span<const uint8_t> data);
  void DropCorrupt(std::string key, uint64_t generation, const Status& why);
  VoidResult ReadRange(std::span<const Extent> extents, uint64_t offset, std::span<uint8_t> out);
  bool Expired(const ObjectRecord& r, uint64_t now) const {
    return r.expires_unix_ns != 0 && now >= r.expires_unix_ns;
  }
  void ExpireDue(uint64_t now, size_t max);
  void AbortStalledFills(uint64_t now_mono);
  uint64_t NowNs() const;
  // CLOCK_REALTIME_COARSE: the last tick's time (up to a tick behind NowNs: 4 ms at 250 Hz),
  // read without the TSC (3.5 ns here against NowNs' 24).
  uint64_t CoarseNowNs() const;
  Tiers tiers() const { return {tier_ptrs_.data(), tier_ptrs_.size()}; }

  StoreOptions options_;
  std::unique_ptr<HeadPool> pool_;
  std::unique_ptr<HeadTable> head_table_;
  EventSink event_sink_;
  bool quiet_ = false;  // DeletePrefix: its deletes report nothing
  void Event(ObjectEvent e, std::string_view key) {
    if (event_sink_ && !quiet_) event_sink_(e, key);
  }
  std::vector<std::unique_ptr<TierSpace>> tiers_;
  std::vector<TierSpace*> tier_ptrs_;
  std::unique_ptr<Index> index_;
  std::unique_ptr<IoEngine> engine_;
  std::unique_ptr<IoBufferPool> buffers_;
  std::unique_ptr<IoRouter> io_;
  absl::node_hash_map<FillId, Fill> fills_;
  absl::node_hash_map<std::string, FillId, StringHash, std::equal_to<>> filling_;  // key -> fill
  absl::node_hash_map<std::string, Resident, StringHash, std::equal_to<>> heads_;
  VersionLoans versions_;  // loans out per version (ObjectRecord::loan_handle)
  LoanSlots loan_ids_;     // loan id -> its version's handle in versions_
  // A stream for this store: a kept one, else a new one.
  StreamPtr NewStream();
  static void ReturnStream(Stream* s);  // (StreamDeleter)
  std::vector<Stream*> spare_streams_;  // closed streams kept for reuse (StreamDeleter)
  std::vector<Stream*> starved_;        // streams waiting for a buffer
  std::vector<Stream*> drive_waiters_;  // streams waiting for room in a drive's queue
  std::vector<Stream*> waking_;         // (WakeAll's)
  // Parked chunks: a chunk read from disk whose stream ended before its last byte (the
  // memcache front asks for a value in pieces, HTTP clients for ranges one after another: a
  // stream each), kept briefly, by the extent it holds, for the stream that reads on: an
  // extent is read whole (its checksum covers it), so without this each piece would read it
  // again. At most a quarter of the I/O buffers, for kParkedNs; given back at once when a
  // reader finds no free buffer.
  struct ParkedChunk {
    ExtentReader::Chunk chunk;
    uint64_t parked_ns;
  };
  static constexpr uint64_t kParkedNs = 100'000'000;
  std::deque<ParkedChunk> parked_;
  void Park(const ExtentReader::Chunk& c);
  std::optional<ExtentReader::Chunk> Unpark(const Extent& e, uint64_t object_offset);
  void DropParked(uint64_t older_than_ns);  // (0: all)
  // Wakes every stream on `list`, leaving it empty (streams that wait again are put back).
  void WakeAll(std::vector<Stream*>* list);
  std::deque<std::string> head_clock_;  // CLOCK order of resident heads (stale entries skipped)
  std::deque<std::string> tail_clock_;  // the same for resident tails
  uint64_t tail_reserve_blocks_ = 0;    // free pool blocks tails leave to heads
  uint32_t read_epoch_ = 0;             // (Reads(): aging of residents' read counts)
  uint64_t loans_this_epoch_ = 0;
  S3Fifo policy_;
  // Objects with a TTL: (expiry, key), earliest first; entries are checked against the index.
  using Due = std::pair<uint64_t, std::string>;
  std::priority_queue<Due, std::vector<Due>, std::greater<>> expiries_;
  uint64_t next_fill_ = 1;
  std::vector<FillId> timed_out_;
  std::vector<FillId> commits_written_;  // CommitAsync fills whose writes have all landed
  struct PendingFree {
    uint64_t lsn;
    std::vector<Extent> extents;
  };
  std::vector<PendingFree> pending_frees_;
  uint64_t finished_lsn_ = 0;                 // durable LSN FinishDurability last acted on
  std::vector<uint64_t> pending_free_slots_;  // per tier
  std::deque<std::pair<uint64_t, std::function<void(const Status&)>>> durable_waiters_;
  uint64_t next_stall_check_ = 0;  // MonotonicNanos
  uint64_t polls_ = 0;
  StoreStats stats_;
};

// The bytes of one object in order, without copies: a span into the head pool, into a
// fill's buffer, or into an I/O buffer read ahead from disk. Created by Store::OpenStream,
// destroyed by its owner (which releases what it holds), never outliving the store.
class Store::Stream {
 public:
  // Streams come and go with every ObjectGet: the store keeps the ones given back whole
  // (StreamPtr), with the capacity of their loan's key and metadata, so a shard's loop stops
  // allocating for them once warm. Deleted at once under a sanitizer, which must see every
  // use after free.
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  enum class Step { kData, kWait, kEnd };
  // kData: `*out` holds the bytes at position() (valid until the next call into the stream
  // or the store). kWait: nothing yet; the ready callback runs when there is. kEnd: done.
  // Errors: Corruption (the object was dropped), Aborted (the followed fill was abandoned),
  // IoError.
  Result<Step> Peek(std::span<const uint8_t>* out);
  void Consume(uint64_t n);

  // Where the bytes of the last kData Peek live, so another process that maps the pools
  // can be lent them instead of sent a copy.
  enum class Where : uint8_t { kHeadPool, kIoBuffer, kPrivate };
  Where where() const { return where_; }
  // kHeadPool bytes in a stable block (HeadPool::Stable): they may be sent by reference.
  bool stable() const { return stable_; }
  // For kIoBuffer: gives the I/O buffer under the last Peek to the caller, who returns it
  // with Store::ReleaseBuffer; Consume() the peeked bytes next.
  uint32_t DetachChunk();
  // The loan the stream holds on a committed object (id 0 while following a fill).
  const Loan& loan() const { return loan_; }
  // Hands the stream's pin on its object version (its loan's id, 0 while following a fill)
  // to the caller, who ends it with Store::ReleasePin: for a reader lent the range's last
  // piece, one pin instead of a second one (Store::Pin) and the stream's release. The
  // stream reads nothing after it.
  uint64_t TakePin() { return std::exchange(loan_.id, 0); }

  uint64_t position() const { return pos_; }
  uint64_t end() const { return end_; }  // UINT64_MAX: following a fill of unknown size
  bool following_fill() const { return fill_ != 0; }
  const ObjectInfo& info() const { return loan_.info; }
  // Called (from inside Store calls) when a kWait stream may have data.
  void SetReadyCallback(std::function<void()> cb) { ready_ = std::move(cb); }

 private:
  friend class Store;
  explicit Stream(Store* store) : store_(store) {}
  ~Stream() = default;
  // Ends what the stream holds (its reader, its place among a fill's followers or the
  // starved, its loan) and makes it as new, keeping its strings' capacity.
  void Close();
  void Wake() {
    if (ready_) ready_();
  }
  // The fill committed as `rec` (switch to the object) or was abandoned (`rec` null).
  void FillEnded(const ObjectRecord* rec);
  Result<Step> PeekDisk(std::span<const Extent> extents, size_t first_durable_end,
                        std::span<const uint8_t>* out);
  void DropReader();

  Store* store_;
  Loan loan_;               // valid once the stream is on a committed object
  Store::FillId fill_ = 0;  // nonzero while following a fill
  uint64_t pos_ = 0, end_ = 0;
  Status failed_;
  std::unique_ptr<ExtentReader> reader_;
  size_t reader_first_ = 0;  // index in the extent list of the reader's first extent
  std::optional<ExtentReader::Chunk> chunk_;  // the chunk being consumed
  Where where_ = Where::kPrivate;
  bool stable_ = false;
  std::function<void()> ready_;
};

}  // namespace goblin::store
