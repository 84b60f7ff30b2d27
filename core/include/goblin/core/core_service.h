// The request handler of goblin-core's ring plane: decodes each SBE request from a client
// session and answers it. Sessions: Ping -> Pong. Objects (when a disk tier is configured):
// PutBegin/PutData/PutCommit/PutAbort fill the store; ObjectHead answers ObjectInfo;
// ObjectGet answers ObjectInfo and then streams ObjectData at the pace the client reads,
// straight from the head pool and the I/O buffers the store reads ahead (with
// kGetFollowFill, a key being filled answers `filling` and streams the fill as it grows;
// with kGetLoans, a client that mapped the pools (MapPools: read-only fds over the session
// socket) is lent the bytes in place as Loan messages, at most kMaxLoansPerSession
// outstanding (a gateway: kMaxLoansPerGateway, and half the I/O buffers), each given back
// with LoanRelease or when the session ends). A session may have many ObjectGets streaming
// at once (a gateway serving many clients); they take turns.
// ObjectDelete -> DeleteAck, ObjectPurge -> PurgeAck. PutResult, DeleteAck and PurgeAck go
// out once the change is durable (the store's group commit). Everything else gets an Error
// naming it.
// Pub/sub (pubsub::Engine): Subscribe (any kind, subscribe or unsubscribe, names or all)
// -> SubscribeAck(s) with Redis's per-name confirmations and counts; Publish -> the
// deliveries, then PublishAck(receivers); each receiving ring session gets one Delivery per
// (kind, pattern) naming all of its subscribers (a gateway's clients) with the payload once;
// PubsubQuery -> PubsubReply(s) (`number` is the total, entries may span several replies).
// A subscriber is (ring session, sessionId); a ring session that falls behind its output
// limits (hard, or soft for too long) is dropped and logged, the publisher is not slowed.
// A session that goes away aborts its fills, releases its loans and its subscriptions. A
// fill that fails on the core's side (write error, full tier, no data for the store's fill
// timeout) is reported at once with an Error carrying the PutBegin's correlation id.
// Threading: called only from the ring server's loop thread.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "goblin/common/buffer.h"
#include "goblin/common/fd.h"
#include "goblin/common/histogram.h"
#include "goblin/common/id_slab.h"
#include "goblin/pubsub/engine.h"
#include "goblin/reactor/handler.h"
#include "goblin/reactor/session.h"
#include "goblin/sbe/runtime.h"
#include "goblin/store/store.h"

namespace goblin::wire {
enum class LookupStatus : uint8_t;  // (goblin/wire/goblin_wire.h, generated)
}  // namespace goblin::wire

namespace goblin::core {

class KeyspaceEvents;

struct CoreCounters {
  uint64_t pings = 0;
  uint64_t errors_sent = 0;
  uint64_t malformed = 0;
  uint64_t sessions_opened = 0;
  uint64_t sessions_closed = 0;
  uint64_t puts = 0, gets = 0, bytes_in = 0, bytes_out = 0;
  uint64_t payloads_placed = 0;  // PutData bytes a transport received into the fill's buffer
  uint64_t bytes_lent = 0, loans = 0;
  uint64_t publishes = 0, deliveries_sent = 0, slow_subscribers_dropped = 0;
  uint64_t reservations = 0;      // PutBegins with kPutReserve granted
  uint64_t gets_parked = 0;       // follow-ObjectGets that waited for a reserved fill's head
  uint64_t gets_cancelled = 0;    // ObjectGets whose reader left before their last byte
  uint64_t scans = 0;             // ObjectScan pages served
  uint64_t loan_pauses = 0;       // downloads paused at a lending limit until a loan came back
  uint64_t loans_taken_back = 0;  // loans of cancelled gets taken back (kCancelTakeBackLoans)
};

struct CoreHistograms {
  // ObjectGet received -> its first bytes ready to send (a get lent whole from a RAM head,
  // the hot path: one in CoreService::kTimedEvery of them, the first included)
  LatencyHistogram get_first_piece;
  LatencyHistogram put_commit;  // PutCommit handled (durable, visible)
  LatencyHistogram publish;     // Publish handled (fanned out to every receiver)
};

class CoreService : public reactor::Handler {
 public:
  static constexpr size_t kMaxLoansPerSession = 6;
  // A gateway carries many clients' reads on one session: more streams and loans at once.
  static constexpr size_t kMaxLoansPerGateway = 4096;
  static constexpr size_t kMaxDownloadsPerSession = 4096;
  // Loans one stream may have out (a slow reader behind a gateway holds only these).
  static constexpr uint32_t kMaxLoansPerDownload = 8;
  // A remote session's first piece of a Get: copied (in the ObjectInfo itself when the reader
  // asks with kGetFirstBytes, else as an ObjectData of its own) before the rest goes by
  // reference. One eager fragment on UCX's tcp, shared-memory and verbs transports, and all
  // of an object of up to this size in one message. 256 KiB objects,
  // bench/native_objects_benchmark.sh, first payload byte p50 as a message of its own: over
  // tcp 33.9 us with 64 KiB, 18.5 with 8 KiB, 16.8 with 2 KiB; over shared memory 15.7, 4.3,
  // 3.2 us; in the ObjectInfo: tcp 9.6 us (the header's time), shared memory 2.6 (512 B: 9.3
  // and 2.1; docs/benchmarks/native.md).
  static constexpr uint64_t kFirstInlineBytes = 2 << 10;

  // `store` may be null (no disk tier): object requests then get an error saying so.
  // Shards: this service is shard `shard` of `shard_count`; a keyed request for a key of
  // another shard (goblin::ShardOf) is refused with wrongShard, and pub/sub is served by
  // shard 0 only (the one engine, so Redis's semantics hold unchanged).
  explicit CoreService(store::Store* store = nullptr, uint16_t shard = 0, uint16_t shard_count = 1)
      : store_(store), shard_(shard), shard_count_(shard_count) {}
  uint16_t shard() const { return shard_; }
  uint16_t shard_count() const { return shard_count_; }

  void OnOpen(reactor::Session& session) override;
  void OnMessage(reactor::Session& session, std::span<const uint8_t> msg) override;
  void OnClose(reactor::Session& session) override;
  void OnWritable(reactor::Session& session) override;
  size_t OnPoll() override;
  int max_sleep_ms() const override;
  void OnPayloadSent(reactor::Session& session, uint64_t token) override;
  // A PutData's bytes sent by reference land in its fill's disk buffer (Store::PlaceAppend).
  bool PlacePayload(reactor::Session& session, std::span<const uint8_t> header, uint32_t length,
                    Placement* out) override;
  void OnPlacedMessage(reactor::Session& session, std::span<const uint8_t> header,
                       std::span<const uint8_t> payload) override;
  void ReleasePlacement(uint64_t token) override;

  const CoreCounters& counters() const { return counters_; }
  const CoreHistograms& histograms() const { return histograms_; }

  // For the admin plane (loop thread only): every open session with what it holds.
  struct SessionView {
    const reactor::Session* session = nullptr;
    size_t loans = 0;        // lent pieces not yet given back
    size_t downloads = 0;    // Gets streaming
    size_t subscribers = 0;  // pub/sub subscribers it carries
  };
  std::vector<SessionView> Sessions() const;
  const pubsub::Engine& pubsub() const { return pubsub_; }
  // Publishes on this shard's engine (shard 0) as a PUBLISH would, without an answer to
  // anyone (keyspace notifications). Returns the receivers.
  uint64_t PublishMessage(std::string_view channel, std::string_view payload, bool sharded);
  // The core's keyspace notifications (shared by every shard; CoreConfig sets their classes).
  void set_keyspace(KeyspaceEvents* k) { keyspace_ = k; }

 private:
  struct Upload {
    uint64_t session = 0;
    uint64_t begin_correlation = 0;  // the PutBegin's: errors about the fill carry it
    uint64_t received = 0;
    std::string key;
    Status failed;  // set once the fill failed: later PutData is dropped, PutCommit gets it
  };
  // The fill failed on the core's side (a write error, a full tier, no data for too long):
  // the store has aborted it; its owner gets an Error with the PutBegin's correlation id.
  void FailUpload(Upload& up, Status why);
  struct LoanTally;
  struct Download {
    uint64_t correlation_id = 0;
    store::Store::StreamPtr stream;
    bool lend = false;  // kGetLoans on a session that mapped the pools
    // A session that sends by reference (UCX) whose client maps the pools in place
    // (MapPoolsInPlace) and asked for loans: its pieces go as Loans, not rendezvous.
    bool in_place = false;
    bool ready = true;  // may have bytes to send (the stream's callback sets it)
    bool done = false;
    bool first_sent = false;  // a piece went out already (remote sessions: inline first)
    uint64_t started_ns = 0;  // when the request arrived (0: its first piece is timed)
    // Its pieces lent out, shared with their Lents (the stream may end first); made at the
    // first loan, and reused by the next download on this node when nobody else holds it.
    std::shared_ptr<LoanTally> tally;
  };
  using Downloads = std::list<Download>;  // a session's streams (stable addresses)
  // What a download has lent out, and whether it paused at a lending limit: a returned loan
  // wakes the download it belonged to, or the first one paused at the session's limit; never
  // every download of the session (a gateway's session carries hundreds of them).
  enum class Pause : uint8_t { kNone, kOwnLimit, kSessionLimit };
  struct LoanTally {
    uint32_t out = 0;
    Pause pause = Pause::kNone;
    bool queued = false;         // in its Lender's `paused` queue
    Download* paused = nullptr;  // the download, while it is paused (cleared when it ends)
  };
  struct Lent {
    uint32_t buffer = UINT32_MAX;  // an I/O buffer, or
    // A by-reference send's bytes (UCX rendezvous): the transport gives them back when the
    // send completes (OnPayloadSent); a reader's LoanRelease or cancel never does.
    bool in_transit = false;
    uint64_t pin = 0;                  // a pin on an object version (head pool bytes)
    uint64_t correlation_id = 0;       // its ObjectGet's (kCancelTakeBackLoans finds it so)
    std::shared_ptr<LoanTally> tally;  // its stream's (the stream may be gone)
  };
  struct Lender {        // per session that mapped the pools
    IdSlab<Lent> loans;  // by loan id (minted here, per session: an index, no hashing)
    size_t buffers = 0;  // loans holding an I/O buffer
    size_t max_loans = 0, max_buffers = 0;
    // Downloads paused at the session's limits, first paused first woken (entries whose
    // download was woken otherwise or ended are skipped).
    std::deque<std::shared_ptr<LoanTally>> paused;
    bool in_place = false;  // a UCX client on this host mapped the pools (MapPoolsInPlace)
  };
  // A download that cannot lend now: paused until a loan comes back (counted).
  void PauseLending(Lender& lender, Download& d, Pause why);
  // Makes a paused download ready again (its session then pumps it).
  static void Wake(reactor::Session& session, LoanTally& t);
  // A loan came back: the first download paused at the session's limits, if any.
  static bool WakeFirstPaused(reactor::Session& session, Lender& lender);  // true: one woke
  // A download ended (finished, failed or cancelled): it may have been woken for room it
  // never took (a wake is one per returned loan), so while the session has room the next
  // paused download gets it; else one could wait with room free and no loan left to return.
  static bool PassOnRoom(reactor::Session& session, Lender& lender);  // true: one woke
  static void Unpause(Download& d) {  // (the download ends: nothing may wake it any more)
    if (d.tally && d.tally->paused == &d) {
      d.tally->paused = nullptr;
      d.tally->pause = Pause::kNone;
    }
  }

  void SendError(reactor::Session& session, uint64_t correlation_id, uint16_t code,
                 std::string_view text);
  // False (and the request answered wrongShard) when `key` belongs to another shard.
  bool OwnsKey(reactor::Session& session, uint64_t correlation_id, std::string_view key);
  void SendStatusError(reactor::Session& session, uint64_t correlation_id, const Status& s);
  // A request that did not decode: counted, answered with InvalidArgument naming it.
  void SendMalformed(reactor::Session& session, std::string_view what, sbe::DecodeError e);
  bool Send(reactor::Session& session, size_t n);  // sends out_[0, n); false: the client is gone
  reactor::Session* SessionById(uint64_t id) {
    auto it = sessions_.find(id);
    return it == sessions_.end() ? nullptr : it->second->session;
  }
  // Sends what one download can send now; false when it is finished (or failed).
  bool Pump(reactor::Session& session, Download& d);
  void HandleConfig(reactor::Session& session, std::span<const uint8_t> msg, uint16_t block_length,
                    uint16_t version);
  void HandlePubsub(reactor::Session& session, uint16_t template_id, std::span<const uint8_t> msg,
                    uint16_t block_length, uint16_t version);
  pubsub::SubscriberId SubscriberOf(reactor::Session& session, uint64_t session_id, bool create);
  void DropSubscribers(reactor::Session& session);
  // Sends a pub/sub message; a subscriber that cannot take it is dropped.
  void SendPubsub(reactor::Session& session, size_t n);
  void HandleMapPools(reactor::Session& session, uint64_t correlation_id);
  void HandleRemotePools(reactor::Session& session, uint64_t correlation_id);
  void HandleMapPoolsInPlace(reactor::Session& session, uint64_t correlation_id,
                             std::string_view boot_id);
  VoidResult OpenReadOnlyPools();  // ro_pool_fd_ and the others, once
  // A loan given back: by the reader (LoanRelease), or by the transport when `in_transit`
  // (a by-reference send completed; only then is an in-transit loan released).
  void HandleLoanRelease(reactor::Session& session, uint64_t loan_id, bool in_transit = false);
  // Purges by tag (ObjectPurge kPurgeTag): the objects carrying it when it came (their
  // digests), deleted (or marked stale) kTagPurgeSlice per loop round; answered once all
  // are done and durable.
  struct TagPurge {
    uint64_t session = 0, corr = 0;
    std::string tag;
    bool soft = false;
    std::vector<store::KeyDigest> members;
    size_t next = 0;                // members done
    std::vector<std::string> keys;  // (the slice's; capacity kept)
    uint64_t purged = 0;
    Status error;
  };
  static constexpr size_t kTagPurgeSlice = 1000;
  std::deque<TagPurge> tag_purges_;
  size_t PumpTagPurges();
  // TouchAck for a Touch or Refresh, once what it changed is durable.
  void AckTouchWhenDurable(reactor::Session& session, uint64_t corr,
                           std::optional<store::Store::Touched> t);
  // Holds the stream's current piece for the session (a pin on the head, or the detached I/O
  // buffer) under a new loan id; nullopt at the session's limits (it waits for a release).
  // The range's last piece of a head takes the stream's own pin (Stream::TakePin).
  std::optional<uint64_t> Hold(reactor::Session& session, Download& d, bool last_piece,
                               bool in_transit = false);
  // The peeked bytes held (Hold) and consumed from the stream: what a Loan, or an
  // ObjectLent (the answer lending the first piece, kGetLoanInAnswer), says of them.
  struct LentPiece {
    uint64_t loan_id = 0;
    bool head = true;  // in the head pool (else an I/O buffer)
    uint64_t pool_offset = 0, object_offset = 0;
    uint32_t length = 0;
    bool stable = false;  // kSegmentStable
    bool last = false;    // it ends the requested range
  };
  std::optional<LentPiece> LendPiece(reactor::Session& session, Download& d,
                                     std::span<const uint8_t> bytes);
  // Answers an ObjectGet with kGetLoanInAnswer by an ObjectLent when the range's first piece
  // is in memory now and is not to be copied into an ObjectInfo (first_bytes_wanted: a
  // reader not in place, or a range the first bytes cover whole); the rest, if any, follows
  // from a download. false: answer with an ObjectInfo as usual (`stream` is left as it was).
  bool AnswerLent(reactor::Session& session, uint64_t corr, wire::LookupStatus status,
                  const store::ObjectInfo& info, store::Store::StreamPtr& stream, bool in_place,
                  bool first_bytes_wanted);
  // An ObjectLent lending piece `p` of `obj` (a stream's store::ObjectInfo, or the index
  // record itself: the same fields), encoded into out_; its size.
  template <typename Object>
  size_t EncodeLent(const reactor::Session& session, uint64_t corr, wire::LookupStatus status,
                    const Object& obj, const LentPiece& p);
  // Answers an ObjectGet whose range the store lent whole from its RAM head
  // (Store::OpenStream's lend_head): an ObjectLent of it, the loan the session's; or, where
  // the reader wants first bytes in the answer and they are the whole range, an ObjectInfo
  // carrying them (the pin given back at once).
  void AnswerHeadLent(reactor::Session& session, uint64_t corr, const store::Store::HeadLoan& h,
                      const store::AccessMarks& marks, bool first_bytes_wanted);
  // Answers an ObjectHead: an ObjectInfo, from the index alone.
  void AnswerHead(reactor::Session& session, uint64_t corr, std::string_view key, uint32_t flags,
                  const store::AccessRequest& access);
  // With kGetDescribe, where a hit's head is, into an ObjectInfo's encoder (a ring reader
  // that serves heads itself).
  template <typename Encoder>
  void DescribeHead(Encoder& oi, const reactor::Session& session, uint32_t flags,
                    wire::LookupStatus status, const store::ObjectInfo& info);
  static constexpr uint64_t kTimedEvery = 16;  // (AnswerHeadLent: get_first_piece samples)
  uint64_t head_lent_answers_ = 0;
  // How many of `available` first bytes an ObjectInfo carries (kGetFirstBytes).
  static uint64_t FirstInlineBytes(const reactor::Session& session, uint64_t available);
  // A download of `stream` (moved in) at the end of the session's list; EndLastDownload
  // ends that one again; WatchDownload lets the stream's readiness pump it (OnWritable).
  Download& StartDownload(reactor::Session& session, uint64_t corr, store::Store::StreamPtr& stream,
                          bool lend, bool in_place);
  void EndLastDownload(reactor::Session& session);
  void WatchDownload(reactor::Session& session, Download& d);
  // Lends the peeked bytes as a Loan; false when the session is at its loan limit.
  bool Lend(reactor::Session& session, Download& d, std::span<const uint8_t> bytes);
  // A remote session: sends the peeked bytes as an ObjectData payload straight from the
  // pool, held like a loan until OnPayloadSent; nullopt at the session's limit.
  std::optional<reactor::SendOutcome> SendByReference(reactor::Session& session, Download& d,
                                                      std::span<const uint8_t> bytes);
  void ReleaseLent(const Lent& l);
  // One PutData's bytes into its fill (in the session's order).
  void AppendPutData(reactor::Session& session, uint64_t put_id, uint64_t offset,
                     std::span<const uint8_t> bytes);
  void HandleObject(reactor::Session& session, uint16_t template_id, std::span<const uint8_t> msg,
                    uint16_t block_length, uint16_t version);
  // ObjectGet and ObjectHead (HandleObject's hot case, a function of its own: its frame and
  // spills are not every other request's).
  void HandleRead(reactor::Session& session, uint16_t template_id, std::span<const uint8_t> msg,
                  uint16_t block_length, uint16_t version, uint64_t corr);
  void SendDescription(reactor::Session& session, uint64_t correlation_id,
                       const std::optional<store::HeadDescription>& d);
  // ObjectDescribes whose head is being read from disk (never on the loop): answered once
  // their refill stream has its first chunk (the head is then in RAM, or cannot be).
  void PumpDescribes();

  store::Store* store_;
  uint16_t shard_ = 0, shard_count_ = 1;
  CoreCounters counters_;
  CoreHistograms histograms_;
  // What the service keeps for one open session, reached from it (Session::handler_data):
  // its downloads and, for a session that may be lent bytes, its loans.
  struct PerSession {
    reactor::Session* session = nullptr;
    Downloads downloads;  // streams in progress
    Lender lender;
    bool lends = false;  // it may be lent bytes (mapped the pools; or sends by reference)
  };
  static PerSession& Of(reactor::Session& session) {
    return *static_cast<PerSession*>(session.handler_data());
  }
  std::unordered_map<uint64_t, std::unique_ptr<PerSession>> sessions_;  // open sessions by id
  ByteBuffer out_ = ByteBuffer(1 << 20);  // not zero-filled: resident as used
  using Uploads = std::unordered_map<uint64_t, Upload>;
  Uploads uploads_;  // fill id -> owner
  // The session's own fill `put_id`, or end() after answering `what` with NotFound.
  Uploads::iterator OwnUpload(reactor::Session& session, uint64_t put_id, std::string_view what,
                              uint64_t corr);
  // Ended downloads, their list nodes kept for the next ObjectGet (no allocation per GET).
  Downloads spare_downloads_;
  Download& NewDownload(Downloads& list);
  // Ends `it` (its stream released) and keeps its node; returns the next one.
  Downloads::iterator EndDownload(Downloads& list, Downloads::iterator it);
  // ObjectGetCancel: the session's ObjectGet `correlation_id` ends here (a stream, or one
  // parked behind a reserved fill); unknown ids are ignored (it may just have ended). With
  // kCancelTakeBackLoans its loans still out come back too (also when its stream had ended).
  void CancelDownload(reactor::Session& session, uint64_t correlation_id, uint32_t flags);
  // The loans of `correlation_id` still out, given back as if released (counted).
  void TakeBackLoans(reactor::Session& session, uint64_t correlation_id);
  struct PendingDescribe {
    uint64_t session = 0, correlation_id = 0;
    std::string key;
    store::Store::StreamPtr refill;
    bool ready = true;
  };
  std::list<PendingDescribe> describes_;  // (stable addresses: the refill callbacks hold them)
  // Follow-ObjectGets of a key whose reserved fill has no head yet: handled again, in
  // order, once the head came or the fill ended (ReplayParked). Those that await a commit
  // (kGetAwaitCommit) wait while the key's fill commits, and are handled again whatever
  // became of it.
  struct ParkedGet {
    uint64_t session = 0;
    std::string key;
    std::vector<uint8_t> msg;
    uint16_t block_length = 0, version = 0;
    bool await_commit = false;
  };
  std::vector<ParkedGet> parked_;
  // Parked gets whose fill has its head (or is gone): handled again when it went on (a
  // fill to follow, or a committed object), else answered Error(aborted). `as_miss` (a
  // key): its parked gets are handled again whatever happened (they then read a miss).
  void ReplayParked(std::string_view as_miss = {});
  bool describes_ready_ = false;
  UniqueFd ro_pool_fd_, ro_io_fd_, ro_table_fd_;  // read-only fds of the pools

  pubsub::Engine pubsub_;
  KeyspaceEvents* keyspace_ = nullptr;
  struct Subscriber {
    reactor::Session* session = nullptr;
    uint64_t session_id = 0;
  };
  std::unordered_map<pubsub::SubscriberId, Subscriber> subscribers_;
  // ring session -> (its sessionId -> subscriber)
  std::unordered_map<uint64_t, std::unordered_map<uint64_t, pubsub::SubscriberId>> sub_ids_;
  pubsub::SubscriberId next_subscriber_ = 1;
  struct FanOut {  // per ring session, reused across publishes (no allocation when warm)
    reactor::Session* session = nullptr;
    std::vector<uint64_t> session_ids;
  };
  std::unordered_map<uint64_t, FanOut> fan_out_;
  std::vector<FanOut*> touched_;
};

}  // namespace goblin::core
