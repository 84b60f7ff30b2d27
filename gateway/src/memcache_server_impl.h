// MemcacheServer's insides, in pieces:
//   memcache_server.cpp  the loop, clients' sockets, command dispatch, the simple commands
//                        (delete, touch, flush_all, stats, ...), replies from the core
//   memcache_get.cpp     get, gets, gat, gats: values streamed out in order, piece by piece
//   memcache_store.cpp   set, add, replace, cas (streamed in, conditional puts) and the
//                        read-modify-writes (append, prepend, incr, decr)
// Threading: everything on the server's one loop thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core_link.h"
#include "core_objects.h"
#include "goblin/common/fd.h"
#include "goblin/gateway/memcache.h"
#include "goblin/gateway/memcache_server.h"
#include "published_stats.h"

namespace goblin::gateway {

class MemcacheServer::Impl {
 public:
  explicit Impl(const MemcacheServerOptions& o) : options_(o) {}
  VoidResult Init();
  VoidResult Run(int stop_fd);
  MemcacheStats stats_;
  PublishedStats<MemcacheStats> published_;  // (the metrics endpoint's and the group's copy)
  int port_ = 0;
  std::shared_ptr<MemcacheStatsGroup> group_;  // (none: `stats` answers for this loop)
  const MemcacheServer* self_ = nullptr;       // (this loop in group_->loops)

 private:
  // ---- one key of a get: its answer, in pieces ----
  struct GetKey {
    std::string key;
    enum class State : uint8_t { kNotAsked, kAsked, kHit, kMiss } state = State::kNotAsked;
    uint64_t size = 0, generation = 0, expires_ns = 0;
    uint32_t flags = 0;
    bool binary_key = false;  // stored with a base64 key (meta b)
    uint8_t marks = 0;        // wire::kInfo* (mg h, X, Z, W), as the lookup found them
    uint32_t idle_s = 0;      // mg l
    std::string buf;          // value bytes received, not yet written to the client
    uint64_t received = 0;    // value bytes received so far (all pieces)
    uint64_t asked_end = 0;   // end of the pieces asked for so far
    bool piece_in_flight = false;
    bool header_out = false;  // its VALUE line is written
  };
  // ---- a write: set/add/replace/cas streamed in, or a read-modify-write ----
  enum class Lease : uint8_t { kNone, kPending, kGranted, kRefused, kRetry };
  struct Op {
    memcache::Cmd cmd = memcache::Cmd::kGet;
    bool noreply = false;
    uint64_t seq = 0;  // this op's number on its connection (replies to older ops are stale)
    std::string key;
    // storage
    uint32_t flags = 0;
    uint64_t ttl_ns = 0;
    uint64_t cas = 0;
    uint64_t data_left = 0;  // value bytes still to read from the client
    bool data_done = false;  // value and its "\r\n" read
    bool bad_chunk = false;  // ... and the "\r\n" was not there
    uint64_t size = 0;       // the value's length as the command line gave it
    std::string data;        // append/prepend: the client's bytes
    std::string value;       // a read-modify-write: the value it writes
    Lease lease = Lease::kNone;
    uint64_t put_id = 0;
    uint64_t begin_corr = 0;  // the PutBegin's id (an upload's failure comes with it)
    uint64_t sent = 0;        // bytes of the value sent to the core as PutData
    bool committing = false;
    std::string refusal;      // the reply of a refused write
    uint64_t retry_at = 0;    // MonotonicNanos: kRetry's next PutBegin
    uint64_t busy_since = 0;  // MonotonicNanos of the first kInProgress answer
    // read-modify-write
    bool fetching = false;
    bool fetched = false;
    bool found = false;
    uint64_t old_size = 0, old_generation = 0, old_expires = 0;
    std::string old_metadata, old_value;
    int attempts = 0;
    // get family
    std::vector<GetKey> keys;
    size_t front = 0;  // the key whose answer is being written
    int32_t exptime = 0;
    // flush_all
    int acks_due = 0;
    // meta commands (mg, ms, md, ma): their flags, tokens copied, and what the reply shows
    bool meta = false;
    memcache::MetaFlags mf;
    std::vector<std::string> meta_tokens;
    uint64_t new_generation = 0;  // a write's (PutResult)
    uint64_t new_expires = 0;     // ma: the value's expiry after it
    bool vivifying = false;       // ma N: creating the value on a miss
    bool no_value = false;        // mg without v: ObjectHead, no bytes
  };
  // A piece of a client's output: bytes of our own, or bytes in a core pool lent to us
  // (written from there with writev; the loan goes back once the kernel has them).
  struct Piece {
    std::string owned;
    const char* lent = nullptr;
    size_t lent_len = 0;
    uint64_t loan = 0;
    CoreLink::Pools* pools = nullptr;
    size_t size() const { return lent != nullptr ? lent_len : owned.size(); }
    const char* data() const { return lent != nullptr ? lent : owned.data(); }
  };
  struct Client {
    uint64_t id = 0;
    UniqueFd fd;
    std::string in;
    size_t in_pos = 0;
    std::deque<Piece> out;
    size_t out_off = 0;      // bytes of out.front() written
    size_t out_bytes = 0;    // not yet written, all pieces
    std::unique_ptr<Op> op;  // the command being carried out (nullptr: none)
    uint64_t next_seq = 1;
    bool close_after_write = false;
    bool closed = false;
    bool epollout = false;
    bool read_paused = false;
    size_t out_size() const { return out_bytes; }
  };
  enum class CorrKind : uint8_t {
    kGetPiece,  // index: the key
    kIgnore,    // an answer nobody waits for (a gat's touch, a delayed flush's purge)
    kPutBegin,
    kPutCommit,
    kDelete,
    kTouch,
    kPurge,
    kMetaHead,  // mg without v: ObjectHead (one answer)
  };
  struct CorrTarget {
    uint64_t client = 0, seq = 0;
    CorrKind kind = CorrKind::kIgnore;
    uint32_t index = 0;
    uint16_t shard = 0;
  };

  // memcache_server.cpp
  void Accept(int listen_fd, bool tcp);
  void OnReadable(Client& c);
  void Process(Client& c);  // parses and starts commands while none is in progress
  void Start(Client& c, memcache::Request& req, size_t line_end);
  void Finish(Client& c, std::string_view reply);  // the op is done: its reply (noreply: none)
  void Write(Client& c, std::string_view bytes);
  void WriteLent(Client& c, std::span<const uint8_t> bytes, uint64_t loan, CoreLink::Pools* pools);
  void ReleaseOutput(Client& c);  // gives back the loans of what was never written
  void FlushClient(Client& c);
  void SetInterest(Client& c);
  void Close(Client& c, std::string_view why);
  Client* Find(uint64_t id);
  Op* OpOf(const CorrTarget& t);  // the op a reply is for, if it is still current
  uint64_t Corr(Client& c, CorrKind kind, uint32_t index = 0, uint16_t shard = 0);
  bool SendKeyed(std::string_view key, FunctionRef<size_t(uint8_t*, size_t)> encode,
                 size_t max_bytes, bool always = false);
  void OnCoreMessage(uint16_t shard, std::span<const uint8_t> m);
  void OnCoreDown();
  // etcd://: one core lost alone (its shards [first, first + count)): only the ops waiting
  // for it end.
  void OnCoreLost(uint16_t first, uint16_t count);
  void EndOps(const std::vector<Client*>& busy);  // each as at a core loss
  void StartSimple(Client& c, const memcache::Request& req);
  std::string StatsReply(std::string_view arg);
  void ResetStats(uint64_t resets);  // (to the group's `resets`; connections kept)
  void FollowGroupReset();           // ResetStats if another loop's `stats reset` came since
  void FlushAll(Client* c);          // purges every shard; c (if given) waits for the acks
  void Tick(uint64_t now);
  static std::string ErrorReply(std::string_view text);

  // memcache_get.cpp
  void StartGet(Client& c, const memcache::Request& req);
  void AskPiece(Client& c, Op& op, size_t index);
  // A touch, a lookup nobody waits for (each counts as a read unless kTouchNoBump).
  void SendTouch(std::string_view key, uint64_t ttl_ns, uint32_t flags = 0);
  void SendHead(std::string_view key);
  void MetaTouchAfterRead(Op& op, std::string_view key);  // mg T
  void OnGetReply(Client& c, Op& op, const CorrTarget& t, uint16_t template_id,
                  std::span<const uint8_t> m, bool* last);
  void PumpGet(Client& c);  // writes what is ready, in key order, and asks for more
  void Take(Client& c, Op& op, size_t index, std::string_view bytes);  // value bytes arrived
  void WriteValueHeader(Client& c, const Op& op, GetKey& k);

  // memcache_meta.cpp
  void StartMeta(Client& c, const memcache::Request& req);
  void StartSwallow(Client& c, std::string_view reply, uint64_t bytes);
  // The return flags of a meta reply, in the order the command gave them.
  std::string MetaFlagsOut(const Op& op, const GetKey* k, bool hit) const;
  std::string MetaReply(const Op& op, std::string_view classic) const;  // STORED -> HD, ...

  // memcache_store.cpp
  void StartStore(Client& c, const memcache::Request& req);
  void StartDelta(Client& c, const memcache::Request& req);
  void PumpStore(Client& c);  // moves the value from the input to the core, finishes
  void SendPutBegin(Client& c, Op& op);
  void SendPieces(Client& c, Op& op, std::string_view bytes);
  void SendCommit(Client& c, Op& op);
  void Fetch(Client& c, Op& op);  // read-modify-write: reads the current value
  void OnStoreReply(Client& c, Op& op, const CorrTarget& t, uint16_t template_id,
                    std::span<const uint8_t> m, bool* last);
  void AfterFetch(Client& c, Op& op);
  void Refused(Client& c, Op& op, uint16_t code, std::string_view text);
  bool IsRmw(const Op& op) const;

  MemcacheServerOptions options_;
  UniqueFd epoll_, tcp_, unix_;
  std::unique_ptr<CoreLink> core_;
  std::unique_ptr<CoreObjects> objects_;  // whole-value reads (read-modify-writes)
  std::unordered_map<uint64_t, std::unique_ptr<Client>> clients_;
  uint64_t next_client_ = 16;
  std::unordered_map<uint64_t, CorrTarget> corr_;
  uint64_t next_corr_ = 1;
  std::vector<Client*> dirty_;     // output to write
  std::vector<uint64_t> waiting_;  // clients whose op waits for the core link or a timer
  uint64_t flush_at_ = 0;          // a delayed flush_all (unix seconds; 0: none)
  uint64_t started_unix_ = 0;
  memcache::Request req_;
};

}  // namespace goblin::gateway
