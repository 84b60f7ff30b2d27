// CoreLink: one gateway front's connection to goblin-core, shared by the HTTP and RESP
// fronts, and what outlives a single connection. It is built on libgoblin's transports
// (client::Transport: the ring plane today; the same calls carry the UCX plane) and owns one
// transport per core shard (the core's Welcome
// says how many; each keyed request goes to ShardOf(key), pub/sub to shard 0), each with
// its queue of messages waiting for ring space (bounded: Send refuses past `queue_limit`
// bytes so the caller pushes back on its clients) and the read-only mappings of that
// shard's pools and head table (HTTP front), and reconnection. The shards come and go together: one
// shard's socket closing means the core went away.
// When the core goes away (socket EOF, corrupt ring) the link goes down: its fds leave the
// caller's epoll set, the queue is dropped, the pool mappings are retired (kept mapped while
// lent bytes still point into them, freed at the last Unhold) and on_down runs; Tick()
// reconnects with exponential back-off (min_backoff doubling to max_backoff) and runs on_up
// once the core answers again (with fresh pool mappings). Each connection is an epoch:
// loans of an older epoch are never released to the new core.
// Several cores (target etcd://): the link watches the membership (cluster::Directory) and
// connects to every registered core, over UCX or, for a core on this host, its ring socket
// (pools mapped: local hits; "?ring=off" in the target: UCX for all); their shards are numbered one
// after another (cores by name), and ShardFor(key) picks the key's core by weighted rendezvous
// hashing (goblin/cluster/rendezvous.h, as libgoblin's Cluster does) and its shard in that core.
// Channels and patterns (pub/sub_shard()) are the first connected core's by name: every
// gateway of the prefix uses the same one (libgoblin's Cluster too). A core that cannot be
// reached is left out (passed over for 5 s or until it registers again: its keys go to their
// next owner). The first connection connects to every member on the caller's thread; later
// ones (a core that joins, one left out tried again) are connected by a CoreConnector thread,
// so a core slow to answer never stalls the loop. A core that joins is added in place (its shards
// are appended: requests in flight go on; the keys it now owns are misses there). A core that is
// lost (it left etcd or registered again, or its transport failed) is taken out alone when the
// front said how (set_on_core_lost): its shard numbers stay unused (Send says kDown), routing skips
// it (its keys go to their next owner), the others' requests go on. Otherwise the link goes down
// and up on the new membership (a new epoch: requests in flight fail as at a core restart). When
// the first core by name changes (it was lost, or a core sorting before it joined), the pub/sub
// core moves with it, in place: on_pubsub_moved tells the front (whose subscriptions at the old one
// are no longer where publishers publish). Threading: one event loop thread; callbacks run on it,
// from inside Poll/OnSocketEvent/Tick.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core_connector.h"
#include "goblin/client/transport.h"
#include "goblin/cluster/directory.h"
#include "goblin/cluster/rendezvous.h"
#include "goblin/common/buffer.h"
#include "goblin/common/function_ref.h"
#include "goblin/common/mapping.h"
#include "goblin/common/shard.h"
#include "goblin/common/status.h"

namespace goblin::gateway {

struct CoreLinkOptions {
  std::string
      target;  // the ring socket's path, or ucx://HOST:PORT (the UCX plane: no pools mapped)
  cluster::EtcdSecurity etcd;  // an etcd:// target's TLS and auth
  std::string name = "goblin-gateway";
  uint32_t ring_bytes = 1u << 20;
  bool map_pools = false;          // MapPools at every (re)connect: the head pool and I/O buffers
  size_t queue_limit = 64u << 20;  // bytes waiting for ring space before Send says kBusy
  std::chrono::milliseconds min_backoff{50}, max_backoff{2000};
};

class CoreLink {
 public:
  // One shard's pools as this process maps them (read-only), for one epoch.
  struct Pools {
    Mapping head, io;
    UniqueFd head_fd;      // the head pool's memfd: stable pieces are sent from it by reference
    Mapping table, touch;  // the head table (read-only) and its touch bytes (writable)
    uint16_t shard = 0;
    uint64_t epoch = 0;
    uint64_t holds = 0;  // lent pieces still pointing into these mappings
    bool retired = false;
  };

  // Connects now (the core must be there: a first connection that fails is an error),
  // registers the link's fds in `epoll_fd` with the two tags, and maps the pools if asked.
  static Result<std::unique_ptr<CoreLink>> Connect(const CoreLinkOptions& options, int epoll_fd,
                                                   uint64_t bell_tag, uint64_t socket_tag);
  ~CoreLink();
  CoreLink(const CoreLink&) = delete;
  CoreLink& operator=(const CoreLink&) = delete;

  void set_on_down(std::function<void()> fn) { on_down_ = std::move(fn); }
  void set_on_up(std::function<void()> fn) { on_up_ = std::move(fn); }
  // etcd://: cores joined in place (the link stayed up; some keys and shard channels now
  // belong to them).
  void set_on_joined(std::function<void()> fn) { on_joined_ = std::move(fn); }
  // etcd://: the core that had shards [first, first + count) was lost alone; the link stays up
  // (its keys now route elsewhere). Without it, losing any core takes the whole link down.
  void set_on_core_lost(std::function<void(uint16_t first, uint16_t count)> fn) {
    on_core_lost_ = std::move(fn);
  }
  // etcd://: the pub/sub core moved in place (pubsub_shard() is another core's now);
  // `old_shard` was its pub/sub shard (it may be lost: sends there say kDown).
  void set_on_pubsub_moved(std::function<void(uint16_t old_shard)> fn) {
    on_pubsub_moved_ = std::move(fn);
  }

  bool up() const { return up_; }
  uint64_t epoch() const { return epoch_; }
  uint32_t max_message() const { return max_message_; }
  // The core's shards (while up; 1 before the first connection). With several cores, the
  // numbers of a lost core's shards stay taken until the link is rebuilt: see shard_lost().
  uint16_t shard_count() const {
    return static_cast<uint16_t>(std::max<size_t>(shards_.size(), 1));
  }
  // A shard number of a core lost alone (the link is up; sending there says kDown). Fan-outs
  // to every shard skip these; while the link is down nothing is lost alone (sends say kDown).
  bool shard_lost(uint16_t shard) const {
    return up_ && shard < shards_.size() && shards_[shard].client == nullptr;
  }
  // The shards a fan-out asks: shard_count() less those lost alone.
  uint16_t live_shard_count() const {
    return static_cast<uint16_t>(shard_count() - (up_ ? lost_shards_ : 0));
  }
  uint16_t ShardFor(std::string_view key) const {
    if (cores_.empty()) return ShardOf(key, shard_count());
    const CoreSpan& c = cores_[cluster::RendezvousOwner(nodes_, key)];
    return static_cast<uint16_t>(c.first_shard + ShardOf(key, c.shards));
  }
  // Channels' and patterns' pub/sub shard (SUBSCRIBE, PUBLISH, PUBSUB CHANNELS): the first
  // shard of the first core by name (0 with one core).
  uint16_t pubsub_shard() const { return cores_.empty() ? 0 : cores_.front().first_shard; }
  // A shard channel's pub/sub shard (SSUBSCRIBE, SPUBLISH): the first shard of the channel's
  // owner core, by the same rendezvous hashing as keys (0 with one core).
  uint16_t PubsubShardFor(std::string_view channel) const {
    return cores_.empty() ? 0 : cores_[cluster::RendezvousOwner(nodes_, channel)].first_shard;
  }
  // Every core's pub/sub shard (PUBSUB SHARDCHANNELS asks them all); {0} with one core.
  std::vector<uint16_t> PubsubShards() const {
    std::vector<uint16_t> out;
    for (const CoreSpan& c : cores_) out.push_back(c.first_shard);
    if (out.empty()) out.push_back(0);
    return out;
  }
  // Several cores: how many are connected now (0: one core, not etcd).
  size_t core_count() const { return cores_.size(); }

  enum class SendResult { kSent, kQueued, kTooLarge, kBusy, kDown };
  // Encodes with `encode(buf, cap)` (0: does not fit) into a scratch buffer of at most
  // `max_bytes` and sends it to `shard`, or queues it in order behind earlier messages when
  // that ring is full. kBusy: the queue is over queue_limit (nothing sent); kDown: no core.
  SendResult Send(FunctionRef<size_t(uint8_t*, size_t)> encode, size_t max_bytes,
                  uint16_t shard = 0);
  // Like Send, but queues past queue_limit too (messages that must not be lost while the
  // link is up: loan releases, fill data the caller already bounded).
  SendResult SendAlways(FunctionRef<size_t(uint8_t*, size_t)> encode, size_t max_bytes,
                        uint16_t shard = 0);
  // Bytes waiting for ring space, all shards together (or one shard's).
  size_t queued_bytes() const { return queued_bytes_; }
  size_t queued_bytes(uint16_t shard) const {
    return shard < shards_.size() ? shards_[shard].queued_bytes : 0;
  }
  bool over_limit() const;
  // Moves queued messages into the rings; true if any went.
  bool Flush();

  // Hands received messages to fn(shard, message); a corrupt ring takes the link down.
  // Returns how many.
  size_t Poll(FunctionRef<void(uint16_t, std::span<const uint8_t>)> fn, size_t max);
  // The socket tag fired: EOF or an error means the core went away.
  void OnSocketEvent();
  // Reconnects when the back-off has passed. `now` is MonotonicNanos().
  void Tick(uint64_t now);
  // Milliseconds until the next reconnection attempt (-1: the link is up).
  int MillisUntilReconnect(uint64_t now) const;

  // The sleep protocol of the transports (client::Transport); true when down (nothing to wake).
  bool PrepareSleep(bool want_space);
  void FinishSleep();

  // A shard's pools in the current epoch (nullptr while down, lost or without map_pools).
  Pools* pools(uint16_t shard) const {
    return up() && shard < shards_.size() ? shards_[shard].pools.get() : nullptr;
  }
  // A piece of `p`'s memory was handed to the kernel: keep it mapped until Unhold.
  static void Hold(Pools* p) { ++p->holds; }
  // A held piece is done: unholds `p` and gives the loan back to its shard if `p` is this
  // epoch's (a retired mapping is freed at its last unhold).
  void ReleaseLoan(uint64_t loan_id, Pools* p);
  // A held piece that was not lent (a head served here) is done.
  void Unhold(Pools* p) {
    if (p == nullptr) return;
    --p->holds;
    if (p->retired && p->holds == 0) FreeRetired(p);
  }
  // Gives back a loan of this epoch that was never held (nobody wants its bytes).
  void ReturnLoan(uint64_t loan_id, uint16_t shard);

  struct Stats {
    uint64_t connects = 0, disconnects = 0, reconnect_failures = 0, refused_busy = 0;
    uint64_t membership_changes = 0;  // etcd:// only
    uint64_t cores_lost = 0;          // etcd://: cores taken out alone (the link stayed up)
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Shard {
    std::unique_ptr<client::Transport> client;
    std::deque<std::vector<uint8_t>> queue;
    size_t queued_bytes = 0;
    std::unique_ptr<Pools> pools;
  };
  // One connected core of an etcd:// link: its shards are [first_shard, first_shard + shards).
  struct CoreSpan {
    std::string name;
    int64_t mod_revision = 0;  // of its etcd record: another one means it registered again
    uint16_t first_shard = 0, shards = 1;
  };
  struct PassedOver {
    int64_t mod_revision = 0;
    uint64_t until_ns = 0;
  };
  explicit CoreLink(const CoreLinkOptions& o);
  // Connects every shard now, on this thread (the first connection, at start).
  VoidResult Open(std::chrono::milliseconds timeout);
  // Takes connected transports in as the link's shards (cores_ set for etcd://) and watches
  // them: the link is up.
  VoidResult OpenWith(std::vector<std::unique_ptr<client::Transport>> transports,
                      std::chrono::milliseconds timeout);
  // The link is down: connects again in the background, to the target or to every
  // registered core not passed over (a round of the connector's); FinishReconnect when all
  // have answered or failed.
  void StartReconnect(uint64_t now);
  void FinishReconnect(uint64_t now);
  client::TransportOptions TransportOptionsFor(std::chrono::milliseconds timeout) const;
  // A member's connect: its transports or why not (empty: no answer yet).
  using MemberResult = std::optional<Result<std::vector<std::unique_ptr<client::Transport>>>>;
  // etcd://: connects to every registered core not passed over, on this thread.
  Result<std::vector<std::unique_ptr<client::Transport>>> ConnectMembers(
      const client::TransportOptions& to);
  // The connected members' transports in shard order (`members` by name: shard 0 is the
  // first's), cores_ and nodes_ set; a member that failed is left out for 5 s. Error: none
  // connected.
  Result<std::vector<std::unique_ptr<client::Transport>>> AssembleMembers(
      uint64_t generation, const std::vector<cluster::Member>& members,
      std::vector<MemberResult>& results, uint64_t now);
  // How to reach a member: {ucx, address} (its ring socket when it runs on this host).
  Result<std::pair<bool, std::string>> RouteTo(const cluster::Member& m) const;
  bool PassedOverNow(const cluster::Member& m, uint64_t now) const;
  // Logs why and passes the member over.
  void LeaveOut(const cluster::Member& m, const Status& why, uint64_t now);
  // Connects to a member in the background (CoreConnector); TakeConnected adds it.
  void StartConnect(const cluster::Member& m, uint64_t now);
  // Background connects that finished: cores still registered as they were are added in place.
  void TakeConnected(uint64_t now);
  // Appends a connected core's shards and watches them (cores_ in name order). False: a
  // shard could not be watched (the caller rebuilds the link).
  bool AddCore(const cluster::Member& m, std::vector<std::unique_ptr<client::Transport>> t);
  // A membership change taken in place: cores that left or registered again are lost alone
  // (LoseCore), newcomers and members left out earlier connected (StartConnect). False: the
  // link must be rebuilt.
  bool ApplyMembership(uint64_t now);
  // Takes the link down to connect to the new set of cores.
  void Rebuild(uint64_t now);
  // The core of cores_[index] is lost: alone (on_core_lost_) when it may be, else GoDown.
  void LoseCore(size_t index, const Status& why);
  // Tells the front when the pub/sub shard is no longer `before` (the link still up).
  void NotePubsubMove(uint16_t before);
  // The core whose shards include `shard` (cores_ index; SIZE_MAX: none).
  size_t CoreOfShard(uint16_t shard) const;
  // A shard's transport failed: its core is lost (LoseCore), or the link goes down.
  void LoseShard(uint16_t shard, const Status& why);
  // Leaves a member out for kPassOverNs (or until it registers again).
  void PassOver(const std::string& name, int64_t mod_revision, uint64_t now);
  void CloseShard(Shard& sh);  // leaves the epoll set, drops its queue, retires its mappings
  VoidResult WatchShard(Shard& sh, uint16_t index, std::chrono::milliseconds timeout);
  VoidResult MapPools(Shard& sh, uint16_t index, std::chrono::milliseconds timeout);
  void CloseShards();  // leaves the epoll set, drops queues, retires mappings
  void FreeRetired(Pools* p);
  void GoDown(const Status& why);
  SendResult SendEncoded(Shard& sh, std::span<const uint8_t> msg, bool bounded);
  SendResult SendVia(FunctionRef<size_t(uint8_t*, size_t)> encode, size_t max_bytes, uint16_t shard,
                     bool bounded);

  CoreLinkOptions options_;
  int epoll_ = -1;
  uint64_t bell_tag_ = 0, socket_tag_ = 0;
  std::vector<Shard> shards_;
  bool up_ = false;
  uint32_t max_message_ = 0;
  ByteBuffer encode_buf_;
  size_t queued_bytes_ = 0;  // all shards'
  std::list<std::unique_ptr<Pools>> retired_;
  uint64_t epoch_ = 0;
  uint64_t reconnect_at_ = 0;
  std::chrono::milliseconds backoff_{0};
  Stats stats_;
  std::function<void()> on_down_, on_up_, on_joined_;
  std::function<void(uint16_t, uint16_t)> on_core_lost_;
  std::function<void(uint16_t)> on_pubsub_moved_;
  // etcd:// only
  std::shared_ptr<cluster::Directory> directory_;           // (the process's: Directory::Shared)
  std::unique_ptr<cluster::Directory::Listener> listener_;  // wakes this loop on a change
  bool local_ring_ = true;  // cores on this host through their ring socket (?ring=off: UCX)
  uint64_t membership_generation_ = 0;
  std::vector<CoreSpan> cores_;                 // by name (the first: pub/sub's)
  std::vector<cluster::RendezvousNode> nodes_;  // cores_'s, same order
  std::map<std::string, PassedOver> passed_over_;
  uint64_t retry_members_at_ = 0;  // a member left out may be tried again then (0: none)
  std::set<std::pair<std::string, int64_t>> connecting_;  // members (name, revision) in progress
  // Every target (started at the first reconnect): joins and reconnects off the loop.
  std::unique_ptr<CoreConnector> connector_;
  // The reconnect in progress (round_ 0: none): the members asked, in name order, their
  // results as they come, how many are still out, the membership it was started from.
  uint64_t round_ = 0, rounds_ = 0;
  std::vector<cluster::Member> round_members_;
  std::vector<MemberResult> round_results_;
  size_t round_pending_ = 0;
  uint64_t round_generation_ = 0;
  size_t lost_shards_ = 0;  // shard numbers of cores lost alone (unused until rebuilt)
};

}  // namespace goblin::gateway
