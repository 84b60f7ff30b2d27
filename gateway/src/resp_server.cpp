#include "goblin/gateway/resp_server.h"

#include <arpa/inet.h>
#include <emmintrin.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core_link.h"
#include "epoll_ctl.h"
#include "goblin/common/buffer.h"
#include "goblin/common/clock.h"
#include "goblin/common/fd.h"
#include "goblin/common/log.h"
#include "goblin/gateway/resp.h"
#include "goblin/ring/unix_socket.h"
#include "goblin/wire/goblin_wire.h"

namespace goblin::gateway {
namespace {

constexpr std::string_view kLog = "resp";
constexpr std::string_view kRedisVersion = "7.0.15";  // the semantics implemented

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// Redis's "value is not an integer" parsing (string2ll).
bool ParseInt(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 20 || s[0] == '+') return false;
  if (s.size() > 1 && (s[0] == '0' || (s[0] == '-' && s[1] == '0'))) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string_view KindName(wire::SubKind k, bool subscribe) {
  switch (k) {
    case wire::SubKind::kPattern:
      return subscribe ? "psubscribe" : "punsubscribe";
    case wire::SubKind::kShard:
      return subscribe ? "ssubscribe" : "sunsubscribe";
    default:
      return subscribe ? "subscribe" : "unsubscribe";
  }
}

// epoll tags: small numbers for fixed fds, client ids above.
constexpr uint64_t kTagStop = 1, kTagCoreBell = 2, kTagCoreSock = 3, kTagTcp = 4, kTagUnix = 5;
constexpr uint64_t kFirstClientTag = 16;

}  // namespace

class RespServer::Impl {
 public:
  explicit Impl(const RespServerOptions& o) : options_(o) {}

  VoidResult Init();
  VoidResult Run(int stop_fd);
  RespStats stats_;
  int port_ = 0;

 private:
  struct Slot {  // one reply in command order
    bool ready = false;
    std::string bytes;
  };
  struct Client {
    uint64_t id = 0;
    UniqueFd fd;
    std::string in;
    size_t in_pos = 0;
    std::string out;
    size_t out_pos = 0;
    std::deque<Slot> slots;  // replies behind a pending core reply
    uint64_t first_seq = 0;  // sequence number of slots.front()
    Proto proto = Proto::kResp2;
    bool authed = false;
    std::string name;
    uint32_t sub_count = 0, shard_count = 0;  // as last confirmed by the core
    int blocked = 0;                          // (un)subscribe requests in flight: parsing waits
    bool close_after_write = false;
    bool closed = false;
    bool epollout = false;
    bool stalled = false;  // not read while the core link is backlogged
    uint64_t soft_since = 0;
    size_t out_size() const { return out.size() - out_pos; }
    bool subscribed() const { return sub_count > 0 || shard_count > 0; }
  };
  enum class ReqKind : uint8_t { kSubscribe, kPublish, kQuery, kSilent };
  struct Pending {  // a core request awaiting its reply
    uint64_t client = 0;
    uint64_t seq = 0;  // the client's reply slot
    ReqKind kind = ReqKind::kSilent;
    wire::SubKind sub_kind = wire::SubKind::kChannel;
    bool subscribe = true;
    bool all = false;   // unsubscribe-all: ends with an empty ack
    size_t expect = 0;  // confirmations expected (named requests)
    size_t got = 0;
    wire::PubsubQueryKind query = wire::PubsubQueryKind::kChannels;
    int64_t number = 0;
    std::vector<std::pair<std::string, int64_t>> entries;
    std::string reply;         // being built
    bool final_part = true;    // the last message of a split request
    bool reset_after = false;  // RESET: reply +RESET when this (the last) completes
  };
  struct SlotKeyHash {
    size_t operator()(const std::pair<uint64_t, uint64_t>& k) const {
      return std::hash<uint64_t>{}(k.first * 0x9e3779b97f4a7c15ULL ^ k.second);
    }
  };
  // Replies of split requests being assembled, by (client, slot).
  std::unordered_map<std::pair<uint64_t, uint64_t>, std::string, SlotKeyHash> partial_;

  // Event handling
  void Accept(int listen_fd, bool tcp);
  void OnReadable(Client& c);
  void ProcessInput(Client& c);
  void Execute(Client& c, std::vector<std::string_view>& argv);
  void FlushClient(Client& c);
  void Close(Client& c, std::string_view why);
  void CheckOutputLimits(Client& c);

  // Replies
  void Reply(Client& c, std::string bytes);  // in command order
  uint64_t PendingSlot(Client& c);           // reserves a slot for a core reply
  void CompleteSlot(uint64_t client, uint64_t seq, std::string bytes);
  std::string Err(std::string_view text) {
    std::string s;
    RespWriter(&s).Error(text);
    return s;
  }

  // Commands
  void CmdSubscribe(Client& c, std::vector<std::string_view>& argv, wire::SubKind kind,
                    bool subscribe);
  void CmdPublish(Client& c, std::vector<std::string_view>& argv, bool sharded);
  void CmdPubsub(Client& c, std::vector<std::string_view>& argv);
  void CmdHello(Client& c, std::vector<std::string_view>& argv);
  void CmdClient(Client& c, std::vector<std::string_view>& argv);
  void CmdCommand(Client& c, std::vector<std::string_view>& argv);
  void CmdReset(Client& c);
  bool CheckPassword(std::string_view user, std::string_view pass) const;

  // The core link
  // Sends (P|S)(UN)SUBSCRIBE for `session` (split to fit the ring); `c` (if not null) waits
  // for the confirmations before its next command. Returns the last correlation id.
  uint64_t SendSubscribe(Client* c, uint64_t session, wire::SubKind kind, bool subscribe,
                         std::span<const std::string_view> names, uint64_t seq, bool silent);
  enum class Sent { kOk, kTooLarge, kDown };
  Sent SendToCore(FunctionRef<size_t(uint8_t*, size_t)> encode, size_t max_bytes);
  void OnCoreMessage(std::span<const uint8_t> m);
  void OnDelivery(const wire::DeliveryDecoder& d);
  // The core went away: its replies will never come, its subscriptions are gone.
  void OnCoreDown();
  // Back-pressure: a client is not read while the core link's queue is over its limit.
  void Stall(Client& c);
  void ResumeStalled();
  void SetReadInterest(Client& c);

  RespServerOptions options_;
  UniqueFd epoll_, tcp_, unix_;
  std::unique_ptr<CoreLink> core_;
  std::unordered_map<uint64_t, std::unique_ptr<Client>> clients_;
  uint64_t next_client_ = kFirstClientTag;
  std::unordered_map<uint64_t, Pending> pending_;  // by correlation id
  uint64_t next_corr_ = 1;
  std::vector<Client*> dirty_;     // clients with output to write
  std::vector<uint64_t> stalled_;  // clients not read until the core link drains
  std::string delivery_fmt_[2];
  RespParser parser_;
  std::vector<std::string_view> argv_;
  std::string err_;
};

VoidResult RespServer::Impl::Init() {
  epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) return ErrnoErr("epoll_create1", errno);
  CoreLinkOptions lo;
  lo.socket_path = options_.core_socket;
  lo.name = "goblin-gateway";
  lo.ring_bytes = options_.core_ring_bytes;
  lo.queue_limit = options_.core_queue_limit;
  GOBLIN_ASSIGN_OR_RETURN(core_, CoreLink::Connect(lo, epoll_.get(), kTagCoreBell, kTagCoreSock));
  core_->set_on_down([this] { OnCoreDown(); });
  if (options_.port != 0) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return ErrnoErr("socket", errno);
    tcp_ = UniqueFd(fd);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(options_.port < 0 ? 0 : options_.port));
    if (inet_pton(AF_INET, options_.listen_address.c_str(), &a.sin_addr) != 1) {
      return goblin::Err(StatusCode::kInvalidArgument,
                         "--listen-address '{}' is not an IPv4 address", options_.listen_address);
    }
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      return ErrnoErr(fmt::format("bind {}:{}", options_.listen_address, options_.port), errno);
    }
    if (listen(fd, 511) != 0) return ErrnoErr("listen", errno);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
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
  bool stop = false;
  while (!stop) {
    size_t work = core_->Poll([&](uint16_t, std::span<const uint8_t> m) { OnCoreMessage(m); }, 256);
    if (core_->queued_bytes() > 0 && core_->Flush()) ++work;
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
    if (work > 0) {
      last_work = now;
    } else if (now - last_work >= busy_ns) {
      timeout = core_->PrepareSleep(core_->queued_bytes() > 0) ? -1 : 0;
      if (int r = core_->MillisUntilReconnect(now); r >= 0 && (timeout < 0 || r < timeout))
        timeout = r;
    } else if (options_.yield_when_polling) {
      sched_yield();
    } else {
      _mm_pause();
    }
    epoll_event events[64];
    int n = epoll_wait(epoll_.get(), events, 64, timeout);
    int wait_errno = errno;  // (FinishSleep reads an eventfd: keep epoll_wait's errno)
    if (timeout != 0 || now - last_work >= busy_ns) core_->FinishSleep();
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
  return {};
}

void RespServer::Impl::Accept(int listen_fd, bool tcp) {
  for (;;) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (clients_.size() >= options_.max_clients) {
      static constexpr std::string_view kMax = "-ERR max number of clients reached\r\n";
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
  while (!c.closed && !c.close_after_write && c.blocked == 0 && c.in_pos < c.in.size()) {
    if (core_->over_limit()) {  // the core is behind: this client waits (TCP pushes back)
      Stall(c);
      break;
    }
    auto st = parser_.Parse(c.in, &c.in_pos, &argv_, &err_, c.authed);
    if (st == RespParser::Status::kNeedMore) break;
    if (st == RespParser::Status::kError) {
      ++stats_.protocol_errors;
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
  ev.events =
      (c.stalled ? 0u : uint32_t{EPOLLIN | EPOLLRDHUP}) | (c.epollout ? uint32_t{EPOLLOUT} : 0u);
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
    c->sub_count = c->shard_count = 0;
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
}

void RespServer::Impl::Close(Client& c, std::string_view why) {
  if (c.closed) return;
  if (!why.empty()) GOBLIN_LOG_WARN(kLog, "client {}: {}", c.id, why);
  c.closed = true;
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
  c.fd.Reset();
  // The core forgets its subscriptions.
  if (c.subscribed() || c.blocked > 0) {
    for (auto k : {wire::SubKind::kChannel, wire::SubKind::kPattern, wire::SubKind::kShard})
      SendSubscribe(nullptr, c.id, k, false, {}, 0, true);
  }
}

void RespServer::Impl::CheckOutputLimits(Client& c) {
  size_t size = c.out_size();
  for (const Slot& s : c.slots) size += s.bytes.size();
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
  if (c.slots.empty()) {
    c.out += bytes;
  } else {
    c.slots.push_back({true, std::move(bytes)});
  }
  dirty_.push_back(&c);
}

uint64_t RespServer::Impl::PendingSlot(Client& c) {
  c.slots.push_back({false, {}});
  return c.first_seq + c.slots.size() - 1;
}

void RespServer::Impl::CompleteSlot(uint64_t client, uint64_t seq, std::string bytes) {
  auto it = clients_.find(client);
  if (it == clients_.end() || it->second->closed) return;
  Client& c = *it->second;
  if (seq < c.first_seq || seq - c.first_seq >= c.slots.size()) return;
  Slot& s = c.slots[seq - c.first_seq];
  s.ready = true;
  s.bytes = std::move(bytes);
  while (!c.slots.empty() && c.slots.front().ready) {
    c.out += c.slots.front().bytes;
    c.slots.pop_front();
    ++c.first_seq;
  }
  CheckOutputLimits(c);
  if (!c.closed) dirty_.push_back(&c);
}

// ---- commands ----

bool RespServer::Impl::CheckPassword(std::string_view user, std::string_view pass) const {
  return user == "default" && !options_.requirepass.empty() && pass == options_.requirepass;
}

void RespServer::Impl::Execute(Client& c, std::vector<std::string_view>& argv) {
  const std::string name = Lower(argv[0]);
  const size_t argc = argv.size();
  struct Spec {
    const char* name;
    int arity;
    bool in_subscribed;  // allowed in RESP2 subscribed mode
    bool no_auth;        // allowed before AUTH
  };
  static constexpr Spec kSpecs[] = {
      {"ping", -1, true, false},       {"echo", 2, false, false},
      {"subscribe", -2, true, false},  {"unsubscribe", -1, true, false},
      {"psubscribe", -2, true, false}, {"punsubscribe", -1, true, false},
      {"ssubscribe", -2, true, false}, {"sunsubscribe", -1, true, false},
      {"publish", 3, false, false},    {"spublish", 3, false, false},
      {"pubsub", -2, false, false},    {"hello", -1, false, true},
      {"auth", -2, false, true},       {"client", -2, false, false},
      {"select", 2, false, false},     {"command", -1, false, false},
      {"quit", -1, true, true},        {"reset", 1, true, true},
  };
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
      {"client", "help", 2},         {"command", "count", 2},
      {"command", "docs", -2},       {"command", "info", -2},
  };
  const Spec* spec = nullptr;
  for (const Spec& sp : kSpecs) {
    if (name == sp.name) spec = &sp;
  }
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
  bool container = name == "pubsub" || name == "client" || name == "command";
  if (container && argc >= 2) {
    std::string sub = Lower(argv[1]);
    const Sub* found = nullptr;
    for (const Sub& sb : kSubs) {
      if (name == sb.parent && sub == sb.name) found = &sb;
    }
    if (found == nullptr) {
      return Reply(c, Err(fmt::format("ERR unknown subcommand '{:.128s}'. Try {} HELP.",
                                      std::string(argv[1]),
                                      Lower(name) == "pubsub" ? "PUBSUB"
                                      : name == "client"      ? "CLIENT"
                                                              : "COMMAND")));
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
  std::string r;
  RespWriter w(&r);
  if (name == "ping") {
    if (argc > 2) return Reply(c, Err("ERR wrong number of arguments for 'ping' command"));
    if (c.proto == Proto::kResp2 && c.subscribed()) {
      w.Array(2);
      w.Bulk("pong");
      w.Bulk(argc == 2 ? argv[1] : "");
    } else if (argc == 2) {
      w.Bulk(argv[1]);
    } else {
      w.Simple("PONG");
    }
    return Reply(c, std::move(r));
  }
  if (name == "echo") {
    w.Bulk(argv[1]);
    return Reply(c, std::move(r));
  }
  if (name == "subscribe") return CmdSubscribe(c, argv, wire::SubKind::kChannel, true);
  if (name == "unsubscribe") return CmdSubscribe(c, argv, wire::SubKind::kChannel, false);
  if (name == "psubscribe") return CmdSubscribe(c, argv, wire::SubKind::kPattern, true);
  if (name == "punsubscribe") return CmdSubscribe(c, argv, wire::SubKind::kPattern, false);
  if (name == "ssubscribe") return CmdSubscribe(c, argv, wire::SubKind::kShard, true);
  if (name == "sunsubscribe") return CmdSubscribe(c, argv, wire::SubKind::kShard, false);
  if (name == "publish") return CmdPublish(c, argv, false);
  if (name == "spublish") return CmdPublish(c, argv, true);
  if (name == "pubsub") return CmdPubsub(c, argv);
  if (name == "hello") return CmdHello(c, argv);
  if (name == "client") return CmdClient(c, argv);
  if (name == "command") return CmdCommand(c, argv);
  if (name == "reset") return CmdReset(c);
  if (name == "quit") {
    w.Simple("OK");
    Reply(c, std::move(r));
    c.close_after_write = true;
    return;
  }
  if (name == "select") {
    int64_t db = 0;
    if (!ParseInt(argv[1], &db))
      return Reply(c, Err("ERR value is not an integer or out of range"));
    if (db != 0) return Reply(c, Err("ERR DB index is out of range"));
    w.Simple("OK");
    return Reply(c, std::move(r));
  }
  if (name == "auth") {
    if (argc > 3) return Reply(c, Err("ERR syntax error"));
    if (options_.requirepass.empty()) {
      return Reply(c, Err("ERR AUTH <password> called without any password configured for the "
                          "default user. Are you sure your configuration is correct?"));
    }
    std::string_view user = argc == 3 ? argv[1] : "default", pass = argv[argc - 1];
    if (!CheckPassword(user, pass)) {
      return Reply(c, Err("WRONGPASS invalid username-password pair or user is disabled."));
    }
    c.authed = true;
    w.Simple("OK");
    return Reply(c, std::move(r));
  }
}

void RespServer::Impl::CmdHello(Client& c, std::vector<std::string_view>& argv) {
  Proto proto = c.proto;
  size_t i = 1;
  if (argv.size() >= 2) {
    int64_t v = 0;
    if (!ParseInt(argv[1], &v)) {
      return Reply(c, Err("ERR Protocol version is not an integer or out of range"));
    }
    if (v < 2 || v > 3) return Reply(c, Err("NOPROTO unsupported protocol version"));
    proto = v == 3 ? Proto::kResp3 : Proto::kResp2;
    i = 2;
  }
  std::optional<std::pair<std::string_view, std::string_view>> auth;
  std::optional<std::string_view> setname;
  for (; i < argv.size(); ++i) {
    size_t more = argv.size() - i - 1;
    if (IEquals(argv[i], "AUTH") && more >= 2) {
      auth = std::pair{argv[i + 1], argv[i + 2]};
      i += 2;
    } else if (IEquals(argv[i], "SETNAME") && more >= 1) {
      setname = argv[i + 1];
      i += 1;
    } else {
      return Reply(c,
                   Err(fmt::format("ERR Syntax error in HELLO option '{}'", std::string(argv[i]))));
    }
  }
  if (auth) {
    if (!CheckPassword(auth->first, auth->second)) {
      return Reply(c, Err("WRONGPASS invalid username-password pair or user is disabled."));
    }
    c.authed = true;
  }
  if (!c.authed) {
    return Reply(c, Err("NOAUTH HELLO must be called with the client already authenticated, "
                        "otherwise the HELLO AUTH <user> <pass> option can be used to "
                        "authenticate the client and select the RESP protocol version at the "
                        "same time"));
  }
  if (setname) {
    for (char ch : *setname) {
      if (ch < '!' || ch > '~') {
        return Reply(c, Err("ERR Client names cannot contain spaces, newlines or special "
                            "characters."));
      }
    }
    c.name = std::string(*setname);
  }
  c.proto = proto;
  std::string r;
  RespWriter w(&r);
  w.Map(proto, 7);
  w.Bulk("server");
  w.Bulk("goblin");
  w.Bulk("version");
  w.Bulk(kRedisVersion);
  w.Bulk("proto");
  w.Integer(proto == Proto::kResp3 ? 3 : 2);
  w.Bulk("id");
  w.Integer(static_cast<int64_t>(c.id));
  w.Bulk("mode");
  w.Bulk("standalone");
  w.Bulk("role");
  w.Bulk("master");
  w.Bulk("modules");
  w.Array(0);
  Reply(c, std::move(r));
}

void RespServer::Impl::CmdClient(Client& c, std::vector<std::string_view>& argv) {
  std::string sub = Lower(argv[1]);
  std::string r;
  RespWriter w(&r);
  auto arity = [&](size_t want) {
    if (argv.size() == want) return true;
    Reply(c, Err(fmt::format("ERR wrong number of arguments for 'client|{}' command", sub)));
    return false;
  };
  if (sub == "id") {
    if (!arity(2)) return;
    w.Integer(static_cast<int64_t>(c.id));
  } else if (sub == "getname") {
    if (!arity(2)) return;
    if (c.name.empty()) {
      w.Null(c.proto);
    } else {
      w.Bulk(c.name);
    }
  } else if (sub == "setname") {
    if (!arity(3)) return;
    for (char ch : argv[2]) {
      if (ch < '!' || ch > '~') {
        return Reply(c, Err("ERR Client names cannot contain spaces, newlines or special "
                            "characters."));
      }
    }
    c.name = std::string(argv[2]);
    w.Simple("OK");
  } else if (sub == "setinfo") {
    if (!arity(4)) return;
    std::string attr = Lower(argv[2]);
    if (attr != "lib-name" && attr != "lib-ver") {
      return Reply(c, Err(fmt::format("ERR Unrecognized option '{}'", std::string(argv[2]))));
    }
    w.Simple("OK");
  } else if (sub == "help") {
    static constexpr const char* kHelp[] = {
        "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GETNAME",
        "    Return the name of the current connection.",
        "ID",
        "    Return the ID of the current connection.",
        "SETNAME <connection-name>",
        "    Assign the name <connection-name> to the current connection.",
        "SETINFO <option> <value>",
        "    Set client meta attr (lib-name or lib-ver).",
        "HELP",
        "    Prints this help."};
    w.Array(std::size(kHelp));
    for (const char* line : kHelp) w.Simple(line);
  } else {
    return Reply(
        c, Err(fmt::format("ERR unknown subcommand '{}'. Try CLIENT HELP.", std::string(argv[1]))));
  }
  Reply(c, std::move(r));
}

void RespServer::Impl::CmdCommand(Client& c, std::vector<std::string_view>& argv) {
  // Enough for clients that probe it: COUNT, DOCS (none), INFO and the list of what we serve.
  struct Info {
    const char* name;
    int arity;
    std::initializer_list<const char*> flags;
  };
  static const Info kInfo[] = {{"ping", -1, {"fast"}},
                               {"echo", 2, {"fast"}},
                               {"subscribe", -2, {"pubsub", "noscript", "loading", "stale"}},
                               {"unsubscribe", -1, {"pubsub", "noscript", "loading", "stale"}},
                               {"psubscribe", -2, {"pubsub", "noscript", "loading", "stale"}},
                               {"punsubscribe", -1, {"pubsub", "noscript", "loading", "stale"}},
                               {"ssubscribe", -2, {"pubsub", "noscript", "loading", "stale"}},
                               {"sunsubscribe", -1, {"pubsub", "noscript", "loading", "stale"}},
                               {"publish", 3, {"pubsub", "loading", "stale", "fast"}},
                               {"spublish", 3, {"pubsub", "loading", "stale", "fast"}},
                               {"pubsub", -2, {}},
                               {"hello", -1, {"noscript", "loading", "stale", "fast", "no_auth"}},
                               {"auth", -2, {"noscript", "loading", "stale", "fast", "no_auth"}},
                               {"client", -2, {}},
                               {"select", 2, {"loading", "stale", "fast"}},
                               {"command", -1, {"loading", "stale"}},
                               {"quit", -1, {"noscript", "loading", "stale", "fast", "no_auth"}},
                               {"reset", 1, {"noscript", "loading", "stale", "fast", "no_auth"}}};
  std::string r;
  RespWriter w(&r);
  auto write_info = [&](const Info& i) {
    w.Array(10);
    w.Bulk(i.name);
    w.Integer(i.arity);
    w.Array(i.flags.size());
    for (const char* f : i.flags) w.Simple(f);
    w.Integer(0);
    w.Integer(0);
    w.Integer(0);
    w.Array(0);  // ACL categories
    w.Array(0);  // tips
    w.Array(0);  // key specs
    w.Array(0);  // subcommands
  };
  if (argv.size() == 1) {
    w.Array(std::size(kInfo));
    for (const Info& i : kInfo) write_info(i);
  } else if (IEquals(argv[1], "COUNT")) {
    w.Integer(static_cast<int64_t>(std::size(kInfo)));
  } else if (IEquals(argv[1], "DOCS")) {
    w.Map(c.proto, 0);
  } else if (IEquals(argv[1], "INFO")) {
    w.Array(argv.size() - 2);
    for (size_t a = 2; a < argv.size(); ++a) {
      std::string n = Lower(argv[a]);
      auto it = std::find_if(std::begin(kInfo), std::end(kInfo),
                             [&](const Info& i) { return n == i.name; });
      if (it == std::end(kInfo)) {
        w.Null(c.proto);
      } else {
        write_info(*it);
      }
    }
  } else {
    return Reply(c, Err(fmt::format("ERR unknown subcommand '{}'. Try COMMAND HELP.",
                                    std::string(argv[1]))));
  }
  Reply(c, std::move(r));
}

void RespServer::Impl::CmdReset(Client& c) {
  c.proto = Proto::kResp2;
  c.name.clear();
  c.authed = options_.requirepass.empty();
  if (!c.subscribed()) {
    std::string r;
    RespWriter(&r).Simple("RESET");
    return Reply(c, std::move(r));
  }
  // Leave every family at the core; the last confirmation sends +RESET.
  uint64_t seq = PendingSlot(c);
  SendSubscribe(&c, c.id, wire::SubKind::kChannel, false, {}, seq, true);
  SendSubscribe(&c, c.id, wire::SubKind::kPattern, false, {}, seq, true);
  uint64_t corr = SendSubscribe(&c, c.id, wire::SubKind::kShard, false, {}, seq, true);
  if (auto it = pending_.find(corr); it != pending_.end()) it->second.reset_after = true;
}

void RespServer::Impl::CmdSubscribe(Client& c, std::vector<std::string_view>& argv,
                                    wire::SubKind kind, bool subscribe) {
  uint64_t seq = PendingSlot(c);
  std::span<const std::string_view> names(argv.data() + 1, argv.size() - 1);
  SendSubscribe(&c, c.id, kind, subscribe, names, seq, false);
}

uint64_t RespServer::Impl::SendSubscribe(Client* c, uint64_t session, wire::SubKind kind,
                                         bool subscribe, std::span<const std::string_view> names,
                                         uint64_t seq, bool silent) {
  // As many Subscribe messages as the ring's message size needs; the client's reply is the
  // confirmations of all of them, in order.
  const size_t max = core_->max_message() - 64;
  if (!core_->up()) {
    if (c != nullptr && !silent) CompleteSlot(session, seq, Err("ERR goblin-core is unavailable"));
    return 0;
  }
  size_t i = 0;
  uint64_t corr = 0;
  do {
    size_t first = i, bytes = 0;
    while (i < names.size() && (i == first || bytes + 4 + names[i].size() <= max)) {
      bytes += 4 + names[i].size();
      ++i;
    }
    corr = next_corr_++;
    Pending p;
    p.client = session;
    p.seq = seq;
    p.kind = silent ? ReqKind::kSilent : ReqKind::kSubscribe;
    p.sub_kind = kind;
    p.subscribe = subscribe;
    p.all = names.empty();
    p.expect = i - first;
    p.final_part = i == names.size();
    std::span<const std::string_view> part = names.subspan(first, i - first);
    Sent sent = SendToCore(
        [&](uint8_t* b, size_t cap) {
          wire::SubscribeEncoder e(b, cap);
          e.set_correlation_id(corr)
              .set_kind(kind)
              .set_action(subscribe ? wire::SubAction::kSubscribe : wire::SubAction::kUnsubscribe)
              .set_session_id(session);
          auto g = e.BeginNames();
          for (std::string_view n : part) g.Next().set_name(n);
          return e.Finish();
        },
        bytes + 64);
    if (sent != Sent::kOk) {
      if (c != nullptr && !silent) {
        CompleteSlot(
            session, seq,
            Err(sent == Sent::kDown ? "ERR goblin-core is unavailable"
                                    : "ERR a channel name is too large for goblin-core's ring"));
      }
      return 0;
    }
    if (c != nullptr) ++c->blocked;
    pending_.emplace(corr, std::move(p));
  } while (i < names.size());
  return corr;
}

RespServer::Impl::Sent RespServer::Impl::SendToCore(FunctionRef<size_t(uint8_t*, size_t)> encode,
                                                    size_t max_bytes) {
  // Never dropped once parsed: ProcessInput stops reading clients while the queue is over its
  // limit, so it exceeds the limit by at most the commands already in hand.
  switch (core_->SendAlways(encode, max_bytes)) {
    case CoreLink::SendResult::kSent:
    case CoreLink::SendResult::kQueued:
    case CoreLink::SendResult::kBusy:
      return Sent::kOk;
    case CoreLink::SendResult::kTooLarge:
      return Sent::kTooLarge;
    case CoreLink::SendResult::kDown:
      return Sent::kDown;
  }
  return Sent::kDown;
}

void RespServer::Impl::CmdPublish(Client& c, std::vector<std::string_view>& argv, bool sharded) {
  uint64_t seq = PendingSlot(c);
  uint64_t corr = next_corr_++;
  std::string_view channel = argv[1], payload = argv[2];
  Sent sent = SendToCore(
      [&](uint8_t* b, size_t cap) {
        return wire::PublishEncoder(b, cap)
            .set_correlation_id(corr)
            .set_sharded(sharded ? 1 : 0)
            .set_channel(channel)
            .set_payload(payload)
            .Finish();
      },
      channel.size() + payload.size() + 64);
  if (sent == Sent::kDown) return CompleteSlot(c.id, seq, Err("ERR goblin-core is unavailable"));
  if (sent != Sent::kOk) {
    return CompleteSlot(c.id, seq,
                        Err(fmt::format("ERR a {}-byte message is larger than goblin-core's ring "
                                        "carries ({} bytes)",
                                        payload.size(), core_->max_message() - 64)));
  }
  Pending p;
  p.client = c.id;
  p.seq = seq;
  p.kind = ReqKind::kPublish;
  pending_.emplace(corr, std::move(p));
}

void RespServer::Impl::CmdPubsub(Client& c, std::vector<std::string_view>& argv) {
  std::string sub = Lower(argv[1]);
  if (sub == "help") {
    static constexpr const char* kHelp[] = {
        "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CHANNELS [<pattern>]",
        "    Return the currently active channels matching a <pattern> (default: '*').",
        "NUMPAT",
        "    Return number of subscriptions to patterns.",
        "NUMSUB [<channel> ...]",
        "    Return the number of subscribers for the specified channels, excluding",
        "    pattern subscriptions(default: no channels).",
        "SHARDCHANNELS [<pattern>]",
        "    Return the currently active shard level channels matching a <pattern> (default: "
        "'*').",
        "SHARDNUMSUB [<shardchannel> ...]",
        "    Return the number of subscribers for the specified shard level channel(s)",
        "HELP",
        "    Prints this help."};
    std::string r;
    RespWriter w(&r);
    w.Array(std::size(kHelp));
    for (const char* line : kHelp) w.Simple(line);
    return Reply(c, std::move(r));
  }
  wire::PubsubQueryKind q;
  if (sub == "channels" || sub == "shardchannels") {
    if (argv.size() > 3) {
      return Reply(c, Err(fmt::format("ERR unknown subcommand or wrong number of arguments for "
                                      "'{}'. Try PUBSUB HELP.",
                                      std::string(argv[1]))));
    }
    q = sub == "channels" ? wire::PubsubQueryKind::kChannels
                          : wire::PubsubQueryKind::kShardchannels;
  } else if (sub == "numsub" || sub == "shardnumsub") {
    q = sub == "numsub" ? wire::PubsubQueryKind::kNumsub : wire::PubsubQueryKind::kShardnumsub;
  } else {
    q = wire::PubsubQueryKind::kNumpat;
  }
  uint64_t seq = PendingSlot(c);
  uint64_t corr = next_corr_++;
  size_t bytes = 64;
  for (size_t i = 2; i < argv.size(); ++i) bytes += argv[i].size() + 4;
  Sent sent = SendToCore(
      [&](uint8_t* b, size_t cap) {
        wire::PubsubQueryEncoder e(b, cap);
        e.set_correlation_id(corr).set_query(q);
        auto g = e.BeginArgs();
        for (size_t i = 2; i < argv.size(); ++i) g.Next().set_arg(argv[i]);
        return e.Finish();
      },
      bytes);
  if (sent == Sent::kDown) return CompleteSlot(c.id, seq, Err("ERR goblin-core is unavailable"));
  if (sent != Sent::kOk) return CompleteSlot(c.id, seq, Err("ERR PUBSUB arguments too large"));
  Pending p;
  p.client = c.id;
  p.seq = seq;
  p.kind = ReqKind::kQuery;
  p.query = q;
  pending_.emplace(corr, std::move(p));
}

void RespServer::Impl::OnCoreMessage(std::span<const uint8_t> m) {
  sbe::MessageHeader h;
  if (!sbe::MessageHeader::Read(m, &h)) return;
  if (h.template_id == wire::DeliveryDecoder::kTemplateId) {
    if (auto d = wire::DeliveryDecoder::Decode(m)) OnDelivery(*d);
    return;
  }
  if (m.size() < 16) return;
  uint64_t corr = sbe::Load<uint64_t>(m.data() + 8);
  auto it = pending_.find(corr);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  auto cit = clients_.find(p.client);
  Client* c = cit == clients_.end() || cit->second->closed ? nullptr : cit->second.get();
  Proto proto = c != nullptr ? c->proto : Proto::kResp2;
  bool done = false;
  if (h.template_id == wire::ErrorDecoder::kTemplateId) {
    auto e = wire::ErrorDecoder::Decode(m);
    p.reply = Err(fmt::format("ERR goblin-core: {}", e ? std::string(e->text()) : "error"));
    p.final_part = true;
    done = true;
  } else if (h.template_id == wire::SubscribeAckDecoder::kTemplateId) {
    auto a = wire::SubscribeAckDecoder::Decode(m);
    if (!a) return;
    size_t n = 0;
    RespWriter w(&p.reply);
    for (auto conf : a->confirmations()) {
      ++n;
      if (c != nullptr) {
        if (p.sub_kind == wire::SubKind::kShard) {
          c->shard_count = conf.count();
        } else {
          c->sub_count = conf.count();
        }
      }
      if (p.kind == ReqKind::kSilent) continue;
      w.Push(proto, 3);
      w.Bulk(KindName(p.sub_kind, p.subscribe));
      if (conf.name_is_nil()) {
        w.Null(proto);
      } else {
        w.Bulk(conf.name());
      }
      w.Integer(conf.count());
    }
    p.got += n;
    done = p.all ? n == 0 : p.got >= p.expect;
  } else if (h.template_id == wire::PublishAckDecoder::kTemplateId) {
    auto a = wire::PublishAckDecoder::Decode(m);
    if (!a) return;
    RespWriter(&p.reply).Integer(static_cast<int64_t>(a->receivers()));
    done = true;
  } else if (h.template_id == wire::PubsubReplyDecoder::kTemplateId) {
    auto r = wire::PubsubReplyDecoder::Decode(m);
    if (!r) return;
    p.number = r->number();
    for (auto e : r->entries()) p.entries.emplace_back(std::string(e.name()), e.count());
    done = p.query == wire::PubsubQueryKind::kNumpat ||
           p.entries.size() >= static_cast<size_t>(p.number);
    if (done) {
      RespWriter w(&p.reply);
      if (p.query == wire::PubsubQueryKind::kNumpat) {
        w.Integer(p.number);
      } else if (p.query == wire::PubsubQueryKind::kChannels ||
                 p.query == wire::PubsubQueryKind::kShardchannels) {
        w.Array(p.entries.size());
        for (auto& [name, count] : p.entries) w.Bulk(name);
      } else {
        w.Array(2 * p.entries.size());  // a flat array in RESP3 too, like Redis 7.0
        for (auto& [name, count] : p.entries) {
          w.Bulk(name);
          w.Integer(count);
        }
      }
    }
  } else {
    return;
  }
  if (!done) return;
  Pending fin = std::move(p);
  pending_.erase(it);
  if (fin.kind == ReqKind::kSubscribe || fin.kind == ReqKind::kSilent) {
    if (c != nullptr && c->blocked > 0) --c->blocked;
  }
  if (c != nullptr) {
    std::string& acc = partial_[{fin.client, fin.seq}];
    acc += fin.reply;
    if (fin.final_part || fin.kind == ReqKind::kPublish || fin.kind == ReqKind::kQuery) {
      std::string bytes = std::move(acc);
      partial_.erase({fin.client, fin.seq});
      if (fin.kind == ReqKind::kSilent) {
        if (fin.reset_after) {
          bytes.clear();
          RespWriter(&bytes).Simple("RESET");
          CompleteSlot(fin.client, fin.seq, std::move(bytes));
        }
      } else {
        CompleteSlot(fin.client, fin.seq, std::move(bytes));
      }
    }
    if (c->blocked == 0 && !c->closed) ProcessInput(*c);  // commands that waited
  } else {
    partial_.erase({fin.client, fin.seq});
  }
}

void RespServer::Impl::OnDelivery(const wire::DeliveryDecoder& d) {
  // RESP2 and RESP3 forms, each built once on first use (member buffers: no allocation
  // per delivery once they have grown).
  std::string* formatted = delivery_fmt_;
  formatted[0].clear();
  formatted[1].clear();
  auto kind = d.kind();
  std::string_view pattern = d.pattern(), channel = d.channel(), payload = d.payload();
  for (auto s : d.sessions()) {
    auto it = clients_.find(s.session_id());
    if (it == clients_.end() || it->second->closed) continue;
    Client& c = *it->second;
    std::string& f = formatted[c.proto == Proto::kResp3 ? 1 : 0];
    if (f.empty()) {
      RespWriter w(&f);
      if (kind == wire::SubKind::kPattern) {
        w.Push(c.proto, 4);
        w.Bulk("pmessage");
        w.Bulk(pattern);
      } else {
        w.Push(c.proto, 3);
        w.Bulk(kind == wire::SubKind::kShard ? "smessage" : "message");
      }
      w.Bulk(channel);
      w.Bulk(payload);
    }
    c.out += f;
    ++stats_.messages_out;
    CheckOutputLimits(c);
    if (!c.closed) dirty_.push_back(&c);
  }
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
int RespServer::port() const { return impl_->port_; }

}  // namespace goblin::gateway
