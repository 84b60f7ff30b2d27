// The engine's side of the reactor: what a shard does with its sessions' messages
// (goblin-core's CoreService implements it). Transports call it; it never knows which one
// carries a session.
// Threading: every call on the loop thread of the reactor that serves the sessions.
#pragma once

#include <cstdint>
#include <span>

#include "goblin/reactor/session.h"

namespace goblin::reactor {

class Handler {
 public:
  virtual ~Handler() = default;
  virtual void OnOpen(Session&) {}
  // `msg` is a private copy of the client's record (the ring is shared memory a client
  // could rewrite while we parse); it is valid during the call only.
  virtual void OnMessage(Session& session, std::span<const uint8_t> msg) = 0;
  virtual void OnClose(Session&) {}
  // The session asked for it (WantWritable) and its output queue is empty: send more.
  // Called from the loop after every poll round; send until Send() says kQueued.
  virtual void OnWritable(Session&) {}
  // Called once per loop round (and after every wake-up) for the handler's own work, such
  // as disk completions; returns the units of work done (0 lets the loop go idle).
  virtual size_t OnPoll() { return 0; }
  // The longest the loop may sleep before OnPoll runs again (-1: until an event), e.g. for
  // the handler's own timers.
  virtual int max_sleep_ms() const { return -1; }
  // The transport no longer reads the payload of SendWithPayload(..., token).
  virtual void OnPayloadSent(Session&, uint64_t token) { (void)token; }
};

}  // namespace goblin::reactor
