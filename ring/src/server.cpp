#include "goblin/ring/server.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "goblin/common/clock.h"
#include "goblin/common/log.h"
#include "goblin/ring/client.h"
#include "goblin/ring/unix_socket.h"
#include "goblin/sbe/framing.h"
#include "goblin/wire/goblin_wire.h"

namespace goblin::ring {
namespace {

constexpr uint32_t kMaxHandshakeBytes = 16 * 1024;
constexpr uint64_t kHandshakeTimeoutNs = 5'000'000'000ULL;
constexpr size_t kPollBatch = 64;
constexpr std::string_view kLog = "ring";

VoidResult EpollAdd(int epfd, int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) return ErrnoErr("epoll_ctl(ADD)", errno);
  return {};
}

}  // namespace

SendOutcome RingSession::Send(std::span<const uint8_t> msg) {
  sbe::MessageHeader h;
  if (!sbe::MessageHeader::Read(msg, &h) || msg.size() > channel_.max_message()) {
    return SendOutcome::kTooLarge;
  }
  if (queued_bytes() == 0) {
    if (channel_.TrySend(h.template_id, msg) == SendStatus::kOk) return SendOutcome::kSent;
  }
  if (queued_bytes() + 4 + msg.size() > output_limit_) return SendOutcome::kOverLimit;
  if (soft_limit_ != 0 && queued_bytes() + 4 + msg.size() > soft_limit_) {
    uint64_t now = MonotonicNanos();
    if (soft_since_ == 0) {
      soft_since_ = now;
    } else if (now - soft_since_ > soft_ns_) {
      return SendOutcome::kOverLimit;
    }
  }
  uint32_t len = static_cast<uint32_t>(msg.size());
  const auto* lp = reinterpret_cast<const uint8_t*>(&len);
  out_.insert(out_.end(), lp, lp + 4);
  out_.insert(out_.end(), msg.begin(), msg.end());
  return SendOutcome::kQueued;
}

bool RingSession::DrainOutput() {
  bool moved = false;
  while (out_head_ < out_.size()) {
    uint32_t len = sbe::Load<uint32_t>(out_.data() + out_head_);
    std::span<const uint8_t> msg(out_.data() + out_head_ + 4, len);
    uint16_t type = sbe::Load<uint16_t>(msg.data() + 2);
    if (!channel_.producer().TryWrite(type, msg)) {
      moved = true;  // publish a pending padding record too
      break;
    }
    out_head_ += 4 + len;
    moved = true;
  }
  if (moved) channel_.Flush();
  if (queued_bytes() <= soft_limit_) soft_since_ = 0;
  if (out_head_ == out_.size()) {
    out_.clear();  // keeps its capacity: no allocation next time
    out_head_ = 0;
    return true;
  }
  if (out_head_ > out_.size() / 2) {
    out_.erase(out_.begin(), out_.begin() + static_cast<long>(out_head_));
    out_head_ = 0;
  }
  return false;
}

Result<std::unique_ptr<RingServer>> RingServer::Listen(const ServerOptions& options,
                                                       reactor::Handler* handler) {
  GOBLIN_RETURN_IF_ERROR_CTX(ValidateCapacity(options.default_ring_bytes), "default ring");
  GOBLIN_RETURN_IF_ERROR_CTX(ValidateCapacity(options.max_ring_bytes), "max ring");
  std::unique_ptr<RingServer> s(new RingServer());
  s->options_ = options;
  s->handler_ = handler;
  if (options.shard_count == 0 || options.shard >= options.shard_count) {
    return Err(StatusCode::kInvalidArgument, "shard {} of {}", options.shard, options.shard_count);
  }
  s->next_id_ = options.shard + 1u;  // session ids are unique across shards
  s->epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (!s->epoll_) return ErrnoErr("epoll_create1", errno);
  GOBLIN_ASSIGN_OR_RETURN(s->adopt_wake_, EventFd::Create());
  s->options_.socket_path.clear();
  if (!options.socket_path.empty()) GOBLIN_RETURN_IF_ERROR(s->BindSocket(options.socket_path));
  GOBLIN_RETURN_IF_ERROR(EpollAdd(s->epoll_.get(), s->adopt_wake_.fd(), EPOLLIN));
  s->scratch_ = ByteBuffer(options.max_ring_bytes);
  return s;
}

VoidResult RingServer::BindSocket(const std::string& socket_path) {
  if (listen_) return Err(StatusCode::kFailedPrecondition, "the ring server listens already");
  GOBLIN_ASSIGN_OR_RETURN(listen_, ListenUnix(socket_path));
  options_.socket_path = socket_path;
  return EpollAdd(epoll_.get(), listen_.get(), EPOLLIN);
}

RingServer::~RingServer() {
  for (auto& [id, s] : sessions_) handler_->OnClose(*s);
  sessions_.clear();
  if (listen_) unlink(options_.socket_path.c_str());
}

VoidResult RingSession::SendSideFrame(std::span<const uint8_t> msg, std::span<const int> fds) {
  return SendFrame(sock_.get(), msg, fds);
}

size_t RingServer::Poll() {
  size_t total = 0;
  for (size_t i = 0; i < active_.size(); ++i) {
    RingSession* s = active_[i];
    if (s->closing_) continue;
    if (s->queued_bytes() > 0) s->DrainOutput();
    if (s->want_writable_ && s->queued_bytes() == 0 && !s->closing_) {
      size_t before = s->out_.size();
      handler_->OnWritable(*s);
      if (s->out_.size() != before || s->want_writable_) ++total;  // streaming is work
    }
    PollResult r = Deliver(*s, kPollBatch);
    if (r.corrupt) {
      ++stats_.corrupt;
      GOBLIN_LOG_WARN(kLog, "client {} ({}, pid {}) corrupted its ring; dropping it", s->id_,
                      s->name_, s->pid_);
      s->closing_ = true;
    }
    total += r.records;
  }
  CloseMarked();
  // Handshakes that never complete are dropped (checked now and then, and after events).
  if (!pending_.empty() && (++rounds_ & 4095) == 0) DropStaleHandshakes();
  return total;
}

bool RingServer::PrepareSleep() {
  bool can_sleep = true;
  for (RingSession* s : active_) {
    if (!s->channel_.PrepareSleep(s->queued_bytes() > 0 || s->want_writable_)) can_sleep = false;
  }
  return can_sleep;
}

void RingServer::FinishSleep() {
  for (RingSession* s : active_) s->channel_.FinishSleep();
  CloseMarked();
  // (after every sleep, which max_sleep_ms bounds to 1 s while handshakes are pending)
  DropStaleHandshakes();
}

void RingServer::Close() {
  std::vector<uint64_t> ids;
  for (auto& [id, s] : sessions_) ids.push_back(id);
  for (uint64_t id : ids) CloseSession(id);
  pending_.clear();
}

PollResult RingServer::Deliver(RingSession& s, size_t max) {
  return s.channel_.Poll(
      [&](int32_t, std::span<const uint8_t> payload) {
        if (s.closing_) return;
        // Trust boundary: copy out of shared memory before parsing.
        std::memcpy(scratch_.data(), payload.data(), payload.size());
        ++stats_.messages;
        handler_->OnMessage(s, {scratch_.data(), payload.size()});
      },
      max);
}

void RingServer::OnReady() {
  epoll_event events[64];
  int n = epoll_wait(epoll_.get(), events, 64, 0);
  if (n < 0) {
    if (errno != EINTR) GOBLIN_LOG_ERROR(kLog, "epoll_wait: {}", ErrnoStatus("epoll_wait", errno));
    return;
  }
  for (int i = 0; i < n; ++i) {
    int fd = events[i].data.fd;
    if (listen_ && fd == listen_.get()) {
      Accept();
    } else if (fd == adopt_wake_.fd()) {
      uint64_t v;
      [[maybe_unused]] ssize_t r = read(fd, &v, sizeof v);
      TakeAdopted();
    } else if (pending_.count(fd)) {
      ReadHandshake(fd);
    } else if (auto it = fd_to_session_.find(fd); it != fd_to_session_.end()) {
      auto sit = sessions_.find(it->second);
      if (sit == sessions_.end()) continue;
      RingSession& s = *sit->second;
      if (fd == s.channel_.server_doorbell_fd()) continue;  // drained in FinishSleep
      // The liveness socket: EOF means the client is gone; data is a protocol error.
      uint8_t b[64];
      auto r = ReadSome(fd, b, nullptr);
      if (r && *r > 0) {
        GOBLIN_LOG_WARN(kLog, "client {} sent data on its liveness socket; dropping it", s.id_);
      }
      if (!r && r.error().code() == StatusCode::kTimeout) continue;
      // Deliver what it published before it left, then drop it.
      if (!s.closing_) Deliver(s, SIZE_MAX);

      s.closing_ = true;
    }
  }
  DropStaleHandshakes();
  CloseMarked();
}

void RingServer::DropStaleHandshakes() {
  if (pending_.empty()) return;
  uint64_t now = MonotonicNanos();
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now - it->second.accepted_at > kHandshakeTimeoutNs) {
      GOBLIN_LOG_WARN(kLog, "dropping a connection that did not complete its handshake");
      epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->first, nullptr);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

void RingServer::Accept() {
  for (;;) {
    int fd = accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        GOBLIN_LOG_WARN(kLog, "accept: {}", ErrnoStatus("accept4", errno));
      }
      return;
    }
    Pending p;
    p.sock = UniqueFd(fd);
    p.accepted_at = MonotonicNanos();
    if (auto r = EpollAdd(epoll_.get(), fd, EPOLLIN | EPOLLRDHUP); !r) {
      GOBLIN_LOG_WARN(kLog, "{}", r.error());
      continue;
    }
    pending_.emplace(fd, std::move(p));
  }
}

void RingServer::Reject(int sock, uint16_t code, std::string_view text) {
  ++stats_.rejected;
  uint8_t buf[512];
  wire::ErrorEncoder e(buf, sizeof buf);
  e.set_code(static_cast<wire::ErrorCode>(code)).set_text(text.substr(0, 400));
  size_t n = e.Finish();
  (void)SendFrame(sock, {buf, n});
  GOBLIN_LOG_WARN(kLog, "refused a client: {}", text);
}

void RingServer::ReadHandshake(int fd) {
  Pending& p = pending_.at(fd);
  uint8_t chunk[4096];
  auto drop = [&] {
    epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
    pending_.erase(fd);
  };
  auto n = ReadSome(fd, chunk, nullptr);
  if (!n) {
    if (n.error().code() != StatusCode::kTimeout) drop();
    return;
  }
  if (*n == 0) return drop();
  p.in.insert(p.in.end(), chunk, chunk + *n);
  auto split = sbe::SplitFrame(p.in, kMaxHandshakeBytes);
  if (split.kind == sbe::FrameSplit::Kind::kNeedMore) return;
  if (split.kind != sbe::FrameSplit::Kind::kFrame) {
    Reject(fd, static_cast<uint16_t>(wire::ErrorCode::kInvalidArgument),
           "malformed handshake frame");
    return drop();
  }
  Handshake(fd, split.message);
}

void RingServer::Adopt(UniqueFd sock, std::vector<uint8_t> hello_frame) {
  {
    std::lock_guard<std::mutex> lock(adopt_mu_);
    adopted_.emplace_back(std::move(sock), std::move(hello_frame));
  }
  has_adopted_.store(true, std::memory_order_release);
  adopt_wake_.Notify();
}

void RingServer::TakeAdopted() {
  if (!has_adopted_.exchange(false, std::memory_order_acq_rel)) return;
  std::vector<std::pair<UniqueFd, std::vector<uint8_t>>> taken;
  {
    std::lock_guard<std::mutex> lock(adopt_mu_);
    taken.swap(adopted_);
  }
  for (auto& [sock, frame] : taken) {
    int fd = sock.get();
    if (auto r = EpollAdd(epoll_.get(), fd, EPOLLIN | EPOLLRDHUP); !r) {
      GOBLIN_LOG_WARN(kLog, "{}", r.error());
      continue;
    }
    Pending& p = pending_[fd];
    p.sock = std::move(sock);
    p.accepted_at = MonotonicNanos();
    p.in = std::move(frame);
    auto split = sbe::SplitFrame(p.in, kMaxHandshakeBytes);
    Handshake(fd, split.message);
  }
}

void RingServer::Handshake(int fd, std::span<const uint8_t> frame) {
  Pending& p = pending_.at(fd);
  auto drop = [&] {
    epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
    pending_.erase(fd);
  };
  auto hello = wire::HelloDecoder::Decode(frame);
  if (!hello) {
    Reject(fd, static_cast<uint16_t>(wire::ErrorCode::kInvalidArgument),
           fmt::format("expected Hello: {}", hello.error().message()));
    return drop();
  }
  if (hello->protocol_version() != kProtocolVersion) {
    Reject(fd, static_cast<uint16_t>(wire::ErrorCode::kProtocolVersion),
           fmt::format("protocol version {} is not supported (this core speaks {})",
                       hello->protocol_version(), kProtocolVersion));
    return drop();
  }
  if (hello->shard() >= options_.shard_count) {
    Reject(fd, static_cast<uint16_t>(wire::ErrorCode::kWrongShard),
           fmt::format("shard {} does not exist (this core has {})", hello->shard(),
                       options_.shard_count));
    return drop();
  }
  if (hello->shard() != options_.shard) {
    RingServer* owner = hello->shard() < shards_.size() ? shards_[hello->shard()] : nullptr;
    if (owner == nullptr || owner == this) {
      Reject(
          fd, static_cast<uint16_t>(wire::ErrorCode::kInternal),
          fmt::format("shard {} is not reachable from shard {}", hello->shard(), options_.shard));
      return drop();
    }
    // The connection belongs to that shard's loop from now on.
    epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
    UniqueFd sock = std::move(p.sock);
    std::vector<uint8_t> in = std::move(p.in);
    pending_.erase(fd);
    owner->Adopt(std::move(sock), std::move(in));
    return;
  }
  if (sessions_.size() >= options_.max_clients) {
    Reject(fd, static_cast<uint16_t>(wire::ErrorCode::kResourceExhausted),
           fmt::format("too many clients (limit {})", options_.max_clients));
    return drop();
  }
  uint32_t ring_bytes =
      hello->ring_bytes() == 0 ? options_.default_ring_bytes : hello->ring_bytes();
  if (auto v = ValidateCapacity(ring_bytes); !v || ring_bytes > options_.max_ring_bytes) {
    Reject(fd, static_cast<uint16_t>(wire::ErrorCode::kInvalidArgument),
           fmt::format("ring size {} is not a power of two between {} and {}", ring_bytes,
                       kMinCapacity, options_.max_ring_bytes));
    return drop();
  }
  // Hello flag 1: the client never sleeps, so it needs no doorbell from us.
  WakeMode client_mode = (hello->flags() & 1) ? WakeMode::kBusyPoll : WakeMode::kSpinThenSleep;
  auto channel = RingChannel::Create(ring_bytes, options_.wake, client_mode);
  if (!channel) {
    Reject(fd, static_cast<uint16_t>(wire::ErrorCode::kResourceExhausted),
           channel.error().ToString());
    return drop();
  }
  auto s = std::make_unique<RingSession>();
  s->id_ = next_id_;
  next_id_ += options_.shard_count;
  s->peer_kind_ = static_cast<uint8_t>(hello->peer_kind());
  s->pid_ = hello->pid();
  s->name_ = std::string(hello->client_name());
  s->channel_ = std::move(*channel);
  s->output_limit_ = options_.output_limit;
  s->soft_limit_ = options_.output_soft_limit;
  s->soft_ns_ = static_cast<uint64_t>(options_.output_soft_time.count());

  uint8_t buf[512];
  wire::WelcomeEncoder w(buf, sizeof buf);
  // Welcome flag 1: this loop never sleeps, so the client needs not ring us.
  w.set_protocol_version(kProtocolVersion)
      .set_flags(options_.wake == WakeMode::kBusyPoll ? 1 : 0)
      .set_server_pid(static_cast<uint32_t>(getpid()))
      .set_client_id(s->id_)
      .set_ring_bytes(ring_bytes)
      .set_max_message(s->channel_.max_message())
      .set_shard(options_.shard)
      .set_shard_count(options_.shard_count)
      .set_server_name(options_.server_name)
      .set_shard_addresses("");
  size_t wn = w.Finish();
  int fds[3] = {s->channel_.memfd(), s->channel_.server_doorbell_fd(),
                s->channel_.client_doorbell_fd()};
  // Hand the socket over from pending to the session before anything can fail.
  s->sock_ = std::move(p.sock);
  pending_.erase(fd);
  if (auto r = SendFrame(s->sock_.get(), {buf, wn}, fds); !r) {
    GOBLIN_LOG_WARN(kLog, "welcome to pid {} failed: {}", s->pid_, r.error());
    epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
    return;
  }
  if (auto r = EpollAdd(epoll_.get(), s->channel_.server_doorbell_fd(), EPOLLIN); !r) {
    GOBLIN_LOG_WARN(kLog, "{}", r.error());
    epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
    return;
  }
  ++stats_.accepted;
  uint64_t id = s->id_;
  fd_to_session_[fd] = id;
  fd_to_session_[s->channel_.server_doorbell_fd()] = id;
  RingSession* raw = s.get();
  sessions_.emplace(id, std::move(s));
  active_.push_back(raw);
  GOBLIN_LOG_DEBUG(kLog, "client {} connected: {} pid {} ring {} bytes", id, raw->name_, raw->pid_,
                   ring_bytes);
  handler_->OnOpen(*raw);
}

void RingServer::CloseMarked() {
  bool any = false;
  for (RingSession* s : active_) any |= s->closing_;
  if (!any) return;
  std::vector<uint64_t> ids;
  for (RingSession* s : active_) {
    if (s->closing_) ids.push_back(s->id_);
  }
  for (uint64_t id : ids) CloseSession(id);
}

void RingServer::CloseSession(uint64_t id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  RingSession* s = it->second.get();
  handler_->OnClose(*s);
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s->sock_.get(), nullptr);
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s->channel_.server_doorbell_fd(), nullptr);
  fd_to_session_.erase(s->sock_.get());
  fd_to_session_.erase(s->channel_.server_doorbell_fd());
  std::erase(active_, s);
  ++stats_.closed;
  GOBLIN_LOG_DEBUG(kLog, "client {} closed", id);
  sessions_.erase(it);
}

}  // namespace goblin::ring
