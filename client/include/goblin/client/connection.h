// libgoblin: the native client library. A Connection talks to one goblin-core over the
// transport its target names, chosen once at Open(): "unix:PATH" is the shared-memory ring
// plane (this host: zero-copy reads of the core's pools), "ucx://HOST:PORT" the UCX plane
// (goblin-core --rdma-listen; verbs on InfiniBand, tcp or shared memory elsewhere, as UCX_TLS
// allows). The same API and the same SBE messages on both. Requests are synchronous and
// carry correlation ids. A core with several shards (--cores) gets one transport per shard
// (ring pair or UCX endpoint), and each keyed request goes straight to its key's shard
// (goblin::ShardOf); pub/sub and Ping go to shard 0. Threading: one thread uses a
// Connection at a time. Fork: a child forked while a ucx:// Connection is open cannot use
// UCX (Open says so: kFailedPrecondition); one forked before or after them can.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "goblin/common/function_ref.h"
#include "goblin/common/status.h"

namespace goblin::client {

class Transport;

struct Target {
  enum class Kind { kUnix, kUcx } kind;
  std::string address;  // socket path, or host:port
};

// "unix:/run/goblin/core.sock", "/run/goblin/core.sock" (a bare path means unix:) or
// "ucx://host:port".
Result<Target> ParseTarget(std::string_view text);

struct ConnectOptions {
  std::string name = "libgoblin";
  uint32_t ring_bytes = 4096;
  std::chrono::milliseconds timeout = std::chrono::seconds(5);
  // Map the core's head pool and I/O buffers read-only and read object bytes in place
  // (the sink sees spans into that memory); false: every byte is copied through the ring.
  // The ring plane passes the pools' fds; over UCX, with the core on this host and UCX
  // allowed shared memory (UCX_TLS), they are opened as /proc/PID/fd/FD of the core (the
  // permission UCX's cma transport needs too: ptrace read access); elsewhere UCX copies
  // (rendezvous into its receive buffer).
  bool zero_copy = true;
  // With zero_copy and the pools mapped: a get's first piece, when the core has it in memory,
  // comes lent in the core's answer itself (ObjectLent) instead of a Loan one message later.
  // false: the answer and the first Loan come apart (for comparisons).
  bool loan_in_answer = true;
  // Waiting for the core's answer: poll this long before sleeping (on the ring's doorbell or
  // the UCX worker's event fd), and while polling give the CPU away (sched_yield) so that a
  // core shard or another thread with work on the same CPU runs meanwhile. A client on a CPU
  // of its own (no core shard, no other busy thread there) sets spin_yield = false for the
  // lowest latency; `spin` 0 sleeps at once.
  std::chrono::nanoseconds spin = std::chrono::microseconds(50);
  bool spin_yield = true;
};

class Connection {
 public:
  static Result<std::unique_ptr<Connection>> Open(std::string_view target,
                                                  const ConnectOptions& options = {});
  ~Connection();

  uint64_t client_id() const;
  uint32_t server_pid() const;
  uint32_t max_message() const;
  uint16_t shard_count() const;

  // Round trip of a Ping carrying `payload`; returns the measured time.
  Result<std::chrono::nanoseconds> Ping(std::string_view payload = {});

  struct ObjectMeta {
    bool found = false;
    bool filling = false;  // found as an in-progress fill (Get with follow_fill)
    uint64_t size = 0;     // UINT64_MAX: a fill of unknown size
    uint64_t generation = 0;
    uint64_t created_unix_ns = 0;
    uint64_t expires_unix_ns = 0;  // 0: never
    std::string metadata;
  };
  // Fills `key` from `source`, which writes up to span.size() bytes and returns how many
  // (0 = end). `size` is announced when known (UINT64_MAX otherwise) and checked by the core.
  // Returns the new generation. AlreadyExists: another fill of the key is in progress.
  using Source = std::function<Result<size_t>(std::span<uint8_t>)>;
  Result<uint64_t> Put(std::string_view key, const Source& source, uint64_t size = UINT64_MAX,
                       uint64_t ttl_ns = 0, std::string_view metadata = {});
  // From memory: over a remote plane, data of kPutByReferenceMin bytes or more is sent by
  // reference (no copy here; the core receives it with a rendezvous, over verbs an RDMA
  // read of `data`); `data` is the caller's again when Put returns.
  static constexpr size_t kPutByReferenceMin = 16 << 10;
  Result<uint64_t> Put(std::string_view key, std::span<const uint8_t> data, uint64_t ttl_ns = 0,
                       std::string_view metadata = {});
  Result<ObjectMeta> Head(std::string_view key);
  // Streams object bytes [offset, offset + length) to `sink` in order. A miss returns
  // found = false without calling the sink. With `follow_fill`, a key being filled is
  // streamed as the fill grows (filling = true); Aborted if that fill is abandoned.
  // `on_meta` (if given) sees the object's metadata when the core's answer arrives, before
  // the first byte reaches the sink (as an HTTP client sees a response's headers); not on a miss.
  // A sink that fails ends the get with its error (also in flight, StartGet): the core is told
  // to stop the stream and take back its loans, so nothing stays held for it. Get only
  // borrows its callbacks for the call (no std::function made, nor allocated, per get);
  // StartGet keeps its sink until the get ends. A sink or on_meta must not use its own
  // Connection: over UCX they run as the reply arrives, inside the transport's progress
  // (~50 ns sooner than after it), where a call that waits for the core fails with
  // FailedPrecondition (and a request it sent is answered to nobody); other Connections
  // may be used there.
  using Sink = std::function<VoidResult(uint64_t offset, std::span<const uint8_t>)>;
  using SinkRef = FunctionRef<VoidResult(uint64_t offset, std::span<const uint8_t>)>;
  using MetaHook = FunctionRef<void(const ObjectMeta&)>;  // (default: none)
  Result<ObjectMeta> Get(std::string_view key, SinkRef sink, uint64_t offset = 0,
                         uint64_t length = UINT64_MAX, bool follow_fill = false,
                         MetaHook on_meta = {});
  Result<bool> Delete(std::string_view key);

  // ---- Many gets in flight on one connection ----
  // StartGet sends an ObjectGet and returns its id at once; the reply's bytes go to `sink` as
  // they arrive, from within WaitGets (or any other call on this Connection that reads
  // replies), and gets finish in whatever order the core finishes them: one client can keep
  // a link busy. At most kMaxGetsInFlight at once (ResourceExhausted beyond: WaitGets first).
  static constexpr size_t kMaxGetsInFlight = 256;
  Result<uint64_t> StartGet(std::string_view key, Sink sink, uint64_t offset = 0,
                            uint64_t length = UINT64_MAX);
  struct GetDone {
    uint64_t id = 0;
    Result<ObjectMeta> result;  // a miss: found = false; an error: the get's Status
  };
  // Waits up to `timeout` for started gets to finish and returns those that have, in the
  // order they finished (empty: none within the timeout, or none in flight). A core that goes
  // away finishes every get in flight on its link with that error.
  Result<std::vector<GetDone>> WaitGets(std::chrono::nanoseconds timeout);
  size_t gets_in_flight() const { return gets_.size(); }

  // Stores the file at `path` (its size announced) under `key`.
  Result<uint64_t> PutFile(std::string_view key, const std::string& path, uint64_t ttl_ns = 0,
                           std::string_view metadata = {});
  // Reads object bytes [offset, offset + buffer.size()) into `buffer`; `*bytes` (if given)
  // says how many arrived (fewer at the object's end). A miss: found = false.
  Result<ObjectMeta> GetInto(std::string_view key, std::span<uint8_t> buffer, uint64_t offset = 0,
                             uint64_t* bytes = nullptr);

  // ---- Pub/sub (Redis semantics; see pubsub/) ----
  enum class SubKind : uint8_t { kChannel = 0, kPattern = 1, kShard = 2 };
  // PUBLISH (or SPUBLISH with sharded): the number of receivers.
  Result<uint64_t> Publish(std::string_view channel, std::string_view payload,
                           bool sharded = false);
  struct Confirmation {
    std::optional<std::string> name;  // nullopt: unsubscribe-all while subscribed to none
    uint32_t count = 0;               // subscriptions of that family after this one
  };
  // (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE `names` (unsubscribe with no names: all) for
  // `session_id` (one connection may carry several subscribers, as a gateway does).
  Result<std::vector<Confirmation>> Subscribe(SubKind kind, std::span<const std::string> names,
                                              bool unsubscribe = false, uint64_t session_id = 0);
  struct Message {
    SubKind kind = SubKind::kChannel;
    std::string pattern;  // kPattern: the pattern that matched
    std::string channel;
    std::string payload;
    std::vector<uint64_t> session_ids;  // the subscribers on this connection it is for
  };
  // The next delivered message (kept in arrival order while other replies were awaited);
  // nullopt when none arrives within `timeout`.
  Result<std::optional<Message>> NextMessage(std::chrono::nanoseconds timeout);
  enum class Query : uint8_t {
    kChannels = 0,
    kNumSub = 1,
    kNumPat = 2,
    kShardChannels = 3,
    kShardNumSub = 4
  };
  struct QueryResult {
    int64_t number = 0;                                    // NUMPAT, or the entry count
    std::vector<std::pair<std::string, int64_t>> entries;  // name (and count for NUMSUB)
  };
  Result<QueryResult> PubsubQuery(Query q, std::span<const std::string> args = {});

  // ---- Non-blocking pub/sub, for event loops and latency-critical code ----
  // Nothing here blocks or allocates: PublishAsync encodes the request straight into the
  // ring and returns its correlation id (ResourceExhausted when the ring has no room now:
  // poll, then retry; InvalidArgument when it can never fit); PollPubsub hands what has
  // arrived to a handler as views into the ring, valid during the call. Deliveries kept by
  // the synchronous calls come first, in arrival order.
  struct MessageView {
    SubKind kind = SubKind::kChannel;
    std::string_view pattern;  // kPattern: the pattern that matched
    std::string_view channel;
    std::string_view payload;
    uint32_t sessions = 0;       // how many subscribers on this connection it is for
    uint64_t first_session = 0;  // the first of them
  };
  class PubsubHandler {
   public:
    virtual ~PubsubHandler() = default;
    virtual void OnPublishAck(uint64_t correlation_id, uint64_t receivers) = 0;
    virtual void OnMessage(const MessageView& message) = 0;
    // The core refused a request (correlation id 0: the session as a whole).
    virtual void OnError(uint64_t correlation_id, const Status& error) = 0;
  };
  Result<uint64_t> PublishAsync(std::string_view channel, std::string_view payload,
                                bool sharded = false);
  // Handles up to `max` received messages; returns how many. Corruption: the ring is bad.
  Result<size_t> PollPubsub(PubsubHandler& handler, size_t max = SIZE_MAX);
  // Sleeping in an event loop: watch wake_fd() (messages) and liveness_fd() (the core went
  // away: CheckAlive says so; -1 on the UCX plane, where wake_fd() reports that too). Sleep only if
  // PrepareSleep() returned true; FinishSleep() after waking. Between PrepareSleep and FinishSleep
  // the core rings wake_fd.
  int wake_fd() const;
  int liveness_fd() const;
  bool PrepareSleep();
  void FinishSleep();
  VoidResult CheckAlive();

  // ---- One-sided head reads ----
  // Where an object's head sits in the core's head pool, and how to tell it is still there:
  // read it without a request to the core (ring plane: from the mapped pool; UCX plane: with
  // one-sided gets, an RDMA READ on verbs). A descriptor stays usable for many reads until
  // the object is replaced, deleted, evicted or its head leaves RAM; a read then reports
  // stale rather than returning wrong bytes (protocol: goblin/sbe/head_table.h).
  struct HeadDescriptor {
    uint64_t size = 0;            // the object's size
    uint64_t generation = 0;      // the object version described
    uint32_t entry = UINT32_MAX;  // the core's head table entry; UINT32_MAX: none (the head
                                  // is not in RAM, or the table is full): read two-sided
    uint64_t pool_offset = 0;     // of the head in the head pool
    uint64_t length = 0;          // head bytes: object bytes [0, length)
    uint64_t checksum = 0;        // their XXH3-64
    uint64_t stamp = 0;           // the entry's stamp while it describes this head
    uint16_t shard = 0;           // the core shard whose pool and table hold it
    bool readable() const { return entry != UINT32_MAX; }
  };
  // nullopt: not stored. The core brings the head into RAM if it was not.
  Result<std::optional<HeadDescriptor>> Describe(std::string_view key);
  // Reads the described head into dst[0, d.length) and checks it is current. true: `dst`
  // holds object bytes [0, d.length) of version d.generation; false: stale (Describe again,
  // or Get). InvalidArgument: no entry, or `dst` smaller than d.length.
  Result<bool> ReadHead(const HeadDescriptor& d, std::span<uint8_t> dst);

  struct Stats {
    uint64_t bytes_lent = 0;       // received in place (zero-copy)
    uint64_t bytes_copied = 0;     // received through the ring
    uint64_t loans = 0;            // lent pieces (Loans, and answers that lent one)
    uint64_t answer_loans = 0;     // of which lent in the core's answer itself (kGetLoanInAnswer)
    uint64_t one_sided_reads = 0;  // ReadHead calls that returned the head
    uint64_t stale_reads = 0;      // ReadHead calls that found the descriptor stale
    uint64_t direct_messages = 0;  // replies handed over inside the transport's progress (UCX)
  };
  const Stats& stats() const { return stats_; }
  // Some shard's pools are mapped (zero-copy reads happen).
  bool pools_mapped() const;

 private:
  struct Link;      // one shard's transport and mappings
  struct GetState;  // one get's reply in progress (client/src/connection_internal.h)
  Connection();
  Link& LinkFor(std::string_view key);
  Link& first() { return *links_.front(); }
  // Asks the core for read-only fds of its pools and maps them (once); on a remote plane
  // for their addresses and rkeys instead.
  VoidResult MapPools(Link& l);
  // A UCX link to a core on this host: opens its pools as /proc/PID/fd/FD (the core names
  // them, MapPoolsInPlace) and maps them read-only, for loans as on the ring plane.
  VoidResult MapPoolsInPlace(Link& l);
  // Reads a head table entry (local: from the mapping, acquire; remote: a one-sided get).
  Result<std::array<uint64_t, 4>> ReadEntry(Link& l, uint32_t entry);
  void ReleaseLoan(Link& l, uint64_t loan_id);
  // A get this reader gave up on before its last bytes (every loan of it seen so far given
  // back): ObjectGetCancel with kCancelTakeBackLoans, so the core stops the stream and takes
  // back the loans still on their way (their messages are dropped unread when they arrive).
  void AbandonGet(Link& l, uint64_t correlation_id);
  // After an abandon on a remote link: a Ping round trip on it, so every piece the core
  // sent by reference before the cancel is received (and dropped) before the reader goes
  // idle; the core holds a piece until its send completes. Called where no Poll is running.
  void DrainAbandoned();
  // A message nobody will read that holds a loan (a Loan, or an ObjectLent: an abandoned or
  // failed request's) gives it back; true if `m` was one.
  bool ReleaseOrphanLoan(Link& l, std::span<const uint8_t> m);
  // One lent segment to the get's sink; false (state.error set) when it lies outside the
  // mapped pools or the sink fails.
  bool TakeLentSegment(GetState& state, bool head_pool, uint64_t pool_offset,
                       uint64_t object_offset, uint64_t length);
  // Keeps a Delivery for NextMessage; false if `m` is not one.
  bool TakeDelivery(std::span<const uint8_t> m);
  // Calls fn for each received message carrying this correlation id until it returns true;
  // an Error with this id (or with id 0, a session-level error) ends it as a Status.
  VoidResult Receive(Link& l, uint64_t correlation_id,
                     FunctionRef<bool(std::span<const uint8_t>)> fn);
  // One message of a get's reply: true when the get is over (its last bytes, a miss, or an
  // error in state.error).
  bool HandleGetMessage(GetState& state, std::span<const uint8_t> msg);
  // A message for a get in flight on `l`: handled (and the get finished when it ends);
  // false when it is not one.
  bool RouteToGets(Link& l, std::span<const uint8_t> msg);
  // Finishes every get in flight on `l` with `error` (its transport failed).
  void FailGets(Link& l, const Status& error);
  // Sends the ObjectGet (mapping the pools first where loans are possible); its id.
  Result<uint64_t> SendGet(Link& l, std::string_view key, uint64_t offset, uint64_t length,
                           bool follow_fill);
  // WaitGets' sleep: on every link's wake and liveness fds at once, up to `max_ns`; a link
  // whose core went away finishes its gets with that error.
  void SleepOnLinks(uint64_t max_ns);
  // Waits for the single reply with this correlation id and copies it out.
  Result<std::vector<uint8_t>> AwaitReply(Link& l, uint64_t correlation_id);
  // Encodes a request (encode(buffer, capacity, correlation_id) -> length, 0 if it did not
  // fit) into request_, sized for `variable_bytes` of key/metadata, sends it, returns its id.
  Result<uint64_t> SendRequest(Link& l, size_t variable_bytes,
                               FunctionRef<size_t(uint8_t*, size_t, uint64_t)> encode);
  // Encodes a message of at most `max` bytes straight into the ring and sends it.
  VoidResult SendEncoded(Link& l, uint32_t max, FunctionRef<size_t(uint8_t*, size_t)> encode);
  // A put's PutBegin and its lease (AlreadyExists when another fill holds the key), then its
  // PutCommit and result. Between them the caller sends the PutData.
  struct PutStarted {
    uint64_t correlation_id = 0, put_id = 0;
  };
  Result<PutStarted> BeginPut(Link& l, std::string_view key, uint64_t size, uint64_t ttl_ns,
                              std::string_view metadata);
  Result<uint64_t> CommitPut(Link& l, const PutStarted& put, uint64_t total_size);
  void AbortPut(Link& l, const PutStarted& put);
  // A put's PutData sent by reference from `data` (remote planes, data of kPutByReferenceMin
  // bytes or more): no copy in the client; the core receives each piece with a rendezvous
  // (over verbs, an RDMA read of `data`).
  Result<uint64_t> PutByReference(Link& l, std::string_view key, std::span<const uint8_t> data,
                                  uint64_t ttl_ns, std::string_view metadata);

  std::vector<std::unique_ptr<Link>> links_;  // by shard
  ConnectOptions options_;
  uint64_t next_correlation_ = 1;
  std::vector<uint8_t> request_;  // SendRequest's encoding buffer (kept: no allocation per request)
  std::deque<Message> inbox_;     // deliveries received while awaiting replies (shard 0's)
  std::unordered_map<uint64_t, std::unique_ptr<GetState>> gets_;  // in flight, by id
  std::vector<GetDone> gets_done_;                                // finished, not yet taken
  Stats stats_;
};

}  // namespace goblin::client
