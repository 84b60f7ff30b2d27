// MemcacheServer: the loop, the clients' sockets, command dispatch, the simple commands and
// the core's replies (see memcache_server_impl.h for the pieces).
#include <arpa/inet.h>
#include <emmintrin.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "core_objects.h"
#include "epoll_ctl.h"
#include "goblin/common/clock.h"
#include "goblin/common/log.h"
#include "goblin/common/spin_backoff.h"
#include "goblin/ring/unix_socket.h"
#include "goblin/sbe/wire_flags.h"
#include "goblin/wire/goblin_wire.h"
#include "memcache_server_impl.h"
#include "tcp_listen.h"

namespace goblin::gateway {
namespace {

constexpr std::string_view kLog = "memcache";
constexpr uint64_t kTagStop = 1, kTagCoreBell = 2, kTagCoreSock = 3, kTagTcp = 4, kTagUnix = 5;
// Unread input a client may have waiting while its command is carried out.
constexpr size_t kInputLimit = 4u << 20;

uint64_t NowUnix() { return static_cast<uint64_t>(std::time(nullptr)); }

}  // namespace

MemcacheStats& MemcacheStats::operator+=(const MemcacheStats& o) {
  accepted += o.accepted;
  closed += o.closed;
  commands += o.commands;
  protocol_errors += o.protocol_errors;
  cmd_get += o.cmd_get;
  get_hits += o.get_hits;
  get_misses += o.get_misses;
  cmd_set += o.cmd_set;
  cmd_touch += o.cmd_touch;
  cmd_flush += o.cmd_flush;
  delete_hits += o.delete_hits;
  delete_misses += o.delete_misses;
  incr_hits += o.incr_hits;
  incr_misses += o.incr_misses;
  decr_hits += o.decr_hits;
  decr_misses += o.decr_misses;
  cas_hits += o.cas_hits;
  cas_misses += o.cas_misses;
  cas_badval += o.cas_badval;
  touch_hits += o.touch_hits;
  touch_misses += o.touch_misses;
  bytes_read += o.bytes_read;
  bytes_written += o.bytes_written;
  write_retries += o.write_retries;
  cut_off += o.cut_off;
  bytes_lent += o.bytes_lent;
  cores_lost += o.cores_lost;
  return *this;
}

VoidResult MemcacheServer::Impl::Init() {
  started_unix_ = NowUnix();
  epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) return ErrnoErr("epoll_create1", errno);
  CoreLinkOptions lo;
  lo.target = options_.core;
  lo.etcd = options_.etcd;
  lo.name = "goblin-gateway memcache";
  lo.ring_bytes = options_.core_ring_bytes;
  lo.queue_limit = options_.core_queue_limit;
  lo.map_pools = true;  // values are lent: written to clients from the core's pools
  GOBLIN_ASSIGN_OR_RETURN(core_, CoreLink::Connect(lo, epoll_.get(), kTagCoreBell, kTagCoreSock));
  core_->set_on_down([this] { OnCoreDown(); });
  core_->set_on_core_lost([this](uint16_t first, uint16_t count) { OnCoreLost(first, count); });
  objects_ = std::make_unique<CoreObjects>(core_.get(), &next_corr_, options_.key_busy_timeout,
                                           UINT64_MAX);
  if (options_.port != 0) {
    TcpListenOptions tl;
    tl.reuse_port = options_.reuse_port;
    tl.what = "memcache";
    GOBLIN_ASSIGN_OR_RETURN(auto listener, ListenTcp(options_.listen_address, options_.port, tl));
    tcp_ = std::move(listener.first);
    port_ = listener.second;
    const int fd = tcp_.get();
    GOBLIN_RETURN_IF_ERROR(EpollAdd(epoll_.get(), fd, EPOLLIN, kTagTcp));
  }
  if (!options_.unix_path.empty()) {
    GOBLIN_ASSIGN_OR_RETURN(unix_, ring::ListenUnix(options_.unix_path));
    GOBLIN_RETURN_IF_ERROR(EpollAdd(epoll_.get(), unix_.get(), EPOLLIN, kTagUnix));
  }
  return {};
}

// ---- the loop ----

VoidResult MemcacheServer::Impl::Run(int stop_fd) {
  if (stop_fd >= 0) GOBLIN_RETURN_IF_ERROR(EpollAdd(epoll_.get(), stop_fd, EPOLLIN, kTagStop));
  uint64_t last_work = MonotonicNanos();
  const uint64_t busy_ns = static_cast<uint64_t>(options_.busy_poll.count());
  SpinBackoff backoff;         // (no spinning for a while on a CPU it was preempted on)
  uint64_t idle_round_at = 0;  // the last round's clock, if it found nothing and did not sleep
  auto publish = [this](MemcacheStats* c) { *c = stats_; };
  bool stop = false;
  while (!stop) {
    size_t work = core_->Poll(
        [&](uint16_t shard, std::span<const uint8_t> m) { OnCoreMessage(shard, m); }, 256);
    if (core_->queued_bytes() > 0 && core_->Flush()) ++work;
    uint64_t now = MonotonicNanos();
    Tick(now);
    FollowGroupReset();  // (a `stats reset` on another loop: before this round's commands)
    for (size_t i = 0; i < dirty_.size(); ++i) {  // (Process may add more)
      Client* c = dirty_[i];
      if (c->closed) continue;
      if (!c->op) Process(*c);
      if (!c->closed) FlushClient(*c);
    }
    dirty_.clear();
    for (auto it = clients_.begin(); it != clients_.end();) {
      if (it->second->closed) {
        it = clients_.erase(it);
        ++stats_.closed;
      } else {
        ++it;
      }
    }
    int timeout = 0;
    core_->Tick(now);
    if (work == 0 && idle_round_at != 0) (void)backoff.Idle(idle_round_at, now);
    bool prepared = false;  // (the core link announced a sleep: FinishSleep after epoll)
    if (work > 0) {
      last_work = now;
    } else if (now - last_work >= busy_ns || !backoff.may_spin(now)) {
      prepared = true;
      timeout = core_->PrepareSleep(core_->queued_bytes() > 0) ? -1 : 0;
      if (int r = core_->MillisUntilReconnect(now); r >= 0 && (timeout < 0 || r < timeout))
        timeout = r;
      if (!waiting_.empty() && timeout != 0) timeout = 1;  // retries and key-busy waits
      if (flush_at_ != 0 && timeout != 0) {
        int64_t ms = (static_cast<int64_t>(flush_at_) - static_cast<int64_t>(NowUnix())) * 1000;
        ms = std::max<int64_t>(ms, 1);
        if (timeout < 0 || ms < timeout) timeout = static_cast<int>(std::min<int64_t>(ms, 1000));
      }
    } else if (options_.yield_when_polling) {
      sched_yield();
    } else {
      _mm_pause();
    }
    published_.Offer(now, last_work, timeout != 0, publish);
    epoll_event events[64];
    int n = epoll_wait(epoll_.get(), events, 64, timeout);
    int wait_errno = errno;
    if (prepared) core_->FinishSleep();
    idle_round_at = work == 0 && timeout == 0 && n == 0 ? now : 0;
    if (n < 0 && wait_errno != EINTR) return ErrnoErr("epoll_wait", wait_errno);
    for (int i = 0; i < n; ++i) {
      uint64_t tag = events[i].data.u64;
      if (tag == kTagStop) {
        stop = true;
      } else if (tag == kTagCoreBell) {
      } else if (tag == kTagCoreSock) {
        core_->OnSocketEvent();
      } else if (tag == kTagTcp) {
        Accept(tcp_.get(), true);
      } else if (tag == kTagUnix) {
        Accept(unix_.get(), false);
      } else if (Client* c = Find(tag)) {
        if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) OnReadable(*c);
        if (!c->closed && (events[i].events & EPOLLOUT)) FlushClient(*c);
      }
    }
    if (n > 0) last_work = MonotonicNanos();
  }
  for (auto& [id, c] : clients_) c->fd.Reset();
  clients_.clear();
  if (!options_.unix_path.empty()) unlink(options_.unix_path.c_str());
  published_.Force(publish);
  return {};
}

void MemcacheServer::Impl::Tick(uint64_t now) {
  if (flush_at_ != 0 && NowUnix() >= flush_at_) {
    flush_at_ = 0;
    FlushAll(nullptr);
  }
  if (waiting_.empty()) return;
  std::vector<uint64_t> ids;
  ids.swap(waiting_);
  for (uint64_t id : ids) {
    Client* c = Find(id);
    if (c == nullptr || !c->op) continue;
    Op& op = *c->op;
    if (op.lease == Lease::kRetry && now < op.retry_at) {
      waiting_.push_back(id);
      continue;
    }
    if (op.lease == Lease::kRetry) {
      SendPutBegin(*c, op);
    } else if (!op.keys.empty()) {
      PumpGet(*c);
    } else {
      PumpStore(*c);
    }
    dirty_.push_back(c);
  }
}

void MemcacheServer::Impl::Accept(int listen_fd, bool tcp) {
  for (;;) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (clients_.size() >= options_.max_clients) {
      static constexpr std::string_view kMax = "SERVER_ERROR Too many open connections\r\n";
      [[maybe_unused]] ssize_t w = write(fd, kMax.data(), kMax.size());
      close(fd);
      continue;
    }
    if (tcp) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    auto c = std::make_unique<Client>();
    c->id = next_client_++;
    c->fd = UniqueFd(fd);
    if (auto r = EpollAdd(epoll_.get(), fd, EPOLLIN | EPOLLRDHUP, c->id); !r) continue;
    ++stats_.accepted;
    clients_.emplace(c->id, std::move(c));
  }
}

MemcacheServer::Impl::Client* MemcacheServer::Impl::Find(uint64_t id) {
  auto it = clients_.find(id);
  return it == clients_.end() || it->second->closed ? nullptr : it->second.get();
}

void MemcacheServer::Impl::OnReadable(Client& c) {
  char buf[64 * 1024];
  while (c.in.size() - c.in_pos < kInputLimit) {
    ssize_t n = read(c.fd.get(), buf, sizeof buf);
    if (n > 0) {
      stats_.bytes_read += static_cast<uint64_t>(n);
      c.in.append(buf, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < sizeof buf) break;
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      Close(c, "");
      return;
    }
    if (errno == EINTR) continue;
    break;
  }
  if (c.op && memcache::IsStorage(c.op->cmd) && !c.op->data_done) PumpStore(c);
  dirty_.push_back(&c);
}

void MemcacheServer::Impl::Process(Client& c) {
  while (!c.closed && !c.op && !c.close_after_write && c.in_pos < c.in.size()) {
    if (c.out_size() > options_.output_limit) break;  // it reads its replies first
    std::string_view line;
    size_t next = 0;
    auto st = memcache::NextLine(c.in, c.in_pos, &line, &next);
    if (st == memcache::LineStatus::kNeedMore) break;
    if (st == memcache::LineStatus::kClose) {
      ++stats_.protocol_errors;
      Close(c, "");  // memcached closes a connection sending a line this long
      return;
    }
    ++stats_.commands;
    auto p = memcache::ParseLine(line, &req_);
    if (p.kind == memcache::Parsed::Kind::kReply) {
      c.in_pos = next;
      if (p.reply.starts_with("ERROR") || p.reply.starts_with("CLIENT_ERROR"))
        ++stats_.protocol_errors;
      if (p.swallow) {  // (an ms refused after its length: its block is read, then this)
        StartSwallow(c, p.reply, req_.bytes);
        continue;
      }
      Write(c, p.reply);
      continue;
    }
    Start(c, req_, next);  // (req_ views c.in: Start copies what it keeps before consuming)
  }
  if (c.in_pos == c.in.size()) {
    c.in.clear();
    c.in_pos = 0;
  } else if (c.in_pos > 64 * 1024 && c.in_pos > c.in.size() / 2) {
    c.in.erase(0, c.in_pos);
    c.in_pos = 0;
  }
}

void MemcacheServer::Impl::Start(Client& c, memcache::Request& req, size_t line_end) {
  using memcache::Cmd;
  switch (req.cmd) {
    case Cmd::kGet:
    case Cmd::kGets:
    case Cmd::kGat:
    case Cmd::kGats:
      c.in_pos = line_end;
      return StartGet(c, req);
    case Cmd::kSet:
    case Cmd::kAdd:
    case Cmd::kReplace:
    case Cmd::kCas:
    case Cmd::kAppend:
    case Cmd::kPrepend: {
      memcache::Request copy = req;  // (views into c.in, which the data block consumes)
      std::string key(req.key);
      copy.key = key;
      c.in_pos = line_end;
      return StartStore(c, copy);
    }
    case Cmd::kIncr:
    case Cmd::kDecr:
      c.in_pos = line_end;
      return StartDelta(c, req);
    case Cmd::kMetaGet:
    case Cmd::kMetaSet:
    case Cmd::kMetaDelete:
    case Cmd::kMetaArith:
    case Cmd::kMetaDebug: {
      memcache::Request copy = req;  // (views into c.in, which a data block consumes)
      std::string key(req.key);
      copy.key = key;
      std::vector<std::string> tokens;
      for (size_t i = 0; i < req.meta.count; ++i) tokens.emplace_back(req.meta.tokens[i]);
      for (size_t i = 0; i < tokens.size(); ++i) copy.meta.tokens[i] = tokens[i];
      c.in_pos = line_end;
      return StartMeta(c, copy);
    }
    default:
      c.in_pos = line_end;
      return StartSimple(c, req);
  }
}

uint64_t MemcacheServer::Impl::Corr(Client& c, CorrKind kind, uint32_t index, uint16_t shard) {
  uint64_t corr = next_corr_++;
  corr_[corr] = CorrTarget{c.id, c.op ? c.op->seq : 0, kind, index, shard};
  return corr;
}

bool MemcacheServer::Impl::SendKeyed(std::string_view key,
                                     FunctionRef<size_t(uint8_t*, size_t)> encode, size_t max_bytes,
                                     bool always) {
  const uint16_t shard = core_->ShardFor(key);
  auto r =
      always ? core_->SendAlways(encode, max_bytes, shard) : core_->Send(encode, max_bytes, shard);
  return r == CoreLink::SendResult::kSent || r == CoreLink::SendResult::kQueued;
}

std::string MemcacheServer::Impl::ErrorReply(std::string_view text) {
  std::string s = "SERVER_ERROR ";
  for (char ch : text) s += (ch == '\r' || ch == '\n') ? ' ' : ch;
  s += "\r\n";
  return s;
}

void MemcacheServer::Impl::StartSimple(Client& c, const memcache::Request& req) {
  using memcache::Cmd;
  switch (req.cmd) {
    case Cmd::kVersion:
      return Write(c, fmt::format("VERSION {}\r\n", memcache::kVersion));
    case Cmd::kVerbosity:
      if (!req.noreply) Write(c, "OK\r\n");
      return;
    case Cmd::kQuit:
      c.close_after_write = true;
      return;
    case Cmd::kMetaNoop:
      return Write(c, "MN\r\n");
    case Cmd::kStats:
      return Write(c, StatsReply(req.stats_arg));
    case Cmd::kFlushAll: {
      ++stats_.cmd_flush;
      if (req.has_delay && req.exptime > 0) {
        // At that time everything stored before it goes (memcached's oldest_live).
        const uint64_t ttl =
            memcache::ExptimeToTtlNanos(req.exptime, static_cast<int64_t>(NowUnix()));
        flush_at_ = NowUnix() + std::max<uint64_t>(1, ttl / 1'000'000'000ULL);
        if (!req.noreply) Write(c, "OK\r\n");
        return;
      }
      flush_at_ = 0;
      if (!core_->up()) {
        if (!req.noreply) Write(c, "SERVER_ERROR goblin-core is unavailable\r\n");
        return;
      }
      c.op = std::make_unique<Op>();
      c.op->cmd = req.cmd;
      c.op->noreply = req.noreply;
      c.op->seq = c.next_seq++;
      FlushAll(&c);
      return;
    }
    case Cmd::kDelete:
    case Cmd::kTouch: {
      if (!core_->up()) {
        if (!req.noreply) Write(c, "SERVER_ERROR goblin-core is unavailable\r\n");
        return;
      }
      c.op = std::make_unique<Op>();
      Op& op = *c.op;
      op.cmd = req.cmd;
      op.noreply = req.noreply;
      op.seq = c.next_seq++;
      op.key = std::string(req.key);
      const uint16_t shard = core_->ShardFor(op.key);
      if (req.cmd == Cmd::kDelete) {
        uint64_t corr = Corr(c, CorrKind::kDelete, 0, shard);
        // md I: the item stays, stale under a new CAS (T: with a new time to live)
        uint32_t flags = 0;
        uint64_t ttl = 0;
        if (req.is_meta && req.meta.invalidate) {
          flags = wire::kDeleteInvalidate;
          if (req.meta.has_ttl) {
            flags |= wire::kDeleteSetTtl;
            ttl = memcache::ExptimeToTtlNanos(req.meta.ttl, static_cast<int64_t>(NowUnix()));
          }
        }
        SendKeyed(
            op.key,
            [&](uint8_t* b, size_t cap) {
              return wire::ObjectDeleteEncoder(b, cap)
                  .set_correlation_id(corr)
                  .set_if_generation(req.cas)  // (md C; 0: whatever version)
                  .set_flags(flags)
                  .set_ttl_nanos(ttl)
                  .set_key(op.key)
                  .Finish();
            },
            op.key.size() + 64, true);
      } else {
        ++stats_.cmd_touch;
        const uint64_t ttl =
            memcache::ExptimeToTtlNanos(req.exptime, static_cast<int64_t>(NowUnix()));
        uint64_t corr = Corr(c, CorrKind::kTouch, 0, shard);
        SendKeyed(
            op.key,
            [&](uint8_t* b, size_t cap) {
              return wire::ObjectTouchEncoder(b, cap)
                  .set_correlation_id(corr)
                  .set_ttl_nanos(ttl)
                  .set_key(op.key)
                  .Finish();
            },
            op.key.size() + 64, true);
      }
      return;
    }
    default:
      return Write(c, "ERROR\r\n");
  }
}

void MemcacheServer::Impl::FlushAll(Client* c) {
  if (!core_->up()) return;
  for (uint16_t s = 0; s < core_->shard_count(); ++s) {
    if (core_->shard_lost(s)) continue;
    uint64_t corr = 0;
    if (c != nullptr) {
      corr = Corr(*c, CorrKind::kPurge, 0, s);
      ++c->op->acks_due;
    } else {
      corr = next_corr_++;
      corr_[corr] = CorrTarget{0, 0, CorrKind::kIgnore, 0, s};
    }
    core_->SendAlways(
        [&](uint8_t* b, size_t cap) {
          return wire::ObjectPurgeEncoder(b, cap).set_correlation_id(corr).set_prefix("").Finish();
        },
        64, s);
  }
}

void MemcacheServer::Impl::FollowGroupReset() {
  if (!group_) return;
  const uint64_t resets = group_->resets.load(std::memory_order_acquire);
  if (resets != stats_.resets) ResetStats(resets);
}

void MemcacheServer::Impl::ResetStats(uint64_t resets) {
  // (connections are not reset: memcached's curr and total connections survive it too)
  stats_ = MemcacheStats{.accepted = stats_.accepted, .closed = stats_.closed, .resets = resets};
}

std::string MemcacheServer::Impl::StatsReply(std::string_view arg) {
  std::string s;
  auto stat = [&](std::string_view name, auto value) {
    fmt::format_to(std::back_inserter(s), "STAT {} {}\r\n", name, value);
  };
  if (arg.empty()) {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    const uint64_t now = NowUnix();
    stat("pid", getpid());
    stat("uptime", now - started_unix_);
    stat("time", now);
    stat("version", memcache::kVersion);
    stat("pointer_size", sizeof(void*) * 8);
    stat("rusage_user", fmt::format("{}.{:06}", ru.ru_utime.tv_sec, ru.ru_utime.tv_usec));
    stat("rusage_system", fmt::format("{}.{:06}", ru.ru_stime.tv_sec, ru.ru_stime.tv_usec));
    // The whole gateway's counters: this loop's, and the others' last published copies
    // (a copy from before the group's last reset counts only its connections).
    FollowGroupReset();
    MemcacheStats total = stats_;
    uint64_t connections = clients_.size();
    if (group_) {
      for (const MemcacheServer* loop : group_->loops) {
        if (loop == self_) continue;
        MemcacheStats o = loop->Published();
        connections += o.accepted - o.closed;
        if (o.resets != stats_.resets)
          o = MemcacheStats{.accepted = o.accepted, .closed = o.closed};
        total += o;
      }
    }
    stat("max_connections", options_.max_clients);
    stat("curr_connections", connections);
    stat("total_connections", total.accepted);
    stat("cmd_get", total.cmd_get);
    stat("cmd_set", total.cmd_set);
    stat("cmd_flush", total.cmd_flush);
    stat("cmd_touch", total.cmd_touch);
    stat("get_hits", total.get_hits);
    stat("get_misses", total.get_misses);
    stat("delete_misses", total.delete_misses);
    stat("delete_hits", total.delete_hits);
    stat("incr_misses", total.incr_misses);
    stat("incr_hits", total.incr_hits);
    stat("decr_misses", total.decr_misses);
    stat("decr_hits", total.decr_hits);
    stat("cas_misses", total.cas_misses);
    stat("cas_hits", total.cas_hits);
    stat("cas_badval", total.cas_badval);
    stat("touch_hits", total.touch_hits);
    stat("touch_misses", total.touch_misses);
    stat("bytes_read", total.bytes_read);
    stat("bytes_written", total.bytes_written);
    stat("goblin_write_retries", total.write_retries);
    stat("goblin_cut_off", total.cut_off);
    stat("goblin_bytes_lent", total.bytes_lent);
    stat("goblin_core_up", core_->up() ? 1 : 0);
    stat("goblin_core_shards", core_->shard_count());
    stat("goblin_cores_lost", total.cores_lost);
    stat("goblin_worker", options_.worker);
  } else if (arg == "reset") {  // (every loop of the group: each before its next command)
    ResetStats(group_ ? group_->resets.fetch_add(1, std::memory_order_acq_rel) + 1
                      : stats_.resets + 1);
    published_.Force([this](MemcacheStats* c) { *c = stats_; });
    return "RESET\r\n";
  } else if (arg == "settings") {
    stat("maxconns", options_.max_clients);
    stat("tcpport", port_);
    stat("item_size_max", "unlimited");
    stat("evictions", "on");
    stat("cas_enabled", "yes");
    stat("flush_enabled", "yes");
  } else {
    return "ERROR\r\n";
  }
  s += "END\r\n";
  return s;
}

// ---- replies ----

void MemcacheServer::Impl::Write(Client& c, std::string_view bytes) {
  if (c.closed || bytes.empty()) return;
  if (c.out.empty() || c.out.back().lent != nullptr || c.out.back().owned.size() > (1u << 20))
    c.out.emplace_back();
  c.out.back().owned.append(bytes);
  c.out_bytes += bytes.size();
  dirty_.push_back(&c);
}

void MemcacheServer::Impl::WriteLent(Client& c, std::span<const uint8_t> bytes, uint64_t loan,
                                     CoreLink::Pools* pools) {
  Piece& p = c.out.emplace_back();
  p.lent = reinterpret_cast<const char*>(bytes.data());
  p.lent_len = bytes.size();
  p.loan = loan;
  p.pools = pools;
  CoreLink::Hold(pools);
  c.out_bytes += bytes.size();
  stats_.bytes_lent += bytes.size();
  dirty_.push_back(&c);
}

void MemcacheServer::Impl::ReleaseOutput(Client& c) {
  for (Piece& p : c.out) {
    if (p.lent != nullptr) core_->ReleaseLoan(p.loan, p.pools);
  }
  c.out.clear();
  c.out_off = c.out_bytes = 0;
}

void MemcacheServer::Impl::Finish(Client& c, std::string_view reply) {
  if (c.op && c.op->meta && c.op->cmd != memcache::Cmd::kMetaGet) {
    Write(c, MetaReply(*c.op, reply));
  } else if (c.op && !c.op->noreply) {
    Write(c, reply);
  }
  c.op.reset();
  dirty_.push_back(&c);  // (the loop parses what waits in its input)
}

void MemcacheServer::Impl::FlushClient(Client& c) {
  const bool was_over = c.out_size() > options_.output_limit;
  while (c.out_bytes > 0) {
    iovec iov[64];
    int n = 0;
    size_t off = c.out_off;
    for (auto it = c.out.begin(); it != c.out.end() && n < 64; ++it, off = 0) {
      iov[n].iov_base = const_cast<char*>(it->data() + off);
      iov[n].iov_len = it->size() - off;
      ++n;
    }
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = static_cast<size_t>(n);
    ssize_t w = sendmsg(c.fd.get(), &mh, MSG_NOSIGNAL);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      Close(c, "");
      return;
    }
    stats_.bytes_written += static_cast<uint64_t>(w);
    c.out_bytes -= static_cast<size_t>(w);
    size_t left = static_cast<size_t>(w);
    while (left > 0) {
      Piece& p = c.out.front();
      const size_t rest = p.size() - c.out_off;
      if (left < rest) {
        c.out_off += left;
        break;
      }
      left -= rest;
      if (p.lent != nullptr) core_->ReleaseLoan(p.loan, p.pools);  // (the kernel has them)
      c.out.pop_front();
      c.out_off = 0;
    }
  }
  if (c.out_bytes == 0 && c.close_after_write && !c.op) {
    Close(c, "");
    return;
  }
  // A get waiting for its client to take what it has: ask for the next piece.
  if (c.op && !c.op->keys.empty() && c.out_size() <= options_.output_limit) PumpGet(c);
  // Commands waiting behind a client's unread replies go on once it has read them.
  if (was_over && !c.closed && !c.op && c.out_size() <= options_.output_limit &&
      c.in_pos < c.in.size()) {
    dirty_.push_back(&c);
  }
  if (!c.closed) SetInterest(c);
}

void MemcacheServer::Impl::SetInterest(Client& c) {
  if (c.closed) return;
  const bool pause = c.in.size() - c.in_pos >= kInputLimit;
  const bool out = c.out_size() > 0;
  if (pause == c.read_paused && out == c.epollout) return;
  c.read_paused = pause;
  c.epollout = out;
  epoll_event ev{};
  ev.events = (pause ? 0u : uint32_t{EPOLLIN | EPOLLRDHUP}) | (out ? uint32_t{EPOLLOUT} : 0u);
  ev.data.u64 = c.id;
  epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
}

void MemcacheServer::Impl::Close(Client& c, std::string_view why) {
  if (c.closed) return;
  if (!why.empty()) GOBLIN_LOG_WARN(kLog, "client {}: {}", c.id, why);
  // A write in progress is given up: nothing of it becomes visible.
  if (c.op && c.op->lease == Lease::kGranted && !c.op->committing && core_->up()) {
    const uint64_t put = c.op->put_id;
    core_->SendAlways(
        [&](uint8_t* b, size_t cap) {
          return wire::PutAbortEncoder(b, cap).set_correlation_id(0).set_put_id(put).Finish();
        },
        64, core_->ShardFor(c.op->key));
  }
  c.closed = true;
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
  c.fd.Reset();
  ReleaseOutput(c);
}

MemcacheServer::Impl::Op* MemcacheServer::Impl::OpOf(const CorrTarget& t) {
  Client* c = Find(t.client);
  if (c == nullptr || !c->op || c->op->seq != t.seq) return nullptr;
  return c->op.get();
}

// ---- the core ----

void MemcacheServer::Impl::OnCoreMessage(uint16_t shard, std::span<const uint8_t> m) {
  sbe::MessageHeader h;
  if (!sbe::MessageHeader::Read(m, &h) || m.size() < 16) return;
  const uint64_t corr = sbe::Load<uint64_t>(m.data() + 8);
  if (objects_->OnMessage(h.template_id, corr, m)) return;
  auto it = corr_.find(corr);
  if (it == corr_.end()) {
    if (h.template_id == wire::LoanDecoder::kTemplateId) {  // nobody wants it any more
      if (auto l = wire::LoanDecoder::Decode(m)) core_->ReturnLoan(l->loan_id(), shard);
    }
    return;
  }
  const CorrTarget t = it->second;
  Client* c = Find(t.client);
  Op* op = OpOf(t);
  bool last = true;
  if (op == nullptr) {
    // Nobody waits any more: a lease granted to a write given up is given back.
    if (h.template_id == wire::FillLeaseDecoder::kTemplateId) {
      auto l = wire::FillLeaseDecoder::Decode(m);
      if (l && l->state() == wire::LeaseState::kGranted) {
        const uint64_t put = l->put_id();
        core_->SendAlways(
            [&](uint8_t* b, size_t cap) {
              return wire::PutAbortEncoder(b, cap).set_correlation_id(0).set_put_id(put).Finish();
            },
            64, shard);
      }
    }
    if (h.template_id == wire::LoanDecoder::kTemplateId) {
      if (auto l = wire::LoanDecoder::Decode(m)) core_->ReturnLoan(l->loan_id(), shard);
    }
    if (t.kind == CorrKind::kGetPiece) last = IsLastObjectAnswer(h.template_id, m);
    if (t.kind == CorrKind::kMetaHead) last = true;
    if (t.kind == CorrKind::kPurge && h.template_id == wire::PurgeAckDecoder::kTemplateId)
      last = true;
    if (last) corr_.erase(corr);
    return;
  }
  switch (t.kind) {
    case CorrKind::kGetPiece:
    case CorrKind::kMetaHead:
      OnGetReply(*c, *op, t, h.template_id, m, &last);
      if (t.kind == CorrKind::kMetaHead) last = true;
      break;
    case CorrKind::kPutBegin:
    case CorrKind::kPutCommit:
      OnStoreReply(*c, *op, t, h.template_id, m, &last);
      break;
    case CorrKind::kDelete: {
      if (h.template_id == wire::DeleteAckDecoder::kTemplateId) {
        auto a = wire::DeleteAckDecoder::Decode(m);
        const bool deleted = a && a->deleted() != 0;
        ++(deleted ? stats_.delete_hits : stats_.delete_misses);
        Finish(*c, deleted ? "DELETED\r\n" : "NOT_FOUND\r\n");
      } else if (h.template_id == wire::ErrorDecoder::kTemplateId) {
        auto e = wire::ErrorDecoder::Decode(m);
        if (e && e->code() == wire::ErrorCode::kFailedPrecondition) {  // (md C: another CAS)
          Finish(*c, "EXISTS\r\n");
        } else {
          Finish(*c, ErrorReply(e ? e->text() : "error"));
        }
      }
      break;
    }
    case CorrKind::kTouch: {
      if (h.template_id == wire::TouchAckDecoder::kTemplateId) {
        auto a = wire::TouchAckDecoder::Decode(m);
        const bool found = a && a->found() != 0;
        ++(found ? stats_.touch_hits : stats_.touch_misses);
        Finish(*c, found ? "TOUCHED\r\n" : "NOT_FOUND\r\n");
      } else if (h.template_id == wire::ErrorDecoder::kTemplateId) {
        auto e = wire::ErrorDecoder::Decode(m);
        Finish(*c, ErrorReply(e ? e->text() : "error"));
      }
      break;
    }
    case CorrKind::kPurge: {
      if (--op->acks_due <= 0) Finish(*c, "OK\r\n");
      break;
    }
    case CorrKind::kIgnore:
      break;
  }
  if (last) corr_.erase(corr);
}

void MemcacheServer::Impl::OnCoreDown() {
  // Every reply in flight is lost with the core: ops waiting for one end now.
  corr_.clear();
  std::vector<Client*> busy;
  for (auto& [id, c] : clients_) {
    if (!c->closed && c->op) busy.push_back(c.get());
  }
  EndOps(busy);
  objects_->OnCoreDown();  // (their ops are finished above: the answers find none)
}

void MemcacheServer::Impl::OnCoreLost(uint16_t first, uint16_t count) {
  // The ops waiting for an answer from the lost core's shards end as at a core loss (the
  // whole op: the other shards' answers to it then find none); the others go on.
  ++stats_.cores_lost;
  std::vector<uint64_t> ids;
  for (const auto& [corr, t] : corr_) {
    if (t.client != 0 && t.shard >= first && static_cast<uint32_t>(t.shard) < first + count) {
      ids.push_back(t.client);
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::erase_if(corr_, [&](const auto& e) {
    return std::binary_search(ids.begin(), ids.end(), e.second.client) ||
           (e.second.shard >= first && static_cast<uint32_t>(e.second.shard) < first + count);
  });
  std::vector<Client*> busy;
  for (uint64_t id : ids) {
    auto it = clients_.find(id);
    if (it != clients_.end() && !it->second->closed && it->second->op) {
      busy.push_back(it->second.get());
    }
  }
  EndOps(busy);
  objects_->OnCoreLost(first, count);
}

void MemcacheServer::Impl::EndOps(const std::vector<Client*>& busy) {
  for (Client* c : busy) {
    Op& op = *c->op;
    const bool mid_value =
        !op.keys.empty() && op.front < op.keys.size() && op.keys[op.front].header_out;
    if (mid_value) {  // a value half sent cannot be finished: the client must not take it whole
      ++stats_.cut_off;
      Close(*c, "goblin-core went away while a value was being sent; closing the client");
      continue;
    }
    if (memcache::IsStorage(op.cmd) && !op.data_done) {
      // Its data block is still to be read (and dropped): answer once it has been.
      op.lease = Lease::kRefused;
      op.refusal = "SERVER_ERROR goblin-core is unavailable\r\n";
      continue;
    }
    Finish(*c, "SERVER_ERROR goblin-core is unavailable\r\n");
  }
}

// ---- the public face ----

MemcacheServer::MemcacheServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MemcacheServer::~MemcacheServer() = default;

Result<std::unique_ptr<MemcacheServer>> MemcacheServer::Start(const MemcacheServerOptions& o) {
  auto impl = std::make_unique<Impl>(o);
  GOBLIN_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<MemcacheServer>(new MemcacheServer(std::move(impl)));
}

VoidResult MemcacheServer::Run(int stop_fd) { return impl_->Run(stop_fd); }
const MemcacheStats& MemcacheServer::stats() const { return impl_->stats_; }
MemcacheStats MemcacheServer::Published() const { return impl_->published_.Get(); }
void MemcacheServer::JoinStatsGroup(std::shared_ptr<MemcacheStatsGroup> group) {
  impl_->group_ = std::move(group);
  impl_->self_ = this;
}
int MemcacheServer::port() const { return impl_->port_; }

}  // namespace goblin::gateway
