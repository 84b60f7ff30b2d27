// RespServer: the loop, clients' sockets, replies in command order, the command table.
#include <arpa/inet.h>
#include <emmintrin.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <optional>

#include "epoll_ctl.h"
#include "goblin/common/buffer.h"
#include "goblin/common/clock.h"
#include "goblin/common/log.h"
#include "goblin/common/spin_backoff.h"
#include "goblin/ring/unix_socket.h"
#include "resp_server_impl.h"
#include "tcp_listen.h"

namespace goblin::gateway {

using namespace resp_detail;

VoidResult RespServer::Impl::Init() {
  epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) return ErrnoErr("epoll_create1", errno);
  CoreLinkOptions lo;
  lo.target = options_.core;
  lo.etcd = options_.etcd;
  lo.name = "goblin-gateway";
  lo.ring_bytes = options_.core_ring_bytes;
  lo.queue_limit = options_.core_queue_limit;
  GOBLIN_ASSIGN_OR_RETURN(core_, CoreLink::Connect(lo, epoll_.get(), kTagCoreBell, kTagCoreSock));
  core_->set_on_down([this] { OnCoreDown(); });
  core_->set_on_joined([this] { OnCoresJoined(); });
  core_->set_on_core_lost([this](uint16_t first, uint16_t count) { OnCoreLost(first, count); });
  core_->set_on_pubsub_moved([this](uint16_t old_shard) { OnPubsubMoved(old_shard); });
  objects_ = std::make_unique<CoreObjects>(core_.get(), &next_corr_, options_.key_busy_timeout,
                                           options_.max_value_bytes);
  // A read in flight when the core link goes down is sent again once it is back (a core of
  // several that died: at the key's next owner), as the HTTP front's lookups.
  objects_->set_resend_reads(true);
  core_->set_on_up([this] { objects_->OnCoreUp(); });
  started_ns_ = MonotonicNanos();
  if (options_.port != 0) {
    TcpListenOptions tl;
    tl.backlog = 511;  // (Redis's tcp-backlog)
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

VoidResult RespServer::Impl::Run(int stop_fd) {
  if (stop_fd >= 0) GOBLIN_RETURN_IF_ERROR(EpollAdd(epoll_.get(), stop_fd, EPOLLIN, kTagStop));
  uint64_t last_work = MonotonicNanos();
  const uint64_t busy_ns = static_cast<uint64_t>(options_.busy_poll.count());
  SpinBackoff backoff;         // (no spinning for a while on a CPU it was preempted on)
  uint64_t idle_round_at = 0;  // the last round's clock, if it found nothing and did not sleep
  auto publish = [this](RespStats* c) {
    *c = stats_;
    c->keyspace_hits = keyspace_hits_;
    c->keyspace_misses = keyspace_misses_;
    c->bytes_read = total_net_in_;
    c->bytes_written = total_net_out_;
    c->connected = c->pubsub_clients = 0;
    for (const auto& [id, cl] : clients_) {
      if (cl->closed) continue;
      ++c->connected;
      c->pubsub_clients += cl->subscribed() ? 1 : 0;
    }
  };
  bool stop = false;
  while (!stop) {
    size_t work = core_->Poll(
        [&](uint16_t shard, std::span<const uint8_t> m) { OnCoreMessage(shard, m); }, 256);
    if (core_->queued_bytes() > 0 && core_->Flush()) ++work;
    if (!resume_.empty()) {
      std::vector<uint64_t> ids = std::move(resume_);
      resume_.clear();
      for (uint64_t id : ids) {
        if (Client* c = FindClient(id); c != nullptr && !c->waiting) ProcessInput(*c);
      }
      ++work;
    }
    if (!stalled_.empty() && core_->queued_bytes() <= options_.core_queue_limit / 2) {
      ResumeStalled();
      ++work;
    }
    for (Client* c : dirty_) {
      if (!c->closed) FlushClient(*c);
    }
    dirty_.clear();
    // Remove closed clients.
    for (auto it = clients_.begin(); it != clients_.end();) {
      if (it->second->closed) {
        it = clients_.erase(it);
        ++stats_.closed;
      } else {
        ++it;
      }
    }
    int timeout = 0;
    uint64_t now = MonotonicNanos();
    core_->Tick(now);
    if (objects_->waiting() && objects_->Tick(now)) ++work;
    if (work == 0 && idle_round_at != 0) (void)backoff.Idle(idle_round_at, now);
    bool prepared = false;  // (the core link announced a sleep: FinishSleep after epoll)
    if (work > 0) {
      last_work = now;
    } else if (now - last_work >= busy_ns || !backoff.may_spin(now)) {
      prepared = true;
      timeout = core_->PrepareSleep(core_->queued_bytes() > 0) ? -1 : 0;
      if (int r = core_->MillisUntilReconnect(now); r >= 0 && (timeout < 0 || r < timeout))
        timeout = r;
      if (objects_->waiting() && timeout != 0) timeout = 1;  // (a retry, a value to send)
    } else if (options_.yield_when_polling) {
      sched_yield();
    } else {
      _mm_pause();
    }
    published_.Offer(now, last_work, timeout != 0, publish);
    epoll_event events[64];
    int n = epoll_wait(epoll_.get(), events, 64, timeout);
    int wait_errno = errno;  // (FinishSleep reads an eventfd: keep epoll_wait's errno)
    if (prepared) core_->FinishSleep();
    idle_round_at = work == 0 && timeout == 0 && n == 0 ? now : 0;
    if (n < 0 && wait_errno != EINTR) return ErrnoErr("epoll_wait", wait_errno);
    for (int i = 0; i < n; ++i) {
      uint64_t tag = events[i].data.u64;
      if (tag == kTagStop) {
        stop = true;
      } else if (tag == kTagCoreBell) {
        // drained by FinishSleep; messages are polled at the top of the loop
      } else if (tag == kTagCoreSock) {
        core_->OnSocketEvent();
      } else if (tag == kTagTcp) {
        Accept(tcp_.get(), true);
      } else if (tag == kTagUnix) {
        Accept(unix_.get(), false);
      } else if (auto it = clients_.find(tag); it != clients_.end()) {
        Client& c = *it->second;
        if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) OnReadable(c);
        if (!c.closed && (events[i].events & EPOLLOUT)) FlushClient(c);
      }
      if (n > 0) last_work = MonotonicNanos();
    }
  }
  for (auto& [id, c] : clients_) c->fd.Reset();
  clients_.clear();
  if (!options_.unix_path.empty()) unlink(options_.unix_path.c_str());
  published_.Force(publish);
  return {};
}

namespace {
// "ip:port" of a TCP socket's end, "path:0" of a unix socket's (as Redis's CLIENT LIST).
std::string SocketName(int fd, bool peer, bool tcp, const std::string& unix_path) {
  if (!tcp) return unix_path + ":0";
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if ((peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
            : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len)) != 0) {
    return "?:0";
  }
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
  return fmt::format("{}:{}", ip, ntohs(a.sin_port));
}
}  // namespace

void RespServer::Impl::Accept(int listen_fd, bool tcp) {
  for (;;) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (clients_.size() >= options_.max_clients) {
      static constexpr std::string_view kMax = "-ERR max number of clients reached\r\n";
      ++stats_.rejected;
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
    c->authed = options_.requirepass.empty();
    c->unix_socket = !tcp;
    c->addr = SocketName(fd, true, tcp, options_.unix_path);
    c->laddr = SocketName(fd, false, tcp, options_.unix_path);
    c->created_ns = c->last_ns = MonotonicNanos();
    if (auto r = EpollAdd(epoll_.get(), fd, EPOLLIN | EPOLLRDHUP, c->id); !r) continue;
    ++stats_.accepted;
    clients_.emplace(c->id, std::move(c));
  }
}

void RespServer::Impl::OnReadable(Client& c) {
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = read(c.fd.get(), buf, sizeof buf);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      total_net_in_ += static_cast<uint64_t>(n);
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
  ProcessInput(c);
}

void RespServer::Impl::ProcessInput(Client& c) {
  while (!c.closed && !c.close_after_write && c.blocked == 0 && !c.waiting &&
         c.reads < kMaxReadsInFlight && c.in_pos < c.in.size()) {
    if (core_->over_limit()) {  // the core is behind: this client waits (TCP pushes back)
      Stall(c);
      break;
    }
    if (c.out_size() + c.slot_bytes > kOutputPause) {  // it does not read its replies
      if (!c.out_paused) {
        c.out_paused = true;
        SetReadInterest(c);
      }
      break;
    }
    auto st = parser_.Parse(c.in, &c.in_pos, &argv_, &err_, c.authed);
    if (st == RespParser::Status::kNeedMore) break;
    if (st == RespParser::Status::kError) {
      ++stats_.protocol_errors;
      c.muted = c.reply_mode == ReplyMode::kOff;
      Reply(c, Err("ERR " + err_));
      c.close_after_write = true;
      break;
    }
    if (argv_.empty()) continue;
    ++stats_.commands;
    Execute(c, argv_);
  }
  if (c.in_pos == c.in.size()) {
    c.in.clear();
    c.in_pos = 0;
  } else if (c.in_pos > 64 * 1024 && c.in_pos > c.in.size() / 2) {
    c.in.erase(0, c.in_pos);
    c.in_pos = 0;
  }
  if (!c.closed) dirty_.push_back(&c);
}

void RespServer::Impl::FlushClient(Client& c) {
  while (c.out_size() > 0) {
    ssize_t n = send(c.fd.get(), c.out.data() + c.out_pos, c.out_size(), MSG_NOSIGNAL);
    if (n > 0) {
      c.out_pos += static_cast<size_t>(n);
      total_net_out_ += static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0 && errno == EINTR) continue;
    Close(c, "");
    return;
  }
  if (c.out_size() == 0) {
    c.out.clear();
    c.out_pos = 0;
    c.soft_since = 0;
    if (c.close_after_write) {
      Close(c, "");
      return;
    }
  }
  if (c.out_paused && c.out_size() <= kOutputPause / 2) {
    c.out_paused = false;
    SetReadInterest(c);
    resume_.push_back(c.id);  // (what it sent meanwhile)
  } else if (c.out_pos > (1 << 20) && c.out_pos > c.out.size() / 2) {
    c.out.erase(0, c.out_pos);
    c.out_pos = 0;
  }
  bool want_out = c.out_size() > 0;
  if (want_out != c.epollout) {
    c.epollout = want_out;
    SetReadInterest(c);
  }
}

void RespServer::Impl::SetReadInterest(Client& c) {
  epoll_event ev{};
  ev.events = (c.stalled || c.out_paused ? 0u : uint32_t{EPOLLIN | EPOLLRDHUP}) |
              (c.epollout ? uint32_t{EPOLLOUT} : 0u);
  ev.data.u64 = c.id;
  epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
}

void RespServer::Impl::Stall(Client& c) {
  if (c.stalled) return;
  c.stalled = true;
  ++stats_.stalled_for_core;
  stalled_.push_back(c.id);
  SetReadInterest(c);
}

void RespServer::Impl::ResumeStalled() {
  std::vector<uint64_t> ids = std::move(stalled_);
  stalled_.clear();
  for (uint64_t id : ids) {
    auto it = clients_.find(id);
    if (it == clients_.end() || it->second->closed) continue;
    Client& c = *it->second;
    c.stalled = false;
    SetReadInterest(c);
    ProcessInput(c);  // what it sent meanwhile (more may wait in the socket: EPOLLIN says)
  }
}

void RespServer::Impl::OnCoreDown() {
  // Subscribers would silently stop receiving: close them (a Redis client reconnects and
  // subscribes again, as after a server restart). Requests in flight are answered -ERR.
  std::vector<Client*> subscribers;
  for (auto& [id, c] : clients_) {
    if (!c->closed && (c->subscribed() || c->blocked > 0)) subscribers.push_back(c.get());
  }
  for (Client* c : subscribers) {
    c->sub_count = 0;
    c->shard_channels.clear();
    c->blocked = 0;
    Close(*c, "goblin-core went away: its subscriptions are gone; closing the client");
  }
  auto pending = std::move(pending_);
  pending_.clear();
  partial_.clear();
  for (auto& [corr, p] : pending) {
    if (p.kind == ReqKind::kSilent) continue;
    CompleteSlot(p.client, p.seq, Err("ERR goblin-core is unavailable"));
  }
  objects_->OnCoreDown();  // (each object command is answered -ERR)
}

void RespServer::Impl::Close(Client& c, std::string_view why) {
  if (c.closed) return;
  if (!why.empty()) GOBLIN_LOG_WARN(kLog, "client {}: {}", c.id, why);
  c.closed = true;
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
  c.fd.Reset();
  // The core forgets its subscriptions.
  if (c.subscribed() || c.blocked > 0) {
    for (auto k : {wire::SubKind::kChannel, wire::SubKind::kPattern})
      SendSubscribe(nullptr, c.id, k, false, {}, 0, true, core_->pubsub_shard());
    std::vector<uint16_t> shards = ShardChannelShards(c);
    if (c.blocked > 0) shards = core_->PubsubShards();  // (an SSUBSCRIBE may be in flight)
    for (uint16_t s : shards)
      SendSubscribe(nullptr, c.id, wire::SubKind::kShard, false, {}, 0, true, s);
  }
}

void RespServer::Impl::CheckOutputLimits(Client& c) {
  // Redis's pub/sub class: a normal client has no output limit (one that does not read is
  // not read either: kOutputPause).
  if (!c.subscribed()) {
    c.soft_since = 0;
    return;
  }
  size_t size = c.out_size();
  size += c.slot_bytes;
  if (options_.output_hard_limit != 0 && size > options_.output_hard_limit) {
    ++stats_.dropped_for_output_limit;
    GOBLIN_LOG_WARN(kLog, "client {} ({}) over the output hard limit ({} bytes); closing it", c.id,
                    c.name, size);
    Close(c, "");
    return;
  }
  if (options_.output_soft_limit != 0 && size > options_.output_soft_limit) {
    uint64_t now = MonotonicNanos();
    if (c.soft_since == 0) {
      c.soft_since = now;
    } else if (now - c.soft_since > static_cast<uint64_t>(options_.output_soft_time.count())) {
      ++stats_.dropped_for_output_limit;
      GOBLIN_LOG_WARN(kLog, "client {} ({}) over the output soft limit for too long; closing it",
                      c.id, c.name);
      Close(c, "");
    }
  } else {
    c.soft_since = 0;
  }
}

// ---- replies in order ----

void RespServer::Impl::Reply(Client& c, std::string bytes) {
  if (c.muted) return;
  if (c.slots.empty()) {
    AppendOut(c, std::move(bytes));
  } else {
    c.slot_bytes += bytes.size();
    c.slots.push_back({true, false, std::move(bytes)});
  }
  dirty_.push_back(&c);
}

void RespServer::Impl::AppendOut(Client& c, std::string&& bytes) {
  if (c.out_size() == 0 && bytes.size() >= 4096) {  // (a large value: taken, not copied)
    c.out = std::move(bytes);
    c.out_pos = 0;
  } else {
    c.out += bytes;
  }
}

uint64_t RespServer::Impl::PendingSlot(Client& c) {
  c.slots.push_back({false, c.muted, {}});
  return c.first_seq + c.slots.size() - 1;
}

uint64_t RespServer::Impl::BlockFor(Client& c) {
  const uint64_t seq = PendingSlot(c);
  if (c.cur_write) {
    c.waiting = true;
    c.write_seq = seq;
  } else {
    ++c.reads;
  }
  return seq;
}

void RespServer::Impl::Unblock(uint64_t client, uint64_t seq, std::string bytes) {
  Client* c = FindClient(client);
  if (c == nullptr) return;
  if (seq == c->write_seq) {
    c->waiting = false;
    c->write_seq = UINT64_MAX;
  } else if (c->reads > 0) {
    --c->reads;
  }
  CompleteSlot(client, seq, std::move(bytes));
  resume_.push_back(client);  // (parsed on from the loop: never inside a handler)
}

RespServer::Impl::Client* RespServer::Impl::FindClient(uint64_t id) {
  auto it = clients_.find(id);
  return it == clients_.end() || it->second->closed ? nullptr : it->second.get();
}

void RespServer::Impl::CompleteSlot(uint64_t client, uint64_t seq, std::string bytes) {
  auto it = clients_.find(client);
  if (it == clients_.end() || it->second->closed) return;
  Client& c = *it->second;
  if (seq < c.first_seq || seq - c.first_seq >= c.slots.size()) return;
  Slot& s = c.slots[seq - c.first_seq];
  s.ready = true;
  if (!s.muted) {
    s.bytes = std::move(bytes);
    c.slot_bytes += s.bytes.size();
  }
  while (!c.slots.empty() && c.slots.front().ready) {
    c.slot_bytes -= c.slots.front().bytes.size();
    AppendOut(c, std::move(c.slots.front().bytes));
    c.slots.pop_front();
    ++c.first_seq;
  }
  CheckOutputLimits(c);
  if (!c.closed) dirty_.push_back(&c);
}

// ---- commands ----

// ---- the core's answers ----

void RespServer::Impl::OnCoreMessage(uint16_t /*shard*/, std::span<const uint8_t> m) {
  sbe::MessageHeader h;
  if (!sbe::MessageHeader::Read(m, &h)) return;
  if (h.template_id == wire::DeliveryDecoder::kTemplateId) {
    if (auto d = wire::DeliveryDecoder::Decode(m)) OnDelivery(*d);
    return;
  }
  if (m.size() < 16) return;
  const uint64_t corr = sbe::Load<uint64_t>(m.data() + 8);  // (requests' answers carry it first)
  if (OnPubsubMessage(h.template_id, corr, m)) return;
  objects_->OnMessage(h.template_id, corr, m);
}

// ---- the command table ----

std::span<const RespServer::Impl::CommandSpec> RespServer::Impl::Commands() {
  // Redis 7.0's arities, flags and key positions; the handler dispatches by argv[0] where
  // one serves several commands.
  static const CommandSpec kCommands[] = {
      {"ping", -1, true, false, &Impl::CmdPing, {"fast"}},
      {"echo", 2, false, false, &Impl::CmdEcho, {"fast"}},
      {"subscribe",
       -2,
       true,
       false,
       &Impl::CmdSubscribe,
       {"pubsub", "noscript", "loading", "stale"}},
      {"unsubscribe",
       -1,
       true,
       false,
       &Impl::CmdSubscribe,
       {"pubsub", "noscript", "loading", "stale"}},
      {"psubscribe",
       -2,
       true,
       false,
       &Impl::CmdSubscribe,
       {"pubsub", "noscript", "loading", "stale"}},
      {"punsubscribe",
       -1,
       true,
       false,
       &Impl::CmdSubscribe,
       {"pubsub", "noscript", "loading", "stale"}},
      {"ssubscribe",
       -2,
       true,
       false,
       &Impl::CmdSubscribe,
       {"pubsub", "noscript", "loading", "stale"},
       1,
       -1,
       1},
      {"sunsubscribe",
       -1,
       true,
       false,
       &Impl::CmdSubscribe,
       {"pubsub", "noscript", "loading", "stale"},
       1,
       -1,
       1},
      {"publish", 3, false, false, &Impl::CmdPublish, {"pubsub", "loading", "stale", "fast"}},
      {"spublish",
       3,
       false,
       false,
       &Impl::CmdPublish,
       {"pubsub", "loading", "stale", "fast"},
       1,
       1,
       1},
      {"pubsub", -2, false, false, &Impl::CmdPubsub, {}},
      {"hello",
       -1,
       false,
       true,
       &Impl::CmdHello,
       {"noscript", "loading", "stale", "fast", "no_auth"}},
      {"auth",
       -2,
       false,
       true,
       &Impl::CmdAuth,
       {"noscript", "loading", "stale", "fast", "no_auth"}},
      {"client", -2, false, false, &Impl::CmdClient, {}},
      {"select", 2, false, false, &Impl::CmdSelect, {"loading", "stale", "fast"}},
      {"command", -1, false, false, &Impl::CmdCommand, {"loading", "stale"}},
      {"quit", -1, true, true, &Impl::CmdQuit, {"noscript", "loading", "stale", "fast", "no_auth"}},
      {"reset",
       1,
       true,
       true,
       &Impl::CmdReset,
       {"noscript", "loading", "stale", "fast", "no_auth"}},
      // the store's objects (resp_objects.cpp)
      {"get", 2, false, false, &Impl::CmdGet, {"readonly", "fast"}, 1, 1, 1},
      {"set", -3, false, false, &Impl::CmdSet, {"write", "denyoom"}, 1, 1, 1},
      {"setnx", 3, false, false, &Impl::CmdSetFamily, {"write", "denyoom", "fast"}, 1, 1, 1},
      {"setex", 4, false, false, &Impl::CmdSetFamily, {"write", "denyoom"}, 1, 1, 1},
      {"psetex", 4, false, false, &Impl::CmdSetFamily, {"write", "denyoom"}, 1, 1, 1},
      {"getset", 3, false, false, &Impl::CmdGetSet, {"write", "denyoom", "fast"}, 1, 1, 1},
      {"getex", -2, false, false, &Impl::CmdGetEx, {"write", "fast"}, 1, 1, 1},
      {"getdel", 2, false, false, &Impl::CmdGetDel, {"write", "fast"}, 1, 1, 1},
      {"del", -2, false, false, &Impl::CmdDel, {"write"}, 1, -1, 1},
      {"unlink", -2, false, false, &Impl::CmdDel, {"write", "fast"}, 1, -1, 1},
      {"exists", -2, false, false, &Impl::CmdExists, {"readonly", "fast"}, 1, -1, 1},
      {"strlen", 2, false, false, &Impl::CmdStrlen, {"readonly", "fast"}, 1, 1, 1},
      {"getrange", 4, false, false, &Impl::CmdGetRange, {"readonly"}, 1, 1, 1},
      {"substr", 4, false, false, &Impl::CmdGetRange, {"readonly"}, 1, 1, 1},
      {"mget", -2, false, false, &Impl::CmdMGet, {"readonly", "fast"}, 1, -1, 1},
      {"mset", -3, false, false, &Impl::CmdMSet, {"write", "denyoom"}, 1, -1, 2},
      {"ttl", 2, false, false, &Impl::CmdTtl, {"readonly", "fast"}, 1, 1, 1},
      {"pttl", 2, false, false, &Impl::CmdTtl, {"readonly", "fast"}, 1, 1, 1},
      {"expiretime", 2, false, false, &Impl::CmdTtl, {"readonly", "fast"}, 1, 1, 1},
      {"pexpiretime", 2, false, false, &Impl::CmdTtl, {"readonly", "fast"}, 1, 1, 1},
      {"expire", -3, false, false, &Impl::CmdExpire, {"write", "fast"}, 1, 1, 1},
      {"pexpire", -3, false, false, &Impl::CmdExpire, {"write", "fast"}, 1, 1, 1},
      {"expireat", -3, false, false, &Impl::CmdExpire, {"write", "fast"}, 1, 1, 1},
      {"pexpireat", -3, false, false, &Impl::CmdExpire, {"write", "fast"}, 1, 1, 1},
      {"persist", 2, false, false, &Impl::CmdPersist, {"write", "fast"}, 1, 1, 1},
      {"type", 2, false, false, &Impl::CmdType, {"readonly", "fast"}, 1, 1, 1},
      {"scan", -2, false, false, &Impl::CmdScan, {"readonly"}},
      // the store as a whole (resp_info.cpp)
      {"dbsize", 1, false, false, &Impl::CmdDbsize, {"readonly", "fast"}},
      {"flushall", -1, false, false, &Impl::CmdFlushAll, {"write"}},
      {"flushdb", -1, false, false, &Impl::CmdFlushAll, {"write"}},
      {"info", -1, false, false, &Impl::CmdInfo, {"loading", "stale"}},
      {"config", -2, false, false, &Impl::CmdConfig, {}},
      {"time", 1, false, false, &Impl::CmdTime, {"loading", "stale", "fast"}},
  };
  return kCommands;
}

const RespServer::Impl::CommandSpec* RespServer::Impl::FindCommand(std::string_view lower_name) {
  static const auto* const kByName = [] {
    auto* m = new std::unordered_map<std::string_view, const CommandSpec*>();
    for (const CommandSpec& sp : Commands()) m->emplace(sp.name, &sp);
    return m;
  }();
  auto it = kByName->find(lower_name);
  return it == kByName->end() ? nullptr : it->second;
}

bool RespServer::Impl::Writes(const CommandSpec& spec) {
  if (std::string_view(spec.name) == "config") return true;  // (SET; GET waits alike)
  return std::any_of(spec.flags.begin(), spec.flags.end(),
                     [](const char* f) { return std::string_view(f) == "write"; });
}

void RespServer::Impl::Execute(Client& c, Argv& argv) {
  const std::string name = Lower(argv[0]);
  const size_t argc = argv.size();
  c.last_ns = MonotonicNanos();
  c.muted = c.reply_mode == ReplyMode::kOff || c.skip_next;
  c.skip_next = false;
  // Subcommands of the container commands, with their own arity (Redis 7's command table).
  struct Sub {
    const char* parent;
    const char* name;
    int arity;
  };
  static constexpr Sub kSubs[] = {
      {"pubsub", "channels", -2},    {"pubsub", "numpat", 2},
      {"pubsub", "numsub", -2},      {"pubsub", "shardchannels", -2},
      {"pubsub", "shardnumsub", -2}, {"pubsub", "help", 2},
      {"client", "id", 2},           {"client", "getname", 2},
      {"client", "setname", 3},      {"client", "setinfo", -4},
      {"client", "help", 2},         {"client", "list", -2},
      {"client", "info", 2},         {"client", "kill", -3},
      {"client", "reply", 3},        {"command", "count", 2},
      {"command", "docs", -2},       {"command", "info", -2},
      {"config", "get", -3},         {"config", "set", -4},
      {"config", "resetstat", 2},    {"config", "help", 2},
  };
  const CommandSpec* spec = FindCommand(name);
  if (spec == nullptr) {
    std::string msg = fmt::format("ERR unknown command '{:.128s}', with args beginning with: ",
                                  std::string(argv[0]));
    std::string args;
    for (size_t i = 1; i < argc && args.size() < 128; ++i) {
      args += fmt::format("'{:.{}s}' ", std::string(argv[i]), 128 - args.size());
    }
    return Reply(c, Err(msg + args));
  }
  std::string fullname = name;
  int arity = spec->arity;
  bool container = name == "pubsub" || name == "client" || name == "command" || name == "config";
  if (container && argc >= 2) {
    std::string sub = Lower(argv[1]);
    const Sub* found = nullptr;
    for (const Sub& sb : kSubs) {
      if (name == sb.parent && sub == sb.name) found = &sb;
    }
    if (found == nullptr) {
      std::string upper = name;
      for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      return Reply(c, Err(fmt::format("ERR unknown subcommand '{:.128s}'. Try {} HELP.",
                                      std::string(argv[1]), upper)));
    }
    fullname = name + "|" + found->name;
    arity = found->arity;
  }
  if ((arity > 0 && static_cast<int>(argc) != arity) ||
      (arity < 0 && static_cast<int>(argc) < -arity)) {
    return Reply(c, Err(fmt::format("ERR wrong number of arguments for '{}' command", fullname)));
  }
  if (!c.authed && !spec->no_auth) return Reply(c, Err("NOAUTH Authentication required."));
  if (c.proto == Proto::kResp2 && c.subscribed() && !spec->in_subscribed) {
    return Reply(c, Err(fmt::format("ERR Can't execute '{}': only (P|S)SUBSCRIBE / "
                                    "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this "
                                    "context",
                                    fullname)));
  }
  c.last_cmd = std::move(fullname);
  c.cur_write = Writes(*spec);
  (this->*spec->handler)(c, argv);
}

RespServer::RespServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RespServer::~RespServer() = default;

Result<std::unique_ptr<RespServer>> RespServer::Start(const RespServerOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  GOBLIN_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<RespServer>(new RespServer(std::move(impl)));
}

VoidResult RespServer::Run(int stop_fd) { return impl_->Run(stop_fd); }
const RespStats& RespServer::stats() const { return impl_->stats_; }
RespStats RespServer::Published() const { return impl_->published_.Get(); }
int RespServer::port() const { return impl_->port_; }

}  // namespace goblin::gateway
