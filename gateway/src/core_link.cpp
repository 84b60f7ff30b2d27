#include "core_link.h"

#include <sys/epoll.h>
#include <sys/mman.h>

#include <algorithm>

#include "epoll_ctl.h"
#include "goblin/client/cluster.h"
#include "goblin/common/clock.h"
#include "goblin/common/log.h"
#include "goblin/wire/goblin_wire.h"

namespace goblin::gateway {
namespace {
constexpr std::string_view kLog = "core-link";
constexpr uint64_t kPassOverNs = 5'000'000'000;  // a core that failed is left out this long
// Shard numbers of cores lost alone are not reused; past this many the link is rebuilt.
constexpr size_t kMaxLostShards = 4096;

}  // namespace

CoreLink::CoreLink(const CoreLinkOptions& o) : options_(o) {}

Result<std::unique_ptr<CoreLink>> CoreLink::Connect(const CoreLinkOptions& options, int epoll_fd,
                                                    uint64_t bell_tag, uint64_t socket_tag) {
  std::unique_ptr<CoreLink> l(new CoreLink(options));
  if (options.target.starts_with("etcd://")) {
    GOBLIN_ASSIGN_OR_RETURN(client::ClusterTarget t, client::ParseClusterTarget(options.target));
    cluster::EtcdOptions eo;
    eo.endpoints = t.endpoints;
    eo.security = options.etcd;
    GOBLIN_ASSIGN_OR_RETURN(l->directory_, cluster::Directory::Shared(eo, t.prefix));
    GOBLIN_ASSIGN_OR_RETURN(l->listener_, l->directory_->Listen());
    l->local_ring_ = t.local_ring;
  }
  l->epoll_ = epoll_fd;
  l->bell_tag_ = bell_tag;
  l->socket_tag_ = socket_tag;
  if (l->directory_) {  // (a sleeping loop wakes for a membership change: Tick takes it in)
    GOBLIN_RETURN_IF_ERROR(EpollAdd(epoll_fd, l->listener_->fd(), EPOLLIN, socket_tag));
  }
  // (and for connects done in the background: Tick takes them in)
  GOBLIN_ASSIGN_OR_RETURN(l->connector_, CoreConnector::Create());
  GOBLIN_RETURN_IF_ERROR(EpollAdd(epoll_fd, l->connector_->fd(), EPOLLIN, socket_tag));
  GOBLIN_RETURN_IF_ERROR(l->Open(std::chrono::seconds(5)));
  l->backoff_ = options.min_backoff;
  return l;
}

CoreLink::~CoreLink() {
  CloseShards();
  if (listener_) epoll_ctl(epoll_, EPOLL_CTL_DEL, listener_->fd(), nullptr);
  if (connector_) epoll_ctl(epoll_, EPOLL_CTL_DEL, connector_->fd(), nullptr);
}

VoidResult CoreLink::WatchShard(Shard& sh, uint16_t index, std::chrono::milliseconds timeout) {
  // Over the UCX plane the core is on another host (or acts as if): no pools to map; hits
  // come as ObjectData, local hits are off.
  if (options_.map_pools && sh.client->local()) {
    GOBLIN_RETURN_IF_ERROR(MapPools(sh, index, timeout));
  }
  GOBLIN_RETURN_IF_ERROR(EpollAdd(epoll_, sh.client->wake_fd(), EPOLLIN, bell_tag_));
  if (int live = sh.client->liveness_fd(); live >= 0) {
    if (auto r = EpollAdd(epoll_, live, EPOLLIN | EPOLLRDHUP, socket_tag_); !r) {
      epoll_ctl(epoll_, EPOLL_CTL_DEL, sh.client->wake_fd(), nullptr);
      return r;
    }
  }
  return {};
}

client::TransportOptions CoreLink::TransportOptionsFor(std::chrono::milliseconds timeout) const {
  client::TransportOptions to;
  to.name = options_.name;
  to.ring_bytes = options_.ring_bytes;
  to.peer_kind = static_cast<uint8_t>(wire::PeerKind::kGateway);
  to.timeout = timeout;
  return to;
}

VoidResult CoreLink::Open(std::chrono::milliseconds timeout) {
  // Every shard's transport (shard 0's Welcome says how many), then each one watched.
  shards_.clear();
  const client::TransportOptions to = TransportOptionsFor(timeout);
  const bool ucx = options_.target.starts_with("ucx://");
  std::vector<std::unique_ptr<client::Transport>> transports;
  if (directory_) {
    GOBLIN_ASSIGN_OR_RETURN(transports, ConnectMembers(to));
  } else {
    GOBLIN_ASSIGN_OR_RETURN(
        transports,
        client::ConnectShards(ucx, ucx ? options_.target.substr(6) : options_.target, to));
  }
  return OpenWith(std::move(transports), timeout);
}

VoidResult CoreLink::OpenWith(std::vector<std::unique_ptr<client::Transport>> transports,
                              std::chrono::milliseconds timeout) {
  shards_.clear();
  auto fail = [&](Status s) {
    CloseShards();
    return goblin::Err(std::move(s));
  };
  shards_.resize(transports.size());
  for (size_t i = 0; i < transports.size(); ++i) shards_[i].client = std::move(transports[i]);
  for (uint16_t i = 0; i < shards_.size(); ++i) {
    if (auto r = WatchShard(shards_[i], i, timeout); !r) {
      return fail(shards_.size() == 1
                      ? r.error()
                      : r.error().WithContext(fmt::format("shard {} of {}", i, shards_.size())));
    }
  }
  max_message_ = shards_[0].client->max_message();
  for (const Shard& sh : shards_) max_message_ = std::min(max_message_, sh.client->max_message());
  if (encode_buf_.size() < max_message_) encode_buf_ = ByteBuffer(max_message_);
  ++epoch_;
  for (Shard& sh : shards_) {
    if (sh.pools) sh.pools->epoch = epoch_;
  }
  up_ = true;
  ++stats_.connects;
  return {};
}

VoidResult CoreLink::MapPools(Shard& sh, uint16_t index, std::chrono::milliseconds timeout) {
  client::Transport& client = *sh.client;
  uint8_t buf[64];
  size_t n = wire::MapPoolsEncoder(buf, sizeof buf).set_correlation_id(0).Finish();
  GOBLIN_RETURN_IF_ERROR(client.Send({buf, n}, timeout));
  bool got = false;
  Status err;
  const uint64_t end =
      MonotonicNanos() + static_cast<uint64_t>(std::chrono::nanoseconds(timeout).count());
  while (!got && err.ok() && MonotonicNanos() < end) {
    GOBLIN_RETURN_IF_ERROR(client.Wait(std::chrono::milliseconds(10)));  // (false: keep waiting)
    GOBLIN_RETURN_IF_ERROR(client.Poll([&](std::span<const uint8_t> msg) {
      if (wire::PoolMapDecoder::Decode(msg)) got = true;
      if (auto e = wire::ErrorDecoder::Decode(msg))
        err = Status(StatusCode::kFailedPrecondition, std::string(e->text()));
    }));
  }
  if (!err.ok())
    return goblin::Err(
        err.WithContext("goblin-core has no object store (start it with --ssd-dir)"));
  if (!got) return goblin::Err(StatusCode::kTimeout, "goblin-core did not answer MapPools");
  std::vector<uint8_t> side;
  std::vector<UniqueFd> fds;
  GOBLIN_RETURN_IF_ERROR(client.ReceiveSideFrame(&side, &fds, timeout));
  auto map = wire::PoolMapDecoder::Decode(side);
  if (!map) return goblin::Err(map.error());
  auto p = std::make_unique<Pools>();
  p->shard = index;
  size_t i = 0;
  for (auto pool : map->pools()) {
    if (i >= fds.size()) break;
    int fd = fds[i++].get();
    Mapping* m = pool.pool() == wire::PoolKind::kHead         ? &p->head
                 : pool.pool() == wire::PoolKind::kIo         ? &p->io
                 : pool.pool() == wire::PoolKind::kHeadTable  ? &p->table
                 : pool.pool() == wire::PoolKind::kTouchTable ? &p->touch
                                                              : nullptr;
    if (m == nullptr) continue;  // a pool this gateway does not know
    int prot = m == &p->touch ? PROT_READ | PROT_WRITE : PROT_READ;
    GOBLIN_ASSIGN_OR_RETURN(*m, Mapping::MapShared(fd, pool.bytes(), prot, "goblin-core pool"));
    if (m == &p->head) p->head_fd = std::move(fds[i - 1]);
  }
  if (!p->head || !p->io) return goblin::Err(StatusCode::kCorruption, "PoolMap without both pools");
  sh.pools = std::move(p);
  return {};
}

void CoreLink::CloseShard(Shard& sh) {
  if (sh.client) {
    epoll_ctl(epoll_, EPOLL_CTL_DEL, sh.client->wake_fd(), nullptr);
    if (sh.client->liveness_fd() >= 0)
      epoll_ctl(epoll_, EPOLL_CTL_DEL, sh.client->liveness_fd(), nullptr);
    sh.client.reset();
  }
  queued_bytes_ -= sh.queued_bytes;
  sh.queue.clear();
  sh.queued_bytes = 0;
  if (sh.pools) {
    sh.pools->retired = true;
    if (sh.pools->holds > 0) retired_.push_back(std::move(sh.pools));
    sh.pools.reset();
  }
}

void CoreLink::CloseShards() {
  for (Shard& sh : shards_) CloseShard(sh);
  shards_.clear();
  lost_shards_ = 0;
  queued_bytes_ = 0;
  up_ = false;
}

bool CoreLink::PassedOverNow(const cluster::Member& m, uint64_t now) const {
  auto po = passed_over_.find(m.name);
  return po != passed_over_.end() && po->second.mod_revision == m.mod_revision &&
         now < po->second.until_ns;
}

Result<std::pair<bool, std::string>> CoreLink::RouteTo(const cluster::Member& m) const {
  // A core on this host: its ring socket (hits read its pools in place, local hits on).
  std::string ring = local_ring_ ? cluster::LocalRingPath(m) : std::string();
  if (!ring.empty()) return std::pair<bool, std::string>{false, std::move(ring)};
  if (!m.address.starts_with("ucx://")) {
    return goblin::Err(StatusCode::kInvalidArgument, "address {} is not ucx://", m.address);
  }
  return std::pair<bool, std::string>{true, m.address.substr(6)};
}

void CoreLink::LeaveOut(const cluster::Member& m, const Status& why, uint64_t now) {
  GOBLIN_LOG_WARN(kLog, "{}: core {} ({}) left out for 5 s: {}", options_.name, m.name, m.address,
                  why);
  PassOver(m.name, m.mod_revision, now);
}

void CoreLink::StartConnect(const cluster::Member& m, uint64_t now) {
  if (connecting_.contains({m.name, m.mod_revision})) return;  // (already on its way)
  auto route = RouteTo(m);
  if (!route) return LeaveOut(m, route.error(), now);
  connecting_.insert({m.name, m.mod_revision});
  connector_->Start(
      {m, route->first, std::move(route->second), TransportOptionsFor(std::chrono::seconds(1))});
}

void CoreLink::TakeConnected(uint64_t now) {
  std::vector<CoreConnector::Done> done;
  for (CoreConnector::Done& d : connector_->Take()) {
    if (d.job.round == 0) {  // (a core joining)
      connecting_.erase({d.job.member.name, d.job.member.mod_revision});
      done.push_back(std::move(d));
      continue;
    }
    if (d.job.round != round_) continue;  // (an earlier round's: its transports close)
    for (size_t i = 0; i < round_members_.size(); ++i) {
      if (!round_results_[i] && round_members_[i].name == d.job.member.name) {
        round_results_[i] = std::move(d.transports);
        --round_pending_;
        break;
      }
    }
  }
  if (round_ != 0 && round_pending_ == 0) FinishReconnect(now);
  if (!up_ || !directory_) return;  // (down: the next reconnect connects to every member)
  auto snap = directory_->snapshot();
  const uint16_t pubsub_before = pubsub_shard();
  bool joined = false;
  for (CoreConnector::Done& d : done) {
    const cluster::Member& m = d.job.member;
    const bool current =
        std::any_of(snap->members.begin(), snap->members.end(), [&](const cluster::Member& x) {
          return x.name == m.name && x.mod_revision == m.mod_revision;
        });
    const bool known = std::any_of(cores_.begin(), cores_.end(),
                                   [&](const CoreSpan& c) { return c.name == m.name; });
    if (!current || known) continue;  // (it left or registered again since, or is connected)
    if (!d.transports || d.transports->empty() ||
        shards_.size() + d.transports->size() > UINT16_MAX) {
      LeaveOut(m,
               d.transports ? Status(StatusCode::kResourceExhausted, "no shards, or too many")
                            : d.transports.error(),
               now);
      continue;
    }
    passed_over_.erase(m.name);
    if (!AddCore(m, std::move(*d.transports))) return Rebuild(now);
    joined = true;
  }
  if (joined && on_joined_) on_joined_();
  NotePubsubMove(pubsub_before);
}

bool CoreLink::AddCore(const cluster::Member& m,
                       std::vector<std::unique_ptr<client::Transport>> t) {
  const auto first = static_cast<uint16_t>(shards_.size());
  bool watched = true;
  for (auto& tr : t) {
    shards_.emplace_back();
    shards_.back().client = std::move(tr);
    if (auto r = WatchShard(shards_.back(), static_cast<uint16_t>(shards_.size() - 1),
                            std::chrono::seconds(1));
        !r) {
      GOBLIN_LOG_WARN(kLog, "{}: core {}: {}", options_.name, m.name, r.error());
      watched = false;
    }
    max_message_ = std::min(max_message_, shards_.back().client->max_message());
  }
  if (!watched) return false;
  // (in name order: one sorting first takes pub/sub over, NotePubsubMove)
  const auto at =
      std::lower_bound(cores_.begin(), cores_.end(), m.name,
                       [](const CoreSpan& c, const std::string& n) { return c.name < n; }) -
      cores_.begin();
  cores_.insert(cores_.begin() + at,
                {m.name, m.mod_revision, first, static_cast<uint16_t>(shards_.size() - first)});
  nodes_.insert(nodes_.begin() + at, {cluster::RendezvousSeed(m.name), cluster::MemberWeight(m)});
  GOBLIN_LOG_INFO(kLog, "{}: core {} joined ({} shards); {} cores", options_.name, m.name,
                  shards_.size() - first, cores_.size());
  return true;
}

void CoreLink::PassOver(const std::string& name, int64_t mod_revision, uint64_t now) {
  const uint64_t until = now + kPassOverNs;
  passed_over_[name] = {mod_revision, until};
  // (tried again then, while the link is up: Tick)
  if (retry_members_at_ == 0 || until < retry_members_at_) retry_members_at_ = until;
}

Result<std::vector<std::unique_ptr<client::Transport>>> CoreLink::ConnectMembers(
    const client::TransportOptions& to) {
  auto snap = directory_->snapshot();
  const uint64_t now = MonotonicNanos();
  std::vector<cluster::Member> members;
  std::vector<MemberResult> results;
  for (const cluster::Member& m : snap->members) {  // (sorted by name: shard 0 is the first's)
    if (PassedOverNow(m, now)) continue;
    auto route = RouteTo(m);
    members.push_back(m);
    results.emplace_back(route ? client::ConnectShards(route->first, route->second, to)
                               : MemberResult::value_type(goblin::Err(route.error())));
  }
  return AssembleMembers(snap->generation, members, results, now);
}

Result<std::vector<std::unique_ptr<client::Transport>>> CoreLink::AssembleMembers(
    uint64_t generation, const std::vector<cluster::Member>& members,
    std::vector<MemberResult>& results, uint64_t now) {
  membership_generation_ = generation;
  cores_.clear();
  nodes_.clear();
  std::vector<std::unique_ptr<client::Transport>> out;
  size_t skipped = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const cluster::Member& m = members[i];
    MemberResult& r = results[i];
    if (!r || !*r || (*r)->empty() || out.size() + (*r)->size() > UINT16_MAX) {
      LeaveOut(m,
               !r    ? Status(StatusCode::kAborted, "no answer")
               : !*r ? r->error()
                     : Status(StatusCode::kResourceExhausted, "no shards, or too many"),
               now);
      ++skipped;
      continue;
    }
    passed_over_.erase(m.name);
    cores_.push_back({m.name, m.mod_revision, static_cast<uint16_t>(out.size()),
                      static_cast<uint16_t>((*r)->size())});
    nodes_.push_back({cluster::RendezvousSeed(m.name), cluster::MemberWeight(m)});
    for (auto& t : **r) out.push_back(std::move(t));
  }
  if (out.empty()) {
    cores_.clear();
    nodes_.clear();
    return goblin::Err(
        StatusCode::kUnavailable, "no goblin-core reachable under {} ({} registered, {} tried)",
        directory_->prefix(), directory_->snapshot()->members.size(), members.size());
  }
  GOBLIN_LOG_INFO(kLog, "{}: {} core{} ({} shards){}", options_.name, cores_.size(),
                  cores_.size() == 1 ? "" : "s", out.size(),
                  skipped == 0 ? std::string() : fmt::format(", {} left out", skipped));
  return out;
}

size_t CoreLink::CoreOfShard(uint16_t shard) const {
  for (size_t i = 0; i < cores_.size(); ++i) {
    if (shard >= cores_[i].first_shard && shard < cores_[i].first_shard + cores_[i].shards) {
      return i;
    }
  }
  return SIZE_MAX;
}

void CoreLink::LoseCore(size_t index, const Status& why) {
  // A front that cannot lose one core alone takes it as the link going down.
  if (!on_core_lost_ || index >= cores_.size() || cores_.size() == 1) return GoDown(why);
  const CoreSpan lost = cores_[index];
  for (uint16_t i = lost.first_shard; i < lost.first_shard + lost.shards; ++i) {
    CloseShard(shards_[i]);
  }
  lost_shards_ += lost.shards;
  PassOver(lost.name, lost.mod_revision, MonotonicNanos());
  cores_.erase(cores_.begin() + static_cast<ptrdiff_t>(index));
  nodes_.erase(nodes_.begin() + static_cast<ptrdiff_t>(index));
  ++stats_.cores_lost;
  GOBLIN_LOG_WARN(kLog, "{}: core {} lost ({}); its keys go to their next owner; {} core{} left",
                  options_.name, lost.name, why, cores_.size(), cores_.size() == 1 ? "" : "s");
  on_core_lost_(lost.first_shard, lost.shards);
  if (index == 0) NotePubsubMove(lost.first_shard);  // (the next by name carries it now)
}

void CoreLink::NotePubsubMove(uint16_t before) {
  if (!up_ || cores_.empty() || pubsub_shard() == before) return;
  GOBLIN_LOG_INFO(kLog, "{}: pub/sub moves to core {}", options_.name, cores_.front().name);
  if (on_pubsub_moved_) on_pubsub_moved_(before);
}

bool CoreLink::ApplyMembership(uint64_t now) {
  auto snap = directory_->snapshot();
  // A core that left or registered again (a restart: its transports are dead) is lost alone
  // where it may be (LoseCore; else the link is rebuilt).
  std::vector<std::string> gone;
  for (size_t i = 0; i < cores_.size(); ++i) {
    const CoreSpan& c = cores_[i];
    auto it = std::find_if(snap->members.begin(), snap->members.end(),
                           [&](const cluster::Member& m) { return m.name == c.name; });
    if (it != snap->members.end() && it->mod_revision == c.mod_revision) continue;
    if (!on_core_lost_) return false;
    gone.push_back(c.name);
  }
  std::vector<const cluster::Member*> fresh;
  for (const cluster::Member& m : snap->members) {
    bool known = std::any_of(cores_.begin(), cores_.end(), [&](const CoreSpan& c) {
      return c.name == m.name && c.mod_revision == m.mod_revision;
    });
    if (known) continue;
    if (PassedOverNow(m, now)) continue;  // (still left out)
    fresh.push_back(&m);
  }
  if (lost_shards_ > kMaxLostShards) return false;  // (a rebuild numbers the shards afresh)
  membership_generation_ = snap->generation;
  for (const std::string& name : gone) {
    auto it = std::find_if(cores_.begin(), cores_.end(),
                           [&](const CoreSpan& c) { return c.name == name; });
    if (it == cores_.end()) continue;
    LoseCore(static_cast<size_t>(it - cores_.begin()),
             Status(StatusCode::kUnavailable, "it left etcd or registered again"));
    if (!up_) return true;  // (LoseCore took the link down)
  }
  retry_members_at_ = 0;
  for (const auto& [name, po] : passed_over_) {  // (still left out: tried again then)
    if (po.until_ns > now && (retry_members_at_ == 0 || po.until_ns < retry_members_at_)) {
      retry_members_at_ = po.until_ns;
    }
  }
  for (const cluster::Member* m : fresh) StartConnect(*m, now);  // (TakeConnected adds them)
  return true;
}

void CoreLink::GoDown(const Status& why) {
  if (!up_) return;
  GOBLIN_LOG_ERROR(kLog, "{}: goblin-core went away ({}); reconnecting", options_.name, why);
  CloseShards();
  ++stats_.disconnects;
  backoff_ = options_.min_backoff;
  reconnect_at_ =
      MonotonicNanos() + static_cast<uint64_t>(std::chrono::nanoseconds(backoff_).count());
  if (on_down_) on_down_();
}

void CoreLink::Rebuild(uint64_t now) {
  GOBLIN_LOG_INFO(kLog, "{}: the cores in etcd changed; connecting to the new set", options_.name);
  CloseShards();
  up_ = false;
  if (on_down_) on_down_();
  reconnect_at_ = now;
}

void CoreLink::Tick(uint64_t now) {
  if (connector_ && connector_->ready()) TakeConnected(now);
  const bool changed = up_ && directory_ && directory_->generation() != membership_generation_;
  if (changed || (up_ && retry_members_at_ != 0 && now >= retry_members_at_)) {
    // Cores came or went (one atomic load per tick otherwise), or one left out may be tried
    // again. Taken in place where possible; else connect again to the new set.
    if (changed) ++stats_.membership_changes;
    if (ApplyMembership(now)) return;
    Rebuild(now);
  }
  if (up_ || round_ != 0 || now < reconnect_at_) return;
  StartReconnect(now);
}

void CoreLink::StartReconnect(uint64_t now) {
  round_ = ++rounds_;
  round_members_.clear();
  const auto to = TransportOptionsFor(std::chrono::seconds(1));
  std::vector<CoreConnector::Job> jobs;
  if (directory_) {
    auto snap = directory_->snapshot();
    round_generation_ = snap->generation;
    for (const cluster::Member& m : snap->members) {  // (by name: shard 0 is the first's)
      if (PassedOverNow(m, now)) continue;
      auto route = RouteTo(m);
      if (!route) {
        LeaveOut(m, route.error(), now);
        continue;
      }
      round_members_.push_back(m);
      jobs.push_back({m, route->first, std::move(route->second), to, round_});
    }
  } else {
    const bool ucx = options_.target.starts_with("ucx://");
    cluster::Member m;
    m.name = options_.target;
    round_members_.push_back(m);
    jobs.push_back({m, ucx, ucx ? options_.target.substr(6) : options_.target, to, round_});
  }
  round_results_.clear();
  round_results_.resize(round_members_.size());
  round_pending_ = jobs.size();
  if (jobs.empty()) return FinishReconnect(now);
  for (auto& j : jobs) connector_->Start(std::move(j));
}

void CoreLink::FinishReconnect(uint64_t now) {
  round_ = 0;
  std::vector<std::unique_ptr<client::Transport>> transports;
  Status err;
  if (directory_) {
    auto r = AssembleMembers(round_generation_, round_members_, round_results_, now);
    if (r) {
      transports = std::move(*r);
    } else {
      err = r.error();
    }
  } else if (!round_results_[0] || !*round_results_[0]) {
    err =
        round_results_[0] ? round_results_[0]->error() : Status(StatusCode::kAborted, "no answer");
  } else {
    transports = std::move(**round_results_[0]);
  }
  round_members_.clear();
  round_results_.clear();
  if (err.ok()) {
    if (auto r = OpenWith(std::move(transports), std::chrono::seconds(1)); !r) err = r.error();
  }
  if (!err.ok()) {
    if (stats_.reconnect_failures++ % 20 == 0) {
      GOBLIN_LOG_WARN(kLog, "{}: goblin-core is still unavailable: {}", options_.name, err);
    }
    backoff_ = std::min(options_.max_backoff, backoff_ * 2);
    reconnect_at_ = now + static_cast<uint64_t>(std::chrono::nanoseconds(backoff_).count());
    return;
  }
  GOBLIN_LOG_INFO(kLog, "{}: goblin-core is back (connection {}, {} shard{})", options_.name,
                  epoch_, shards_.size(), shards_.size() == 1 ? "" : "s");
  backoff_ = options_.min_backoff;
  if (on_up_) on_up_();
}

int CoreLink::MillisUntilReconnect(uint64_t now) const {
  if (up_ || round_ != 0) return -1;  // (a reconnect in progress wakes the loop when done)
  if (now >= reconnect_at_) return 0;
  return static_cast<int>((reconnect_at_ - now + 999'999) / 1'000'000);
}

bool CoreLink::over_limit() const {
  for (const Shard& sh : shards_) {  // (a lost core's shards queue nothing)
    if (sh.queued_bytes > options_.queue_limit) return true;
  }
  return false;
}

CoreLink::SendResult CoreLink::SendEncoded(Shard& sh, std::span<const uint8_t> msg, bool bounded) {
  if (!sh.client) return SendResult::kDown;  // (a core lost alone)
  if (sh.queue.empty()) {
    switch (sh.client->TrySend(msg)) {
      case client::Transport::TrySendResult::kOk:
        return SendResult::kSent;
      case client::Transport::TrySendResult::kTooLarge:
        return SendResult::kTooLarge;
      case client::Transport::TrySendResult::kFull:
        break;
    }
  }
  if (bounded && sh.queued_bytes > options_.queue_limit) {
    ++stats_.refused_busy;
    return SendResult::kBusy;
  }
  sh.queue.emplace_back(msg.begin(), msg.end());  // the ring is full: keep the order
  sh.queued_bytes += msg.size();
  queued_bytes_ += msg.size();
  return SendResult::kQueued;
}

CoreLink::SendResult CoreLink::SendVia(FunctionRef<size_t(uint8_t*, size_t)> encode,
                                       size_t max_bytes, uint16_t shard, bool bounded) {
  if (!up_) return SendResult::kDown;
  if (shard >= shards_.size()) return SendResult::kTooLarge;  // (a caller's bug)
  size_t cap = std::min<size_t>(encode_buf_.size(), std::max<size_t>(max_bytes, 64));
  size_t n = encode(encode_buf_.data(), cap);
  if (n == 0 || n > max_message_) return SendResult::kTooLarge;
  return SendEncoded(shards_[shard], {encode_buf_.data(), n}, bounded);
}

CoreLink::SendResult CoreLink::Send(FunctionRef<size_t(uint8_t*, size_t)> encode, size_t max_bytes,
                                    uint16_t shard) {
  return SendVia(encode, max_bytes, shard, true);
}

CoreLink::SendResult CoreLink::SendAlways(FunctionRef<size_t(uint8_t*, size_t)> encode,
                                          size_t max_bytes, uint16_t shard) {
  return SendVia(encode, max_bytes, shard, false);
}

bool CoreLink::Flush() {
  bool any = false;
  for (Shard& sh : shards_) {
    while (sh.client && !sh.queue.empty() &&
           sh.client->TrySend(sh.queue.front()) == client::Transport::TrySendResult::kOk) {
      sh.queued_bytes -= sh.queue.front().size();
      queued_bytes_ -= sh.queue.front().size();
      sh.queue.pop_front();
      any = true;
    }
  }
  return any;
}

size_t CoreLink::Poll(FunctionRef<void(uint16_t, std::span<const uint8_t>)> fn, size_t max) {
  size_t total = 0;
  for (uint16_t i = 0; up_ && i < shards_.size() && total < max; ++i) {
    if (!shards_[i].client) continue;
    auto n = shards_[i].client->Poll([&](std::span<const uint8_t> m) { fn(i, m); }, max - total);
    if (!n) {
      LoseShard(i, n.error());
      continue;  // (the others go on if the link is still up)
    }
    total += *n;
  }
  return total;
}

bool CoreLink::PrepareSleep(bool want_space) {
  bool ok = true;
  for (Shard& sh : shards_) {
    if (sh.client && !sh.client->PrepareSleep(want_space && sh.queued_bytes > 0)) ok = false;
  }
  return ok;
}

void CoreLink::FinishSleep() {
  for (Shard& sh : shards_) {
    if (sh.client) sh.client->FinishSleep();
  }
}

void CoreLink::OnSocketEvent() {
  if (listener_) listener_->Drain();
  for (uint16_t i = 0; up_ && i < shards_.size(); ++i) {
    if (!shards_[i].client) continue;
    if (auto r = shards_[i].client->CheckAlive(); !r) LoseShard(i, r.error());
  }
}

void CoreLink::LoseShard(uint16_t shard, const Status& why) {
  const size_t core = directory_ ? CoreOfShard(shard) : SIZE_MAX;
  if (core == SIZE_MAX) return GoDown(why);
  LoseCore(core, why);
}

void CoreLink::ReturnLoan(uint64_t loan_id, uint16_t shard) {
  SendAlways(
      [&](uint8_t* b, size_t cap) {
        return wire::LoanReleaseEncoder(b, cap).set_loan_id(loan_id).Finish();
      },
      32, shard);
}

void CoreLink::ReleaseLoan(uint64_t loan_id, Pools* p) {
  if (p == nullptr) return;
  --p->holds;
  if (!p->retired) return ReturnLoan(loan_id, p->shard);
  if (p->holds == 0) FreeRetired(p);
}

void CoreLink::FreeRetired(Pools* p) {
  retired_.remove_if([p](const std::unique_ptr<Pools>& r) { return r.get() == p; });
}

}  // namespace goblin::gateway
