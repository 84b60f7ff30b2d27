// The HTTP front's client connections: accept, read and parse requests, dispatch them,
// queue and write responses (--net sync: epoll readiness and writev; --net async: NetRing),
// and close. See http_server_impl.h.
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "epoll_ctl.h"
#include "goblin/common/clock.h"
#include "goblin/common/config.h"
#include "goblin/common/log.h"
#include "goblin/gateway/cache_policy.h"
#include "http_server_impl.h"
#include "tcp_listen.h"

namespace goblin::gateway {
namespace {
constexpr std::string_view kLog = "http";

}  // namespace

using detail::ErrorBody;
using detail::Reason;

void HttpServer::Impl::Accept(int listen_fd, bool tls) {
  const bool neighbours = listen_fd != listen_.get() && listen_fd != tls_listen_.get();
  for (;;) {
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    int fd =
        accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (conns_.size() >= options_.max_clients) {
      close(fd);
      continue;
    }
    if (same_host_send_buffer_ > 0 && PeerOnThisHost(fd, peer) &&
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &same_host_send_buffer_,
                   sizeof same_host_send_buffer_) == 0) {
      ++stats_.same_host_buffers;
    }
    std::unique_ptr<Conn> c;  // (TCP_NODELAY comes from the listener)
    if (!spare_conns_.empty()) {
      c = std::move(spare_conns_.back());
      spare_conns_.pop_back();
    } else {
      c = std::make_unique<Conn>();
    }
    c->id = next_tag_++;
    c->fd = UniqueFd(fd);
    char ip[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip);
    c->peer = ip;
    c->last_active = MonotonicNanos();
    if (tls) {
      auto session = options_.tls->Accept(fd);
      if (!session) {
        GOBLIN_LOG_WARN(kLog, "TLS: {}", session.error());
        c->fd.Reset();
        continue;
      }
      c->tls = std::move(*session);
    }
    if (async_ && c->uses_ring()) {
      if (!c->rbuf) c->rbuf = std::make_unique<char[]>(kRecvBytes);
      Conn& ref = *c;
      conns_.emplace(c->id, std::move(c));
      ++stats_.accepted;
      stats_.accepted_for_neighbour += neighbours;
      PostRecv(ref);
      continue;
    }
    if (!EpollCtl(epoll_.get(), EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLRDHUP, c->id)) continue;
    ++stats_.accepted;
    stats_.accepted_for_neighbour += neighbours;
    Conn& ref = *c;
    conns_.emplace(c->id, std::move(c));
    // Accepted once its first bytes arrived (TCP_DEFER_ACCEPT): read and answer them now.
    OnReadable(ref);
  }
}

void HttpServer::Impl::OnReadable(Conn& c) {
  if (c.tls) return OnTlsReadable(c);
  char buf[kRecvBytes];
  for (;;) {
    ssize_t n = read(c.fd.get(), buf, sizeof buf);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      c.last_active = MonotonicNanos();
      if (c.in.size() > options_.limits.max_header_bytes * 4 && c.ex) break;  // pipelined: enough
      // Less than asked for: the socket is drained (its readiness is level-triggered, so
      // anything that arrives after this read is reported again): no read just for EAGAIN.
      if (static_cast<size_t>(n) < sizeof buf) break;
      continue;
    }
    if (n == 0) {
      // The peer finished sending: answer what it sent, then close.
      c.reading = false;
      (void)EpollCtl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), c.epollout ? uint32_t{EPOLLOUT} : 0u,
                     c.id);
      break;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      Close(c);
      return;
    }
    if (errno == EINTR) continue;
    break;
  }
  ProcessRequests(c);
  // A peer that finished sending is closed once everything it asked for is answered.
  if (!c.reading && !c.ex && c.out.empty()) Close(c);
}

void HttpServer::Impl::ProcessRequests(Conn& c) {
  if (c.h2) return H2Receive(c);
  if (!c.h2_checked && !c.in.empty()) {
    // A plain connection opening with HTTP/2's preface speaks h2c (prior knowledge).
    const size_t n = std::min(c.in.size(), kH2Preface.size());
    if (options_.http2 && !c.tls &&
        std::string_view(c.in).substr(0, n) == kH2Preface.substr(0, n)) {
      if (n < kH2Preface.size()) return;  // (the rest of it is on the way)
      StartH2(c);
      if (c.h2) H2Receive(c);
      return;
    }
    c.h2_checked = true;
  }
  while (!c.closed && !c.ex && !c.close_after && !c.in.empty()) {
    // (one Request for every parse: its header vector keeps its capacity; nothing reads it
    // once the request is dispatched, so a nested ProcessRequests may reuse it)
    http::Request& r = request_;
    int status = 400;
    auto p = http::ParseRequest(c.in, options_.limits, &r, &status);
    if (p == http::Parse::kNeedMore) return;
    if (p == http::Parse::kError) {
      ++stats_.bad_requests;
      c.close_after = true;
      Respond(c, status, fmt::format("{} {}\n", status, Reason(status)), "Connection: close\r\n");
      return;
    }
    // Bodies: proxied methods may carry one with a Content-Length up to --max-body (the
    // whole body is read before the request goes to the origin); chunked request bodies
    // are refused with 411.
    uint64_t body = r.framing.content_length.value_or(0);
    if (r.framing.chunked) {
      ++stats_.bad_requests;
      c.close_after = true;
      Respond(c, 411, "411 Length Required: send a Content-Length\n", "Connection: close\r\n");
      return;
    }
    if (body > options_.max_body) {
      ++stats_.bad_requests;
      c.close_after = true;
      Respond(c, 413, fmt::format("413 Content Too Large (limit {} bytes)\n", options_.max_body),
              "Connection: close\r\n");
      return;
    }
    if (c.in.size() < r.head_bytes + body) return;  // wait for the whole body
    if (body == 0 && UpgradeToH2(c, r)) return;
    ++stats_.requests;
    BuildExchange(c, r);  // copies what it needs out of the buffer
    c.ex->body = c.in.substr(r.head_bytes, body);
    // The request leaves the buffer before it is answered (an answer may start the next
    // pipelined request).
    c.in.erase(0, r.head_bytes + body);
    Dispatch(c);
  }
}

void HttpServer::Impl::BuildExchange(Conn& c, const http::Request& r) {
  // The connection's last exchange, when there is one: its strings keep their capacity.
  std::unique_ptr<Exchange> ex = c.spare_ex ? std::move(c.spare_ex) : std::make_unique<Exchange>();
  ex->Reset();
  ex->method.assign(r.method);
  ex->target.assign(r.target);
  ex->host.assign(r.Get("host"));
  detail::LowerInPlace(&ex->host);
  if (options_.cache_key.plain()) {
    ex->key.assign(ex->host).append(ex->target);  // Varnish's default hash: Host + URL
  } else {
    policy::BuildCacheKey(&ex->key, ex->host, ex->target, options_.cache_key, r, &key_scratch_);
    for (const std::string& h : options_.cache_key.headers) {
      // (the origin request's own fields are not the client's to set)
      if (h == "host" || h == "range" || h == "content-length" || h == "transfer-encoding" ||
          h == "connection" || h == "te" || h == "upgrade")
        continue;
      std::string_view v = r.Get(h);
      if (!v.empty()) ex->key_lines.append(h).append(": ").append(v).append("\r\n");
    }
  }
  ex->range.assign(r.Get("range"));
  ex->inm.assign(r.Get("if-none-match"));
  ex->ims.assign(r.Get("if-modified-since"));
  ex->keep_alive = r.keep_alive;
  ex->minor0 = r.minor == 0;
  ex->head = r.method == "HEAD";
  if (!ex->keep_alive) c.close_after = true;
  if (ex->method == "PURGE") {  // (its headers are looked for in PURGEs only)
    ex->purge_token_ok =
        !options_.purge_token.empty() && r.Get("x-purge-token") == options_.purge_token;
    ex->purge_mode.assign(r.Get("x-purge"));
    detail::LowerInPlace(&ex->purge_mode);
    ex->purge_soft = r.Get("x-purge-soft") == "1";
    for (const http::Header& h : r.headers) {
      if (!http::IEquals(h.name, "x-purge-tag") && !http::IEquals(h.name, "xkey-purge")) continue;
      for (std::string& t : policy::PurgeTags(h.value)) ex->purge_tags.push_back(std::move(t));
    }
  }
  ex->content_type_in.assign(r.Get("content-type"));
  if (log_ != nullptr || options_.timing) {
    ex->start_ns = MonotonicNanos();
    ex->start_unix = static_cast<int64_t>(detail::NowSeconds());
    ex->log_begin = c.written_total + c.out_bytes;
    if (log_ != nullptr) {
      ex->user_agent.assign(r.Get("user-agent"));
      ex->referer.assign(r.Get("referer"));
    }
  }
  c.ex = std::move(ex);
}

void HttpServer::Impl::Dispatch(Conn& c) {
  Exchange& e = *c.ex;
  if (e.method == "PURGE") {
    e.cache = "PURGE";
    return Purge(c);
  }
  if (e.method != "GET" && e.method != "HEAD") {
    // Other methods go to the origin, uncached.
    ++stats_.passes;
    e.cache = "PASS";
    Origin* o = OpenOrigin(e.method, e.target, "", e.key_lines, e.content_type_in, e.body);
    if (o == nullptr) {
      const OriginFault why = OpenFault();
      return Fail(c, detail::StatusFor(why), detail::Describe(why));
    }
    o->pass_conn = c.id;
    e.state = ExState::kOrigin;
    return;
  }
  if (!core_->up()) {
    ++stats_.core_unavailable;
    return Respond(c, 503, ErrorBody(503, "goblin-core is unavailable"), "Retry-After: 1\r\n");
  }
  // (HTTP/2 streams: from the core, whose pieces the frames lend)
  if (options_.local_hits && e.range.empty() && c.h2_parent == 0 && ServeLocal(c)) return;
  LookUp(c);
}

void HttpServer::Impl::LookUp(Conn& c) {
  Exchange& e = *c.ex;
  e.state = ExState::kLookup;
  // Plain GETs ask for the body at once (the best first byte); the rest look first.
  e.via_head_lookup = e.head || !e.range.empty() || !e.inm.empty() || !e.ims.empty();
  if (e.via_head_lookup) {
    CoreHead(c);
  } else {
    CoreGet(c, 0, UINT64_MAX, /*follow=*/true);
  }
}

void HttpServer::Impl::Respond(Conn& c, int status, std::string_view body, std::string_view extra) {
  const uint64_t begin = c.written_total + c.out_bytes;  // (the access log's, without an exchange)
  std::string head = fmt::format(
      "HTTP/1.1 {} {}\r\nDate: {}\r\nServer: goblin\r\nContent-Type: text/plain\r\nContent-Length: "
      "{}\r\n{}{}\r\n",
      status, Reason(status), HttpDate(), body.size(), extra,
      c.close_after ? "Connection: close\r\n" : "");
  const size_t head_len = head.size();
  Write(c, head + std::string(c.ex && c.ex->head ? std::string_view() : body), true);
  if (!c.ex) LogBadRequest(c, status, begin, head_len);
  FinishExchange(c);
}

void HttpServer::Impl::Fail(Conn& c, int status, std::string_view why) {
  c.close_after = true;
  if (c.ex && !c.ex->head_sent) {
    Respond(c, status, ErrorBody(status, why));
    return;
  }
  // Headers are out: closing mid-body is the only honest signal.
  CancelCoreGet(c);
  LogExchange(c);
  c.ex.reset();
  dirty_.push_back(&c);
}

void HttpServer::Impl::FinishExchange(Conn& c) {
  LogExchange(c);
  c.spare_ex = std::move(c.ex);  // (kept for the connection's next request)
  dirty_.push_back(&c);
  if (!c.close_after && !c.in.empty()) ProcessRequests(c);
  if (async_ && !c.ex) PostRecv(c);
}

void HttpServer::Impl::Write(Conn& c, std::string bytes, bool response_head, bool mark_dirty) {
  if (bytes.empty()) return;
  if (response_head && c.ex) {
    if ((log_ != nullptr || options_.timing) && !c.ex->head_sent) NoteResponseHead(*c.ex, bytes);
    c.ex->head_sent = true;
  }
  if (c.out.empty()) c.last_progress = MonotonicNanos();
  c.out_bytes += bytes.size();
  Piece p;
  p.owned = std::move(bytes);
  p.response_head = response_head;
  c.out.push_back(std::move(p));
  if (mark_dirty) dirty_.push_back(&c);
}

void HttpServer::Impl::WriteLoan(Conn& c, const uint8_t* ptr, size_t n, uint64_t loan,
                                 CoreLink::Pools* pools, bool by_ref) {
  if (c.out.empty()) c.last_progress = MonotonicNanos();
  c.out_bytes += n;
  Piece p;
  p.ptr = ptr;
  p.len = n;
  p.loan = loan;
  p.pools = pools;
  p.by_ref = by_ref;
  c.out.push_back(std::move(p));
  dirty_.push_back(&c);
}

void HttpServer::Impl::Flush(Conn& c, bool once) {
  if (c.h2_parent != 0) return FlushH2Stream(c);
  if (c.h2 && !c.closed && !H2Send(c)) return;  // (the session's frames into the queue first)
#if GOBLIN_HAVE_URING
  if (async_ && c.uses_ring()) {
    if (c.closed || c.write_inflight) return;
    if (c.out.empty()) {
      if (!c.ex && (c.close_after || !c.reading)) Close(c);
      return;
    }
    c.wiov_bytes = Gather(c, &c.wiov, c.h2 ? 256 : 64);
    c.write_inflight = true;
    ++c.ops;
    net_.Writev(c.fd.get(), c.wiov.data(), static_cast<unsigned>(c.wiov.size()),
                (c.id << 2) | kOpWrite);
    return;
  }
#endif
  if (c.write_blocked && !c.out.empty()) return;  // (until EPOLLOUT)
  if (c.tls && !c.tls_ready) return;              // (nothing to write before the handshake)
  c.write_blocked = false;
  std::vector<iovec>& iov = c.wiov;
  // This round's share: --write-chunk, and no more than the response has sent so far (at
  // least kRampBytes): a client that leaves after the first bytes of a big response (a
  // player seeking, a probe) costs a few small copies, not a socket buffer's worth.
  if (!c.out.empty() && c.out.front().response_head && c.first_off == 0) c.response_sent = 0;
  const size_t budget = options_.write_chunk == 0
                            ? SIZE_MAX
                            : std::min<uint64_t>(options_.write_chunk,
                                                 std::max<uint64_t>(kRampBytes, c.response_sent));
  size_t written = 0;
  // TLS without kTLS: encrypted here, record by record (else the kernel encrypts what the
  // plain path below writes).
  const bool user_tls = c.tls && !c.tls_kernel_send;
  if (user_tls && !FlushTls(c, budget, once)) return;  // (closed, or the rest next round)
  while (!user_tls && !c.out.empty()) {
    if (written >= budget) {                         // others' turn: the rest in the next round
      if (!c.epollout) next_round_.push_back(c.id);  // (else its EPOLLOUT brings it back)
      return;
    }
    ssize_t n;
    if (const Piece& front = c.out.front(); front.by_ref) {
      // By reference: the socket takes the pool's pages (the block is stable: its pages are
      // never rewritten while referenced), so the loan can go back once this returns.
      off_t off = static_cast<off_t>(front.ptr - front.pools->head.data() + c.first_off);
      n = sendfile(c.fd.get(), front.pools->head_fd.get(), &off,
                   std::min(front.len - c.first_off, budget - written));
      if (n >= 0) stats_.bytes_by_reference += static_cast<uint64_t>(n);
    } else {
      bool ref_next = false;
      Gather(c, &iov, c.h2 ? 64 : 16, &ref_next, budget - written);
      msghdr mh{};
      mh.msg_iov = iov.data();
      mh.msg_iovlen = iov.size();
      // Headers followed by a piece sent by reference: one segment, not two.
      n = sendmsg(c.fd.get(), &mh, MSG_NOSIGNAL | (ref_next ? MSG_MORE : 0));
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        c.write_blocked = true;
        break;
      }
      Close(c);
      return;
    }
    written += static_cast<size_t>(n);
    c.response_sent += static_cast<uint64_t>(n);
    if (!Advance(c, static_cast<size_t>(n))) {
      Close(c);
      return;
    }
    if (once) {
      dirty_.push_back(&c);  // (the rest at the end of this round)
      break;
    }
  }
  // HTTP/2: everything written, the session may have more (frames it held back while the
  // queue was full): they go in the next round.
  if (c.h2 && c.out.empty() && !c.closed && nghttp2_session_want_write(c.h2->session)) {
    if (!H2Send(c)) return;
    if (!c.out.empty()) next_round_.push_back(c.id);
  }
  if (c.out.empty() && !c.ex && (c.close_after || !c.reading)) {
    Close(c);
    return;
  }
  UpdateEpoll(c);
}

void HttpServer::Impl::UpdateEpoll(Conn& c) {
  bool want = !c.out.empty() || c.tls_read_wants_write;
  if (want != c.epollout) {
    uint32_t in = c.reading ? uint32_t{EPOLLIN | EPOLLRDHUP} : 0u;
    (void)EpollCtl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), in | (want ? uint32_t{EPOLLOUT} : 0u),
                   c.id);
    c.epollout = want;
  }
}

size_t HttpServer::Impl::Gather(Conn& c, std::vector<iovec>* iov, size_t max, bool* ref_next,
                                size_t max_bytes) {
  iov->clear();
  size_t bytes = 0, off = c.first_off;
  // A write that starts a response stops kFirstSendBytes after its headers.
  size_t limit = max_bytes;
  for (size_t i = 0; i < c.out.size() && iov->size() < max; ++i) {
    Piece* it = &c.out[i];
    if (ref_next != nullptr && it->by_ref) {  // (goes on its own: sendfile)
      *ref_next = true;
      break;
    }
    if (it->response_head && off == 0) {
      if (!iov->empty()) break;  // the previous response's bytes go on their own
      limit = std::min(limit, it->owned.size() + kFirstSendBytes);
    }
    const uint8_t* base =
        it->owned.empty() ? it->ptr : reinterpret_cast<const uint8_t*>(it->owned.data());
    size_t len = std::min((it->owned.empty() ? it->len : it->owned.size()) - off, limit - bytes);
    iov->push_back({const_cast<uint8_t*>(base + off), len});
    bytes += len;
    off = 0;
    if (bytes == limit) break;
    if (it->stamp != 0) break;  // a local head is checked before anything after it goes
  }
  return bytes;
}

bool HttpServer::Impl::Advance(Conn& c, size_t left) {
  c.last_active = c.last_progress = MonotonicNanos();
  c.out_bytes -= left;
  c.written_total += left;
  if (c.logs_n != 0) EmitLogs(c, false);  // (its line counts its bytes, not their release)
  bool ok = true;
  while (left > 0 && !c.out.empty()) {
    Piece& p = c.out.front();
    size_t len = p.owned.empty() ? p.len : p.owned.size();
    size_t rest = len - c.first_off;
    if (left >= rest) {
      left -= rest;
      if (p.stamp != 0) {
        // Every byte of this local head has been read by the kernel: still the object's?
        // (the held-back last byte is read first, so the check covers it too)
        if (c.out.size() > 1 && c.out[1].seal != nullptr) {
          c.out[1].owned[0] = static_cast<char>(*c.out[1].seal);
          c.out[1].seal = nullptr;
        }
        if (!StampHolds(*p.pools, p.entry, p.stamp)) {
          ++stats_.local_cut;
          GOBLIN_LOG_WARN(kLog, "a head changed while it was sent: closing the connection");
          ok = false;
        }
      }
      const uint64_t child = p.h2_child;
      ReleasePiece(p);
      c.out.pop_front();
      c.first_off = 0;
      if (child != 0) H2Returned(child, len, true);
      if (!ok) return false;
    } else {
      c.first_off += left;
      left = 0;
    }
  }
  return ok;
}

void HttpServer::Impl::ReleasePiece(Piece& p) {
  if (p.loan != 0) {
    ReleaseLoan(p.loan, p.pools);
  } else if (p.stamp != 0) {
    core_->Unhold(p.pools);
  }
  p.loan = p.stamp = 0;
  GiveString(std::move(p.owned));
}

void HttpServer::Impl::ReleasePieces(Conn& c) {
  for (size_t i = 0; i < c.out.size(); ++i) {
    ReleasePiece(c.out[i]);
    if (c.out[i].h2_child != 0) H2Returned(c.out[i].h2_child, c.out[i].len, false);
  }
  c.out.clear();
  c.out_bytes = 0;
  c.first_off = 0;
}

void HttpServer::Impl::PostRecv(Conn& c) {
#if GOBLIN_HAVE_URING
  if (c.closed || c.recv_inflight || !c.reading || !c.uses_ring()) return;
  if (c.in.size() > (1u << 20) && c.ex) return;  // enough pipelined input: wait for this one
  c.recv_inflight = true;
  ++c.ops;
  net_.Recv(c.fd.get(), c.rbuf.get(), kRecvBytes, (c.id << 2) | kOpRecv);
#else
  (void)c;
#endif
}

void HttpServer::Impl::OnNetCompletion(uint64_t ud, int32_t res) {
  uint64_t id = ud >> 2, op = ud & 3;
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  if (op == kOpCancel) return;
  --c.ops;
  if (op == kOpRecv) {
    c.recv_inflight = false;
    if (c.closed) return;
    if (res > 0) {
      c.in.append(c.rbuf.get(), static_cast<size_t>(res));
      c.last_active = MonotonicNanos();
      ProcessRequests(c);
      PostRecv(c);
    } else if (res == 0) {
      c.reading = false;  // the peer finished sending: answer it, then close
      ProcessRequests(c);
      if (!c.ex && c.out.empty()) Close(c);
    } else if (res != -EINTR && res != -EAGAIN) {
      Close(c);
    } else {
      PostRecv(c);
    }
    return;
  }
  // op == kOpWrite
  c.write_inflight = false;
  if (c.closed) {
    // Loans are given back only now that the kernel no longer reads their memory.
    ReleasePieces(c);
    return;
  }
  if (res < 0) {
    if (res == -EINTR || res == -EAGAIN) return Flush(c);
    return Close(c);
  }
  if (!Advance(c, static_cast<size_t>(res))) return Close(c);
  Flush(c);
}

void HttpServer::Impl::ReapClosed() {
  size_t kept = 0;
  for (uint64_t id : closed_) {
    auto it = conns_.find(id);
    if (it == conns_.end()) continue;
    // io_uring still holds its buffers, or (a stream conn) its parent still holds bytes it
    // lent: next round.
    if (it->second->ops != 0 || it->second->h2_lent != 0) {
      closed_[kept++] = id;
      continue;
    }
    if (spare_conns_.size() < kSpareConns) {
      it->second->Reset();
      spare_conns_.push_back(std::move(it->second));
    }
    conns_.erase(it);
  }
  closed_.resize(kept);
}

void HttpServer::Impl::Close(Conn& c) {
  if (c.closed) return;
  c.closed = true;
  closed_.push_back(c.id);
  if (c.h2_parent == 0) {  // (a stream conn has no socket)
    // TLS: a close_notify if nothing is half written (best effort, never waited for).
    if (c.tls && c.tls_ready && c.tls_retry == 0) c.tls.Shutdown();
    // The peer sees the end now (FIN), even while io_uring still holds a reference to the
    // socket for requests in flight: a close(2) alone would wait for them.
    shutdown(c.fd.get(), SHUT_RDWR);
#if GOBLIN_HAVE_URING
    if (async_ && c.ops > 0) net_.Cancel(c.fd.get(), (c.id << 2) | kOpCancel);
#endif
    if (!async_ || !c.uses_ring()) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
    c.fd.Reset();
  }
  // The access log: an exchange cut short is logged with what it sent (a stream conn's
  // lines wait for the bytes it lent to come back).
  if (c.ex) LogExchange(c);
  if (c.logs_n != 0 && c.h2_lent == 0) EmitLogs(c, true);
  // (bytes a stream conn lent its parent stay until the parent gives them back)
  if (!c.write_inflight && c.h2_lent == 0) ReleasePieces(c);
  CloseH2Streams(c);
  CancelCoreGet(c);  // (the rest of an object it was reading)
  // A fill this client led goes on without it (others follow it; the cache wants it); a
  // pass-through for it is dropped.
  if (c.ex && c.ex->state == ExState::kOrigin) {
    std::vector<Fill*> unread;
    for (auto& [ptr, f] : all_fills_) {
      if (f->leader != c.id) continue;
      f->leader = 0;
      if (f->stage == Stage::kUncached) unread.push_back(ptr);  // nobody reads it now
    }
    for (Fill* f : unread) EndFill(*f);
    for (auto& [tag, o] : origins_) {
      if (o->pass_conn == c.id) {
        o->pass_conn = 0;
        CloseOrigin(*o);
        break;
      }
    }
  }
}

}  // namespace goblin::gateway
