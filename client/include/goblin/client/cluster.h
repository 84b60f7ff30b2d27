// libgoblin over a fabric of cores: a Cluster finds the live goblin-cores in etcd (each core
// registers itself with --etcd; goblin/cluster/member.h) and sends each keyed request to the
// key's owner by weighted rendezvous hashing over them (goblin/cluster/rendezvous.h: weights
// from the cores' capacities; a key's variants after a NUL byte go with it). Target:
// "etcd://HOST:PORT[,HOST:PORT...][/prefix][?ring=off]" (default prefix /goblin; a core on
// this host is reached through its ring socket unless ?ring=off). A secured etcd (TLS, a
// client certificate, auth) is reached with GOBLIN_ETCD_CACERT, GOBLIN_ETCD_CERT,
// GOBLIN_ETCD_KEY, GOBLIN_ETCD_USER (NAME[:PASSWORD]) and GOBLIN_ETCD_PASSWORD_FILE in the
// environment (the CA or a certificate turns TLS on). Membership is kept
// by a watch (goblin/cluster/directory.h): a core that leaves is dropped when its record goes
// (at once on a clean stop, within its lease on a crash) and its keys go to their next
// owner, where they are misses until stored again; a core that joins takes its share (~1/N).
// A request that meets a connection failure (the core died and etcd does not know yet) is
// sent once more, to the key's next owner, and that core is passed over for 2 s or until it
// registers again. Streamed puts (a Source) are not retried: their bytes are consumed.
// One Connection per core, opened at its first request (the UCX plane: ucx://).
// Threading: one thread uses a Cluster at a time (as Connection); the membership watch runs
// on a thread of its own.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "goblin/client/connection.h"
#include "goblin/common/status.h"

namespace goblin::cluster {
class Directory;
}  // namespace goblin::cluster

struct pollfd;

namespace goblin::client {

struct ClusterTarget {
  std::vector<std::string> endpoints;  // etcd's, HOST:PORT
  std::string prefix = "/goblin";
  // A core on this host (its record's hostname, its ring socket present) is reached through
  // its ring socket, zero-copy, instead of UCX; "?ring=off" uses UCX for every core.
  bool local_ring = true;
};
// "etcd://127.0.0.1:2379", "etcd://a:2379,b:2379/site-1", "etcd://a:2379/site-1?ring=off".
Result<ClusterTarget> ParseClusterTarget(std::string_view text);

class Cluster {
 public:
  using ObjectMeta = Connection::ObjectMeta;
  static Result<std::unique_ptr<Cluster>> Open(std::string_view target,
                                               const ConnectOptions& options = {});
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  Result<uint64_t> Put(std::string_view key, std::span<const uint8_t> data, uint64_t ttl_ns = 0,
                       std::string_view metadata = {});
  Result<uint64_t> Put(std::string_view key, const Connection::Source& source,
                       uint64_t size = UINT64_MAX, uint64_t ttl_ns = 0,
                       std::string_view metadata = {});
  Result<uint64_t> PutFile(std::string_view key, const std::string& path, uint64_t ttl_ns = 0,
                           std::string_view metadata = {});
  Result<ObjectMeta> Head(std::string_view key);
  // Retried on the next owner only if the sink has seen no byte yet.
  Result<ObjectMeta> Get(std::string_view key, Connection::SinkRef sink, uint64_t offset = 0,
                         uint64_t length = UINT64_MAX, bool follow_fill = false);
  Result<bool> Delete(std::string_view key);

  // ---- Pub/sub: channels and patterns on one core for the whole prefix, the first live
  // member by name (as goblin-gateway --core etcd:// does), so PUBLISH here reaches
  // subscribers of every gateway and client of the prefix. When that core changes (it left,
  // or one sorting before it joined) NextMessage says kUnavailable once: subscribe again.
  // Shard channels (kShard, SPUBLISH) on their owner core, as keys (Redis Cluster's
  // semantics: one Subscribe's channels must have one owner, else InvalidArgument CROSSSLOT;
  // counts are over every core); NextMessage waits on every core this client has
  // subscriptions at, and says kUnavailable once when shard channels were lost with their
  // core or moved to a joining one (they are dropped: subscribe again).
  Result<uint64_t> Publish(std::string_view channel, std::string_view payload,
                           bool sharded = false);
  Result<std::vector<Connection::Confirmation>> Subscribe(Connection::SubKind kind,
                                                          std::span<const std::string> names,
                                                          bool unsubscribe = false);
  Result<std::optional<Connection::Message>> NextMessage(std::chrono::nanoseconds timeout);

  // The live members (sorted by name) and the one that owns `key` now (empty: none).
  struct MemberInfo {
    std::string name, address, zone;
    uint32_t shards = 1;
    uint64_t capacity = 0;
  };
  std::vector<MemberInfo> members() const;
  std::string OwnerOf(std::string_view key);
  // Waits (bounded) until `n` members are live; false on timeout. For tools and tests.
  bool WaitForMembers(size_t n, std::chrono::milliseconds timeout) const;

  struct Stats {
    uint64_t requests = 0;
    uint64_t failovers = 0;  // requests sent again to the next owner
    uint64_t connections_opened = 0;
    uint64_t membership_changes = 0;  // directory snapshots taken in
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Core;
  Cluster();
  void Refresh();
  // The key's owner and its next owner (rendezvous order, cores passed over last); how many
  // there are (0-2). One pass over the cores, no allocation: it runs for every request.
  size_t Choose(std::string_view key, std::array<Core*, 2>& out);
  Result<Connection*> ConnectionOf(Core& core);
  void PassOver(Core& core);
  // Runs `op` on the key's owner; on a connection failure once more on the next owner, unless
  // !retry_allowed or *consumed (the request's input or output was partly used).
  template <typename T, typename F>
  Result<T> Route(std::string_view key, F&& op, bool retry_allowed = true,
                  const bool* consumed = nullptr);
  // The pub/sub core (the first member by name) and its connection.
  Result<Core*> PubsubCore();
  // A shard channel's owner core and its connection.
  Result<Core*> ChannelOwner(std::string_view channel);
  static const std::string& CoreId(const Core& core);  // "name@revision": one registration
  Core* FindCore(std::string_view id);
  Result<std::vector<Connection::Confirmation>> SubscribeShard(std::span<const std::string> names,
                                                               bool unsubscribe);
  // Drops shard channels whose core left or which a joining core now owns (error: which).
  Status CheckShardChannels();

  ConnectOptions options_;
  bool local_ring_ = true;
  std::unique_ptr<cluster::Directory> directory_;
  uint64_t generation_ = 0;
  std::vector<std::unique_ptr<Core>> cores_;
  std::string subscribed_at_;  // the pub/sub core this client's subscriptions are on (name@rev)
  std::map<std::string, std::string> shard_channels_;  // shard channel -> its core (name@rev)
  uint64_t shard_generation_ = 0;  // the membership shard_channels_ was checked against
  size_t next_from_ = 0;           // NextMessage's turn over several cores
  // NextMessage's wait list (the cores with this client's subscriptions) and its poll set,
  // rebuilt when wait_version_ (bumped by whatever changes them) moves past wait_built_.
  std::vector<Core*> wait_from_;
  std::vector<pollfd> wait_fds_;
  uint64_t wait_version_ = 1, wait_built_ = 0;
  Stats stats_;
};

}  // namespace goblin::client
