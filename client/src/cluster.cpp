// Cluster: rendezvous routing over the cores etcd lists (client/include/goblin/client/cluster.h).
#include "goblin/client/cluster.h"

#include <fmt/format.h>
#include <poll.h>

#include <algorithm>
#include <array>
#include <utility>

#include "goblin/cluster/directory.h"
#include "goblin/cluster/etcd_client.h"
#include "goblin/cluster/member.h"
#include "goblin/cluster/rendezvous.h"

namespace goblin::client {
namespace {

constexpr auto kPassOver = std::chrono::seconds(2);

// Errors that mean "this core could not be reached or went away", as opposed to an answer.
bool IsConnectionFailure(const Status& s) {
  switch (s.code()) {
    case StatusCode::kUnavailable:
    case StatusCode::kTimeout:
    case StatusCode::kIoError:
    case StatusCode::kAborted:
      return true;
    default:
      return false;
  }
}

}  // namespace

struct Cluster::Core {
  cluster::Member member;
  std::string id;  // "name@revision": this registration
  cluster::RendezvousNode node;
  std::unique_ptr<Connection> conn;
  std::chrono::steady_clock::time_point passed_over_until{};
};

Result<ClusterTarget> ParseClusterTarget(std::string_view text) {
  if (!text.starts_with("etcd://")) {
    return Err(StatusCode::kInvalidArgument, "target '{}': want etcd://HOST:PORT[/prefix]", text);
  }
  text.remove_prefix(7);
  ClusterTarget t;
  if (size_t q = text.find('?'); q != std::string_view::npos) {
    std::string_view query = text.substr(q + 1);
    text = text.substr(0, q);
    if (query == "ring=off") {
      t.local_ring = false;
    } else if (query != "ring=local") {
      return Err(StatusCode::kInvalidArgument, "target option '{}': want ring=off or ring=local",
                 query);
    }
  }
  if (size_t slash = text.find('/'); slash != std::string_view::npos) {
    t.prefix = cluster::NormalizePrefix(text.substr(slash));
    text = text.substr(0, slash);
  }
  GOBLIN_ASSIGN_OR_RETURN(t.endpoints, cluster::ParseEtcdEndpoints(text));
  return t;
}

Cluster::Cluster() = default;
Cluster::~Cluster() = default;

Result<std::unique_ptr<Cluster>> Cluster::Open(std::string_view target,
                                               const ConnectOptions& options) {
  GOBLIN_ASSIGN_OR_RETURN(ClusterTarget t, ParseClusterTarget(target));
  cluster::EtcdOptions eo;
  eo.endpoints = t.endpoints;
  eo.timeout = options.timeout;
  // A secured etcd: TLS and auth from GOBLIN_ETCD_* (cluster/etcd_client.h), as etcdctl
  // takes ETCDCTL_*.
  GOBLIN_ASSIGN_OR_RETURN(eo.security, cluster::EtcdSecurityFromEnvironment());
  std::unique_ptr<Cluster> c(new Cluster());
  c->options_ = options;
  c->local_ring_ = t.local_ring;
  GOBLIN_ASSIGN_OR_RETURN(c->directory_, cluster::Directory::Open(eo, t.prefix));
  c->Refresh();
  return c;
}

void Cluster::Refresh() {
  if (directory_->generation() == generation_) return;  // one atomic load per request
  auto snap = directory_->snapshot();
  generation_ = snap->generation;
  ++stats_.membership_changes;
  std::vector<std::unique_ptr<Core>> next;
  next.reserve(snap->members.size());
  for (const cluster::Member& m : snap->members) {
    // The same registration (name and revision) keeps its connection and its pass-over.
    auto it = std::find_if(cores_.begin(), cores_.end(), [&](const auto& c) {
      return c && c->member.name == m.name && c->member.mod_revision == m.mod_revision;
    });
    if (it != cores_.end()) {
      next.push_back(std::move(*it));
      continue;
    }
    auto core = std::make_unique<Core>();
    core->member = m;
    core->id = fmt::format("{}@{}", m.name, m.mod_revision);
    core->node = {cluster::RendezvousSeed(m.name), cluster::MemberWeight(m)};
    next.push_back(std::move(core));
  }
  cores_ = std::move(next);
  ++wait_version_;  // (cores that left are gone: NextMessage's wait list names them)
}

size_t Cluster::Choose(std::string_view key, std::array<Core*, 2>& out) {
  Refresh();
  // Live cores before those passed over, then by score: one pass, nothing allocated.
  struct Pick {
    Core* core = nullptr;
    bool live = false;
    double score = -1;
  };
  auto better = [](const Pick& a, const Pick& b) {
    return a.live != b.live ? a.live : a.score > b.score;
  };
  const auto now = std::chrono::steady_clock::now();
  Pick best, next;
  for (const auto& c : cores_) {
    Pick p{c.get(), c->passed_over_until <= now, cluster::RendezvousScore(c->node, key)};
    if (best.core == nullptr || better(p, best)) {
      next = best;
      best = p;
    } else if (next.core == nullptr || better(p, next)) {
      next = p;
    }
  }
  out = {best.core, next.core};
  return static_cast<size_t>(best.core != nullptr) + static_cast<size_t>(next.core != nullptr);
}

Result<Connection*> Cluster::ConnectionOf(Core& core) {
  if (!core.conn) {
    const std::string ring = local_ring_ ? cluster::LocalRingPath(core.member) : std::string();
    auto c = Connection::Open(ring.empty() ? core.member.address : "unix:" + ring, options_);
    if (!c) {
      return Err(c.error().WithContext(
          fmt::format("core {} ({})", core.member.name, core.member.address)));
    }
    core.conn = std::move(*c);
    ++stats_.connections_opened;
  }
  return core.conn.get();
}

void Cluster::PassOver(Core& core) {
  if (core.conn) ++wait_version_;
  core.conn.reset();
  core.passed_over_until = std::chrono::steady_clock::now() + kPassOver;
}

template <typename T, typename F>
Result<T> Cluster::Route(std::string_view key, F&& op, bool retry_allowed, const bool* consumed) {
  ++stats_.requests;
  std::array<Core*, 2> ranked;
  const size_t n = Choose(key, ranked);
  if (n == 0) {
    return Err(StatusCode::kUnavailable, "no goblin-core is registered under {}",
               directory_->prefix());
  }
  const size_t tries = retry_allowed ? n : 1;
  Status last;
  for (size_t i = 0; i < tries; ++i) {
    Core& core = *ranked[i];
    if (i > 0) ++stats_.failovers;
    auto conn = ConnectionOf(core);
    if (!conn) {
      last = conn.error();
      PassOver(core);
      continue;
    }
    Result<T> r = op(**conn);
    if (r || !IsConnectionFailure(r.error())) return r;
    last = r.error().WithContext(fmt::format("core {}", core.member.name));
    PassOver(core);
    if (!retry_allowed || (consumed != nullptr && *consumed)) break;  // cannot be sent again
  }
  return Err(last);
}

Result<uint64_t> Cluster::Put(std::string_view key, std::span<const uint8_t> data, uint64_t ttl_ns,
                              std::string_view metadata) {
  return Route<uint64_t>(key, [&](Connection& c) { return c.Put(key, data, ttl_ns, metadata); });
}

Result<uint64_t> Cluster::Put(std::string_view key, const Connection::Source& source, uint64_t size,
                              uint64_t ttl_ns, std::string_view metadata) {
  return Route<uint64_t>(
      key, [&](Connection& c) { return c.Put(key, source, size, ttl_ns, metadata); },
      /*retry_allowed=*/false);
}

Result<uint64_t> Cluster::PutFile(std::string_view key, const std::string& path, uint64_t ttl_ns,
                                  std::string_view metadata) {
  return Route<uint64_t>(key,
                         [&](Connection& c) { return c.PutFile(key, path, ttl_ns, metadata); });
}

Result<Cluster::ObjectMeta> Cluster::Head(std::string_view key) {
  return Route<ObjectMeta>(key, [&](Connection& c) { return c.Head(key); });
}

Result<Cluster::ObjectMeta> Cluster::Get(std::string_view key, Connection::SinkRef sink,
                                         uint64_t offset, uint64_t length, bool follow_fill) {
  bool delivered = false;
  auto counted = [&](uint64_t off, std::span<const uint8_t> bytes) {
    delivered = true;
    return sink(off, bytes);
  };
  return Route<ObjectMeta>(
      key, [&](Connection& c) { return c.Get(key, counted, offset, length, follow_fill); }, true,
      &delivered);
}

Result<bool> Cluster::Delete(std::string_view key) {
  return Route<bool>(key, [&](Connection& c) { return c.Delete(key); });
}

Result<Cluster::Core*> Cluster::PubsubCore() {
  Refresh();
  if (cores_.empty()) {
    return Err(StatusCode::kUnavailable, "no goblin-core is registered under {}",
               directory_->prefix());
  }
  Core& core = *cores_.front();  // (sorted by name, as the directory lists them)
  GOBLIN_RETURN_IF_ERROR(ConnectionOf(core));
  return &core;
}

const std::string& Cluster::CoreId(const Core& core) { return core.id; }

Cluster::Core* Cluster::FindCore(std::string_view id) {
  for (const auto& c : cores_) {
    if (CoreId(*c) == id) return c.get();
  }
  return nullptr;
}

Result<Cluster::Core*> Cluster::ChannelOwner(std::string_view channel) {
  std::array<Core*, 2> ranked;
  if (Choose(channel, ranked) == 0) {
    return Err(StatusCode::kUnavailable, "no goblin-core is registered under {}",
               directory_->prefix());
  }
  GOBLIN_RETURN_IF_ERROR(ConnectionOf(*ranked[0]));
  return ranked[0];
}

Result<uint64_t> Cluster::Publish(std::string_view channel, std::string_view payload,
                                  bool sharded) {
  GOBLIN_ASSIGN_OR_RETURN(Core * core, sharded ? ChannelOwner(channel) : PubsubCore());
  auto r = core->conn->Publish(channel, payload, sharded);
  if (!r && IsConnectionFailure(r.error())) PassOver(*core);
  return r;
}

Result<std::vector<Connection::Confirmation>> Cluster::Subscribe(Connection::SubKind kind,
                                                                 std::span<const std::string> names,
                                                                 bool unsubscribe) {
  if (kind == Connection::SubKind::kShard) return SubscribeShard(names, unsubscribe);
  GOBLIN_ASSIGN_OR_RETURN(Core * core, PubsubCore());
  const std::string& here = CoreId(*core);
  if (!subscribed_at_.empty() && subscribed_at_ != here) {
    return Err(StatusCode::kUnavailable,
               "the pub/sub core changed from {} to {}: NextMessage first, then subscribe again",
               subscribed_at_, here);
  }
  auto r = core->conn->Subscribe(kind, names, unsubscribe);
  if (r) {
    if (subscribed_at_.empty()) ++wait_version_;
    subscribed_at_ = here;
  } else if (IsConnectionFailure(r.error())) {
    PassOver(*core);
  }
  return r;
}

Result<std::vector<Connection::Confirmation>> Cluster::SubscribeShard(
    std::span<const std::string> names, bool unsubscribe) {
  std::vector<Connection::Confirmation> out;
  // One core's (un)subscription; the counts are over every core (this client's channels).
  auto apply = [&](Core& core, std::span<const std::string> part) -> VoidResult {
    auto r = core.conn->Subscribe(Connection::SubKind::kShard, part, unsubscribe);
    if (!r) {
      if (IsConnectionFailure(r.error())) PassOver(core);
      return Err(r.error());
    }
    const std::string& id = CoreId(core);
    ++wait_version_;
    for (Connection::Confirmation& conf : *r) {
      if (conf.name && !unsubscribe) {
        shard_channels_[*conf.name] = id;
      } else if (conf.name) {
        if (auto it = shard_channels_.find(*conf.name);
            it != shard_channels_.end() && it->second == id) {
          shard_channels_.erase(it);
        }
      }
      conf.count = static_cast<uint32_t>(shard_channels_.size());
      out.push_back(std::move(conf));
    }
    return {};
  };
  if (names.empty()) {
    if (!unsubscribe) return Err(StatusCode::kInvalidArgument, "SSUBSCRIBE needs a channel");
    std::vector<std::string> ids;  // every core this client has shard channels at
    for (const auto& [name, id] : shard_channels_) {
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    if (ids.empty()) {  // (none: the answer is one confirmation with no name)
      GOBLIN_ASSIGN_OR_RETURN(Core * core, PubsubCore());
      GOBLIN_RETURN_IF_ERROR(apply(*core, {}));
    }
    for (const std::string& id : ids) {
      Core* core = FindCore(id);
      if (core == nullptr || !ConnectionOf(*core)) {  // gone, and its subscriptions with it
        std::erase_if(shard_channels_, [&](const auto& e) { return e.second == id; });
        ++wait_version_;
        continue;
      }
      GOBLIN_RETURN_IF_ERROR(apply(*core, {}));
    }
    return out;
  }
  // As Redis Cluster: one command's shard channels have one owner.
  GOBLIN_ASSIGN_OR_RETURN(Core * owner, ChannelOwner(names[0]));
  for (const std::string& n : names.subspan(1)) {
    std::array<Core*, 2> ranked;
    if (Choose(n, ranked) == 0 || ranked[0] != owner) {
      return Err(StatusCode::kInvalidArgument,
                 "CROSSSLOT shard channels {} and {} are owned by different cores", names[0], n);
    }
  }
  GOBLIN_RETURN_IF_ERROR(apply(*owner, names));
  return out;
}

Status Cluster::CheckShardChannels() {
  // Channels at a core that left, or whose owner is now another core (one joined): they
  // would receive nothing more. Left at their core; the caller is told once to subscribe again.
  std::vector<std::string> lost;
  for (auto it = shard_channels_.begin(); it != shard_channels_.end();) {
    Core* at = FindCore(it->second);
    std::array<Core*, 2> ranked;
    if (at != nullptr && Choose(it->first, ranked) > 0 && ranked[0] == at) {
      ++it;
      continue;
    }
    if (at != nullptr && at->conn) {
      std::vector<std::string> one{it->first};
      (void)at->conn->Subscribe(Connection::SubKind::kShard, one, true);
    }
    lost.push_back(it->first);
    it = shard_channels_.erase(it);
  }
  if (lost.empty()) return Status();
  ++wait_version_;
  return Status(
      StatusCode::kUnavailable,
      fmt::format("shard channel{} {}{} moved to another core: subscribe again",
                  lost.size() == 1 ? "" : "s", lost.front(),
                  lost.size() == 1 ? "" : fmt::format(" (and {} more)", lost.size() - 1)));
}

Result<std::optional<Connection::Message>> Cluster::NextMessage(std::chrono::nanoseconds timeout) {
  GOBLIN_ASSIGN_OR_RETURN(Core * core, PubsubCore());
  if (!subscribed_at_.empty() && subscribed_at_ != CoreId(*core)) {
    std::string was = std::exchange(subscribed_at_, std::string());
    ++wait_version_;
    return Err(StatusCode::kUnavailable, "the pub/sub core changed from {} to {}: subscribe again",
               was, CoreId(*core));
  }
  if (shard_generation_ != generation_) {
    shard_generation_ = generation_;
    if (Status s = CheckShardChannels(); !s.ok()) return Err(std::move(s));
  }
  // The cores this client has subscriptions at: rebuilt only when those change (a
  // subscription, a membership change, a core passed over), not for every message.
  if (wait_built_ != wait_version_ || wait_from_.empty()) {
    wait_from_.clear();
    if (!subscribed_at_.empty() || shard_channels_.empty()) wait_from_.push_back(core);
    for (const auto& [name, id] : shard_channels_) {
      Core* at = FindCore(id);
      if (at != nullptr &&
          std::find(wait_from_.begin(), wait_from_.end(), at) == wait_from_.end()) {
        GOBLIN_RETURN_IF_ERROR(ConnectionOf(*at));
        wait_from_.push_back(at);
      }
    }
    wait_built_ = wait_version_;
  }
  auto failed = [&](Core* c, const Status& s) {
    if (!IsConnectionFailure(s)) return;
    if (c == core) subscribed_at_.clear();
    std::erase_if(shard_channels_, [&](const auto& e) { return e.second == CoreId(*c); });
    PassOver(*c);
    ++wait_version_;
  };
  if (wait_from_.size() == 1) {
    Core* c = wait_from_[0];
    auto r = c->conn->NextMessage(timeout);
    if (!r) failed(c, r.error());
    return r;
  }
  // Several cores carry this client's subscriptions: take what has come from each (in turn,
  // starting one further each call), then sleep on all of them.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    ++next_from_;
    for (size_t i = 0; i < wait_from_.size(); ++i) {
      Core* c = wait_from_[(next_from_ + i) % wait_from_.size()];
      auto r = c->conn->NextMessage(std::chrono::nanoseconds(0));
      if (!r) {
        failed(c, r.error());
        return r;
      }
      if (r->has_value()) return r;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return std::optional<Connection::Message>();
    wait_fds_.clear();
    size_t prepared = 0;
    bool sleep = true;
    for (Core* c : wait_from_) {
      if (!c->conn->PrepareSleep()) {
        sleep = false;
        break;
      }
      ++prepared;
      wait_fds_.push_back({c->conn->wake_fd(), POLLIN, 0});
      if (c->conn->liveness_fd() >= 0) wait_fds_.push_back({c->conn->liveness_fd(), POLLIN, 0});
    }
    if (sleep) {
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
      (void)poll(wait_fds_.data(), wait_fds_.size(), static_cast<int>(std::min<int64_t>(ms, 1000)));
    }
    for (size_t i = 0; i < prepared; ++i) wait_from_[i]->conn->FinishSleep();
  }
}

std::vector<Cluster::MemberInfo> Cluster::members() const {
  std::vector<MemberInfo> out;
  for (const cluster::Member& m : directory_->snapshot()->members) {
    out.push_back({m.name, m.address, m.zone, m.shards, m.capacity});
  }
  return out;
}

std::string Cluster::OwnerOf(std::string_view key) {
  std::array<Core*, 2> ranked;
  return Choose(key, ranked) == 0 ? std::string() : ranked[0]->member.name;
}

bool Cluster::WaitForMembers(size_t n, std::chrono::milliseconds timeout) const {
  return directory_->WaitUntil([n](const auto& ms) { return ms.size() == n; }, timeout);
}

}  // namespace goblin::client
