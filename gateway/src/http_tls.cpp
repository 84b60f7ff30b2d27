// The HTTP front's HTTPS connections: the TLS handshake, reading requests through the
// session, and writing responses through it where the kernel does not encrypt them (no
// kTLS). See http_server_impl.h; TLS itself (certificates, SNI, ALPN, kTLS) in tls.h.
#include <sys/epoll.h>

#include <algorithm>
#include <atomic>

#include "epoll_ctl.h"
#include "goblin/common/clock.h"
#include "goblin/common/log.h"
#include "http_server_impl.h"

namespace goblin::gateway {
namespace {
constexpr std::string_view kLog = "http";
// A TLS record's largest plaintext: one user-space write encrypts at most this.
constexpr size_t kTlsRecord = 16 << 10;
using Io = TlsSession::Io;

// Said once per process: the first connection that got no kTLS.
void NoteUserSpaceTls(std::string_view version) {
  static std::atomic<bool> said{false};
  if (said.exchange(true, std::memory_order_relaxed)) return;
  GOBLIN_LOG_WARN(kLog,
                  "kTLS is not available for {} on this kernel (no tls module?): HTTPS "
                  "responses are encrypted in user space (a copy per byte)",
                  version);
}
}  // namespace

void HttpServer::Impl::OnTlsReadable(Conn& c) {
  c.tls_read_wants_write = false;
  if (!c.tls_ready) {
    switch (c.tls.Handshake()) {
      case Io::kOk:
        break;
      case Io::kWantRead:
        UpdateEpoll(c);
        return;
      case Io::kWantWrite:
        c.tls_read_wants_write = true;
        UpdateEpoll(c);
        return;
      case Io::kClosed:
        Close(c);
        return;
      case Io::kError:
        ++stats_.tls_failed;
        GOBLIN_LOG_DEBUG(kLog, "TLS handshake with {} failed: {}", c.peer, c.tls.TakeError());
        Close(c);
        return;
    }
    c.tls_ready = true;
    c.last_active = MonotonicNanos();
    ++stats_.tls_handshakes;
    stats_.tls_resumed += c.tls.resumed() ? 1 : 0;
    c.tls_kernel_send = c.tls.ktls_send();
    stats_.ktls_send += c.tls_kernel_send ? 1 : 0;
    stats_.ktls_recv += c.tls.ktls_recv() ? 1 : 0;
    if (!c.tls_kernel_send) NoteUserSpaceTls(c.tls.version());
    c.h2_checked = true;
    if (options_.http2 && c.tls.alpn() == "h2") StartH2(c);
    if (c.closed) return;
  }
  // A read takes at most one record (16 KiB) from the socket and this buffer holds more,
  // so nothing readable stays inside the session when it stops: level-triggered epoll
  // reports whatever is left, as for a plain socket.
  char buf[kRecvBytes];
  for (;;) {
    size_t n = 0;
    Io io = c.tls.Read(buf, sizeof buf, &n);
    if (io == Io::kOk) {
      c.in.append(buf, n);
      c.last_active = MonotonicNanos();
      if (c.in.size() > options_.limits.max_header_bytes * 4 && c.ex) break;  // pipelined: enough
      continue;
    }
    if (io == Io::kWantRead) break;
    if (io == Io::kWantWrite) {
      c.tls_read_wants_write = true;
      break;
    }
    if (io == Io::kClosed) {
      // The peer finished sending: answer what it sent, then close.
      c.reading = false;
      (void)EpollCtl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), c.epollout ? uint32_t{EPOLLOUT} : 0u,
                     c.id);
      break;
    }
    GOBLIN_LOG_DEBUG(kLog, "TLS read from {}: {}", c.peer, c.tls.TakeError());
    Close(c);
    return;
  }
  UpdateEpoll(c);
  ProcessRequests(c);
  if (!c.closed && !c.reading && !c.ex && c.out.empty()) Close(c);
}

bool HttpServer::Impl::FlushTls(Conn& c, size_t budget, bool once) {
  size_t written = 0;
  while (!c.out.empty()) {
    if (written >= budget) {                         // others' turn: the rest in the next round
      if (!c.epollout) next_round_.push_back(c.id);  // (else its EPOLLOUT brings it back)
      return false;
    }
    const Piece& front = c.out.front();
    const uint8_t* base =
        front.owned.empty() ? front.ptr : reinterpret_cast<const uint8_t*>(front.owned.data());
    const size_t rest = (front.owned.empty() ? front.len : front.owned.size()) - c.first_off;
    // One record: straight from the first piece when it fills one (or is alone, or is a
    // local head, checked before anything after it goes); else small pieces gathered.
    // A write retried after a full socket passes the same bytes again: the queue's front
    // has not moved since.
    size_t len = c.tls_retry != 0 ? c.tls_retry : std::min(rest, kTlsRecord);
    const uint8_t* p = base + c.first_off;
    const bool gather =
        c.tls_retry != 0 ? len > rest : rest < kTlsRecord && c.out.size() > 1 && front.stamp == 0;
    if (gather) {
      const size_t want = c.tls_retry != 0 ? c.tls_retry : kTlsRecord;
      c.tls_stage.clear();
      size_t off = c.first_off;
      for (size_t i = 0; i < c.out.size() && c.tls_stage.size() < want; ++i) {
        const Piece& it = c.out[i];
        const char* b = it.owned.empty() ? reinterpret_cast<const char*>(it.ptr) : it.owned.data();
        size_t n = std::min((it.owned.empty() ? it.len : it.owned.size()) - off,
                            want - c.tls_stage.size());
        c.tls_stage.append(b + off, n);
        off = 0;
        if (it.stamp != 0) break;
      }
      p = reinterpret_cast<const uint8_t*>(c.tls_stage.data());
      len = c.tls_stage.size();
    }
    size_t n = 0;
    switch (c.tls.Write(p, len, &n)) {
      case Io::kOk:
        c.tls_retry = 0;
        break;
      case Io::kWantWrite:
      case Io::kWantRead:  // (no renegotiation: not expected; wait for the socket anyway)
        c.tls_retry = len;
        c.write_blocked = true;
        return true;
      case Io::kClosed:
      case Io::kError:
        GOBLIN_LOG_DEBUG(kLog, "TLS write to {}: {}", c.peer, c.tls.TakeError());
        Close(c);
        return false;
    }
    written += n;
    c.response_sent += n;
    if (!Advance(c, n)) {
      Close(c);
      return false;
    }
    if (once) {
      dirty_.push_back(&c);  // (the rest at the end of this round)
      return true;
    }
  }
  return true;
}

}  // namespace goblin::gateway
