// The HTTP front's origin connections: the origin's address (resolved once, and again after
// a connection fails), non-blocking connects, a keep-alive pool (a request on a pooled
// connection the origin had dropped is sent again on a fresh one), response parsing with
// every way a response can go wrong named (OriginFault), and back-pressure (an origin is
// paused while its reader or the core is behind). See http_server_impl.h.
#include <netdb.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "epoll_ctl.h"
#include "goblin/common/clock.h"
#include "goblin/common/log.h"
#include "http_server_impl.h"

namespace goblin::gateway {
static_assert(kOriginFaultNames.size() == static_cast<size_t>(OriginFault::kSick) + 1);
namespace {
constexpr std::string_view kLog = "http";

OriginFault FaultOf(int err) {
  switch (err) {
    case ECONNREFUSED:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ETIMEDOUT:
      return OriginFault::kUnreachable;
    default:
      return OriginFault::kReset;
  }
}
}  // namespace

using detail::Describe;

VoidResult HttpServer::Impl::ParseMirror() {
  // --mirror http://host[:port][/prefix]
  std::string m = options_.mirror;
  if (!m.starts_with("http://")) {
    return goblin::Err(StatusCode::kInvalidArgument,
                       "--mirror '{}': expected http://HOST[:PORT][/PREFIX] (the origin side "
                       "speaks plain HTTP/1.1)",
                       m);
  }
  m = m.substr(7);
  size_t slash = m.find('/');
  std::string hostport = m.substr(0, slash);
  origin_prefix_ = slash == std::string::npos ? "" : m.substr(slash);
  while (!origin_prefix_.empty() && origin_prefix_.back() == '/') origin_prefix_.pop_back();
  size_t colon = hostport.rfind(':');
  origin_host_ = colon == std::string::npos ? hostport : hostport.substr(0, colon);
  origin_port_ = colon == std::string::npos ? "80" : hostport.substr(colon + 1);
  origin_hostport_ = hostport;
  if (origin_host_.empty())
    return goblin::Err(StatusCode::kInvalidArgument, "--mirror has no host");
  return {};
}

bool HttpServer::Impl::ResolveOrigin() {
  last_resolve_ = MonotonicNanos();
  resolve_again_ = false;
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(origin_host_.c_str(), origin_port_.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    GOBLIN_LOG_WARN(kLog, "cannot resolve the origin '{}': {}", origin_host_, gai_strerror(rc));
    resolve_again_ = true;
    return false;
  }
  std::memcpy(&origin_addr_, res->ai_addr, res->ai_addrlen);
  origin_addr_len_ = static_cast<socklen_t>(res->ai_addrlen);
  freeaddrinfo(res);
  return true;
}

HttpServer::Impl::Origin* HttpServer::Impl::OpenOrigin(const std::string& method,
                                                       const std::string& target,
                                                       const std::string& range,
                                                       const std::string& key_lines,
                                                       const std::string& content_type,
                                                       const std::string& body, bool probe) {
  if (!probe && OpenFault() == OriginFault::kSick) {
    ++stats_.origin_faults[static_cast<size_t>(OriginFault::kSick)];
    return nullptr;
  }
  const bool head = method == "HEAD";
  ++stats_.origin_requests;
  bool with_body = method != "GET" && method != "HEAD";
  std::string request = fmt::format(
      "{} {}{} HTTP/1.1\r\nHost: {}\r\nUser-Agent: goblin-gateway\r\nVia: 1.1 "
      "goblin\r\n{}{}{}{}\r\n",
      method, origin_prefix_, target, origin_hostport_, key_lines,
      range.empty() ? "" : "Range: " + range + "\r\n",
      content_type.empty() ? "" : "Content-Type: " + content_type + "\r\n",
      with_body ? fmt::format("Content-Length: {}\r\n", body.size()) : "");
  request += body;
  uint64_t deadline =
      MonotonicNanos() + static_cast<uint64_t>(options_.origin_timeout.count()) * 1'000'000'000ULL;
  // A pooled keep-alive connection if one is idle.
  while (!idle_origins_.empty()) {
    uint64_t tag = idle_origins_.back();
    idle_origins_.pop_back();
    auto it = origins_.find(tag);
    if (it == origins_.end() || !it->second->idle) continue;
    Origin& o = *it->second;
    o.idle = false;
    o.reused = true;
    o.head_request = head;
    o.request = request;
    o.out = std::move(request);
    o.deadline = deadline;
    (void)EpollCtl(epoll_.get(), EPOLL_CTL_MOD, o.fd.get(), EPOLLIN | EPOLLOUT | EPOLLRDHUP, o.tag);
    return &o;
  }
  auto o = std::make_unique<Origin>();
  o->tag = kOriginTagBit | next_tag_++;
  o->head_request = head;
  o->request = request;
  o->out = std::move(request);
  o->deadline = deadline;
  if (!ConnectOrigin(*o)) {
    ++stats_.origin_faults[static_cast<size_t>(OriginFault::kUnreachable)];
    return nullptr;
  }
  Origin* p = o.get();
  origins_.emplace(o->tag, std::move(o));
  return p;
}

bool HttpServer::Impl::ConnectOrigin(Origin& o) {
  // The address is resolved once; after a failed connection again (at most once a second).
  if ((resolve_again_ || origin_addr_len_ == 0) &&
      MonotonicNanos() - last_resolve_ > 1'000'000'000ULL) {
    ResolveOrigin();
  }
  if (origin_addr_len_ == 0) return false;
  const auto* addr = reinterpret_cast<const sockaddr*>(&origin_addr_);
  int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int rc = fd < 0 ? -1 : connect(fd, addr, origin_addr_len_);
  if (fd < 0 || (rc != 0 && errno != EINPROGRESS)) {
    if (fd >= 0) close(fd);
    resolve_again_ = true;
    return false;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (o.fd) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, o.fd.get(), nullptr);
  o.fd = UniqueFd(fd);
  return EpollCtl(epoll_.get(), EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP, o.tag)
      .has_value();
}

void HttpServer::Impl::ReleaseOrigin(Origin& o) {
  bool reusable = o.head_done && o.resp.keep_alive && !o.until_close && o.out.empty() &&
                  idle_origins_.size() < 32;
  if (!reusable) return CloseOrigin(o);
  if (o.fill != nullptr && o.fill->origin == &o) o.fill->origin = nullptr;
  o.fill = nullptr;
  o.pass_conn = 0;
  o.head_done = false;
  o.resp = http::Response{};
  o.chunked = http::ChunkedDecoder{};
  o.body_left = 0;
  o.until_close = false;
  o.paused = false;
  o.deadline = 0;
  o.request.clear();
  o.in.clear();
  o.idle = true;
  o.idle_since = MonotonicNanos();
  (void)EpollCtl(epoll_.get(), EPOLL_CTL_MOD, o.fd.get(), EPOLLIN | EPOLLRDHUP, o.tag);
  idle_origins_.push_back(o.tag);
}

void HttpServer::Impl::CloseOrigin(Origin& o) {
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, o.fd.get(), nullptr);
  if (o.fill != nullptr && o.fill->origin == &o) o.fill->origin = nullptr;
  origins_.erase(o.tag);  // destroys o
}

void HttpServer::Impl::PauseOrigin(Origin& o) {
  if (o.paused) return;
  o.paused = true;
  (void)EpollCtl(epoll_.get(), EPOLL_CTL_MOD, o.fd.get(), 0, o.tag);
}

void HttpServer::Impl::ResumeOrigins() {
  if (core_->queued_bytes() >= kCoreBacklogHigh / 2) return;
  std::vector<uint64_t> resume;
  for (auto& [tag, o] : origins_) {
    if (!o->paused) continue;
    Conn* reader = Find(o->fill != nullptr ? o->fill->leader : o->pass_conn);
    bool pending_ok = o->fill == nullptr || o->fill->pending.size() < kCoreBacklogHigh / 2;
    if (pending_ok && (reader == nullptr || reader->out_bytes < kClientOutputHigh / 2))
      resume.push_back(tag);
  }
  for (uint64_t tag : resume) {
    auto it = origins_.find(tag);
    if (it == origins_.end()) continue;
    Origin& o = *it->second;
    o.paused = false;
    // Silence is counted from now: we were the ones not reading.
    o.deadline = MonotonicNanos() +
                 static_cast<uint64_t>(options_.origin_timeout.count()) * 1'000'000'000ULL;
    (void)EpollCtl(epoll_.get(), EPOLL_CTL_MOD, o.fd.get(), EPOLLIN | EPOLLRDHUP, o.tag);
    OnOriginEvent(o, EPOLLIN);
  }
}

void HttpServer::Impl::OnOriginEvent(Origin& o, uint32_t events) {
  if (o.idle) return CloseOrigin(o);  // the origin closed (or spoke) while pooled
  auto stale_retry = [&]() {
    // A kept-alive connection the origin had already dropped: send again on a new one.
    if (!o.reused || o.head_done || !o.in.empty()) return false;
    o.reused = false;
    o.out = o.request;
    return ConnectOrigin(o);
  };
  if (!o.out.empty() && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
    ssize_t n = send(o.fd.get(), o.out.data(), o.out.size(), MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN) {
      int err = errno;
      if (stale_retry()) return;
      resolve_again_ = true;
      return OnOriginDone(o, false, o.reused ? FaultOf(err) : OriginFault::kUnreachable);
    }
    if (n > 0) o.out.erase(0, static_cast<size_t>(n));
    if (o.out.empty())
      (void)EpollCtl(epoll_.get(), EPOLL_CTL_MOD, o.fd.get(), EPOLLIN | EPOLLRDHUP, o.tag);
  }
  if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) return;
  char buf[256 * 1024];
  const uint64_t tag = o.tag;
  auto gone = [&] { return origins_.find(tag) == origins_.end(); };
  for (;;) {
    if (o.paused) return;
    ssize_t n = read(o.fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      int err = errno;
      if (stale_retry()) return;
      if (!o.head_done && !o.reused && FaultOf(err) == OriginFault::kUnreachable)
        resolve_again_ = true;
      return OnOriginDone(o, false, FaultOf(err));
    }
    if (n == 0) {
      if (stale_retry()) return;
      if (o.head_done && o.until_close) return OnOriginDone(o, true);
      return OnOriginDone(o, false, o.head_done ? OriginFault::kTruncated : OriginFault::kClosed);
    }
    o.deadline = MonotonicNanos() +
                 static_cast<uint64_t>(options_.origin_timeout.count()) * 1'000'000'000ULL;
    std::string_view data(buf, static_cast<size_t>(n));
    if (!o.head_done) {
      o.in.append(data);
      auto p = http::ParseResponse(o.in, http::Limits{}, o.head_request, &o.resp);
      if (p == http::Parse::kNeedMore) continue;
      if (p == http::Parse::kError) return OnOriginDone(o, false, OriginFault::kMalformed);
      if (o.resp.status < 200) {  // 1xx: skip it
        o.in.erase(0, o.resp.head_bytes);
        continue;
      }
      o.head_done = true;
      o.until_close = !o.resp.framing.chunked && !o.resp.framing.content_length;
      o.body_left = o.resp.framing.content_length.value_or(0);
      std::string rest = o.in.substr(o.resp.head_bytes);
      OnOriginHead(o);
      if (gone()) return;
      o.in.clear();
      data = {};
      if (!rest.empty()) {
        o.in = std::move(rest);
        data = o.in;
      }
      if (!o.resp.framing.chunked && !o.until_close && o.body_left == 0) {
        if (!data.empty()) return OnOriginDone(o, false, OriginFault::kTooLong);
        return OnOriginDone(o, true);
      }
    }
    if (data.empty()) continue;
    if (o.resp.framing.chunked) {
      std::string feed =
          o.in.empty() || data.data() != o.in.data() ? o.in + std::string(data) : std::string(data);
      std::vector<std::string_view> pieces;
      size_t pos = 0;
      auto st = o.chunked.Feed(feed, &pos, &pieces);
      for (auto piece : pieces) {
        OnOriginBody(o, piece);
        if (gone()) return;
      }
      if (st == http::Parse::kError) return OnOriginDone(o, false, OriginFault::kBadChunk);
      if (st == http::Parse::kComplete) {
        if (pos < feed.size()) return OnOriginDone(o, false, OriginFault::kTooLong);
        return OnOriginDone(o, true);
      }
      o.in = pos < feed.size() ? feed.substr(pos) : std::string();  // a partial size line
    } else {
      bool too_long = !o.until_close && data.size() > o.body_left;
      if (too_long) data = data.substr(0, o.body_left);
      OnOriginBody(o, data);
      if (gone()) return;
      o.in.clear();
      if (too_long) return OnOriginDone(o, false, OriginFault::kTooLong);
      if (!o.until_close) {
        o.body_left -= data.size();
        if (o.body_left == 0) return OnOriginDone(o, true);
      }
    }
  }
}

void HttpServer::Impl::OnOriginHead(Origin& o) {
  if (o.probe) {
    const int st = o.resp.status;
    ProbeDone(st >= 200 && st < 400, fmt::format("status {}", st));
    return CloseOrigin(o);
  }
  if (o.fill != nullptr) return OnFillHead(o);
  // A pass-through (uncacheable, a range on a miss, other methods).
  Conn* c = Find(o.pass_conn);
  if (c == nullptr || !c->ex) return CloseOrigin(o);
  const http::Response& r = o.resp;
  std::string passthrough;
  for (const auto& h : r.headers) {
    if (detail::EndToEnd(h.name)) passthrough += fmt::format("{}: {}\r\n", h.name, h.value);
  }
  std::string framing;
  if (r.framing.content_length)
    framing = fmt::format("Content-Length: {}\r\n", *r.framing.content_length);
  else if (!c->ex->minor0 && !c->ex->head)
    framing = "Transfer-Encoding: chunked\r\n";
  c->ex->chunked_out = framing.starts_with("Transfer");
  if (framing.empty() && !c->ex->head) c->close_after = true;
  Write(*c,
        fmt::format("HTTP/1.1 {} {}\r\n{}Date: {}\r\nVia: 1.1 goblin\r\nX-Cache: MISS\r\n{}{}\r\n",
                    r.status, r.reason, passthrough, HttpDate(), framing,
                    c->close_after ? "Connection: close\r\n" : ""),
        true);
}

void HttpServer::Impl::OnOriginBody(Origin& o, std::string_view bytes) {
  if (bytes.empty()) return;
  if (o.fill != nullptr) return OnFillBody(o, bytes);
  Conn* c = Find(o.pass_conn);
  if (c == nullptr || !c->ex) return CloseOrigin(o);
  if (c->ex->chunked_out) Write(*c, fmt::format("{:x}\r\n", bytes.size()));
  Write(*c, std::string(bytes));
  if (c->ex->chunked_out) Write(*c, "\r\n");
  if (c->out_bytes > kClientOutputHigh) PauseOrigin(o);  // the client sets the pace
}

void HttpServer::Impl::OnOriginDone(Origin& o, bool ok, OriginFault fault) {
  if (o.probe) {
    ProbeDone(false, Describe(fault));
    return CloseOrigin(o);
  }
  if (ok && o.head_done && !o.until_close) {
    // Bytes already waiting beyond the declared end: the origin sent more than it said.
    char probe;
    if (recv(o.fd.get(), &probe, 1, MSG_PEEK | MSG_DONTWAIT) > 0) {
      ok = false;
      fault = OriginFault::kTooLong;
    }
  }
  if (!ok) {
    ++stats_.origin_faults[static_cast<size_t>(fault)];
    GOBLIN_LOG_WARN(kLog, "origin: {} ({} {})", Describe(fault),
                    o.fill != nullptr ? "fill of" : "request for",
                    o.fill != nullptr ? o.fill->key : o.request.substr(0, o.request.find('\r')));
  }
  if (o.fill != nullptr) {
    Fill& f = *o.fill;
    o.fill = nullptr;
    f.origin = nullptr;
    if (ok) {
      ReleaseOrigin(o);
    } else {
      CloseOrigin(o);
    }
    return OnFillOriginDone(f, ok, fault);
  }
  if (Conn* c = Find(o.pass_conn); c != nullptr && c->ex) {
    if (!ok) {
      Fail(*c, detail::StatusFor(fault), Describe(fault));
    } else {
      if (c->ex->chunked_out) Write(*c, "0\r\n\r\n");
      FinishExchange(*c);
    }
  }
  o.pass_conn = 0;
  if (ok) {
    ReleaseOrigin(o);
  } else {
    CloseOrigin(o);
  }
}

}  // namespace goblin::gateway

namespace goblin::gateway {

void HttpServer::Impl::StartProbe(uint64_t now) {
  next_probe_ = now + static_cast<uint64_t>(options_.probe_interval.count()) * 1'000'000ULL;
  ++stats_.probes;
  Origin* o = OpenOrigin("GET", options_.probe_path, "", "", {}, {}, /*probe=*/true);
  if (o == nullptr) return ProbeDone(false, Describe(OriginFault::kUnreachable));
  o->probe = true;
  o->deadline = now + static_cast<uint64_t>(options_.probe_timeout.count()) * 1'000'000ULL;
  probe_inflight_ = true;
}

void HttpServer::Impl::ProbeDone(bool good, std::string_view why) {
  probe_inflight_ = false;
  std::atomic<bool>& healthy = *options_.origin_healthy;
  if (good) {
    probe_fails_ = 0;
    if (!healthy.exchange(true)) {
      GOBLIN_LOG_INFO(kLog, "origin healthy again: probe {} answered ({})", options_.probe_path,
                      why);
    }
    return;
  }
  ++stats_.probe_failures;
  ++probe_fails_;
  if (probe_fails_ >= options_.probe_threshold && healthy.exchange(false)) {
    GOBLIN_LOG_WARN(kLog,
                    "origin marked sick: {} probes of {} failed in a row (last: {}); misses are "
                    "answered 503 until a probe succeeds",
                    probe_fails_, options_.probe_path, why);
  }
}

}  // namespace goblin::gateway
