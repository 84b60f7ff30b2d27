// Index: the durable map from object key to object record (size, generation, times, the
// gateway's metadata blob, and the disk extents that hold the object whole with a checksum
// each). Every change is a journal record made durable before it is applied, so a crash
// never loses a committed object and never shows an uncommitted one; Checkpoint() writes the
// whole map atomically and restarts the journal. Keys are looked up by their XXH3-128
// digest and compared in full, so digest collisions cost a probe, never a wrong object.
// Threading: one owner thread (a core shard).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "goblin/common/status.h"
#include "goblin/store/journal.h"

namespace goblin::store {

struct KeyDigest {
  uint64_t hi = 0, lo = 0;
  static KeyDigest Of(std::string_view key);
  friend bool operator==(const KeyDigest&, const KeyDigest&) = default;
};

struct Extent {
  uint16_t tier = 0;      // 0: first disk tier, 1: second
  uint32_t file = 0;      // extent file number within the tier
  uint64_t offset = 0;    // byte offset in that file
  uint64_t length = 0;    // bytes of object data
  uint64_t checksum = 0;  // XXH3-64 of those bytes
  friend bool operator==(const Extent&, const Extent&) = default;
};

struct ObjectRecord {
  std::string key;
  uint64_t size = 0;
  uint64_t generation = 0;  // assigned by the index at commit, strictly increasing
  uint64_t created_unix_ns = 0;
  uint64_t expires_unix_ns = 0;  // 0: never
  std::string metadata;
  std::vector<Extent> extents;
  friend bool operator==(const ObjectRecord&, const ObjectRecord&) = default;
};

// The serialized form used in journal and checkpoint records (bounds-checked decode).
std::vector<uint8_t> EncodeRecord(const ObjectRecord& r);
Result<ObjectRecord> DecodeRecord(std::span<const uint8_t> bytes);

struct IndexRecovery {
  uint64_t from_checkpoint = 0;  // objects loaded from the checkpoint
  uint64_t journal_records = 0;  // journal records applied after it
  uint64_t discarded_bytes = 0;  // torn journal tail cut off
};

class Index {
 public:
  // Loads `dir`/index.checkpoint (if present) and replays `dir`/index.journal. A damaged
  // checkpoint or a journal that does not continue it is a Corruption error: the core
  // refuses to start rather than serve a silently shrunken cache.
  static Result<std::unique_ptr<Index>> Open(const std::string& dir);

  // Makes `record` durable (generation assigned here) and visible, replacing any object
  // with the same key. `released` receives the replaced object's extents (their space is
  // free once the caller has no loans on them).
  Result<uint64_t> Commit(ObjectRecord record, std::vector<Extent>* released);
  // Removes `key` durably; false when it was not present.
  Result<bool> Delete(std::string_view key, std::vector<Extent>* released);

  const ObjectRecord* Find(std::string_view key) const;
  size_t size() const { return size_; }
  void ForEach(const std::function<void(const ObjectRecord&)>& fn) const;

  // Writes every live record to a new checkpoint (tmp + fsync + rename), then restarts the
  // journal after it.
  VoidResult Checkpoint();

  const IndexRecovery& recovery() const { return recovery_; }
  uint64_t journal_bytes() const { return journal_.file_bytes(); }

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

  std::string dir_;
  Journal journal_;
  // Buckets by digest; a bucket holds more than one record only on a digest collision.
  std::unordered_map<KeyDigest, std::vector<ObjectRecord>, DigestHash> map_;
  size_t size_ = 0;
  uint64_t next_generation_ = 1;
  uint64_t applied_lsn_ = 0;
  IndexRecovery recovery_;
};

}  // namespace goblin::store
