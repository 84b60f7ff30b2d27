// A client of goblin-core as the engine sees it, whatever carries its messages: a ring
// session (ring/: shared-memory rings plus a liveness socket) or a UCX endpoint (verbs/).
// The transport owns the session and implements sending; the Handler (handler.h) sees
// only this interface.
// Threading: the loop thread of the reactor that serves it (loop.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "goblin/common/status.h"

namespace goblin::reactor {

enum class SendOutcome : uint8_t {
  kSent,       // handed to the transport (in the client's ring, or sent)
  kQueued,     // no room now: queued in the session's bounded output buffer
  kTooLarge,   // larger than the transport can ever carry: not sent
  kOverLimit,  // output buffer limit reached: not sent (the client is too slow)
};

class Session {
 public:
  virtual ~Session() = default;
  uint64_t id() const { return id_; }
  uint8_t peer_kind() const { return peer_kind_; }
  uint32_t pid() const { return pid_; }
  const std::string& name() const { return name_; }
  // The largest message Send() takes.
  virtual uint32_t max_message() const = 0;
  // Bytes accepted by Send() that have not reached the client's side yet.
  virtual size_t queued_bytes() const = 0;

  // Sends one SBE message (record type = its template id).
  virtual SendOutcome Send(std::span<const uint8_t> msg) = 0;
  // Drops the session after the current callback returns.
  void Close() {
    closing_ = true;
    Attend();
  }
  bool closing() const { return closing_; }
  // The Handler's own state for this session (set in OnOpen, cleared in OnClose): reached
  // without a lookup by id on every message. The transport never touches it.
  void* handler_data() const { return handler_data_; }
  void set_handler_data(void* data) { handler_data_ = data; }
  // Whether the client shares this host's memory (may map the core's pools read-only).
  virtual bool local() const { return false; }
  // Sends a frame with `fds` on the session's socket (not the ring): shared-memory fds for
  // zero-copy reads. Announce it with a ring message; the client then reads it. Only for
  // local() sessions.
  virtual VoidResult SendSideFrame(std::span<const uint8_t> msg, std::span<const int> fds);
  // Asks for Handler::OnWritable whenever this session's output queue is empty (for
  // streaming large responses at the pace the client reads them).
  void WantWritable(bool want) {
    const bool wake = want && !want_writable_;
    want_writable_ = want;
    if (wake) Attend();
  }
  bool wants_writable() const { return want_writable_; }

  // Zero-copy sends, for transports that can send from memory the caller keeps valid (the
  // UCX plane): `header` is an SBE message whose last field is an empty varData32, and
  // `payload` becomes that field's bytes on the client's side. The caller keeps `payload`
  // valid until Handler::OnPayloadSent(session, token), or releases it at once when the
  // result says `done`.
  virtual bool sends_by_reference() const { return false; }
  // A remote session's key for one-sided reads of [base, base + bytes) (memory the
  // transport registered), packed for the client; Unimplemented where there is none.
  virtual Result<std::vector<uint8_t>> PackRemoteKey(const void* base, size_t bytes);
  struct PayloadSend {
    SendOutcome outcome = SendOutcome::kTooLarge;
    bool done = true;
  };
  virtual PayloadSend SendWithPayload(std::span<const uint8_t> header,
                                      std::span<const uint8_t> payload, uint64_t token);

 protected:
  // The session now needs its transport's attention (it is closing, or wants OnWritable): for
  // a transport that looks each round only at sessions that asked (the UCX plane), not at all.
  virtual void Attend() {}

  uint64_t id_ = 0;
  uint8_t peer_kind_ = 0;
  uint32_t pid_ = 0;
  std::string name_;
  bool closing_ = false;
  bool want_writable_ = false;
  void* handler_data_ = nullptr;
};

}  // namespace goblin::reactor
