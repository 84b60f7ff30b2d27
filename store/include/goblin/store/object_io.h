// Streaming object data to and from the disk tiers. ObjectWriter takes an object's bytes in
// any pieces, fills one I/O buffer per extent, checksums it (XXH3-64) and writes it with
// O_DIRECT, several extents in flight; object bytes [0, tier0_bytes) go to the first tier
// and the rest to the second (an extent never straddles the two). Finish() returns the
// extents for the index record. While it runs, Locate() tells a reader following the fill
// where a byte is now: in a buffer in memory (not yet on disk) or in an extent on disk.
// ExtentReader reads extents back with `read_ahead` extents in flight, verifies each
// checksum before handing the buffer out, and reports a mismatch as Corruption (the caller
// drops the object; a damaged byte is never served). It has a non-blocking TryNext() for
// event loops and a blocking Next().
// Both share the engine with every other stream through the IoRouter, keep memory bounded
// (a reader leaves `keep_free` buffers for writers) and release what they hold on every path.
// Threading: the owner thread of the router, the buffer pool and the tiers.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "goblin/common/status.h"
#include "goblin/store/disk_io.h"
#include "goblin/store/index.h"
#include "goblin/store/io_router.h"
#include "goblin/store/tier_space.h"

namespace goblin::store {

// The tiers of a store, indexed by Extent::tier.
using Tiers = std::span<TierSpace* const>;

class ObjectWriter final : public IoClient {
 public:
  // Buffers must be at least the tiers' extent size. `tier0_bytes`: object bytes on the first
  // tier (UINT64_MAX: all of them). `head_cut`: an extent ends there (the RAM head's end), so
  // a read of the bytes after a resident head never reads the head's bytes from disk too
  // (an extent is read whole: its checksum covers it); 0: no cut.
  ObjectWriter(IoRouter* io, Tiers tiers, uint64_t tier0_bytes = UINT64_MAX, uint64_t head_cut = 0);
  ~ObjectWriter();  // aborts an unfinished write
  ObjectWriter(const ObjectWriter&) = delete;
  ObjectWriter& operator=(const ObjectWriter&) = delete;

  // `data` may be the span Place() lent (then nothing is copied).
  VoidResult Append(std::span<const uint8_t> data);
  // Lends the memory where object bytes [offset, offset + length) will lie in the current
  // I/O buffer or the kPlaceAhead next ones (taken now), so a transport can receive them
  // there before they are appended; Append() of exactly that span, in object order, then
  // copies nothing. The buffer is pinned (Placed.buffer: IoBufferPool::Unpin it once the
  // transport is done writing, whatever became of the write): it is not reused, even after
  // Abort, until then. nullopt when those bytes do not fall in one extent's buffer within
  // reach, the pool has none to spare, or the writer failed or is finishing.
  struct Placed {
    uint8_t* at;
    uint32_t buffer;
  };
  std::optional<Placed> Place(uint64_t offset, uint32_t length);
  static constexpr uint32_t kPlaceAhead = 2;  // (a put's pulls in flight span ~2 extents)
  // Writes what remains and waits for every write; the extents carry their checksums.
  Result<std::vector<Extent>> Finish();
  // Starts the last write and returns at once; `done` runs (from inside the router's Poll,
  // or from here when nothing is in flight) once every write has landed. Finish() then
  // returns without waiting. Nothing may be appended after it.
  VoidResult FinishAsync(std::function<void()> done);
  // Waits for in-flight writes and frees every allocated extent.
  void Abort();
  uint64_t bytes() const { return bytes_; }

  // Where object byte `offset` (< bytes()) is now: in memory (`memory` holds the bytes from
  // `offset` to the end of what that buffer holds; valid until the next call into the
  // writer or the router) or on disk in extent `extent` (its write has completed).
  struct Location {
    std::span<const uint8_t> memory;
    size_t extent = SIZE_MAX;
  };
  Location Locate(uint64_t offset) const;
  const std::vector<Extent>& extents() const { return extents_; }
  uint64_t extent_start(size_t i) const { return starts_[i]; }
  bool extent_on_disk(size_t i) const { return in_memory_[i] == nullptr; }
  // Called when a tier is full: frees space on tier `tier` (evicting) and returns true, or
  // false when nothing more can be freed (the write then fails with ResourceExhausted).
  void SetMakeRoom(std::function<bool(uint16_t tier)> fn) { make_room_ = std::move(fn); }

  void OnIoComplete(uint32_t tag, int32_t result) override;
  // Times Append waited for the disk (no I/O buffer and the writer's share used up).
  uint64_t disk_waits() const { return disk_waits_; }
  // Writes one writer keeps on their way before it waits for the disk rather than staging
  // more (when every I/O buffer is out).
  static constexpr uint32_t kOwnWritesBeforeWaiting = 4;

 private:
  VoidResult SubmitCurrent();
  VoidResult Fail(Status s);
  VoidResult WaitFor(uint32_t max_in_flight);
  uint32_t CurrentLimit() const { return LimitAt(cur_start_); }
  uint32_t LimitAt(uint64_t start) const;  // bytes the extent starting at `start` takes

  IoRouter* io_;
  IoBufferPool* buffers_;
  std::vector<TierSpace*> tiers_;
  uint64_t tier0_bytes_;
  uint64_t head_cut_;
  uint64_t client_ = 0;
  std::vector<Extent> extents_;
  std::vector<uint64_t> starts_;  // object offset of each extent
  // A private, 4 KiB-aligned staging buffer (the I/O buffers were all out).
  struct Staging {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  using StagingBuffer = std::unique_ptr<uint8_t, Staging>;
  // Per extent while its write is in flight: its I/O buffer (or kNoBuffer), its staging
  // buffer and capacity (or null), and where its bytes are (null once on disk).
  std::vector<uint32_t> in_buffer_;
  std::vector<StagingBuffer> staging_;
  std::vector<uint32_t> staging_cap_;
  std::vector<const uint8_t*> in_memory_;
  std::optional<uint32_t> cur_buf_;
  std::deque<uint32_t> ahead_;  // buffers for the extents after the current one (Place)
  StagingBuffer cur_staging_;   // instead of cur_buf_ when the pool had none
  uint32_t cur_staging_cap_ = 0;
  uint8_t* current() const { return cur_buf_ ? buffers_->Buffer(*cur_buf_) : cur_staging_.get(); }
  bool has_current() const { return cur_buf_.has_value() || cur_staging_ != nullptr; }
  // Room for `need` bytes in the current staging buffer (grown up to `limit`).
  VoidResult GrowStaging(uint32_t need, uint32_t limit);
  void DropCurrent();
  uint32_t cur_len_ = 0;
  uint64_t cur_start_ = 0;  // object offset of the current buffer's first byte
  uint64_t bytes_ = 0;
  uint32_t in_flight_ = 0;
  uint64_t disk_waits_ = 0;
  bool failed_ = false;
  bool done_ = false;
  Status error_;
  std::function<bool(uint16_t)> make_room_;
  std::function<void()> finished_;  // FinishAsync's: runs once the last write lands
};

class ExtentReader final : public IoClient {
 public:
  // Reads `extents` in order; the first holds object bytes from `first_offset`.
  ExtentReader(IoRouter* io, Tiers tiers, std::vector<Extent> extents, uint64_t first_offset,
               uint32_t read_ahead, uint32_t keep_free = 0);
  ~ExtentReader();
  ExtentReader(const ExtentReader&) = delete;
  ExtentReader& operator=(const ExtentReader&) = delete;

  struct Chunk {
    uint32_t buffer;  // IoBufferPool index; Release() it when done
    uint32_t length;  // object bytes in it
    uint64_t object_offset;
    Extent extent;  // the extent read into it (its identity: the same bytes wherever read)
  };
  enum class Step { kChunk, kWait, kEnd };
  // The next verified chunk in object order if its read has landed (kWait: not yet, the
  // ready callback runs when it does; kEnd: after the last). Corruption when an extent's
  // checksum does not match, IoError when the read failed or came back short.
  Result<Step> TryNext(Chunk* out);
  // Blocking form: polls the router until the next chunk lands; nullopt after the last.
  Result<std::optional<Chunk>> Next();
  void Release(const Chunk& c) { buffers_->Release(c.buffer); }
  // Starts reads for free buffers (after buffers were released elsewhere).
  void Fill();
  // Runs when the read at the front lands (from inside IoRouter::Poll).
  void SetReadyCallback(std::function<void()> cb) { ready_ = std::move(cb); }
  // Nothing in flight and nothing read: waiting for a buffer (starved), or for the next
  // extent's drive to have room in its queue (a completion there makes it).
  bool starved() const { return window_.empty() && next_submit_ < extents_.size() && !drive_full_; }
  bool waiting_for_drive() const { return window_.empty() && drive_full_; }
  uint64_t next_offset() const { return offset_; }
  size_t remaining_extents() const { return extents_.size() - next_deliver_; }

  void OnIoComplete(uint32_t tag, int32_t result) override;

 private:
  IoRouter* io_;
  IoBufferPool* buffers_;
  std::vector<TierSpace*> tiers_;
  std::vector<Extent> extents_;
  uint32_t read_ahead_;
  uint32_t keep_free_;
  uint64_t client_ = 0;
  size_t next_submit_ = 0;
  bool drive_full_ = false;  // Fill() stopped at a drive whose queue was full
  size_t next_deliver_ = 0;
  uint64_t offset_ = 0;
  struct Slot {
    uint32_t buffer = 0;
    bool done = false;
    int32_t result = 0;
  };
  std::deque<Slot> window_;  // extents next_deliver_ .. next_submit_-1
  std::function<void()> ready_;
};

}  // namespace goblin::store
