#include "goblin/ring/client.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "goblin/common/clock.h"
#include "goblin/ring/unix_socket.h"
#include "goblin/wire/goblin_wire.h"

namespace goblin::ring {

Result<std::unique_ptr<RingClient>> RingClient::Connect(const std::string& socket_path,
                                                        const ClientOptions& options) {
  GOBLIN_RETURN_IF_ERROR(ValidateCapacity(options.ring_bytes));
  std::unique_ptr<RingClient> c(new RingClient());
  c->options_ = options;
  GOBLIN_ASSIGN_OR_RETURN(c->sock_, ConnectUnix(socket_path, options.connect_timeout));

  uint8_t buf[512];
  wire::HelloEncoder hello(buf, sizeof buf);
  hello.set_protocol_version(kProtocolVersion)
      .set_peer_kind(static_cast<wire::PeerKind>(options.peer_kind))
      .set_flags(options.wake == WakeMode::kBusyPoll ? 1 : 0)
      .set_pid(static_cast<uint32_t>(getpid()))
      .set_max_message(MaxPayload(options.ring_bytes))
      .set_ring_bytes(options.ring_bytes)
      .set_shard(options.shard)
      .set_client_name(options.name.substr(0, 200));
  size_t n = hello.Finish();
  GOBLIN_RETURN_IF_ERROR(SendFrame(c->sock_.get(), {buf, n}));

  std::vector<uint8_t> reply;
  std::vector<UniqueFd> fds;
  GOBLIN_RETURN_IF_ERROR_CTX(
      RecvFrame(c->sock_.get(), 64 * 1024, options.connect_timeout, &reply, &fds),
      fmt::format("handshake with {}", socket_path));
  sbe::MessageHeader h;
  if (!sbe::MessageHeader::Read(reply, &h))
    return Err(StatusCode::kCorruption, "short handshake reply");
  if (h.template_id == wire::ErrorDecoder::kTemplateId) {
    auto e = wire::ErrorDecoder::Decode(reply);
    if (!e) return Err(StatusCode::kCorruption, "malformed Error in handshake");
    return Err(StatusCode::kFailedPrecondition, "the core refused the connection: {}", e->text());
  }
  auto w = wire::WelcomeDecoder::Decode(reply);
  if (!w) return Err(w.error().WithContext("handshake"));
  if (w->protocol_version() != kProtocolVersion) {
    return Err(StatusCode::kFailedPrecondition, "the core speaks protocol {}, this client {}",
               w->protocol_version(), kProtocolVersion);
  }
  if (fds.size() != 3) {
    return Err(StatusCode::kCorruption, "the core passed {} file descriptors, expected 3",
               fds.size());
  }
  GOBLIN_ASSIGN_OR_RETURN(
      c->channel_,
      RingChannel::Attach(std::move(fds[0]), std::move(fds[1]), std::move(fds[2]), w->ring_bytes(),
                          options.wake,
                          (w->flags() & 1) ? WakeMode::kBusyPoll : WakeMode::kSpinThenSleep));
  c->client_id_ = w->client_id();
  c->server_pid_ = w->server_pid();
  c->server_name_ = std::string(w->server_name());
  c->shard_ = w->shard();
  c->shard_count_ = w->shard_count() == 0 ? 1 : w->shard_count();
  if (c->shard_ != options.shard) {
    return Err(StatusCode::kCorruption, "asked for shard {}, the core answered for shard {}",
               options.shard, c->shard_);
  }
  return c;
}

SendStatus RingClient::TrySend(std::span<const uint8_t> msg) {
  sbe::MessageHeader h;
  if (!sbe::MessageHeader::Read(msg, &h)) return SendStatus::kTooLarge;  // not a message
  return channel_.TrySend(h.template_id, msg);
}

void RingClient::Commit(uint32_t len) {
  // The record type is the template id of the message just encoded in place.
  uint16_t template_id = sbe::Load<uint16_t>(reserved_ + 2);
  channel_.Complete(len, template_id);
  channel_.Flush();
}

VoidResult RingClient::Send(std::span<const uint8_t> msg, std::chrono::nanoseconds timeout) {
  uint64_t deadline = 0;  // (the clock is read only when the ring is full)
  for (;;) {
    switch (TrySend(msg)) {
      case SendStatus::kOk:
        return {};
      case SendStatus::kTooLarge:
        return Err(StatusCode::kInvalidArgument,
                   "message of {} bytes does not fit a {}-byte ring (at most {} bytes)", msg.size(),
                   ring_bytes(), max_message());
      case SendStatus::kFull:
        break;
    }
    GOBLIN_RETURN_IF_ERROR(CheckAlive());
    uint64_t now = MonotonicNanos();
    if (deadline == 0) deadline = now + static_cast<uint64_t>(timeout.count());
    if (now >= deadline)
      return Err(StatusCode::kTimeout, "the core did not drain the ring in time");
    WaitForRoom(std::chrono::nanoseconds(deadline - now));
  }
}

Result<bool> RingClient::Wait(std::chrono::nanoseconds timeout) {
  if (channel_.HasData()) return true;
  bool woke =
      channel_.Wait(options_.spin, timeout, /*want_space=*/false, sock_.get(), options_.spin_yield);
  if (channel_.HasData()) return true;
  GOBLIN_RETURN_IF_ERROR(CheckAlive());
  return woke && channel_.HasData();
}

VoidResult RingClient::CheckAlive() {
  uint8_t b;
  ssize_t n;
  do {
    n = recv(sock_.get(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return Err(StatusCode::kUnavailable, "the core closed the connection");
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
    return Err(ErrnoStatus("liveness socket", errno));
  }
  return {};
}

VoidResult RingClient::ReceiveSideFrame(std::vector<uint8_t>* msg, std::vector<UniqueFd>* fds,
                                        std::chrono::milliseconds timeout) {
  return RecvFrame(sock_.get(), 64 * 1024, timeout, msg, fds);
}

}  // namespace goblin::ring
