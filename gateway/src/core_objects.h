// CoreObjects: whole-value object requests to goblin-core over a CoreLink, for a front that
// holds its values in memory (RESP: a command's arguments and its reply are whole): get (a
// range, or only what is known of the object), put (conditional, keeping the expiry), delete
// (conditional), touch (with Redis's EXPIRE conditions), a page of a shard's keys, and a
// purge of a shard. Each request's callback runs exactly once, from inside OnMessage,
// OnCoreDown or Tick (a read lost with the link is sent again once it is back). A put sends its
// value in pieces while the link has room (the rest from Tick), and one that meets another write of
// its key in progress tries again every millisecond up to `busy_timeout`. Refusals come back as the
// core's codes (NotFound, AlreadyExists, FailedPrecondition: a conditional put or delete whose
// condition failed). Threading: the front's loop thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core_link.h"
#include "goblin/common/status.h"

namespace goblin::gateway {

// Whether `m` (a message answering an ObjectGet or ObjectHead) is the last of its answer.
bool IsLastObjectAnswer(uint16_t template_id, std::span<const uint8_t> m);

class CoreObjects {
 public:
  // `next_corr`: the front's correlation counter (ids are unique across the link). A get of
  // more than `max_value` bytes fails with OutOfRange (the value is not held here).
  CoreObjects(CoreLink* link, uint64_t* next_corr, std::chrono::milliseconds busy_timeout,
              uint64_t max_value);

  struct Object {
    bool found = false;
    uint64_t size = 0, generation = 0, expires_ns = 0;  // expires_ns: unix ns, 0: never
    std::string metadata, bytes;
  };
  using GetDone = std::function<void(Result<Object>)>;
  // Bytes [offset, offset + length) (length UINT64_MAX: to the end). `flags`: ObjectGet
  // flags besides kGetFirstBytes (kGetNoBump: a read-modify-write's read is no read of it).
  void Get(std::string_view key, uint64_t offset, uint64_t length, GetDone done,
           uint32_t flags = 0);
  // What is known of it, no bytes.
  void Head(std::string_view key, GetDone done);

  struct PutSpec {
    uint32_t flags = 0;  // wire::kPutIf*, kPutKeepExpiry
    uint64_t ttl_ns = 0;
    uint64_t if_generation = 0;
    std::string metadata;
  };
  using PutDone = std::function<void(Result<uint64_t>)>;  // the new version's generation
  void Put(std::string key, std::string value, PutSpec spec, PutDone done);

  using DeleteDone = std::function<void(Result<bool>)>;  // false: nothing was stored
  void Delete(std::string_view key, uint64_t if_generation, DeleteDone done);

  struct Touched {
    bool found = false;  // false: nothing stored, or a condition did not hold
    uint64_t generation = 0, expires_ns = 0;
  };
  void Touch(std::string_view key, uint64_t ttl_ns, uint32_t flags,
             std::function<void(Result<Touched>)> done);

  struct ScanPage {
    std::vector<std::string> keys;
    uint64_t next_cursor = 0;
    // the shard's totals
    uint64_t objects = 0, expiring = 0, ram_bytes = 0, ram_limit = 0, expired = 0, evicted = 0;
  };
  void Scan(uint16_t shard, uint64_t cursor, uint32_t count,
            std::function<void(Result<ScanPage>)> done);
  void Purge(uint16_t shard, std::function<void(Result<uint64_t>)> done);
  // A setting of the core as a whole (CoreConfig: notify-keyspace-events): its value after.
  void Config(bool set, std::string_view name, std::string_view value,
              std::function<void(Result<std::string>)> done);

  // A message from the core with correlation id `corr`: true if it answered one of ours.
  bool OnMessage(uint16_t template_id, uint64_t corr, std::span<const uint8_t> m);
  // The core went away: every request fails with Unavailable, but reads (Get, Head): each
  // is sent again once when the link is back (OnCoreUp; at the key's owner then), and fails
  // only if it is not back within kResendWaitNs.
  void OnCoreDown();
  void OnCoreUp();
  // One core was lost alone (CoreLink::set_on_core_lost; its shards [first, first + count)):
  // the requests sent there fail with Unavailable, reads (with set_resend_reads) are sent
  // again at once at the key's next owner; the others go on.
  void OnCoreLost(uint16_t first, uint16_t count);
  // Reads are sent again only if the front asks for it (RESP: its command waits for the
  // answer; memcache ends every op when the core goes down).
  void set_resend_reads(bool on) { resend_reads_ = on; }
  static constexpr uint64_t kResendWaitNs = 5'000'000'000;
  // Retries due and the rest of values waiting for room. True if it did something.
  bool Tick(uint64_t now);
  // Requests waiting for time (a retry) or room (a value not all sent): the loop polls.
  bool waiting() const { return !retrying_.empty() || !sending_.empty() || !resend_.empty(); }
  size_t in_flight() const { return reqs_.size(); }

 private:
  enum class Kind : uint8_t { kGet, kPut, kDelete, kTouch, kScan, kPurge, kConfig };
  struct Req {
    Kind kind = Kind::kGet;
    uint64_t id = 0;
    uint64_t corr = 0;   // the request's (a put: its current begin)
    uint16_t shard = 0;  // where it was last sent
    std::string key;
    // get
    Object object;
    uint64_t offset = 0, length = 0;
    uint32_t get_flags = 0;
    bool head_only = false;  // ObjectHead: its ObjectInfo is all of the answer
    bool resent = false;     // lost with the link once and sent again
    GetDone get_done;
    // put
    std::string value;
    PutSpec spec;
    PutDone put_done;
    uint64_t put_id = 0, sent = 0, begin_corr = 0, commit_corr = 0;
    uint64_t busy_since = 0, retry_at = 0;
    bool granted = false;
    // the rest
    DeleteDone delete_done;
    std::function<void(Result<Touched>)> touch_done;
    std::function<void(Result<ScanPage>)> scan_done;
    std::function<void(Result<uint64_t>)> purge_done;
    std::function<void(Result<std::string>)> config_done;
    ScanPage page;
  };
  Req& NewReq(Kind kind, std::string_view key);
  uint64_t Corr(Req& r);
  // Sends `encode` to the key's shard (or `shard`); false (and `r` failed) when it cannot.
  bool Send(Req& r, FunctionRef<size_t(uint8_t*, size_t)> encode, size_t max_bytes, uint16_t shard);
  void SendGet(Req& r);  // ObjectGet (or ObjectHead) to the key's shard
  void SendPutBegin(Req& r);
  void SendPieces(Req& r);  // as much of the value as the link has room for; then the commit
  void Fail(Req& r, const Status& s);  // runs its callback with `s`, forgets it
  void Done(Req& r);                   // forgets it (its callback ran)
  void OnPutAnswer(Req& r, uint64_t corr, uint16_t template_id, std::span<const uint8_t> m);

  CoreLink* link_;
  uint64_t* next_corr_;
  std::chrono::milliseconds busy_timeout_;
  uint64_t max_value_;
  uint64_t next_req_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Req>> reqs_;  // by id
  std::unordered_map<uint64_t, uint64_t> corr_;              // correlation id -> request id
  std::vector<uint64_t> retrying_;                           // puts waiting to begin again
  std::vector<uint64_t> sending_;                            // puts with value left to send
  std::vector<uint64_t> resend_;  // reads lost with the link, sent again when it is back
  uint64_t resend_deadline_ = 0;
  bool resend_reads_ = false;
};

}  // namespace goblin::gateway
