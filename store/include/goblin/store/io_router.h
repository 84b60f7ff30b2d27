// IoRouter: lets many streams (object writers, object readers, head refills) share one
// IoEngine. Each request is tagged with its owner and the owner's own tag; Poll() reaps
// completions and hands each to its owner's OnIoComplete. A reader may go away with reads
// still in flight: the router releases their buffers when they land (the bytes are
// dropped). A writer must wait for its writes before it goes (its slots must not be reused
// while a write to them is in flight).
// No allocation per request once the in-flight table has grown to the engine's depth.
// Threading: the owner thread of the engine and buffer pool (a core shard).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "goblin/common/status.h"
#include "goblin/store/disk_io.h"

namespace goblin::store {

class IoClient {
 public:
  virtual void OnIoComplete(uint32_t tag, int32_t result) = 0;

 protected:
  ~IoClient() = default;
};

class IoRouter {
 public:
  static constexpr uint32_t kNoBuffer = UINT32_MAX;

  IoRouter(IoEngine* engine, IoBufferPool* buffers) : engine_(engine), buffers_(buffers) {}
  IoRouter(const IoRouter&) = delete;
  IoRouter& operator=(const IoRouter&) = delete;

  uint64_t Register(IoClient* client);
  // Forgets a client; completions of its requests still in flight release their buffer.
  void Unregister(uint64_t client);

  // Queues a request for `client`; `buffer` (an IoBufferPool index, or kNoBuffer) is the
  // buffer it reads into or writes from. False when the engine is at its depth.
  // `in_flight` (if given: a drive's count, DriveSpace::io_in_flight) is raised now and
  // lowered when the request completes, whether or not its client is still there.
  bool Submit(uint64_t client, uint32_t tag, const IoRequest& request, uint32_t buffer,
              uint32_t* in_flight = nullptr);
  VoidResult Flush() { return engine_->Flush(); }
  // Dispatches waiting completions, first waiting for at least `min_complete` (capped at
  // what is in flight). Returns how many were dispatched.
  Result<size_t> Poll(uint32_t min_complete);

  uint32_t in_flight() const { return engine_->in_flight(); }
  uint32_t depth() const { return engine_->depth(); }
  int event_fd() const { return engine_->event_fd(); }
  IoEngine& engine() { return *engine_; }
  IoBufferPool& buffers() { return *buffers_; }
  uint64_t orphaned_completions() const { return orphaned_; }

  // Staging: heap memory writers use for an extent when every I/O buffer is out (many fills
  // at once), bounded by `limit` bytes for the whole shard.
  void set_staging_limit(uint64_t limit) { staging_limit_ = limit; }
  bool TakeStaging(uint64_t bytes) {
    if (staging_bytes_ + bytes > staging_limit_) return false;
    staging_bytes_ += bytes;
    return true;
  }
  void GiveStaging(uint64_t bytes) { staging_bytes_ -= bytes; }
  uint64_t staging_bytes() const { return staging_bytes_; }
  uint64_t staging_limit() const { return staging_limit_; }

 private:
  struct Pending {
    uint64_t client = 0;
    uint32_t tag = 0;
    uint32_t buffer = kNoBuffer;
    uint32_t* in_flight = nullptr;
  };
  IoEngine* engine_;
  IoBufferPool* buffers_;
  std::unordered_map<uint64_t, IoClient*> clients_;
  uint64_t next_client_ = 1;
  std::vector<Pending> pending_;  // by user_data
  std::vector<uint32_t> free_;    // free pending_ slots
  uint64_t orphaned_ = 0;
  uint64_t staging_bytes_ = 0, staging_limit_ = 256ull << 20;
};

}  // namespace goblin::store
