// Disk tier directories: a tier is a directory that `goblin-core --prepare DIR` marked with
// an identity file (GOBLIN-TIER: magic, format version, random tier id, creation time,
// CRC). The core only ever uses, fills or wipes a prepared directory: an empty or foreign
// one (a typo, another program's data) is refused with a message saying what to do, and a
// tier in use by another goblin-core (an exclusive flock on the identity file) is refused
// too. Slow-path calls; thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "goblin/common/fd.h"
#include "goblin/common/status.h"

namespace goblin::store {

inline constexpr const char* kTierIdentityFile = "GOBLIN-TIER";
inline constexpr uint32_t kTierFormatVersion = 1;

struct TierIdentity {
  uint64_t id_hi = 0, id_lo = 0;  // random 128-bit tier id
  uint64_t created_unix_ns = 0;
  uint32_t format_version = 0;
  std::string IdString() const;  // 32 hex digits
};

// Marks `dir` as a Goblin tier. Creates the directory if absent. Refuses a directory that
// holds anything already (foreign data is never adopted); preparing a directory that is
// already a Goblin tier is a no-op that returns its identity.
Result<TierIdentity> PrepareTier(const std::string& dir);

// An open tier: its identity, and the exclusive lock held for as long as this lives.
class TierDir {
 public:
  // Errors: not a directory / missing (NotFound), no identity file (FailedPrecondition,
  // "run goblin-core --prepare DIR"), a damaged identity (Corruption), a newer format
  // (FailedPrecondition), in use by another process (Unavailable).
  static Result<TierDir> Open(const std::string& dir);

  const std::string& path() const { return path_; }
  const TierIdentity& identity() const { return identity_; }

 private:
  std::string path_;
  TierIdentity identity_;
  UniqueFd lock_;
};

// Shards: a tier serving one shard holds its files itself; a tier serving N > 1 shards (one
// goblin-core with --cores N) holds a SHARDS file naming N and one subdirectory per shard,
// shard-0 .. shard-(N-1), each a tier of its own. The layout is fixed by the first start:
// a tier laid out for another shard count is refused with a message naming the count it
// needs (keys are spread over shards by hash, so objects cannot simply be reopened by a
// different number of shards).
inline constexpr const char* kTierShardsFile = "SHARDS";

struct ShardedTier {
  std::optional<TierDir> parent;        // N > 1: the operator's tier, locked while this lives
  std::vector<std::string> shard_dirs;  // the directory each shard's store opens
};

// The shard count `dir` is laid out for: its SHARDS file, else 1 when it holds a store's
// files, else nullopt (new, empty or not there yet: the first start decides).
Result<std::optional<uint16_t>> TierShardLayout(const std::string& dir);

// Checks (and on first use lays out) `dir` for `shards` shards.
Result<ShardedTier> OpenShardedTier(const std::string& dir, uint16_t shards);

// Drives: a tier may be several drives (`--ssd-dir A,B,...`), each a prepared tier
// directory. Each keeps a label naming the store it belongs to (the tier id of the drive
// that holds the store's index), its tier and its number in that tier, so extents find
// their drive whatever order the directories are listed in. Written (atomically) when the
// store first uses the drive.
inline constexpr const char* kDriveLabelFile = "DRIVE";

struct DriveLabel {
  std::string store_id;  // 32 hex digits
  uint16_t tier = 0;
  uint16_t number = 0;
  friend bool operator==(const DriveLabel&, const DriveLabel&) = default;
};

// A tier's drives as configured: "A,B,..." (`--ssd-dir`, `--hdd-dir`); "" is no tier. An
// empty entry or a directory listed twice is InvalidArgument.
Result<std::vector<std::string>> ParseDriveList(const std::string& list);

// nullopt: no label (a drive not used yet); Corruption: a damaged one.
Result<std::optional<DriveLabel>> ReadDriveLabel(const std::string& dir);
VoidResult WriteDriveLabel(const std::string& dir, const DriveLabel& label);

}  // namespace goblin::store
