#include "core_link.h"

#include <sys/epoll.h>
#include <sys/mman.h>

#include <algorithm>

#include "epoll_ctl.h"
#include "goblin/common/clock.h"
#include "goblin/common/log.h"
#include "goblin/wire/goblin_wire.h"

namespace goblin::gateway {
namespace {
constexpr std::string_view kLog = "core-link";

}  // namespace

Result<std::unique_ptr<CoreLink>> CoreLink::Connect(const CoreLinkOptions& options, int epoll_fd,
                                                    uint64_t bell_tag, uint64_t socket_tag) {
  std::unique_ptr<CoreLink> l(new CoreLink(options));
  l->epoll_ = epoll_fd;
  l->bell_tag_ = bell_tag;
  l->socket_tag_ = socket_tag;
  GOBLIN_RETURN_IF_ERROR(l->Open(std::chrono::seconds(5)));
  l->backoff_ = options.min_backoff;
  return l;
}

CoreLink::~CoreLink() {
  if (client_) {
    epoll_ctl(epoll_, EPOLL_CTL_DEL, client_->doorbell_fd(), nullptr);
    epoll_ctl(epoll_, EPOLL_CTL_DEL, client_->socket_fd(), nullptr);
  }
}

VoidResult CoreLink::Open(std::chrono::milliseconds timeout) {
  ring::ClientOptions co;
  co.name = options_.name;
  co.ring_bytes = options_.ring_bytes;
  co.peer_kind = static_cast<uint8_t>(wire::PeerKind::kGateway);
  co.connect_timeout = timeout;
  GOBLIN_ASSIGN_OR_RETURN(client_, ring::RingClient::Connect(options_.socket_path, co));
  auto fail = [&](Status s) {
    client_.reset();
    return goblin::Err(std::move(s));
  };
  if (options_.map_pools) {
    if (auto r = MapPools(timeout); !r) return fail(r.error());
  }
  if (auto r = EpollAdd(epoll_, client_->doorbell_fd(), EPOLLIN, bell_tag_); !r)
    return fail(r.error());
  if (auto r = EpollAdd(epoll_, client_->socket_fd(), EPOLLIN | EPOLLRDHUP, socket_tag_); !r) {
    epoll_ctl(epoll_, EPOLL_CTL_DEL, client_->doorbell_fd(), nullptr);
    return fail(r.error());
  }
  max_message_ = client_->max_message();
  if (encode_buf_.size() < max_message_) encode_buf_ = ByteBuffer(max_message_);
  ++epoch_;
  if (pools_) pools_->epoch = epoch_;
  ++stats_.connects;
  return {};
}

VoidResult CoreLink::MapPools(std::chrono::milliseconds timeout) {
  uint8_t buf[64];
  size_t n = wire::MapPoolsEncoder(buf, sizeof buf).set_correlation_id(0).Finish();
  GOBLIN_RETURN_IF_ERROR(client_->Send({buf, n}, timeout));
  bool got = false;
  Status err;
  const uint64_t end =
      MonotonicNanos() + static_cast<uint64_t>(std::chrono::nanoseconds(timeout).count());
  while (!got && err.ok() && MonotonicNanos() < end) {
    GOBLIN_RETURN_IF_ERROR(client_->Wait(std::chrono::milliseconds(10)));
    GOBLIN_RETURN_IF_ERROR(client_->Poll([&](std::span<const uint8_t> msg) {
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
  GOBLIN_RETURN_IF_ERROR(client_->ReceiveSideFrame(&side, &fds, timeout));
  auto map = wire::PoolMapDecoder::Decode(side);
  if (!map) return goblin::Err(map.error());
  auto p = std::make_unique<Pools>();
  size_t i = 0;
  for (auto pool : map->pools()) {
    if (i >= fds.size()) break;
    int fd = fds[i++].get();
    Mapping* m = pool.pool() == wire::PoolKind::kHead ? &p->head
                 : pool.pool() == wire::PoolKind::kIo ? &p->io
                                                      : nullptr;
    if (m == nullptr) continue;  // (the head table: for one-sided readers)
    GOBLIN_ASSIGN_OR_RETURN(*m,
                            Mapping::MapShared(fd, pool.bytes(), PROT_READ, "goblin-core pool"));
  }
  if (!p->head || !p->io) return goblin::Err(StatusCode::kCorruption, "PoolMap without both pools");
  pools_ = std::move(p);
  return {};
}

void CoreLink::GoDown(const Status& why) {
  if (!client_) return;
  GOBLIN_LOG_ERROR(kLog, "{}: goblin-core went away ({}); reconnecting", options_.name, why);
  epoll_ctl(epoll_, EPOLL_CTL_DEL, client_->doorbell_fd(), nullptr);
  epoll_ctl(epoll_, EPOLL_CTL_DEL, client_->socket_fd(), nullptr);
  client_.reset();
  queue_.clear();
  queued_bytes_ = 0;
  if (pools_) {
    pools_->retired = true;
    if (pools_->holds > 0) retired_.push_back(std::move(pools_));
    pools_.reset();
  }
  ++stats_.disconnects;
  backoff_ = options_.min_backoff;
  reconnect_at_ =
      MonotonicNanos() + static_cast<uint64_t>(std::chrono::nanoseconds(backoff_).count());
  if (on_down_) on_down_();
}

void CoreLink::Tick(uint64_t now) {
  if (client_ || now < reconnect_at_) return;
  if (auto r = Open(std::chrono::seconds(1)); !r) {
    if (stats_.reconnect_failures++ % 20 == 0) {
      GOBLIN_LOG_WARN(kLog, "{}: goblin-core is still unavailable: {}", options_.name, r.error());
    }
    backoff_ = std::min(options_.max_backoff, backoff_ * 2);
    reconnect_at_ = now + static_cast<uint64_t>(std::chrono::nanoseconds(backoff_).count());
    return;
  }
  GOBLIN_LOG_INFO(kLog, "{}: goblin-core is back (connection {})", options_.name, epoch_);
  backoff_ = options_.min_backoff;
  if (on_up_) on_up_();
}

int CoreLink::MillisUntilReconnect(uint64_t now) const {
  if (client_) return -1;
  if (now >= reconnect_at_) return 0;
  return static_cast<int>((reconnect_at_ - now + 999'999) / 1'000'000);
}

CoreLink::SendResult CoreLink::SendEncoded(std::span<const uint8_t> msg, bool bounded) {
  if (!client_) return SendResult::kDown;
  if (queue_.empty()) {
    switch (client_->TrySend(msg)) {
      case ring::SendStatus::kOk:
        return SendResult::kSent;
      case ring::SendStatus::kTooLarge:
        return SendResult::kTooLarge;
      default:
        break;
    }
  }
  if (bounded && queued_bytes_ > options_.queue_limit) {
    ++stats_.refused_busy;
    return SendResult::kBusy;
  }
  queue_.emplace_back(msg.begin(), msg.end());  // the ring is full: keep the order
  queued_bytes_ += msg.size();
  return SendResult::kQueued;
}

CoreLink::SendResult CoreLink::Send(FunctionRef<size_t(uint8_t*, size_t)> encode,
                                    size_t max_bytes) {
  if (!client_) return SendResult::kDown;
  size_t cap = std::min<size_t>(encode_buf_.size(), std::max<size_t>(max_bytes, 64));
  size_t n = encode(encode_buf_.data(), cap);
  if (n == 0 || n > max_message_) return SendResult::kTooLarge;
  return SendEncoded({encode_buf_.data(), n}, true);
}

CoreLink::SendResult CoreLink::SendAlways(FunctionRef<size_t(uint8_t*, size_t)> encode,
                                          size_t max_bytes) {
  if (!client_) return SendResult::kDown;
  size_t cap = std::min<size_t>(encode_buf_.size(), std::max<size_t>(max_bytes, 64));
  size_t n = encode(encode_buf_.data(), cap);
  if (n == 0 || n > max_message_) return SendResult::kTooLarge;
  return SendEncoded({encode_buf_.data(), n}, false);
}

bool CoreLink::Flush() {
  if (!client_) return false;
  bool any = false;
  while (!queue_.empty() && client_->TrySend(queue_.front()) == ring::SendStatus::kOk) {
    queued_bytes_ -= queue_.front().size();
    queue_.pop_front();
    any = true;
  }
  return any;
}

size_t CoreLink::Poll(FunctionRef<void(std::span<const uint8_t>)> fn, size_t max) {
  if (!client_) return 0;
  auto n = client_->Poll([&](std::span<const uint8_t> m) { fn(m); }, max);
  if (!n) {
    GoDown(n.error());
    return 0;
  }
  return *n;
}

void CoreLink::OnSocketEvent() {
  if (!client_) return;
  if (auto r = client_->CheckAlive(); !r) GoDown(r.error());
}

void CoreLink::ReturnLoan(uint64_t loan_id) {
  SendAlways(
      [&](uint8_t* b, size_t cap) {
        return wire::LoanReleaseEncoder(b, cap).set_loan_id(loan_id).Finish();
      },
      32);
}

void CoreLink::ReleaseLoan(uint64_t loan_id, Pools* p) {
  if (p == nullptr) return;
  --p->holds;
  if (!p->retired) return ReturnLoan(loan_id);
  if (p->holds == 0) {
    retired_.remove_if([p](const std::unique_ptr<Pools>& r) { return r.get() == p; });
  }
}

}  // namespace goblin::gateway
