#include "goblin/gateway/http_server.h"

#include <arpa/inet.h>
#include <emmintrin.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <functional>
#include <list>
#include <random>
#include <unordered_map>

#include "goblin/common/buffer.h"
#include "goblin/common/clock.h"
#include "goblin/common/config.h"
#include "goblin/common/fd.h"
#include "goblin/common/log.h"
#include "goblin/ring/client.h"
#include "goblin/sbe/wire_flags.h"
#include "goblin/wire/goblin_wire.h"

#if GOBLIN_HAVE_URING
#include <liburing.h>
#endif

namespace goblin::gateway {
namespace {

constexpr std::string_view kLog = "http";
constexpr size_t kClientOutputHigh = 8 << 20;  // pause the origin above this per client
constexpr size_t kCoreQueueHigh = 16 << 20;  // pause origins while the core ring is this far behind

uint64_t NowSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec);
}
uint64_t NowUnixNanos() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 206:
      return "Partial Content";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 416:
      return "Range Not Satisfiable";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

// Hop-by-hop and framing headers are never stored or passed through.
bool EndToEnd(std::string_view name) {
  static constexpr std::string_view kHop[] = {"connection",
                                              "keep-alive",
                                              "transfer-encoding",
                                              "te",
                                              "trailer",
                                              "upgrade",
                                              "proxy-authenticate",
                                              "proxy-authorization",
                                              "content-length",
                                              "date",
                                              "age",
                                              "via",
                                              "x-cache",
                                              "accept-ranges"};
  for (auto h : kHop) {
    if (http::IEquals(name, h)) return false;
  }
  return true;
}

// Stored metadata: "Name: value\r\n" lines of the origin's end-to-end headers.
std::string_view MetaGet(std::string_view meta, std::string_view name) {
  size_t pos = 0;
  while (pos < meta.size()) {
    size_t nl = meta.find("\r\n", pos);
    if (nl == std::string_view::npos) nl = meta.size();
    std::string_view line = meta.substr(pos, nl - pos);
    size_t colon = line.find(':');
    if (colon != std::string_view::npos && http::IEquals(line.substr(0, colon), name)) {
      std::string_view v = line.substr(colon + 1);
      while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
      return v;
    }
    pos = nl + 2;
  }
  return {};
}

bool EtagMatches(std::string_view if_none_match, std::string_view etag) {
  if (etag.empty()) return false;
  auto strip = [](std::string_view e) {
    if (e.starts_with("W/")) e.remove_prefix(2);
    return e;
  };
  std::string_view want = strip(etag);
  while (!if_none_match.empty()) {
    size_t comma = if_none_match.find(',');
    std::string_view item = if_none_match.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item == "*" || strip(item) == want) return true;
    if (comma == std::string_view::npos) break;
    if_none_match.remove_prefix(comma + 1);
  }
  return false;
}

VoidResult EpollCtl(int ep, int op, int fd, uint32_t events, uint64_t tag) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = tag;
  if (epoll_ctl(ep, op, fd, &ev) != 0) return ErrnoErr("epoll_ctl", errno);
  return {};
}

constexpr uint64_t kTagStop = 1, kTagCoreBell = 2, kTagCoreSock = 3, kTagListen = 4;
constexpr uint64_t kOriginTagBit = 1ull << 62;
constexpr uint64_t kFirstTag = 16;

// --net async: client sockets are read and written through io_uring (recv into a
// per-connection buffer, writev of the response pieces, cancel on close); completions are
// reaped in the loop, woken by the ring's eventfd in the epoll set.
class NetRing {
 public:
  ~NetRing() {
#if GOBLIN_HAVE_URING
    if (ready_) io_uring_queue_exit(&ring_);
#endif
  }
  VoidResult Init(unsigned entries) {
#if GOBLIN_HAVE_URING
    int rc = io_uring_queue_init(entries, &ring_, 0);
    if (rc < 0) return Err(ErrnoStatus("io_uring_queue_init (--net async)", -rc));
    ready_ = true;
    efd_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!efd_) return ErrnoErr("eventfd", errno);
    rc = io_uring_register_eventfd(&ring_, efd_.get());
    if (rc < 0) return Err(ErrnoStatus("io_uring_register_eventfd", -rc));
    return {};
#else
    (void)entries;
    return Err(StatusCode::kUnimplemented, "--net async: this build has no liburing");
#endif
  }
  int event_fd() const { return efd_.get(); }
#if GOBLIN_HAVE_URING
  io_uring_sqe* Sqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    ++unsubmitted_;
    return sqe;
  }
  void Recv(int fd, void* buf, size_t len, uint64_t ud) {
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_recv(sqe, fd, buf, len, 0);
    io_uring_sqe_set_data64(sqe, ud);
  }
  void Writev(int fd, const iovec* iov, unsigned n, uint64_t ud) {
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_writev(sqe, fd, iov, n, 0);
    io_uring_sqe_set_data64(sqe, ud);
  }
  void CancelFd(int fd, uint64_t ud) {
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_cancel_fd(sqe, fd, IORING_ASYNC_CANCEL_ALL);
    io_uring_sqe_set_data64(sqe, ud);
  }
  void Submit() {
    if (unsubmitted_ > 0) {
      io_uring_submit(&ring_);
      unsubmitted_ = 0;
    }
  }
  template <typename Fn>
  size_t Reap(Fn&& fn) {
    uint64_t v;
    [[maybe_unused]] ssize_t r = read(efd_.get(), &v, sizeof v);
    size_t n = 0;
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe != nullptr) {
      uint64_t ud = io_uring_cqe_get_data64(cqe);
      int32_t res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      fn(ud, res);
      ++n;
    }
    return n;
  }
#endif

 private:
#if GOBLIN_HAVE_URING
  io_uring ring_{};
#endif
  bool ready_ = false;
  unsigned unsubmitted_ = 0;
  UniqueFd efd_;
};

constexpr uint64_t kTagNetRing = 5;
constexpr uint64_t kOpRecv = 1, kOpWrite = 2, kOpCancel = 3;
// Body bytes sent with a response's headers in its first write (the rest follows at once).
constexpr size_t kFirstSendBytes = 64 << 10;

}  // namespace

class HttpServer::Impl {
 public:
  explicit Impl(const HttpServerOptions& o) : options_(o) {}
  VoidResult Init();
  VoidResult Run(int stop_fd);
  HttpStats stats_;
  int port_ = 0;

 private:
  struct Piece {
    std::string owned;
    const uint8_t* ptr = nullptr;  // borrowed (a loan) when owned is empty
    size_t len = 0;
    uint64_t loan = 0;
    bool response_head = false;  // a status line and headers: see kFirstSendBytes
  };
  struct Fill;
  enum class ExState { kLookup, kCoreBody, kWaitFill, kOrigin, kDone };
  struct Exchange {
    ExState state = ExState::kLookup;
    std::string method, target, key, range, inm, ims, host;
    bool head = false, keep_alive = true, minor0 = false;
    uint64_t corr = 0;
    bool via_head_lookup = false;  // ObjectHead first (ranges, conditionals, HEAD)
    bool chunked_out = false;      // the body goes out chunked (size unknown)
    std::vector<http::ByteRange> ranges;
    size_t range_idx = 0;
    std::string boundary, content_type;
    uint64_t size = 0;
    bool follow = false;  // reading a fill through the core
    bool is_miss = false;
    bool purge_token_ok = false;
    std::string purge_mode;  // X-Purge: "" (this URL), "prefix" or "all"
    std::string body, content_type_in;
  };
  struct Conn {
    uint64_t id = 0;
    UniqueFd fd;
    std::string in;
    std::deque<Piece> out;
    size_t first_off = 0;
    size_t out_bytes = 0;
    uint64_t last_active = 0;
    uint64_t last_progress = 0;  // last time output moved (slow-client timeout)
    bool close_after = false, closed = false, epollout = false, reading = true;
    std::string peer;
    std::unique_ptr<Exchange> ex;
    // --net async
    std::unique_ptr<char[]> rbuf;
    bool recv_inflight = false, write_inflight = false;
    uint32_t ops = 0;  // io_uring requests in flight (the Conn lives until they complete)
    std::vector<iovec> wiov;
    size_t wiov_bytes = 0;
  };
  struct Origin {
    uint64_t tag = 0;
    UniqueFd fd;
    bool connected = false;
    std::string out;  // request bytes not yet sent
    std::string in;
    http::Response resp;
    bool head_done = false;
    http::ChunkedDecoder chunked;
    uint64_t body_left = 0;
    bool until_close = false;
    bool head_request = false;
    uint64_t deadline = 0;
    bool paused = false;
    // Owner: a fill (cacheable fetch) or a pass-through exchange.
    Fill* fill = nullptr;
    uint64_t pass_conn = 0;
    // Keep-alive: a connection back in the pool is idle; a request on a reused connection
    // that fails before any answer is sent again on a fresh one.
    bool idle = false, reused = false;
    uint64_t idle_since = 0;
    std::string request;  // the bytes of the current request (for that retry)
  };
  struct Fill {
    std::string key, target, host;
    Origin* origin = nullptr;
    uint64_t leader = 0;  // the connection streaming straight from the origin (0: none)
    std::vector<uint64_t> waiters;
    bool cacheable = false, decided = false, granted = false, in_progress_elsewhere = false;
    uint64_t put_id = 0, begin_corr = 0, commit_corr = 0;
    uint64_t received = 0;  // body bytes from the origin
    uint64_t sent = 0;      // body bytes sent to the core (PutData)
    std::string pending;    // body bytes waiting for the lease
    bool origin_done = false;
    bool leader_head = false;  // the leader asked HEAD
  };
  enum class CorrKind : uint8_t { kLookup, kHeadLookup, kFillBegin, kFillCommit, kPurge };
  struct CorrTarget {
    CorrKind kind;
    uint64_t conn = 0;
    Fill* fill = nullptr;
  };

  // Client side
  void Accept();
  void OnReadable(Conn& c);
  void ProcessRequests(Conn& c);
  void BuildExchange(Conn& c, const http::Request& r);
  void Dispatch(Conn& c);
  void Respond(Conn& c, int status, std::string_view body = {}, std::string_view extra = {});
  // Queues bytes for the client. `response_head`: these are a response's status line and
  // headers; the write that sends them carries at most kFirstSendBytes of what follows, so
  // the client's first byte is not held back behind copying a whole RAM head.
  void Write(Conn& c, std::string bytes, bool response_head = false);
  void WriteLoan(Conn& c, const uint8_t* p, size_t n, uint64_t loan);
  void Flush(Conn& c);
  void Close(Conn& c);
  void FinishExchange(Conn& c);
  Conn* Find(uint64_t id) {
    auto it = conns_.find(id);
    return it == conns_.end() || it->second->closed ? nullptr : it->second.get();
  }

  // Core side
  uint64_t CoreGet(Conn& c, uint64_t offset, uint64_t length, bool follow);
  // A lookup went to the core: the loop keeps polling for its answer up to
  // options_.core_reply_poll before it sleeps (a client's first byte waits on it).
  void ExpectCoreReply() {
    poll_until_ = std::max(
        poll_until_, MonotonicNanos() + static_cast<uint64_t>(options_.core_reply_poll.count()));
  }
  uint64_t poll_until_ = 0;
  uint64_t CoreHead(Conn& c);
  bool SendToCore(const std::function<size_t(uint8_t*, size_t)>& encode, size_t max_bytes);
  bool FlushCoreQueue();
  size_t PollCore();
  void OnCoreMessage(std::span<const uint8_t> m);
  void OnObjectInfo(Conn& c, const wire::ObjectInfoDecoder& info);
  void StartRangePart(Conn& c);
  void OnCoreBody(Conn& c, uint64_t offset, std::span<const uint8_t> bytes, uint64_t loan,
                  bool last);
  void ReleaseLoan(uint64_t loan);
  std::string HitHead(Exchange& ex, int status, std::string_view meta, uint64_t created_ns,
                      std::string_view extra);

  // Origin side
  void Miss(Conn& c);
  Fill* StartFill(Exchange& ex, bool leader_is_client, uint64_t leader);
  Origin* OpenOrigin(const std::string& method, const std::string& target, const std::string& range,
                     const std::string& content_type = {}, const std::string& body = {});
  void OnOriginEvent(Origin& o, uint32_t events);
  void OnOriginHead(Origin& o);
  void OnOriginBody(Origin& o, std::string_view bytes);
  void OnOriginDone(Origin& o, bool ok, std::string_view why);
  void CloseOrigin(Origin& o);
  // After a complete answer: back to the keep-alive pool if the origin allows, else closed.
  void ReleaseOrigin(Origin& o);
  bool ConnectOrigin(Origin& o);  // a fresh connection for o (same tag)
  std::vector<uint64_t> idle_origins_;
  // --net async
  bool async_ = false;
  NetRing net_;
  void PostRecv(Conn& c);
  void OnNetCompletion(uint64_t ud, int32_t res);
  void Advance(Conn& c, size_t n);  // n output bytes left the process
  // The output pieces as iovecs (at most `max`), from the unsent part of the first one.
  size_t Gather(Conn& c, std::vector<iovec>* iov, size_t max);
  void FillGranted(Fill& f);
  void ReleaseWaiters(Fill& f, bool follow);
  void CommitFill(Fill& f);  // PutCommit of everything the origin sent
  void Follow(Conn& c);
  void EndFill(Fill& f);
  void SendPutData(Fill& f, std::string_view bytes);

  HttpServerOptions options_;
  std::string origin_host_, origin_port_, origin_prefix_, origin_hostport_;
  std::unique_ptr<ring::RingClient> core_;
  UniqueFd epoll_, listen_;
  const uint8_t* pools_[2] = {nullptr, nullptr};
  uint64_t pool_bytes_[2] = {0, 0};
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::unordered_map<uint64_t, std::unique_ptr<Origin>> origins_;
  std::unordered_map<std::string, std::unique_ptr<Fill>> fills_;
  std::unordered_map<uint64_t, CorrTarget> corr_;
  uint64_t next_tag_ = kFirstTag, next_corr_ = 1;
  std::vector<std::vector<uint8_t>> core_queue_;
  size_t core_queue_bytes_ = 0;
  ByteBuffer encode_buf_;  // not zero-filled: resident as used
  std::vector<Conn*> dirty_;
  std::vector<Fill*> dead_fills_;
  bool core_gone_ = false;
};

// ---- setup ----

VoidResult HttpServer::Impl::Init() {
  // --mirror http://host[:port][/prefix]
  std::string m = options_.mirror;
  if (!m.starts_with("http://")) {
    return goblin::Err(StatusCode::kInvalidArgument,
                       "--mirror '{}': expected http://HOST[:PORT][/PREFIX]", m);
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

  ring::ClientOptions co;
  co.name = "goblin-gateway-http";
  co.ring_bytes = options_.core_ring_bytes;
  co.peer_kind = static_cast<uint8_t>(wire::PeerKind::kGateway);
  GOBLIN_ASSIGN_OR_RETURN(core_, ring::RingClient::Connect(options_.core_socket, co));
  encode_buf_ = ByteBuffer(core_->max_message());
  // Map the core's pools read-only: hits are written to sockets from there.
  {
    uint8_t buf[64];
    size_t n = wire::MapPoolsEncoder(buf, sizeof buf).set_correlation_id(0).Finish();
    GOBLIN_RETURN_IF_ERROR(core_->Send({buf, n}, std::chrono::seconds(5)));
    bool got = false;
    Status err;
    for (int i = 0; i < 500 && !got && err.ok(); ++i) {
      GOBLIN_RETURN_IF_ERROR(core_->Wait(std::chrono::milliseconds(10)));
      GOBLIN_RETURN_IF_ERROR(core_->Poll([&](std::span<const uint8_t> msg) {
        if (wire::PoolMapDecoder::Decode(msg)) got = true;
        if (auto e = wire::ErrorDecoder::Decode(msg))
          err = Status(StatusCode::kFailedPrecondition, std::string(e->text()));
      }));
    }
    if (!err.ok())
      return goblin::Err(
          err.WithContext("goblin-core has no object store (start it with --ssd-dir)"));
    if (!got) return goblin::Err(StatusCode::kTimeout, "goblin-core did not answer MapPools");
    std::vector<uint8_t> side;
    std::vector<UniqueFd> fds;
    GOBLIN_RETURN_IF_ERROR(core_->ReceiveSideFrame(&side, &fds, std::chrono::seconds(5)));
    auto map = wire::PoolMapDecoder::Decode(side);
    if (!map) return goblin::Err(map.error());
    size_t i = 0;
    for (auto p : map->pools()) {
      if (i >= fds.size()) break;
      int fd = fds[i++].get();
      if (p.pool() != wire::PoolKind::kHead && p.pool() != wire::PoolKind::kIo) continue;
      void* a = mmap(nullptr, p.bytes(), PROT_READ, MAP_SHARED, fd, 0);
      if (a == MAP_FAILED) return ErrnoErr("mmap(goblin-core pool)", errno);
      int k = p.pool() == wire::PoolKind::kHead ? 0 : 1;
      pools_[k] = static_cast<const uint8_t*>(a);
      pool_bytes_[k] = p.bytes();
    }
  }
  epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) return ErrnoErr("epoll_create1", errno);
  async_ = options_.net_async;
  if (async_) {
    GOBLIN_RETURN_IF_ERROR(net_.Init(4096));
    GOBLIN_RETURN_IF_ERROR(
        EpollCtl(epoll_.get(), EPOLL_CTL_ADD, net_.event_fd(), EPOLLIN, kTagNetRing));
  }
  GOBLIN_RETURN_IF_ERROR(
      EpollCtl(epoll_.get(), EPOLL_CTL_ADD, core_->doorbell_fd(), EPOLLIN, kTagCoreBell));
  GOBLIN_RETURN_IF_ERROR(EpollCtl(epoll_.get(), EPOLL_CTL_ADD, core_->socket_fd(),
                                  EPOLLIN | EPOLLRDHUP, kTagCoreSock));
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoErr("socket", errno);
  listen_ = UniqueFd(fd);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(options_.port < 0 ? 0 : options_.port));
  if (inet_pton(AF_INET, options_.listen_address.c_str(), &a.sin_addr) != 1) {
    return goblin::Err(StatusCode::kInvalidArgument, "--listen-address '{}' is not an IPv4 address",
                       options_.listen_address);
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    return ErrnoErr(fmt::format("bind {}:{}", options_.listen_address, options_.port), errno);
  }
  if (listen(fd, 1024) != 0) return ErrnoErr("listen", errno);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  return EpollCtl(epoll_.get(), EPOLL_CTL_ADD, fd, EPOLLIN, kTagListen);
}

// ---- the loop ----

VoidResult HttpServer::Impl::Run(int stop_fd) {
  if (stop_fd >= 0)
    GOBLIN_RETURN_IF_ERROR(EpollCtl(epoll_.get(), EPOLL_CTL_ADD, stop_fd, EPOLLIN, kTagStop));
  bool stop = false;
  uint64_t last_work = MonotonicNanos(), last_sweep = 0;
  while (!stop && !core_gone_) {
    size_t work = PollCore();
    if (!core_queue_.empty() && FlushCoreQueue()) ++work;
#if GOBLIN_HAVE_URING
    if (async_) work += net_.Reap([&](uint64_t ud, int32_t res) { OnNetCompletion(ud, res); });
#endif
    // Origins paused for the core's backlog resume when it shrinks.
    if (core_queue_bytes_ < kCoreQueueHigh / 2) {
      std::vector<uint64_t> resume;
      for (auto& [tag, o] : origins_) {
        if (!o->paused) continue;
        Conn* reader = Find(o->fill != nullptr ? o->fill->leader : o->pass_conn);
        if (reader == nullptr || reader->out_bytes < kClientOutputHigh / 2) resume.push_back(tag);
      }
      for (uint64_t tag : resume) {
        auto it = origins_.find(tag);
        if (it == origins_.end()) continue;
        Origin& o = *it->second;
        o.paused = false;
        (void)EpollCtl(epoll_.get(), EPOLL_CTL_MOD, o.fd.get(), EPOLLIN | EPOLLRDHUP, o.tag);
        OnOriginEvent(o, EPOLLIN);
        ++work;
      }
    }
    for (size_t i = 0; i < dirty_.size(); ++i) {
      if (!dirty_[i]->closed) Flush(*dirty_[i]);
    }
    dirty_.clear();
    for (auto it = conns_.begin(); it != conns_.end();) {
      it = it->second->closed && it->second->ops == 0 ? conns_.erase(it) : std::next(it);
    }
    for (Fill* f : dead_fills_) fills_.erase(f->key);
    dead_fills_.clear();
    uint64_t now = MonotonicNanos();
    if (now - last_sweep > 1'000'000'000ULL) {  // idle connections and origin timeouts
      last_sweep = now;
      uint64_t idle = static_cast<uint64_t>(options_.idle_timeout.count()) * 1'000'000'000ULL;
      uint64_t send_limit = static_cast<uint64_t>(options_.send_timeout.count()) * 1'000'000'000ULL;
      for (auto& [id, c] : conns_) {
        if (c->closed) continue;
        if (!c->ex && c->out_bytes == 0 && now - c->last_active > idle) {
          Close(*c);
        } else if (c->out_bytes > 0 && now - c->last_progress > send_limit) {
          ++stats_.slow_clients_dropped;
          GOBLIN_LOG_WARN(kLog, "client {} ({}) read nothing for {} s; closing it", c->id, c->peer,
                          options_.send_timeout.count());
          Close(*c);
        }
      }
      std::vector<Origin*> late, stale;
      for (auto& [tag, o] : origins_) {
        if (o->idle && now - o->idle_since > 30'000'000'000ULL) stale.push_back(o.get());
        if (o->deadline != 0 && now > o->deadline && !o->paused) late.push_back(o.get());
      }
      for (Origin* o : stale) CloseOrigin(*o);
      for (Origin* o : late) OnOriginDone(*o, false, "origin timeout");
    }
    int timeout = 0;
    if (work > 0) {
      last_work = now;
    } else if (now - last_work > 50'000 && now > poll_until_) {
      timeout = core_->PrepareSleep(!core_queue_.empty()) ? 1000 : 0;
    }
#if GOBLIN_HAVE_URING
    if (async_) net_.Submit();
#endif
    epoll_event events[128];
    int n = epoll_wait(epoll_.get(), events, 128, timeout);
    int wait_errno = errno;  // (FinishSleep reads an eventfd: keep epoll_wait's errno)
    if (timeout != 0) core_->FinishSleep();
    // EINTR also comes from io_uring task work, not only from signals.
    if (n < 0 && wait_errno != EINTR) return ErrnoErr("epoll_wait", wait_errno);
    for (int i = 0; i < n; ++i) {
      uint64_t tag = events[i].data.u64;
      uint32_t ev = events[i].events;
      if (tag == kTagStop) {
        stop = true;
      } else if (tag == kTagCoreBell) {
      } else if (tag == kTagCoreSock) {
        if (!core_->CheckAlive()) core_gone_ = true;
      } else if (tag == kTagListen) {
        Accept();
      } else if (tag == kTagNetRing) {
        // completions are reaped at the top of the loop
      } else if (tag & kOriginTagBit) {
        if (auto it = origins_.find(tag); it != origins_.end()) OnOriginEvent(*it->second, ev);
      } else if (Conn* c = Find(tag)) {
        if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) OnReadable(*c);
        if (!c->closed && (ev & EPOLLOUT)) Flush(*c);
      }
    }
    if (n > 0) last_work = MonotonicNanos();
  }
  conns_.clear();
  origins_.clear();
  if (core_gone_) return goblin::Err(StatusCode::kUnavailable, "goblin-core went away");
  return {};
}

// ---- clients ----

void HttpServer::Impl::Accept() {
  for (;;) {
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    int fd = accept4(listen_.get(), reinterpret_cast<sockaddr*>(&peer), &len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (conns_.size() >= options_.max_clients) {
      close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<Conn>();
    c->id = next_tag_++;
    c->fd = UniqueFd(fd);
    char ip[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip);
    c->peer = ip;
    c->last_active = MonotonicNanos();
    if (async_) {
      c->rbuf = std::make_unique<char[]>(64 * 1024);
      Conn& ref = *c;
      conns_.emplace(c->id, std::move(c));
      ++stats_.accepted;
      PostRecv(ref);
      continue;
    }
    if (!EpollCtl(epoll_.get(), EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLRDHUP, c->id)) continue;
    ++stats_.accepted;
    conns_.emplace(c->id, std::move(c));
  }
}

void HttpServer::Impl::OnReadable(Conn& c) {
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = read(c.fd.get(), buf, sizeof buf);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      c.last_active = MonotonicNanos();
      if (c.in.size() > options_.limits.max_header_bytes * 4 && c.ex) break;  // pipelined: enough
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
  while (!c.closed && !c.ex && !c.close_after && !c.in.empty()) {
    http::Request r;
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
  auto ex = std::make_unique<Exchange>();
  ex->method = std::string(r.method);
  ex->target = std::string(r.target);
  ex->host = Lower(r.Get("host"));
  ex->key = ex->host + ex->target;  // Varnish's default hash: Host + URL
  ex->range = std::string(r.Get("range"));
  ex->inm = std::string(r.Get("if-none-match"));
  ex->ims = std::string(r.Get("if-modified-since"));
  ex->keep_alive = r.keep_alive;
  ex->minor0 = r.minor == 0;
  ex->head = r.method == "HEAD";
  if (!ex->keep_alive) c.close_after = true;
  ex->purge_token_ok =
      !options_.purge_token.empty() && r.Get("x-purge-token") == options_.purge_token;
  ex->purge_mode = Lower(r.Get("x-purge"));
  ex->content_type_in = std::string(r.Get("content-type"));
  c.ex = std::move(ex);
}

void HttpServer::Impl::Dispatch(Conn& c) {
  Exchange& e = *c.ex;
  if (e.method == "PURGE") {
    bool allowed = std::find(options_.purge_allow.begin(), options_.purge_allow.end(), c.peer) !=
                   options_.purge_allow.end();
    if (e.purge_token_ok) allowed = true;
    if (!allowed) return Respond(c, 403, "403 Forbidden: PURGE is not allowed from here\n");
    uint64_t corr = next_corr_++;
    bool many = e.purge_mode == "prefix" || e.purge_mode == "all";
    // A prefix purge takes the key up to the query (Host + path); "all" empties the cache.
    std::string key = e.purge_mode == "all"      ? std::string()
                      : e.purge_mode == "prefix" ? e.key.substr(0, e.key.find('?'))
                                                 : e.key;
    bool sent = SendToCore(
        [&](uint8_t* b, size_t cap) {
          if (many)
            return wire::ObjectPurgeEncoder(b, cap)
                .set_correlation_id(corr)
                .set_prefix(key)
                .Finish();
          return wire::ObjectDeleteEncoder(b, cap).set_correlation_id(corr).set_key(key).Finish();
        },
        key.size() + 64);
    if (!sent) return Respond(c, 414, "414 URI Too Long\n");
    corr_[corr] = {CorrKind::kPurge, c.id, nullptr};
    e.corr = corr;
    return;
  }
  if (e.method != "GET" && e.method != "HEAD") {
    // Other methods go to the origin, uncached.
    ++stats_.passes;
    Origin* o = OpenOrigin(e.method, e.target, "", e.content_type_in, e.body);
    if (o == nullptr) return Respond(c, 502, "502 Bad Gateway: cannot reach the origin\n");
    o->pass_conn = c.id;
    e.state = ExState::kOrigin;
    return;
  }
  // Plain GETs ask for the body at once (the best first byte); the rest look first.
  e.via_head_lookup = e.head || !e.range.empty() || !e.inm.empty() || !e.ims.empty();
  if (e.via_head_lookup) {
    CoreHead(c);
  } else {
    CoreGet(c, 0, UINT64_MAX, /*follow=*/true);
  }
}

void HttpServer::Impl::Respond(Conn& c, int status, std::string_view body, std::string_view extra) {
  std::string head = fmt::format(
      "HTTP/1.1 {} {}\r\nDate: {}\r\nServer: goblin\r\nContent-Type: text/plain\r\nContent-Length: "
      "{}\r\n{}{}\r\n",
      status, Reason(status), http::FormatHttpDate(static_cast<int64_t>(NowSeconds())), body.size(),
      extra, c.close_after ? "Connection: close\r\n" : "");
  Write(c, head + std::string(c.ex && c.ex->head ? std::string_view() : body), true);
  FinishExchange(c);
}

void HttpServer::Impl::FinishExchange(Conn& c) {
  c.ex.reset();
  dirty_.push_back(&c);
  if (!c.close_after && !c.in.empty()) ProcessRequests(c);
  if (async_ && !c.ex) PostRecv(c);
}

void HttpServer::Impl::Write(Conn& c, std::string bytes, bool response_head) {
  if (bytes.empty()) return;
  if (c.out.empty()) c.last_progress = MonotonicNanos();
  c.out_bytes += bytes.size();
  c.out.push_back(Piece{std::move(bytes), nullptr, 0, 0, response_head});
  dirty_.push_back(&c);
}

void HttpServer::Impl::WriteLoan(Conn& c, const uint8_t* p, size_t n, uint64_t loan) {
  if (c.out.empty()) c.last_progress = MonotonicNanos();
  c.out_bytes += n;
  c.out.push_back(Piece{{}, p, n, loan});
  dirty_.push_back(&c);
}

void HttpServer::Impl::Flush(Conn& c) {
#if GOBLIN_HAVE_URING
  if (async_) {
    if (c.closed || c.write_inflight) return;
    if (c.out.empty()) {
      if (!c.ex && (c.close_after || !c.reading)) Close(c);
      return;
    }
    c.wiov_bytes = Gather(c, &c.wiov, 64);
    c.write_inflight = true;
    ++c.ops;
    net_.Writev(c.fd.get(), c.wiov.data(), static_cast<unsigned>(c.wiov.size()),
                (c.id << 2) | kOpWrite);
    return;
  }
#endif
  std::vector<iovec>& iov = c.wiov;
  while (!c.out.empty()) {
    Gather(c, &iov, 16);
    ssize_t n = writev(c.fd.get(), iov.data(), static_cast<int>(iov.size()));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      Close(c);
      return;
    }
    Advance(c, static_cast<size_t>(n));
  }
  if (c.out.empty() && !c.ex && (c.close_after || !c.reading)) {
    Close(c);
    return;
  }
  bool want = !c.out.empty();
  if (want != c.epollout) {
    uint32_t in = c.reading ? uint32_t{EPOLLIN | EPOLLRDHUP} : 0u;
    (void)EpollCtl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), in | (want ? uint32_t{EPOLLOUT} : 0u),
                   c.id);
    c.epollout = want;
  }
}

size_t HttpServer::Impl::Gather(Conn& c, std::vector<iovec>* iov, size_t max) {
  iov->clear();
  size_t bytes = 0, off = c.first_off;
  // A write that starts a response stops kFirstSendBytes after its headers.
  size_t limit = SIZE_MAX;
  for (auto it = c.out.begin(); it != c.out.end() && iov->size() < max; ++it) {
    if (it->response_head && off == 0) {
      if (!iov->empty()) break;  // the previous response's bytes go on their own
      limit = it->owned.size() + kFirstSendBytes;
    }
    const uint8_t* base =
        it->owned.empty() ? it->ptr : reinterpret_cast<const uint8_t*>(it->owned.data());
    size_t len = std::min((it->owned.empty() ? it->len : it->owned.size()) - off, limit - bytes);
    iov->push_back({const_cast<uint8_t*>(base + off), len});
    bytes += len;
    off = 0;
    if (bytes == limit) break;
  }
  return bytes;
}

void HttpServer::Impl::Advance(Conn& c, size_t left) {
  c.last_active = c.last_progress = MonotonicNanos();
  c.out_bytes -= left;
  while (left > 0 && !c.out.empty()) {
    Piece& p = c.out.front();
    size_t len = p.owned.empty() ? p.len : p.owned.size();
    size_t rest = len - c.first_off;
    if (left >= rest) {
      left -= rest;
      if (p.loan != 0) ReleaseLoan(p.loan);
      c.out.pop_front();
      c.first_off = 0;
    } else {
      c.first_off += left;
      left = 0;
    }
  }
}

void HttpServer::Impl::PostRecv(Conn& c) {
#if GOBLIN_HAVE_URING
  if (c.closed || c.recv_inflight || !c.reading) return;
  if (c.in.size() > (1u << 20) && c.ex) return;  // enough pipelined input: wait for this one
  c.recv_inflight = true;
  ++c.ops;
  net_.Recv(c.fd.get(), c.rbuf.get(), 64 * 1024, (c.id << 2) | kOpRecv);
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
    for (Piece& p : c.out) {
      if (p.loan != 0) ReleaseLoan(p.loan);
    }
    c.out.clear();
    return;
  }
  if (res < 0) {
    if (res == -EINTR || res == -EAGAIN) return Flush(c);
    return Close(c);
  }
  Advance(c, static_cast<size_t>(res));
  Flush(c);
}

void HttpServer::Impl::Close(Conn& c) {
  if (c.closed) return;
  c.closed = true;
#if GOBLIN_HAVE_URING
  if (async_) {
    if (c.ops > 0) net_.CancelFd(c.fd.get(), (c.id << 2) | kOpCancel);
    // (the fd closes now; io_uring holds its own reference until the cancels complete)
  }
#endif
  if (!async_) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
  c.fd.Reset();
  if (!c.write_inflight) {
    for (Piece& p : c.out) {
      if (p.loan != 0) ReleaseLoan(p.loan);
    }
    c.out.clear();
  }
  // A fill this client led goes on without it (others follow it; the cache wants it).
  if (c.ex && c.ex->state == ExState::kOrigin) {
    for (auto& [key, f] : fills_) {
      if (f->leader == c.id) f->leader = 0;
    }
    for (auto& [tag, o] : origins_) {
      if (o->pass_conn == c.id) {
        o->pass_conn = 0;
        CloseOrigin(*o);
        break;
      }
    }
  }
}

// ---- the core ----

bool HttpServer::Impl::SendToCore(const std::function<size_t(uint8_t*, size_t)>& encode,
                                  size_t max_bytes) {
  size_t cap = std::min<size_t>(encode_buf_.size(), std::max<size_t>(max_bytes, 64));
  size_t n = encode(encode_buf_.data(), cap);
  if (n == 0) return false;
  std::span<const uint8_t> msg(encode_buf_.data(), n);
  if (core_queue_.empty() && core_->TrySend(msg) == ring::SendStatus::kOk) return true;
  core_queue_.emplace_back(msg.begin(), msg.end());
  core_queue_bytes_ += n;
  return true;
}

bool HttpServer::Impl::FlushCoreQueue() {
  size_t sent = 0;
  while (sent < core_queue_.size() && core_->TrySend(core_queue_[sent]) == ring::SendStatus::kOk) {
    core_queue_bytes_ -= core_queue_[sent].size();
    ++sent;
  }
  core_queue_.erase(core_queue_.begin(), core_queue_.begin() + static_cast<ptrdiff_t>(sent));
  return sent > 0;
}

void HttpServer::Impl::ReleaseLoan(uint64_t loan) {
  SendToCore(
      [&](uint8_t* b, size_t cap) {
        return wire::LoanReleaseEncoder(b, cap).set_loan_id(loan).Finish();
      },
      32);
}

uint64_t HttpServer::Impl::CoreGet(Conn& c, uint64_t offset, uint64_t length, bool follow) {
  uint64_t corr = next_corr_++;
  const std::string& key = c.ex->key;
  uint32_t flags = wire::kGetLoans | (follow ? wire::kGetFollowFill : 0);
  bool sent = SendToCore(
      [&](uint8_t* b, size_t cap) {
        return wire::ObjectGetEncoder(b, cap)
            .set_correlation_id(corr)
            .set_offset(offset)
            .set_length(length)
            .set_flags(flags)
            .set_key(key)
            .Finish();
      },
      key.size() + 64);
  if (!sent) {
    Respond(c, 414, "414 URI Too Long\n");
    return 0;
  }
  corr_[corr] = {CorrKind::kLookup, c.id, nullptr};
  c.ex->corr = corr;
  c.ex->state = ExState::kLookup;
  ExpectCoreReply();
  return corr;
}

uint64_t HttpServer::Impl::CoreHead(Conn& c) {
  uint64_t corr = next_corr_++;
  const std::string& key = c.ex->key;
  bool sent = SendToCore(
      [&](uint8_t* b, size_t cap) {
        return wire::ObjectHeadEncoder(b, cap).set_correlation_id(corr).set_key(key).Finish();
      },
      key.size() + 64);
  if (!sent) {
    Respond(c, 414, "414 URI Too Long\n");
    return 0;
  }
  corr_[corr] = {CorrKind::kHeadLookup, c.id, nullptr};
  c.ex->corr = corr;
  c.ex->state = ExState::kLookup;
  ExpectCoreReply();
  return corr;
}

size_t HttpServer::Impl::PollCore() {
  auto n = core_->Poll([&](std::span<const uint8_t> m) { OnCoreMessage(m); }, 512);
  if (!n) {
    GOBLIN_LOG_ERROR(kLog, "core link: {}", n.error());
    core_gone_ = true;
    return 0;
  }
  return *n;
}

std::string HttpServer::Impl::HitHead(Exchange& ex, int status, std::string_view meta,
                                      uint64_t created_ns, std::string_view extra) {
  uint64_t now = NowUnixNanos();
  uint64_t age = created_ns != 0 && now > created_ns ? (now - created_ns) / 1'000'000'000ULL : 0;
  return fmt::format(
      "HTTP/1.1 {} {}\r\n{}Date: {}\r\nAge: {}\r\nVia: 1.1 goblin\r\nX-Cache: {}\r\nAccept-Ranges: "
      "bytes\r\n{}{}\r\n",
      status, Reason(status), meta, http::FormatHttpDate(static_cast<int64_t>(NowSeconds())), age,
      ex.is_miss ? "MISS" : "HIT", extra, ex.keep_alive ? "" : "Connection: close\r\n");
}

void HttpServer::Impl::OnCoreMessage(std::span<const uint8_t> m) {
  sbe::MessageHeader h;
  if (!sbe::MessageHeader::Read(m, &h) || m.size() < 16) return;
  uint64_t corr = sbe::Load<uint64_t>(m.data() + 8);
  auto it = corr_.find(corr);
  if (it == corr_.end()) {
    if (h.template_id == wire::LoanDecoder::kTemplateId) {  // nobody wants it any more
      if (auto l = wire::LoanDecoder::Decode(m)) ReleaseLoan(l->loan_id());
    }
    return;
  }
  CorrTarget t = it->second;
  if (t.kind == CorrKind::kFillBegin || t.kind == CorrKind::kFillCommit) {
    Fill* f = t.fill;
    corr_.erase(it);
    if (h.template_id == wire::FillLeaseDecoder::kTemplateId) {
      auto lease = wire::FillLeaseDecoder::Decode(m);
      if (lease && lease->state() == wire::LeaseState::kGranted) {
        f->put_id = lease->put_id();
        f->granted = true;
        FillGranted(*f);
      } else {
        // Another process fills this key: follow it, drop our origin fetch.
        f->in_progress_elsewhere = true;
        f->cacheable = false;
        f->pending.clear();
        ReleaseWaiters(*f, /*follow=*/true);  // (our leader keeps streaming from the origin)
        if (f->origin_done) EndFill(*f);
      }
    } else if (h.template_id == wire::PutResultDecoder::kTemplateId) {
      ++stats_.fills;
      EndFill(*f);
    } else if (h.template_id == wire::ErrorDecoder::kTemplateId) {
      auto e = wire::ErrorDecoder::Decode(m);
      GOBLIN_LOG_WARN(kLog, "fill of '{}': {}", f->key, e ? std::string(e->text()) : "error");
      ++stats_.fills_aborted;
      f->cacheable = false;
      f->granted = false;
      ReleaseWaiters(*f, /*follow=*/false);
      if (t.kind == CorrKind::kFillCommit) EndFill(*f);
    }
    return;
  }
  Conn* c = Find(t.conn);
  bool last_message = false;
  if (c == nullptr || !c->ex || c->ex->corr != corr) {
    if (h.template_id == wire::LoanDecoder::kTemplateId) {
      if (auto l = wire::LoanDecoder::Decode(m)) {
        ReleaseLoan(l->loan_id());
        last_message = l->last() != 0;
      }
    } else if (h.template_id == wire::ObjectDataDecoder::kTemplateId) {
      if (auto d = wire::ObjectDataDecoder::Decode(m)) last_message = d->last() != 0;
    } else {
      last_message = true;
    }
    if (last_message) corr_.erase(it);
    return;
  }
  switch (h.template_id) {
    case wire::ObjectInfoDecoder::kTemplateId: {
      auto info = wire::ObjectInfoDecoder::Decode(m);
      if (!info) return;
      // A HEAD lookup or a miss is the whole answer; a GET's body follows.
      if (info->status() == wire::LookupStatus::kMiss || t.kind == CorrKind::kHeadLookup)
        corr_.erase(it);
      OnObjectInfo(*c, *info);
      return;
    }
    case wire::LoanDecoder::kTemplateId: {
      auto l = wire::LoanDecoder::Decode(m);
      if (!l) return;
      for (auto seg : l->segments()) {
        int k = seg.pool() == wire::PoolKind::kHead ? 0 : 1;
        if (pools_[k] == nullptr || seg.pool_offset() + seg.length() > pool_bytes_[k]) break;
        stats_.bytes_lent += seg.length();
        OnCoreBody(*c, seg.object_offset(), {pools_[k] + seg.pool_offset(), seg.length()},
                   l->loan_id(), l->last() != 0);
      }
      if (l->last() != 0) corr_.erase(it);
      return;
    }
    case wire::ObjectDataDecoder::kTemplateId: {
      auto d = wire::ObjectDataDecoder::Decode(m);
      if (!d) return;
      bool last = d->last() != 0;
      if (last) corr_.erase(it);
      OnCoreBody(*c, d->offset(), d->bytes_bytes(), 0, last);
      return;
    }
    case wire::PurgeAckDecoder::kTemplateId: {
      auto a = wire::PurgeAckDecoder::Decode(m);
      corr_.erase(it);
      ++stats_.purges;
      return Respond(*c, 200, fmt::format("200 Purged {} objects\n", a ? a->deleted() : 0));
    }
    case wire::DeleteAckDecoder::kTemplateId: {
      auto a = wire::DeleteAckDecoder::Decode(m);
      corr_.erase(it);
      ++stats_.purges;
      if (a && a->deleted()) return Respond(*c, 200, "200 Purged\n");
      return Respond(*c, 404, "404 Not in cache\n");
    }
    case wire::ErrorDecoder::kTemplateId: {
      auto e = wire::ErrorDecoder::Decode(m);
      corr_.erase(it);
      std::string text = e ? std::string(e->text()) : "error";
      if (c->ex->state == ExState::kCoreBody) {
        // Headers are out: closing mid-body is the only honest signal.
        GOBLIN_LOG_WARN(kLog, "'{}' failed mid-body: {}", c->ex->key, text);
        c->close_after = true;
        c->ex.reset();
        dirty_.push_back(c);
        return;
      }
      return Respond(*c, 503, "503 " + text + "\n");
    }
    default:
      return;
  }
}

void HttpServer::Impl::OnObjectInfo(Conn& c, const wire::ObjectInfoDecoder& info) {
  Exchange& ex = *c.ex;
  if (ex.state == ExState::kCoreBody) return;  // a later part of a multi-range answer
  if (info.status() == wire::LookupStatus::kMiss) {
    if (ex.follow) {
      // The fill we waited for ended before we asked (committed and gone, or abandoned).
      ex.follow = false;
    }
    return Miss(c);
  }
  std::string meta(info.metadata());
  uint64_t size = info.object_size();
  bool filling = info.status() == wire::LookupStatus::kFilling;
  if (!ex.is_miss) ++stats_.hits;
  if (ex.via_head_lookup) {
    // Conditionals first, then ranges.
    std::string_view etag = MetaGet(meta, "etag");
    std::string_view lm = MetaGet(meta, "last-modified");
    bool not_modified = false;
    if (!ex.inm.empty()) {
      not_modified = EtagMatches(ex.inm, etag);
    } else if (!ex.ims.empty() && !lm.empty()) {
      auto since = http::ParseHttpDate(ex.ims), modified = http::ParseHttpDate(lm);
      not_modified = since && modified && *modified <= *since;
    }
    if (not_modified) {
      Write(c, HitHead(ex, 304, meta, info.created_nanos(), ""), true);
      return FinishExchange(c);
    }
    if (ex.head) {
      Write(
          c,
          HitHead(ex, 200, meta, info.created_nanos(), fmt::format("Content-Length: {}\r\n", size)),
          true);
      return FinishExchange(c);
    }
    auto rr = http::ParseRange(ex.range, size, &ex.ranges);
    if (rr == http::RangeResult::kUnsatisfiable) {
      Write(c,
            HitHead(ex, 416, "", info.created_nanos(),
                    fmt::format("Content-Range: bytes */{}\r\nContent-Length: 0\r\n", size)),
            true);
      return FinishExchange(c);
    }
    ex.size = size;
    if (rr == http::RangeResult::kOk && ex.ranges.size() == 1) {
      const auto& r = ex.ranges[0];
      Write(c,
            HitHead(ex, 206, meta, info.created_nanos(),
                    fmt::format("Content-Range: bytes {}-{}/{}\r\nContent-Length: {}\r\n", r.first,
                                r.last, size, r.length())),
            true);
      CoreGet(c, r.first, r.length(), false);
      ex.state = ExState::kCoreBody;
      return;
    }
    if (rr == http::RangeResult::kOk) {
      // multipart/byteranges: the length is known up front.
      std::mt19937_64 rng(NowUnixNanos());
      ex.boundary = fmt::format("goblin{:016x}", rng());
      ex.content_type = std::string(MetaGet(meta, "content-type"));
      uint64_t total = 0;
      for (const auto& r : ex.ranges) {
        total +=
            fmt::format("\r\n--{}\r\n{}Content-Range: bytes {}-{}/{}\r\n\r\n", ex.boundary,
                        ex.content_type.empty() ? "" : "Content-Type: " + ex.content_type + "\r\n",
                        r.first, r.last, size)
                .size() +
            r.length();
      }
      total += fmt::format("\r\n--{}--\r\n", ex.boundary).size();
      std::string m2;
      for (size_t pos = 0; pos < meta.size();) {  // the parts carry the type; drop it here
        size_t nl = meta.find("\r\n", pos);
        std::string_view line = std::string_view(meta).substr(pos, nl - pos + 2);
        if (!line.starts_with("Content-Type:") && !line.starts_with("content-type:")) m2 += line;
        pos = nl + 2;
      }
      Write(
          c,
          HitHead(ex, 206, m2, info.created_nanos(),
                  fmt::format("Content-Type: multipart/byteranges; boundary={}\r\nContent-Length: "
                              "{}\r\n",
                              ex.boundary, total)),
          true);
      ex.range_idx = 0;
      ex.state = ExState::kCoreBody;
      return StartRangePart(c);
    }
    // No (usable) range: the whole object.
    Write(c,
          HitHead(ex, 200, meta, info.created_nanos(), fmt::format("Content-Length: {}\r\n", size)),
          true);
    CoreGet(c, 0, UINT64_MAX, false);
    ex.state = ExState::kCoreBody;
    return;
  }
  // ObjectGet answered: the body follows.
  ex.size = size;
  if (ex.head) {
    Write(c,
          HitHead(ex, 200, meta, info.created_nanos(),
                  size == UINT64_MAX ? "" : fmt::format("Content-Length: {}\r\n", size)),
          true);
    return FinishExchange(c);
  }
  if (filling && size == UINT64_MAX) {
    ex.chunked_out = !ex.minor0;
    if (ex.minor0) c.close_after = true;
    Write(c,
          HitHead(ex, 200, meta, info.created_nanos(),
                  ex.chunked_out ? "Transfer-Encoding: chunked\r\n" : ""),
          true);
  } else {
    Write(c,
          HitHead(ex, 200, meta, info.created_nanos(), fmt::format("Content-Length: {}\r\n", size)),
          true);
  }
  ex.state = ExState::kCoreBody;
  if (size == 0) {
    // The core still sends one empty last record; OnCoreBody finishes the exchange.
  }
}

void HttpServer::Impl::StartRangePart(Conn& c) {
  Exchange& ex = *c.ex;
  const auto& r = ex.ranges[ex.range_idx];
  Write(c, fmt::format("\r\n--{}\r\n{}Content-Range: bytes {}-{}/{}\r\n\r\n", ex.boundary,
                       ex.content_type.empty() ? "" : "Content-Type: " + ex.content_type + "\r\n",
                       r.first, r.last, ex.size));
  CoreGet(c, r.first, r.length(), false);
  ex.state = ExState::kCoreBody;
}

void HttpServer::Impl::OnCoreBody(Conn& c, uint64_t offset, std::span<const uint8_t> bytes,
                                  uint64_t loan, bool last) {
  (void)offset;
  Exchange& ex = *c.ex;
  if (ex.chunked_out && !bytes.empty()) Write(c, fmt::format("{:x}\r\n", bytes.size()));
  if (loan != 0) {
    if (bytes.empty()) {
      ReleaseLoan(loan);
    } else {
      WriteLoan(c, bytes.data(), bytes.size(), loan);
    }
  } else if (!bytes.empty()) {
    Write(c, std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }
  if (ex.chunked_out && !bytes.empty()) Write(c, "\r\n");
  if (!last) return;
  if (!ex.ranges.empty() && ex.ranges.size() > 1) {
    if (++ex.range_idx < ex.ranges.size()) return StartRangePart(c);
    Write(c, fmt::format("\r\n--{}--\r\n", ex.boundary));
  }
  if (ex.chunked_out) Write(c, "0\r\n\r\n");
  FinishExchange(c);
}

// ---- misses and the origin ----

void HttpServer::Impl::Miss(Conn& c) {
  Exchange& ex = *c.ex;
  ex.is_miss = true;
  ++stats_.misses;
  auto fit = fills_.find(ex.key);
  bool ranged = !ex.range.empty();
  if (fit != fills_.end()) {
    Fill& f = *fit->second;
    if (f.granted && !ranged) {  // follow it through the core now
      ++stats_.coalesced;
      return Follow(c);
    }
    if (!ranged || !f.decided) {
      ++stats_.coalesced;
      f.waiters.push_back(c.id);
      ex.state = ExState::kWaitFill;
      return;
    }
  }
  if (ranged) {
    // Answer the range from the origin at once; fill the whole object behind it.
    if (fit == fills_.end()) StartFill(ex, false, 0);
    ++stats_.passes;
    Origin* o = OpenOrigin(ex.head ? "HEAD" : "GET", ex.target, ex.range);
    if (o == nullptr) return Respond(c, 502, "502 Bad Gateway: cannot reach the origin\n");
    o->pass_conn = c.id;
    ex.state = ExState::kOrigin;
    return;
  }
  Fill* f = StartFill(ex, true, c.id);
  if (f == nullptr) return Respond(c, 502, "502 Bad Gateway: cannot reach the origin\n");
  ex.state = ExState::kOrigin;
}

HttpServer::Impl::Fill* HttpServer::Impl::StartFill(Exchange& ex, bool leader_is_client,
                                                    uint64_t leader) {
  auto f = std::make_unique<Fill>();
  f->key = ex.key;
  f->target = ex.target;
  f->host = ex.host;
  f->leader = leader_is_client ? leader : 0;
  f->leader_head = leader_is_client && ex.head;
  Origin* o = OpenOrigin("GET", ex.target, "");
  if (o == nullptr) return nullptr;
  o->fill = f.get();
  f->origin = o;
  Fill* p = f.get();
  fills_[ex.key] = std::move(f);
  return p;
}

HttpServer::Impl::Origin* HttpServer::Impl::OpenOrigin(const std::string& method,
                                                       const std::string& target,
                                                       const std::string& range,
                                                       const std::string& content_type,
                                                       const std::string& body) {
  const bool head = method == "HEAD";
  ++stats_.origin_requests;
  bool with_body = method != "GET" && method != "HEAD";
  std::string request = fmt::format(
      "{} {}{} HTTP/1.1\r\nHost: {}\r\nUser-Agent: goblin-gateway\r\nVia: 1.1 goblin\r\n{}{}{}\r\n",
      method, origin_prefix_, target, origin_hostport_,
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
    ++stats_.origin_errors;
    return nullptr;
  }
  Origin* p = o.get();
  origins_.emplace(o->tag, std::move(o));
  return p;
}

bool HttpServer::Impl::ConnectOrigin(Origin& o) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(origin_host_.c_str(), origin_port_.c_str(), &hints, &res) != 0 ||
      res == nullptr) {
    return false;
  }
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int rc = fd < 0 ? -1 : connect(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (fd < 0 || (rc != 0 && errno != EINPROGRESS)) {
    if (fd >= 0) close(fd);
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
      if (stale_retry()) return;
      return OnOriginDone(o, false, "cannot reach the origin");
    }
    if (n > 0) o.out.erase(0, static_cast<size_t>(n));
    if (o.out.empty())
      (void)EpollCtl(epoll_.get(), EPOLL_CTL_MOD, o.fd.get(), EPOLLIN | EPOLLRDHUP, o.tag);
  }
  if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) return;
  char buf[256 * 1024];
  uint64_t tag = o.tag;
  for (;;) {
    if (o.paused) return;
    ssize_t n = read(o.fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (stale_retry()) return;
      return OnOriginDone(o, false, "origin connection reset");
    }
    if (n == 0) {
      if (stale_retry()) return;
      if (o.head_done && o.until_close) return OnOriginDone(o, true, "");
      return OnOriginDone(o, false,
                          o.head_done ? "origin closed mid-body (truncated)" : "origin closed");
    }
    o.deadline = MonotonicNanos() +
                 static_cast<uint64_t>(options_.origin_timeout.count()) * 1'000'000'000ULL;
    std::string_view data(buf, static_cast<size_t>(n));
    if (!o.head_done) {
      o.in.append(data);
      auto p = http::ParseResponse(o.in, http::Limits{}, o.head_request, &o.resp);
      if (p == http::Parse::kNeedMore) continue;
      if (p == http::Parse::kError) return OnOriginDone(o, false, "malformed origin response");
      if (o.resp.status < 200) {  // 1xx: skip it
        o.in.erase(0, o.resp.head_bytes);
        continue;
      }
      o.head_done = true;
      o.until_close = !o.resp.framing.chunked && !o.resp.framing.content_length;
      o.body_left = o.resp.framing.content_length.value_or(0);
      std::string rest = o.in.substr(o.resp.head_bytes);
      OnOriginHead(o);
      if (origins_.find(tag) == origins_.end()) return;
      o.in.clear();
      data = {};
      if (!rest.empty()) {
        o.in = std::move(rest);
        data = o.in;
      }
      if (!o.resp.framing.chunked && !o.until_close && o.body_left == 0 && data.empty()) {
        return OnOriginDone(o, true, "");
      }
    }
    if (data.empty()) continue;
    if (o.resp.framing.chunked) {
      std::string feed = std::string(data);
      std::vector<std::string_view> pieces;
      size_t pos = 0;
      auto st = o.chunked.Feed(feed, &pos, &pieces);
      for (auto piece : pieces) OnOriginBody(o, piece);
      if (origins_.find(tag) == origins_.end()) return;
      if (st == http::Parse::kError)
        return OnOriginDone(o, false, "bad chunked body from the origin");
      if (st == http::Parse::kComplete) return OnOriginDone(o, true, "");
      if (pos < feed.size()) {
        // (a partial size line stays for the next read)
        o.in = feed.substr(pos);
      } else {
        o.in.clear();
      }
    } else {
      if (!o.until_close && data.size() > o.body_left) data = data.substr(0, o.body_left);
      OnOriginBody(o, data);
      if (origins_.find(tag) == origins_.end()) return;
      if (!o.until_close) {
        o.body_left -= data.size();
        if (o.body_left == 0) return OnOriginDone(o, true, "");
      }
      o.in.clear();
    }
  }
}

void HttpServer::Impl::OnOriginHead(Origin& o) {
  const http::Response& r = o.resp;
  std::string passthrough;
  for (const auto& h : r.headers) {
    if (EndToEnd(h.name)) passthrough += fmt::format("{}: {}\r\n", h.name, h.value);
  }
  if (o.pass_conn != 0) {  // a pass-through (e.g. a range on a miss)
    Conn* c = Find(o.pass_conn);
    if (c == nullptr) return CloseOrigin(o);
    std::string framing;
    if (r.framing.content_length)
      framing = fmt::format("Content-Length: {}\r\n", *r.framing.content_length);
    else if (!c->ex->minor0)
      framing = "Transfer-Encoding: chunked\r\n";
    c->ex->chunked_out = framing.starts_with("Transfer");
    if (framing.empty()) c->close_after = true;
    Write(
        *c,
        fmt::format("HTTP/1.1 {} {}\r\n{}Date: {}\r\nVia: 1.1 goblin\r\nX-Cache: MISS\r\n{}{}\r\n",
                    r.status, r.reason, passthrough,
                    http::FormatHttpDate(static_cast<int64_t>(NowSeconds())), framing,
                    c->close_after ? "Connection: close\r\n" : ""),
        true);
    return;
  }
  Fill& f = *o.fill;
  f.decided = true;
  auto cc = http::ParseCacheControl(r.Get("cache-control"));
  f.cacheable = r.status == 200 && !cc.no_store && !cc.is_private && !cc.no_cache &&
                r.Get("set-cookie").empty();
  int64_t ttl = options_.default_ttl.count();
  if (cc.s_maxage) {
    ttl = *cc.s_maxage;
  } else if (cc.max_age) {
    ttl = *cc.max_age;
  } else if (auto exp = http::ParseHttpDate(r.Get("expires"))) {
    auto date = http::ParseHttpDate(r.Get("date"));
    ttl = *exp - (date ? *date : static_cast<int64_t>(NowSeconds()));
  }
  if (ttl <= 0) f.cacheable = false;
  Conn* leader = Find(f.leader);
  if (leader != nullptr) {
    std::string framing;
    if (r.framing.content_length) {
      framing = fmt::format("Content-Length: {}\r\n", *r.framing.content_length);
    } else if (!leader->ex->minor0) {
      framing = "Transfer-Encoding: chunked\r\n";
    }
    leader->ex->chunked_out = framing.starts_with("Transfer") && !leader->ex->head;
    if (framing.empty()) leader->close_after = true;
    Write(*leader,
          fmt::format("HTTP/1.1 {} {}\r\n{}Date: {}\r\nAge: 0\r\nVia: 1.1 goblin\r\nX-Cache: "
                      "MISS\r\n{}{}{}\r\n",
                      r.status, r.reason, passthrough,
                      http::FormatHttpDate(static_cast<int64_t>(NowSeconds())),
                      f.cacheable ? "Accept-Ranges: bytes\r\n" : "", framing,
                      leader->close_after ? "Connection: close\r\n" : ""),
          true);
    if (leader->ex->head) {
      leader->ex->state = ExState::kDone;
      f.leader = 0;
      FinishExchange(*leader);
    }
  }
  if (!f.cacheable) {
    ++stats_.passes;
    ReleaseWaiters(f, /*follow=*/false);  // each fetches for itself
    return;
  }
  uint64_t corr = next_corr_++;
  uint64_t expected = r.framing.content_length.value_or(UINT64_MAX);
  std::string key = f.key;
  bool sent = SendToCore(
      [&](uint8_t* b, size_t cap) {
        return wire::PutBeginEncoder(b, cap)
            .set_correlation_id(corr)
            .set_expected_size(expected)
            .set_ttl_nanos(static_cast<uint64_t>(ttl) * 1'000'000'000ULL)
            .set_key(key)
            .set_metadata(passthrough)
            .Finish();
      },
      key.size() + passthrough.size() + 96);
  if (!sent) {
    f.cacheable = false;
    ReleaseWaiters(f, false);
    return;
  }
  f.begin_corr = corr;
  corr_[corr] = {CorrKind::kFillBegin, 0, &f};
}

void HttpServer::Impl::SendPutData(Fill& f, std::string_view bytes) {
  const size_t max = core_->max_message() - 64;
  while (!bytes.empty()) {
    size_t n = std::min(max, bytes.size());
    std::string_view part = bytes.substr(0, n);
    uint64_t offset = f.sent;
    f.sent += n;
    SendToCore(
        [&](uint8_t* b, size_t cap) {
          return wire::PutDataEncoder(b, cap)
              .set_put_id(f.put_id)
              .set_offset(offset)
              .set_bytes(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(part.data()),
                                                  part.size()))
              .Finish();
        },
        n + 64);
    bytes.remove_prefix(n);
  }
}

void HttpServer::Impl::OnOriginBody(Origin& o, std::string_view bytes) {
  if (bytes.empty()) return;
  if (o.pass_conn != 0) {
    Conn* c = Find(o.pass_conn);
    if (c == nullptr) return CloseOrigin(o);
    if (c->ex->chunked_out) Write(*c, fmt::format("{:x}\r\n", bytes.size()));
    Write(*c, std::string(bytes));
    if (c->ex->chunked_out) Write(*c, "\r\n");
    if (c->out_bytes > kClientOutputHigh) {  // the client sets the pace
      o.paused = true;
      (void)EpollCtl(epoll_.get(), EPOLL_CTL_MOD, o.fd.get(), 0, o.tag);
    }
    return;
  }
  Fill& f = *o.fill;
  f.received += bytes.size();
  if (Conn* leader = Find(f.leader)) {
    if (leader->ex->chunked_out) Write(*leader, fmt::format("{:x}\r\n", bytes.size()));
    Write(*leader, std::string(bytes));
    if (leader->ex->chunked_out) Write(*leader, "\r\n");
  }
  if (f.cacheable) {
    if (f.granted) {
      SendPutData(f, bytes);
    } else if (!f.in_progress_elsewhere) {
      f.pending.append(bytes);  // until the lease arrives
    }
  }
  Conn* leader = Find(f.leader);
  if (core_queue_bytes_ > kCoreQueueHigh ||
      (leader != nullptr && leader->out_bytes > kClientOutputHigh)) {
    o.paused = true;
    (void)EpollCtl(epoll_.get(), EPOLL_CTL_MOD, o.fd.get(), 0, o.tag);
  }
}

void HttpServer::Impl::FillGranted(Fill& f) {
  if (!f.pending.empty()) {
    std::string p = std::move(f.pending);
    f.pending.clear();
    SendPutData(f, p);
  }
  ReleaseWaiters(f, /*follow=*/true);
  if (f.origin_done) CommitFill(f);
}

void HttpServer::Impl::CommitFill(Fill& f) {
  uint64_t corr = next_corr_++;
  SendToCore(
      [&](uint8_t* b, size_t cap) {
        return wire::PutCommitEncoder(b, cap)
            .set_correlation_id(corr)
            .set_put_id(f.put_id)
            .set_total_size(f.received)
            .Finish();
      },
      64);
  corr_[corr] = {CorrKind::kFillCommit, 0, &f};
}

void HttpServer::Impl::ReleaseWaiters(Fill& f, bool follow) {
  std::vector<uint64_t> waiters = std::move(f.waiters);
  f.waiters.clear();
  for (uint64_t id : waiters) {
    Conn* c = Find(id);
    if (c == nullptr || !c->ex) continue;
    if (follow && c->ex->range.empty()) {
      Follow(*c);
    } else {
      // Not cacheable: this request fetches for itself.
      ++stats_.passes;
      Origin* o = OpenOrigin(c->ex->head ? "HEAD" : "GET", c->ex->target, c->ex->range);
      if (o == nullptr) {
        Respond(*c, 502, "502 Bad Gateway: cannot reach the origin\n");
        continue;
      }
      o->pass_conn = c->id;
      c->ex->state = ExState::kOrigin;
    }
  }
}

void HttpServer::Impl::Follow(Conn& c) {
  // An in-progress fill is visible to ObjectGet (follow) only, so HEAD and conditional
  // requests read it as a GET (a HEAD stops after the headers).
  c.ex->follow = true;
  c.ex->via_head_lookup = false;
  CoreGet(c, 0, c.ex->head ? 0 : UINT64_MAX, true);
}

void HttpServer::Impl::OnOriginDone(Origin& o, bool ok, std::string_view why) {
  if (!ok) {
    ++stats_.origin_errors;
    GOBLIN_LOG_WARN(kLog, "origin: {}", why);
  }
  if (o.pass_conn != 0) {
    if (Conn* c = Find(o.pass_conn)) {
      if (!o.head_done) {
        Respond(*c, why.find("timeout") != std::string_view::npos ? 504 : 502,
                fmt::format("502 Bad Gateway: {}\n", why));
      } else if (!ok) {
        c->close_after = true;  // mid-body: closing is the only honest signal
        c->ex.reset();
        dirty_.push_back(c);
      } else {
        if (c->ex->chunked_out) Write(*c, "0\r\n\r\n");
        FinishExchange(*c);
      }
    }
    return ok ? ReleaseOrigin(o) : CloseOrigin(o);
  }
  Fill& f = *o.fill;
  f.origin = nullptr;
  Conn* leader = Find(f.leader);
  if (!ok) {
    if (leader != nullptr) {
      if (!o.head_done) {
        Respond(*leader, why.find("timeout") != std::string_view::npos ? 504 : 502,
                fmt::format("502 Bad Gateway: {}\n", why));
      } else {
        leader->close_after = true;
        leader->ex.reset();
        dirty_.push_back(leader);
      }
    }
    // Never cached: the fill is abandoned (its followers see Aborted and close), waiters
    // get the error too.
    if (f.granted) {
      SendToCore(
          [&](uint8_t* b, size_t cap) {
            return wire::PutAbortEncoder(b, cap).set_put_id(f.put_id).Finish();
          },
          64);
      ++stats_.fills_aborted;
    }
    for (uint64_t id : f.waiters) {
      if (Conn* c = Find(id)) Respond(*c, 502, fmt::format("502 Bad Gateway: {}\n", why));
    }
    f.waiters.clear();
    CloseOrigin(o);
    return EndFill(f);
  }
  if (leader != nullptr && leader->ex && leader->ex->state == ExState::kOrigin) {
    if (leader->ex->chunked_out) Write(*leader, "0\r\n\r\n");
    f.leader = 0;
    FinishExchange(*leader);
  }
  ReleaseOrigin(o);
  f.origin_done = true;
  if (f.cacheable && f.granted) {
    CommitFill(f);
  } else if (!f.cacheable || f.in_progress_elsewhere) {
    EndFill(f);
  }
  // (granted pending: FillGranted commits when the lease arrives)
}

void HttpServer::Impl::CloseOrigin(Origin& o) {
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, o.fd.get(), nullptr);
  if (o.fill != nullptr && o.fill->origin == &o) o.fill->origin = nullptr;
  origins_.erase(o.tag);  // destroys o
}

void HttpServer::Impl::EndFill(Fill& f) {
  if (f.origin != nullptr) {
    f.origin->fill = nullptr;
    Origin* o = f.origin;
    f.origin = nullptr;
    CloseOrigin(*o);
  }
  for (auto& [corr, t] : corr_) {
    if (t.fill == &f) t.fill = nullptr;
  }
  std::erase_if(corr_, [](const auto& kv) {
    return (kv.second.kind == CorrKind::kFillBegin || kv.second.kind == CorrKind::kFillCommit) &&
           kv.second.fill == nullptr;
  });
  dead_fills_.push_back(&f);
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  GOBLIN_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

VoidResult HttpServer::Run(int stop_fd) { return impl_->Run(stop_fd); }
const HttpStats& HttpServer::stats() const { return impl_->stats_; }
int HttpServer::port() const { return impl_->port_; }

}  // namespace goblin::gateway
