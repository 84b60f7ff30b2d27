#include "goblin/client/connection.h"

#include "goblin/common/clock.h"
#include "goblin/ring/client.h"
#include "goblin/wire/goblin_wire.h"

namespace goblin::client {

Result<Target> ParseTarget(std::string_view text) {
  if (text.starts_with("unix:"))
    text.remove_prefix(5);
  else if (text.starts_with("ucx://")) {
    if (text.size() == 6)
      return Err(StatusCode::kInvalidArgument, "target '{}' has no host:port", text);
    return Target{Target::Kind::kUcx, std::string(text.substr(6))};
  } else if (!text.starts_with("/") && !text.starts_with(".")) {
    return Err(StatusCode::kInvalidArgument,
               "target '{}' is neither unix:PATH, a socket path, nor ucx://HOST:PORT", text);
  }
  if (text.empty()) return Err(StatusCode::kInvalidArgument, "empty unix socket path");
  return Target{Target::Kind::kUnix, std::string(text)};
}

Connection::~Connection() = default;

Result<std::unique_ptr<Connection>> Connection::Open(std::string_view target_text,
                                                     const ConnectOptions& options) {
  GOBLIN_ASSIGN_OR_RETURN(Target target, ParseTarget(target_text));
  if (target.kind == Target::Kind::kUcx) {
    return Err(StatusCode::kUnimplemented,
               "the UCX plane (ucx://) is not built yet; use unix:PATH");
  }
  std::unique_ptr<Connection> c(new Connection());
  c->options_ = options;
  ring::ClientOptions ro;
  ro.name = options.name;
  ro.ring_bytes = options.ring_bytes;
  ro.peer_kind = static_cast<uint8_t>(wire::PeerKind::kClient);
  ro.connect_timeout = options.timeout;
  GOBLIN_ASSIGN_OR_RETURN(c->ring_, ring::RingClient::Connect(target.address, ro));
  return c;
}

uint64_t Connection::client_id() const { return ring_->client_id(); }
uint32_t Connection::server_pid() const { return ring_->server_pid(); }
uint32_t Connection::max_message() const { return ring_->max_message(); }

Result<std::vector<uint8_t>> Connection::AwaitReply(uint64_t correlation_id) {
  const uint64_t deadline =
      MonotonicNanos() + static_cast<uint64_t>(options_.timeout.count()) * 1'000'000;
  std::vector<uint8_t> reply;
  bool done = false;
  while (!done) {
    uint64_t now = MonotonicNanos();
    if (now >= deadline) return Err(StatusCode::kTimeout, "no reply from goblin-core in time");
    GOBLIN_ASSIGN_OR_RETURN(bool ready, ring_->Wait(std::chrono::nanoseconds(deadline - now)));
    if (!ready) continue;
    GOBLIN_RETURN_IF_ERROR(ring_->Poll([&](std::span<const uint8_t> m) {
      if (done || m.size() < 16) return;
      if (sbe::Load<uint64_t>(m.data() + 8) != correlation_id) return;  // not ours: stale
      reply.assign(m.begin(), m.end());
      done = true;
    }));
  }
  sbe::MessageHeader h;
  sbe::MessageHeader::Read(reply, &h);
  if (h.template_id == wire::ErrorDecoder::kTemplateId) {
    auto e = wire::ErrorDecoder::Decode(reply);
    if (!e) return Err(StatusCode::kCorruption, "malformed Error reply");
    return Err(StatusCode::kFailedPrecondition, "goblin-core: {} ({})", e->text(),
               ToString(e->code()));
  }
  return reply;
}

Result<std::chrono::nanoseconds> Connection::Ping(std::string_view payload) {
  uint64_t id = next_correlation_++;
  std::vector<uint8_t> buf(64 + payload.size());
  wire::PingEncoder e(buf.data(), buf.size());
  uint64_t start = MonotonicNanos();
  size_t n = e.set_correlation_id(id).set_send_nanos(start).set_payload(payload).Finish();
  if (n == 0)
    return Err(StatusCode::kInvalidArgument, "ping payload of {} bytes is too large",
               payload.size());
  GOBLIN_RETURN_IF_ERROR(ring_->Send({buf.data(), n}, options_.timeout));
  GOBLIN_ASSIGN_OR_RETURN(auto reply, AwaitReply(id));
  uint64_t end = MonotonicNanos();
  auto pong = wire::PongDecoder::Decode(reply);
  if (!pong) return Err(pong.error());
  if (pong->payload() != payload)
    return Err(StatusCode::kCorruption, "pong payload differs from ping");
  return std::chrono::nanoseconds(end - start);
}

}  // namespace goblin::client
