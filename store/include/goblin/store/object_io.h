// Streaming object data to and from a disk tier. ObjectWriter takes an object's bytes in
// any pieces, fills one I/O buffer per extent, checksums it (XXH3-64) and writes it with
// O_DIRECT through the IoEngine, several extents in flight; Finish() returns the extents
// for the index record. ObjectReader reads an object's extents back with `read_ahead`
// extents in flight, verifies each checksum before handing the buffer out, and reports a
// mismatch as Corruption (the caller drops the object; a damaged byte is never served).
// Both wait for the engine when buffers or queue slots run out (bounded memory), and both
// release everything they hold on every path.
// Limitation for now: a writer or reader uses the engine alone while it has I/O in flight
// (completions are matched by their user_data); the store's completion router that lets
// many streams share one engine is still to come.
// Threading: the owner thread of the engine, the buffer pool and the tier.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "goblin/common/status.h"
#include "goblin/store/disk_io.h"
#include "goblin/store/index.h"
#include "goblin/store/tier_space.h"

namespace goblin::store {

class ObjectWriter {
 public:
  // Buffers must be at least the tier's extent size.
  ObjectWriter(IoEngine* engine, IoBufferPool* buffers, TierSpace* tier);
  ~ObjectWriter();  // aborts an unfinished write
  ObjectWriter(const ObjectWriter&) = delete;
  ObjectWriter& operator=(const ObjectWriter&) = delete;

  VoidResult Append(std::span<const uint8_t> data);
  // Writes what remains and waits for every write; the extents carry their checksums.
  Result<std::vector<Extent>> Finish();
  // Waits for in-flight writes and frees every allocated extent.
  void Abort();
  uint64_t bytes() const { return bytes_; }

 private:
  VoidResult SubmitCurrent();
  VoidResult WaitFor(uint32_t max_in_flight);

  IoEngine* engine_;
  IoBufferPool* buffers_;
  TierSpace* tier_;
  std::vector<Extent> extents_;
  std::vector<uint32_t> buffer_of_;  // per submitted-not-completed request: buffer index
  std::optional<uint32_t> cur_buf_;
  uint32_t cur_len_ = 0;
  uint64_t bytes_ = 0;
  uint32_t in_flight_ = 0;
  bool failed_ = false;
  bool done_ = false;
  Status error_;
};

class ObjectReader {
 public:
  ObjectReader(IoEngine* engine, IoBufferPool* buffers, const TierSpace* tier,
               std::vector<Extent> extents, uint32_t read_ahead);
  ~ObjectReader();
  ObjectReader(const ObjectReader&) = delete;
  ObjectReader& operator=(const ObjectReader&) = delete;

  struct Chunk {
    uint32_t buffer;  // IoBufferPool index; Release() it when done
    uint32_t length;  // object bytes in it
    uint64_t object_offset;
  };
  // The next verified chunk in object order; nullopt after the last. Corruption when an
  // extent's checksum does not match, IoError when the read failed or came back short.
  Result<std::optional<Chunk>> Next();
  void Release(const Chunk& c) { buffers_->Release(c.buffer); }

 private:
  void Fill();

  IoEngine* engine_;
  IoBufferPool* buffers_;
  const TierSpace* tier_;
  std::vector<Extent> extents_;
  uint32_t read_ahead_;
  size_t next_submit_ = 0;
  size_t next_deliver_ = 0;
  uint64_t offset_ = 0;
  struct Slot {
    uint32_t buffer = 0;
    bool submitted = false;
    bool done = false;
    int32_t result = 0;
  };
  std::deque<Slot> window_;  // extents next_deliver_ .. next_submit_-1
};

}  // namespace goblin::store
