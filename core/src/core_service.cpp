#include "goblin/core/core_service.h"

#include "goblin/common/log.h"
#include "goblin/wire/goblin_wire.h"

namespace goblin::core {

namespace {
constexpr std::string_view kLog = "core";
}

void CoreService::OnOpen(ring::Session& session) {
  ++counters_.sessions_opened;
  GOBLIN_LOG_INFO(kLog, "client {} connected: '{}' pid {}", session.id(), session.name(),
                  session.pid());
}

void CoreService::OnClose(ring::Session& session) {
  ++counters_.sessions_closed;
  GOBLIN_LOG_INFO(kLog, "client {} disconnected", session.id());
}

void CoreService::SendError(ring::Session& session, uint64_t correlation_id, uint16_t code,
                            std::string_view text) {
  wire::ErrorEncoder e(out_, sizeof out_);
  e.set_correlation_id(correlation_id)
      .set_code(static_cast<wire::ErrorCode>(code))
      .set_text(text.substr(0, 512));
  size_t n = e.Finish();
  ++counters_.errors_sent;
  if (session.Send({out_, n}) == ring::SendOutcome::kOverLimit) session.Close();
}

void CoreService::OnMessage(ring::Session& session, std::span<const uint8_t> msg) {
  sbe::MessageHeader h;
  if (!sbe::MessageHeader::Read(msg, &h) || h.schema_id != wire::kSchemaId) {
    ++counters_.malformed;
    SendError(session, 0, static_cast<uint16_t>(wire::ErrorCode::kInvalidArgument),
              "not a Goblin SBE message");
    return;
  }
  switch (h.template_id) {
    case wire::PingDecoder::kTemplateId: {
      wire::PingDecoder ping;
      if (auto e = ping.WrapBody(msg, h.block_length, h.version); e != sbe::DecodeError::kNone) {
        ++counters_.malformed;
        SendError(session, 0, static_cast<uint16_t>(wire::ErrorCode::kInvalidArgument),
                  fmt::format("Ping: {}", sbe::DecodeErrorName(e)));
        return;
      }
      ++counters_.pings;
      wire::PongEncoder pong(out_, sizeof out_);
      pong.set_correlation_id(ping.correlation_id())
          .set_send_nanos(ping.send_nanos())
          .set_payload(ping.payload());
      size_t n = pong.Finish();
      if (n == 0) {
        SendError(session, ping.correlation_id(),
                  static_cast<uint16_t>(wire::ErrorCode::kMessageTooLarge),
                  "ping payload too large");
        return;
      }
      if (session.Send({out_, n}) == ring::SendOutcome::kOverLimit) session.Close();
      return;
    }
    default: {
      // Every request we do not serve yet carries its correlation id first (uint64 at 8).
      uint64_t corr = 0;
      if (msg.size() >= 16 && h.block_length >= 8) corr = sbe::Load<uint64_t>(msg.data() + 8);
      SendError(session, corr, static_cast<uint16_t>(wire::ErrorCode::kUnimplemented),
                fmt::format("{} is not served by this goblin-core yet",
                            wire::TemplateName(h.template_id)));
      return;
    }
  }
}

}  // namespace goblin::core
