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

  // Payloads a client sent by reference (the trailing, empty varData32 of `header` stands
  // for `length` bytes the transport receives by rendezvous; over verbs an RDMA read):
  // PlacePayload may lend the memory they belong in (a fill's disk buffer), so they land
  // there and are not copied again. The transport then calls OnPlacedMessage instead of
  // OnMessage, in the session's order, with `payload` the lent memory, and
  // ReleasePlacement(token) exactly once when it no longer writes there (after
  // OnPlacedMessage, or instead of it when the receive failed or the session went).
  // PlacePayload runs inside the transport's progress: it must not send.
  struct Placement {
    uint8_t* at = nullptr;
    uint64_t token = 0;
  };
  virtual bool PlacePayload(Session&, std::span<const uint8_t> header, uint32_t length,
                            Placement* out) {
    (void)header, (void)length, (void)out;
    return false;
  }
  virtual void OnPlacedMessage(Session&, std::span<const uint8_t> header,
                               std::span<const uint8_t> payload) {
    (void)header, (void)payload;
  }
  virtual void ReleasePlacement(uint64_t token) { (void)token; }
};

}  // namespace goblin::reactor
