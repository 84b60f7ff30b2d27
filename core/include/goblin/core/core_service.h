// The request handler of goblin-core's ring plane: decodes each SBE request from a client
// session and answers it. Today: session liveness (Ping -> Pong); every other message gets
// an Error(unimplemented) naming it, until the object store and pub/sub engine plug in here.
// Threading: called only from the ring server's loop thread.
#pragma once

#include <cstdint>

#include "goblin/ring/server.h"

namespace goblin::core {

struct CoreCounters {
  uint64_t pings = 0;
  uint64_t errors_sent = 0;
  uint64_t malformed = 0;
  uint64_t sessions_opened = 0;
  uint64_t sessions_closed = 0;
};

class CoreService : public ring::Handler {
 public:
  void OnOpen(ring::Session& session) override;
  void OnMessage(ring::Session& session, std::span<const uint8_t> msg) override;
  void OnClose(ring::Session& session) override;

  const CoreCounters& counters() const { return counters_; }

 private:
  void SendError(ring::Session& session, uint64_t correlation_id, uint16_t code,
                 std::string_view text);

  CoreCounters counters_;
  uint8_t out_[1024];
};

}  // namespace goblin::core
