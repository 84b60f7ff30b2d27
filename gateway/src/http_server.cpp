// The HTTP front: setup and the event loop. See http_server_impl.h for the other parts.
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "epoll_ctl.h"
#include "goblin/common/clock.h"
#include "goblin/common/config.h"
#include "goblin/common/log.h"
#include "goblin/common/spin_backoff.h"
#include "http_server_impl.h"
#include "tcp_listen.h"

namespace goblin::gateway {
namespace {
constexpr std::string_view kLog = "http";

}  // namespace

HttpStats& HttpStats::operator+=(const HttpStats& o) {
  accepted += o.accepted;
  accepted_for_neighbour += o.accepted_for_neighbour;
  same_host_buffers += o.same_host_buffers;
  requests += o.requests;
  hits += o.hits;
  misses += o.misses;
  passes += o.passes;
  coalesced += o.coalesced;
  origin_requests += o.origin_requests;
  fills += o.fills;
  fills_aborted += o.fills_aborted;
  purges += o.purges;
  bad_requests += o.bad_requests;
  bytes_lent += o.bytes_lent;
  bytes_by_reference += o.bytes_by_reference;
  slow_clients_dropped += o.slow_clients_dropped;
  core_unavailable += o.core_unavailable;
  core_disconnects += o.core_disconnects;
  core_retries += o.core_retries;
  cores_lost += o.cores_lost;
  local_hits += o.local_hits;
  local_stale += o.local_stale;
  local_cut += o.local_cut;
  tls_handshakes += o.tls_handshakes;
  tls_resumed += o.tls_resumed;
  tls_failed += o.tls_failed;
  ktls_send += o.ktls_send;
  ktls_recv += o.ktls_recv;
  h2_connections += o.h2_connections;
  h2_upgrades += o.h2_upgrades;
  h2_streams += o.h2_streams;
  h2_resets += o.h2_resets;
  h2_goaways += o.h2_goaways;
  probes += o.probes;
  probe_failures += o.probe_failures;
  revalidations += o.revalidations;
  not_modified += o.not_modified;
  stale_served += o.stale_served;
  background_revalidations += o.background_revalidations;
  stale_if_error += o.stale_if_error;
  for (size_t i = 0; i < origin_faults.size(); ++i) origin_faults[i] += o.origin_faults[i];
  return *this;
}

VoidResult HttpServer::Impl::Init() {
  if (options_.port == 0 && options_.https_port == 0)
    return Err(StatusCode::kInvalidArgument, "HTTP needs a port: --http-port and/or --https-port");
  if (options_.https_port != 0 && !options_.tls)
    return Err(StatusCode::kInvalidArgument, "--https-port needs --tls-cert and --tls-key");
  GOBLIN_RETURN_IF_ERROR(ParseMirror());
  if (!ResolveOrigin()) {
    GOBLIN_LOG_WARN(kLog, "origin host '{}' does not resolve yet: misses answer 502 until it does",
                    origin_host_);
  }
  epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) return ErrnoErr("epoll_create1", errno);
  CoreLinkOptions lo;
  lo.target = options_.core;
  lo.etcd = options_.etcd;
  lo.name = options_.worker == 0 ? std::string("goblin-gateway-http")
                                 : fmt::format("goblin-gateway-http-{}", options_.worker);
  lo.ring_bytes = options_.core_ring_bytes;
  lo.map_pools = true;  // hits are written to sockets from the core's pools
  GOBLIN_ASSIGN_OR_RETURN(core_, CoreLink::Connect(lo, epoll_.get(), kTagCoreBell, kTagCoreSock));
  core_->set_on_down([this] { OnCoreDown(); });
  core_->set_on_up([this] { OnCoreUp(); });
  core_->set_on_core_lost([this](uint16_t first, uint16_t count) { OnCoreLost(first, count); });
  async_ = options_.net_async;
  if (async_) {
    GOBLIN_RETURN_IF_ERROR(net_.Init(4096));
    GOBLIN_RETURN_IF_ERROR(
        EpollCtl(epoll_.get(), EPOLL_CTL_ADD, net_.event_fd(), EPOLLIN, kTagNetRing));
  }
  // Accepted connections inherit TCP_NODELAY (no system call per accept), and are accepted
  // once their first bytes are in (nginx's `listen ... deferred`): the request is read
  // right at accept, not one loop round later behind whatever else that round writes.
  TcpListenOptions tl;
  tl.reuse_port = tl.reuse_port_required = options_.reuse_port;
  tl.nodelay = true;
  tl.defer_accept_s = 1;
  tl.send_buffer = static_cast<int>(std::min<uint64_t>(options_.send_buffer, INT_MAX / 2));
  // (a fixed buffer for everyone is inherited from the listener instead)
  same_host_send_buffer_ =
      options_.send_buffer != 0
          ? 0
          : static_cast<int>(std::min<uint64_t>(options_.same_host_send_buffer, INT_MAX / 2));
  if (options_.port != 0) {
    tl.what = "HTTP";
    GOBLIN_ASSIGN_OR_RETURN(auto listener, ListenTcp(options_.listen_address, options_.port, tl));
    listen_ = std::move(listener.first);
    port_ = listener.second;
    GOBLIN_RETURN_IF_ERROR(
        EpollCtl(epoll_.get(), EPOLL_CTL_ADD, listen_.get(), EPOLLIN, kTagListen));
  }
  if (options_.https_port != 0) {  // (a ClientHello is in when the connection is accepted)
    tl.what = "HTTPS";
    GOBLIN_ASSIGN_OR_RETURN(auto listener,
                            ListenTcp(options_.listen_address, options_.https_port, tl));
    tls_listen_ = std::move(listener.first);
    tls_port_ = listener.second;
    GOBLIN_RETURN_IF_ERROR(
        EpollCtl(epoll_.get(), EPOLL_CTL_ADD, tls_listen_.get(), EPOLLIN, kTagListenTls));
  }
  return {};
}

VoidResult HttpServer::Impl::Run(int stop_fd) {
  if (stop_fd >= 0)
    GOBLIN_RETURN_IF_ERROR(EpollCtl(epoll_.get(), EPOLL_CTL_ADD, stop_fd, EPOLLIN, kTagStop));
  bool stop = false;
  uint64_t drain_until = 0;  // (draining after the stop signal: until then, or no fills left)
  uint64_t last_work = MonotonicNanos(), last_sweep = 0;
  const auto busy_poll_ns = static_cast<uint64_t>(options_.busy_poll.count());
  SpinBackoff backoff;         // (no spinning for a while on a CPU it was preempted on)
  uint64_t idle_round_at = 0;  // the last round's clock, if it found nothing and did not sleep
  auto publish = [this](Copy* c) {
    c->stats = stats_;
    c->ttfb = ttfb_;
  };
  while (!stop) {
    size_t work = core_->Poll(
        [&](uint16_t shard, std::span<const uint8_t> m) { OnCoreMessage(shard, m); }, 512);
    if (core_->queued_bytes() > 0 && core_->Flush()) ++work;
#if GOBLIN_HAVE_URING
    if (async_) work += net_.Reap([&](uint64_t ud, int32_t res) { OnNetCompletion(ud, res); });
#endif
    // Origins paused for the core's backlog or a slow client resume when that shrinks.
    ResumeOrigins();
    if (!after_commit_.empty()) {
      ++work;
      AfterCommits();
    }
    if (!next_round_.empty()) {  // (their turn again)
      ++work;
      for (uint64_t id : next_round_) {
        if (Conn* c = Find(id)) dirty_.push_back(c);
      }
      next_round_.clear();
    }
    for (size_t i = 0; i < dirty_.size(); ++i) {
      if (!dirty_[i]->closed) Flush(*dirty_[i]);
    }
    dirty_.clear();
    if (!closed_.empty()) ReapClosed();
    dead_fills_.clear();
    uint64_t now = MonotonicNanos();
    core_->Tick(now);
    if (!relook_.empty()) ExpireRelooks(now);
    if (options_.prober && !probe_inflight_ && now >= next_probe_) StartProbe(now);
    published_.Offer(now, 0, false, publish);   // (the metrics endpoint's copy)
    if (now - last_sweep > 1'000'000'000ULL) {  // idle connections and origin timeouts
      last_sweep = now;
      uint64_t idle = static_cast<uint64_t>(options_.idle_timeout.count()) * 1'000'000'000ULL;
      uint64_t send_limit = static_cast<uint64_t>(options_.send_timeout.count()) * 1'000'000'000ULL;
      std::vector<uint64_t> slow_streams;
      for (auto& [id, c] : conns_) {
        if (c->closed) continue;
        if (c->h2_parent != 0) {
          // An HTTP/2 stream whose bytes the client takes none of (it keeps the stream's
          // window shut): reset, as a slow HTTP/1.1 client is closed (its loans go back).
          if (c->out_bytes > 0 && now - c->last_progress > send_limit) slow_streams.push_back(id);
          continue;
        }
        const bool streams = c->h2 && !c->h2->streams.empty();
        if (!c->ex && !streams && c->out_bytes == 0 && now - c->last_active > idle) {
          Close(*c);
        } else if (c->out_bytes > 0 && now - c->last_progress > send_limit) {
          ++stats_.slow_clients_dropped;
          GOBLIN_LOG_WARN(kLog, "client {} ({}) read nothing for {} s; closing it", c->id, c->peer,
                          options_.send_timeout.count());
          Close(*c);
        }
      }
      for (uint64_t id : slow_streams) {
        if (Conn* st = Find(id)) {
          ++stats_.slow_clients_dropped;
          GOBLIN_LOG_WARN(kLog, "HTTP/2 stream {} of {} took nothing for {} s; resetting it",
                          st->h2s->id, st->peer, options_.send_timeout.count());
          ResetH2Stream(*st);
        }
      }
      std::vector<uint64_t> late, stale;
      for (auto& [tag, o] : origins_) {
        if (o->idle && now - o->idle_since > 30'000'000'000ULL) stale.push_back(tag);
        // A paused origin is not silent: we stopped reading it (a slow client, the core).
        if (o->deadline != 0 && now > o->deadline && !o->paused) late.push_back(tag);
      }
      for (uint64_t tag : stale) {
        if (auto it = origins_.find(tag); it != origins_.end()) CloseOrigin(*it->second);
      }
      for (uint64_t tag : late) {
        if (auto it = origins_.find(tag); it != origins_.end())
          OnOriginDone(*it->second, false, OriginFault::kTimeout);
      }
    }
    if (drain_until != 0 && (all_fills_.empty() || now >= drain_until)) {
      if (!all_fills_.empty()) {
        GOBLIN_LOG_WARN(kLog, "stopping with {} fills still in flight after {} ms (aborted)",
                        all_fills_.size(), options_.drain_timeout.count());
      }
      break;
    }
    int timeout = 0;
    // (connections given a turn in the next round, or marked since this round's writes -
    // an HTTP/2 session's frames queued at the end of a flush - are work: no sleep)
    const bool idle = work == 0 && next_round_.empty() && dirty_.empty();
    if (idle && idle_round_at != 0) (void)backoff.Idle(idle_round_at, now);
    if (!idle) {
      last_work = now;
    } else if ((now - last_work >= busy_poll_ns && now > poll_until_) || !backoff.may_spin(now)) {
      timeout = core_->PrepareSleep(core_->queued_bytes() > 0) ? 1000 : 0;
      if (int r = core_->MillisUntilReconnect(now); r >= 0 && r < timeout) timeout = r;
      if (options_.prober && !probe_inflight_) {  // (awake for the next probe)
        const int64_t ms =
            next_probe_ > now ? static_cast<int64_t>((next_probe_ - now) / 1'000'000) : 0;
        if (ms < timeout) timeout = static_cast<int>(ms);
      }
    }
    if (drain_until != 0 && timeout != 0) timeout = 10;      // (the drain's end is looked for)
    published_.Offer(now, last_work, timeout > 0, publish);  // (sleeping: what it did is seen)
    if (timeout == 0 && work == 0 && options_.yield_when_polling) sched_yield();
#if GOBLIN_HAVE_URING
    if (async_) net_.Submit();
#endif
    epoll_event events[128];
    int n = epoll_wait(epoll_.get(), events, 128, timeout);
    int wait_errno = errno;  // (FinishSleep reads an eventfd: keep epoll_wait's errno)
    if (timeout != 0) core_->FinishSleep();
    // EINTR also comes from io_uring task work, not only from signals.
    if (n < 0 && wait_errno != EINTR) return ErrnoErr("epoll_wait", wait_errno);
    for (int i = 0; i < n; ++i) {
      uint64_t tag = events[i].data.u64;
      uint32_t ev = events[i].events;
      if (tag == kTagStop) {
        if (drain_until == 0) drain_until = BeginDrain(stop_fd);
        if (drain_until == 0) stop = true;
      } else if (tag == kTagCoreBell) {
      } else if (tag == kTagCoreSock) {
        core_->OnSocketEvent();
      } else if (tag == kTagListen) {
        Accept(listen_.get(), false);
      } else if (tag == kTagListenNeighbour) {
        Accept(neighbour_listen_, false);
      } else if (tag == kTagListenTls) {
        Accept(tls_listen_.get(), true);
      } else if (tag == kTagListenNeighbourTls) {
        Accept(neighbour_tls_listen_, true);
      } else if (tag == kTagNetRing) {
        // completions are reaped at the top of the loop
      } else if (tag & kOriginTagBit) {
        if (auto it = origins_.find(tag); it != origins_.end()) OnOriginEvent(*it->second, ev);
      } else if (Conn* c = Find(tag)) {
        if ((ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) ||
            (c->tls_read_wants_write && (ev & EPOLLOUT)))
          OnReadable(*c);
        if (!c->closed && (ev & EPOLLOUT)) {
          c->write_blocked = false;
          Flush(*c);
        }
      }
    }
    if (n > 0) last_work = MonotonicNanos();
    idle_round_at = idle && timeout == 0 && n == 0 ? now : 0;
  }
  for (auto& [id, c] : conns_) Close(*c);
  conns_.clear();
  origins_.clear();
  fills_.clear();
  all_fills_.clear();
  published_.Force(publish);
  return {};
}

uint64_t HttpServer::Impl::BeginDrain(int stop_fd) {
  if (all_fills_.empty() || options_.drain_timeout.count() <= 0) return 0;
  // No more connections; the stop fd stays readable, so it leaves the epoll set too.
  for (int fd : {stop_fd, listen_fd(), tls_listen_fd(), neighbour_listen_, neighbour_tls_listen_})
    if (fd >= 0) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  std::vector<Conn*> idle;
  for (auto& [id, c] : conns_) {
    const bool streams = c->h2 && !c->h2->streams.empty();
    if (!c->closed && c->h2_parent == 0 && !c->ex && !streams && c->out_bytes == 0)
      idle.push_back(c.get());
  }
  for (Conn* c : idle) Close(*c);
  GOBLIN_LOG_INFO(kLog, "stopping: {} fills in flight finish first (at most {} ms)",
                  all_fills_.size(), options_.drain_timeout.count());
  return MonotonicNanos() + static_cast<uint64_t>(options_.drain_timeout.count()) * 1'000'000ULL;
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  GOBLIN_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

VoidResult HttpServer::Run(int stop_fd) { return impl_->Run(stop_fd); }
const HttpStats& HttpServer::stats() const { return impl_->stats_; }
HttpStats HttpServer::Published(LatencyHistogram* ttfb) const {
  Impl::Copy c = impl_->published_.Get();
  if (ttfb != nullptr) *ttfb = c.ttfb;
  return c.stats;
}
int HttpServer::port() const { return impl_->port_; }
int HttpServer::https_port() const { return impl_->tls_port_; }
int HttpServer::listen_fd() const { return impl_->listen_fd(); }
int HttpServer::tls_listen_fd() const { return impl_->tls_listen_fd(); }
VoidResult HttpServer::AcceptAlsoFrom(int fd, int tls_fd) {
  return impl_->AcceptAlsoFrom(fd, tls_fd);
}

VoidResult HttpServer::Impl::AcceptAlsoFrom(int fd, int tls_fd) {
  if (fd >= 0) {
    neighbour_listen_ = fd;
    GOBLIN_RETURN_IF_ERROR(
        EpollCtl(epoll_.get(), EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLEXCLUSIVE, kTagListenNeighbour));
  }
  if (tls_fd >= 0) {
    neighbour_tls_listen_ = tls_fd;
    GOBLIN_RETURN_IF_ERROR(EpollCtl(epoll_.get(), EPOLL_CTL_ADD, tls_fd, EPOLLIN | EPOLLEXCLUSIVE,
                                    kTagListenNeighbourTls));
  }
  return {};
}

}  // namespace goblin::gateway
