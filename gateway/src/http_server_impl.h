// The HTTP front's state and its parts, one file each:
//   http_server.cpp  setup, the event loop, timers (idle clients, slow clients, origins)
//   http_client.cpp  client connections: accept, parse, dispatch, queue and write responses
//                    (--net sync: epoll readiness; --net async: NetRing), close
//   http_hit.cpp     answers from the core: lookups, ranges, multipart, conditionals, PURGE,
//                    what happens when the core link goes down
//   http_local.cpp   local hits: heads served from the mapped pools without the core
//                    (descriptors learned from its answers, checked against its head table)
//   http_fill.cpp    misses: the fill of one key from the origin into the core, its leader,
//                    its waiters and followers, and how it ends (committed or aborted)
//   http_origin.cpp  origin connections: address, connect, keep-alive pool, response parsing
//   http_tls.cpp     HTTPS connections: the handshake, reads, and writes encrypted in user
//                    space where the kernel has no kTLS (always by epoll readiness, also
//                    in a --net async worker)
//   http_access_log.cpp  the access log's line for each exchange (--access-log)
//   http_h2.cpp      HTTP/2 (nghttp2): a connection's session, and each stream as a
//                    connection of its own without a socket (a "stream conn") whose
//                    HTTP/1.1 request is synthesized from the stream's headers and whose
//                    response is turned into HEADERS and DATA frames, the body lent from
//                    the stream conn's pieces (no copy)
// A fill ends exactly one way: committed (PutResult) or aborted (origin fault, core error,
// core link lost); on abort nothing is stored, every client reading it is cut off or told
// 5xx, and the key is free for the next request at once. See docs/architecture.md.
// Threading: everything here runs on the front's one loop thread.
#pragma once

#include <netinet/in.h>
#include <nghttp2/nghttp2.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core_link.h"
#include "goblin/common/fd.h"
#include "goblin/common/recycling_map.h"
#include "goblin/gateway/access_log.h"
#include "goblin/gateway/cache_policy.h"
#include "goblin/gateway/h2_message.h"
#include "goblin/gateway/http.h"
#include "goblin/gateway/http_server.h"
#include "goblin/wire/goblin_wire.h"
#include "hot_heads.h"
#include "http_util.h"
#include "net_ring.h"
#include "published_stats.h"
#include "stable_queue.h"

namespace goblin::gateway {

using detail::OriginFault;

inline constexpr size_t kClientOutputHigh = 8 << 20;  // pause the origin above this per client
inline constexpr size_t kCoreBacklogHigh = 16 << 20;  // pause origins while the core is behind
// Body bytes sent with a response's headers in its first write (the rest follows at once):
// a small first segment reaches the client sooner (on loopback a 64 KiB first write put
// ~70 us between the request and the response's first byte that a 4 KiB one does not).
inline constexpr size_t kFirstSendBytes = 4 << 10;
inline constexpr size_t kRecvBytes = 64 << 10;  // one read of a client's requests
// --net sync: a response's writes per loop round start at this and double up to
// --write-chunk (see Flush).
inline constexpr size_t kRampBytes = 64 << 10;
// epoll tags: small numbers for fixed fds; connections count up from kFirstTag; origins
// have kOriginTagBit set.
inline constexpr uint64_t kTagStop = 1, kTagCoreBell = 2, kTagCoreSock = 3, kTagListen = 4,
                          kTagNetRing = 5, kTagListenNeighbour = 6, kTagListenTls = 7,
                          kTagListenNeighbourTls = 8;
inline constexpr uint64_t kOriginTagBit = 1ull << 62;
inline constexpr uint64_t kFirstTag = 16;
// The HTTP/2 client connection preface (h2c by prior knowledge starts with it).
inline constexpr std::string_view kH2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
// --net async user data: connection id << 2 | operation.
inline constexpr uint64_t kOpRecv = 1, kOpWrite = 2, kOpCancel = 3;

// One HTTP/2 connection's session (http_h2.cpp).
struct H2Session {
  nghttp2_session* session = nullptr;             // owned; its callbacks' user_data is this
  void* impl = nullptr;                           // the HttpServer::Impl it belongs to
  uint64_t conn = 0;                              // the connection it runs on
  std::unordered_map<int32_t, uint64_t> streams;  // stream id -> its stream conn
  // Upgraded from HTTP/1.1: stream 1's response waits for the client's preface (its first
  // SETTINGS): curl 7.88 fails an upgrade followed by more than 32 KiB before it.
  bool await_settings = false;
  H2Session() = default;
  H2Session(const H2Session&) = delete;
  H2Session& operator=(const H2Session&) = delete;
  ~H2Session() {
    if (session != nullptr) nghttp2_session_del(session);
  }
};

// One stream, in its stream conn: the request as it arrives, then how its HTTP/1.1
// response becomes frames.
struct H2Stream {
  int32_t id = 0;
  h2::RequestBuilder request;  // its fields until dispatched
  std::string body;            // the request's body until dispatched
  bool dispatched = false;     // its request went to the stream conn
  bool head = false;           // a HEAD request: no body in the answer
  bool submitted = false;      // the response's HEADERS were submitted
  enum class Body { kNone, kLength, kChunked, kUntilClose } framing = Body::kNone;
  uint64_t left = 0;      // kLength: body bytes not yet given to the session
  uint64_t reserved = 0;  // given to the session (read callback), not yet framed
  http::ChunkedDecoder chunked;
  std::string decoded;    // kChunked: decoded body bytes (copied out), not yet framed
  bool ended = false;     // every body byte is in (kChunked, kUntilClose)
  bool deferred = false;  // the session waits for more body (resume when it comes)
  bool reset = false;     // RST_STREAM submitted
};

class HttpServer::Impl {
 public:
  friend class HttpServer;
  explicit Impl(const HttpServerOptions& o) : log_(o.access_log), options_(o), hot_(o.hot_heads) {}
  VoidResult Init();
  VoidResult Run(int stop_fd);
  HttpStats stats_;
  int port_ = 0, tls_port_ = 0;
  int same_host_send_buffer_ = 0;  // SO_SNDBUF set at accept for a peer on this host (0: none)
  // The stop signal with fills in flight: stop taking connections, close idle ones; returns
  // when the drain ends (0: no fills, or no drain: stop now).
  uint64_t BeginDrain(int stop_fd);
  int listen_fd() const { return listen_ ? listen_.get() : -1; }
  int tls_listen_fd() const { return tls_listen_ ? tls_listen_.get() : -1; }
  VoidResult AcceptAlsoFrom(int fd, int tls_fd);

 private:
  struct Piece {
    std::string owned;
    const uint8_t* ptr = nullptr;  // borrowed (a loan) when owned is empty
    size_t len = 0;
    uint64_t loan = 0;
    CoreLink::Pools* pools = nullptr;  // the mapping a loan's (or local head's) bytes live in
    bool response_head = false;        // a status line and headers: see kFirstSendBytes
    // A lent piece in a stable pool block (wire::kSegmentStable): --net sync sends it by
    // reference (sendfile from the pool's memfd: the socket holds the pages, no copy), and
    // the loan goes back once the call returns.
    bool by_ref = false;
    // A head served here, not lent: its bytes are the object's only while head table entry
    // `entry` of `pools` still carries `stamp`, checked once the kernel has read them (no
    // later piece goes in the same write); the connection is closed if not.
    uint64_t stamp = 0;
    uint32_t entry = 0;
    // The response's last byte, held back (in `owned`) until the piece before it is
    // checked: copied from here just before that check.
    const uint8_t* seal = nullptr;
    // HTTP/2: bytes of stream conn `h2_child`'s pieces (borrowed, not owned): once written
    // (or dropped) they are given back to it.
    uint64_t h2_child = 0;
  };
  // An access log line waiting for its response's last byte: `line` up to the status (and
  // its space), `tail` from the referer to the TTFB; the byte counts and duration are added
  // when it is written (AccessLog in access_log.h).
  struct LogEntry {
    std::string line, tail;
    uint64_t begin = 0, end = 0, head_len = 0, start_ns = 0;
  };
  struct Fill;
  enum class ExState { kLookup, kCoreBody, kWaitFill, kOrigin, kDone };
  struct Exchange {
    ExState state = ExState::kLookup;
    std::string method, target, key, range, inm, ims, host;
    std::string key_lines;  // the --cache-key-header fields, for the origin (OpenOrigin)
    bool head = false, keep_alive = true, minor0 = false;
    bool head_sent = false;  // a response head went to the client: failures now close it
    uint64_t corr = 0;
    bool via_head_lookup = false;  // ObjectHead first (ranges, conditionals, HEAD)
    bool chunked_out = false;      // the body goes out chunked (size unknown)
    std::vector<http::ByteRange> ranges;
    size_t range_idx = 0;
    std::string boundary, content_type;
    uint64_t size = 0;
    bool follow = false;    // reading a fill through the core
    bool relooked = false;  // its lookup was lost with the core link once and sent again
    bool is_miss = false;
    // Revalidation (http_revalidate.cpp): the stale version found and its stored headers
    // (copied: the core's message goes away), how often this exchange revalidated (once at
    // most) and looked again after a fill it followed ended unstored (once at most).
    uint64_t reval_generation = 0;
    std::string reval_meta;
    uint8_t revalidations = 0, relookups = 0;
    bool revalidated = false;  // the stored object was refreshed by a 304 for it
    // It found a committing fill stale (generation 0: no version to revalidate yet) and
    // looks again once the commit is done (kGetAwaitCommit; once at most).
    bool await_commit = false;
    bool stale = false;  // a stale object is served (grace, stale-if-error)
    // Until when (unix ms) an origin error while revalidating is answered with the stale
    // object (0: it is not).
    uint64_t if_error_until_ms = 0;
    bool purge_token_ok = false;
    std::string purge_mode;               // X-Purge: "" (this URL), "prefix" or "all"
    bool purge_soft = false;              // X-Purge-Soft: 1 (mark stale, keep for revalidation)
    std::vector<std::string> purge_tags;  // X-Purge-Tag / xkey-purge: by tag
    std::string body, content_type_in;
    uint32_t acks_due = 0;  // a purge by prefix: PurgeAcks still to come (one per shard)
    uint64_t purged = 0;    // ... and the objects they deleted so far
    // The head went out from here; the core sends the tail (it must be of this version).
    bool local_tail = false;
    uint64_t local_generation = 0;
    // The access log (only with --access-log): what its line says.
    const char* cache = "SYNTH";  // HIT, MISS, PASS, PURGE, SYNTH, REVALIDATED, STALE
    std::string user_agent, referer;
    uint64_t start_ns = 0, ttfb_ns = 0;  // monotonic: received; its head queued (after it)
    int64_t start_unix = 0;
    int status = 0;
    size_t head_len = 0;     // bytes of its response head
    bool logged = false;     // its line is made (once, whichever way it ends)
    uint64_t log_begin = 0;  // the connection's byte offset where its response starts
    // Back to a new exchange's state, keeping what the strings and vectors have allocated
    // (a keep-alive connection's next request reuses them).
    void Reset() {
      std::string* s[] = {&method,       &target,     &key,       &range,
                          &inm,          &ims,        &host,      &boundary,
                          &content_type, &purge_mode, &body,      &content_type_in,
                          &user_agent,   &referer,    &key_lines, &reval_meta};
      std::string kept[std::size(s)];
      for (size_t i = 0; i < std::size(s); ++i) kept[i] = std::move(*s[i]);
      std::vector<http::ByteRange> kept_ranges = std::move(ranges);
      *this = Exchange{};
      for (size_t i = 0; i < std::size(s); ++i) {
        *s[i] = std::move(kept[i]);
        s[i]->clear();
      }
      ranges = std::move(kept_ranges);
      ranges.clear();
    }
  };
  struct Conn {
    uint64_t id = 0;
    UniqueFd fd;
    std::string in;
    // (stable: an io_uring write in flight points into its pieces, which must not move
    // when more are queued, and a short string keeps its bytes inside the object)
    StableQueue<Piece> out;
    size_t first_off = 0;
    size_t out_bytes = 0;
    uint64_t last_active = 0;
    uint64_t last_progress = 0;  // last time output moved (slow-client timeout)
    bool close_after = false, closed = false, epollout = false, reading = true;
    // --net sync: the last write met a full socket; no write is tried again before EPOLLOUT
    // (pieces queued meanwhile wait for it, without a system call each).
    bool write_blocked = false;
    uint64_t response_sent = 0;  // bytes of the response being written (its writes ramp up)
    std::string peer;
    std::unique_ptr<Exchange> ex;
    std::unique_ptr<Exchange> spare_ex;  // the last one, reused by the next request
    // --net async
    std::unique_ptr<char[]> rbuf;
    bool recv_inflight = false, write_inflight = false;
    uint32_t ops = 0;  // io_uring requests in flight (the Conn lives until they complete)
    std::vector<iovec> wiov;
    size_t wiov_bytes = 0;
    // HTTPS (http_tls.cpp). Such a connection is served by epoll readiness whatever --net
    // says; once its handshake is done with kTLS for sending, its writes are the plain
    // path's (writev, sendfile: the kernel encrypts).
    TlsSession tls;
    bool tls_ready = false;             // the handshake is complete
    bool tls_kernel_send = false;       // kTLS: writes go out as on a plain socket
    bool tls_read_wants_write = false;  // the handshake (or a read) waits for EPOLLOUT
    size_t tls_retry = 0;               // a user-space write that met a full socket: its length
    std::string tls_stage;              // small pieces gathered into one record
    // HTTP/2 (http_h2.cpp). A connection speaking it has `h2`; each of its streams is a
    // Conn of its own with `h2_parent` set (no socket) and `h2s`.
    std::unique_ptr<H2Session> h2;
    bool h2_checked = false;  // the first bytes were looked at (the h2c preface?)
    uint64_t h2_parent = 0;
    std::unique_ptr<H2Stream> h2s;
    uint64_t h2_lent = 0;  // bytes of `out` lent to the parent's queue, not yet written
    // The access log: bytes of responses written so far, and the lines of responses queued
    // whose last byte is not yet written (logs[logs_first, logs_n); the strings of entries
    // past logs_n keep their capacity for the next ones).
    uint64_t written_total = 0;
    std::vector<LogEntry> logs;
    size_t logs_first = 0, logs_n = 0;
    bool uses_ring() const { return !tls && h2_parent == 0; }  // (in a --net async worker)
    // Back to a fresh connection's state (for reuse by the next accept), keeping what its
    // buffers, queue and last exchange have allocated.
    void Reset() {
      id = 0;
      fd.Reset();
      in.clear();
      out.clear();
      first_off = out_bytes = 0;
      last_active = last_progress = 0;
      close_after = closed = epollout = write_blocked = false;
      response_sent = 0;
      reading = true;
      peer.clear();
      if (ex) spare_ex = std::move(ex);
      recv_inflight = write_inflight = false;
      ops = 0;
      wiov.clear();
      wiov_bytes = 0;
      tls.Reset();
      tls_ready = tls_kernel_send = tls_read_wants_write = false;
      tls_retry = 0;
      tls_stage.clear();
      h2.reset();
      h2s.reset();
      h2_checked = false;
      h2_parent = h2_lent = 0;
      written_total = 0;
      logs_first = logs_n = 0;
    }
  };
  struct Origin {
    uint64_t tag = 0;
    UniqueFd fd;
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
    bool probe = false;   // the health probe's (its answer only says healthy or not)
  };
  // One key being fetched from the origin. A miss first reserves the key in the core
  // (kReserving: PutBegin with kPutReserve sent, the origin not asked yet), so that one
  // origin request serves every client of every worker and gateway: granted -> kFetching
  // with the reservation (`reserved`, put_id); in progress elsewhere -> everyone follows
  // that fill. Without a reservation (the core could not be asked) kFetching asks for the
  // lease once the head is in (kLeasing). At the origin's head: kUncached (not stored:
  // uncacheable, filled elsewhere, refused or lost by the core; the leader still streams
  // from the origin), or kFilling (PutHead or the lease; body bytes go to the core as
  // PutData) -> kCommitting (PutCommit sent).
  enum class Stage { kReserving, kFetching, kUncached, kLeasing, kFilling, kCommitting };
  struct Fill {
    std::string key, target, host, key_lines;
    uint16_t shard = 0;  // the core shard of the key (set when the fill is made)
    // A revalidation: the stale version and its stored headers (the origin is asked
    // conditionally; a 304 refreshes that version instead of filling a new one).
    uint64_t reval_generation = 0;
    std::string reval_meta;
    Stage stage = Stage::kFetching;
    Origin* origin = nullptr;
    uint64_t leader = 0;            // the connection streaming straight from the origin
    std::vector<uint64_t> waiters;  // connections waiting for the origin's answer
    // Revalidations that met this fill committing: the version they found stale may be this
    // fill's own (committed in the core, its answer still on the way), which they must not
    // follow; they ask again when it has ended (after_commit_).
    std::vector<uint64_t> revalidators;
    bool leader_head = false;  // the leader asked HEAD
    uint64_t put_id = 0, begin_corr = 0, commit_corr = 0;
    bool reserved = false;  // put_id is a reservation whose head (PutHead) is still due
    uint64_t received = 0;  // body bytes from the origin
    uint64_t sent = 0;      // body bytes sent to the core (PutData)
    std::string pending;    // body bytes waiting for the lease
    bool origin_done = false;
    bool ended = false;
  };
  // What a correlation id sent to the core belongs to. A fill keeps its PutBegin's id for its
  // whole life (the core reports a fill it had to abort with an Error carrying it); a fill
  // that ended before its lease came leaves kOrphanLease behind, so a lease granted late is
  // given back at once.
  enum class CorrKind : uint8_t { kLookup, kHeadLookup, kFill, kFillCommit, kOrphanLease, kPurge };
  static constexpr uint16_t kEveryShard = UINT16_MAX;  // (a purge asked of every shard)
  struct CorrTarget {
    CorrKind kind;
    uint64_t conn = 0;
    Fill* fill = nullptr;
    uint16_t shard = 0;  // where it was sent (a core lost alone ends what went to its shards)
  };

  // ---- clients (http_client.cpp) ----
  // Accepts what `listen_fd` has queued (this worker's listener or its neighbour's; `tls`:
  // an HTTPS one).
  void Accept(int listen_fd, bool tls);
  void OnReadable(Conn& c);
  void ProcessRequests(Conn& c);
  void BuildExchange(Conn& c, const http::Request& r);
  void Dispatch(Conn& c);
  // Asks the core for the exchange's object (a plain GET: the body at once, following a
  // fill; HEAD, ranges and conditionals: ObjectHead first).
  void LookUp(Conn& c);
  // http_revalidate.cpp: a stale hit goes to the origin conditionally (a miss carrying the
  // stale version); a 304 refreshes that version in the core and everyone reading the key
  // looks again; a fill that followers read as a miss (ended unstored) is looked up again.
  void Revalidate(Conn& c, uint64_t generation, std::string_view meta);
  void OnNotModified(Fill& f, const http::Response& r);
  // A stale object in grace is served; its revalidation runs without a reader, unless one
  // is already under way for the key here.
  void RevalidateInBackground(Exchange& ex, uint64_t generation, std::string_view meta);
  // The origin failed a revalidation: the reader looks the object up again and is served the
  // stale copy (stale-if-error). False: its window does not allow it (answer the error).
  bool ServeStaleOnError(Conn& c);
  // Deletes the stale version a revalidation carries (if it is still the current one): the
  // origin answered with something that is not stored (a 404, a no-store 200, ...).
  void DropStale(const Fill& f);
  void LookAgain(Conn& c);
  // A stale answer of a fill still committing (generation 0): the version it commits is
  // what is revalidated, so the exchange looks again when it is in (kGetAwaitCommit).
  void AwaitCommit(Conn& c);
  // The stored head for a response (its end-to-end lines and the freshness end), and the
  // core's time to live for it (fresh + keep).
  static std::string StoredMeta(std::string_view passthrough, const policy::Storability& v);
  // The request lines an origin fetch carries: the cache key's headers, and the stale
  // version's validators when it revalidates (`reval_meta` non-empty).
  static std::string OriginLines(const std::string& key_lines, std::string_view reval_meta);
  // A complete response of its own (status line, our headers, `body`), ending the exchange.
  void Respond(Conn& c, int status, std::string_view body = {}, std::string_view extra = {});
  // The exchange cannot go on: a 5xx (status, body saying the same) if no response head went
  // out yet, else the connection is closed once the bytes already queued are written (the
  // only honest signal mid-body). Either way the connection does not serve another request.
  void Fail(Conn& c, int status, std::string_view why);
  // Queues bytes for the client. `response_head`: these are a response's status line and
  // headers; the write that sends them carries at most kFirstSendBytes of what follows, so
  // the client's first byte is not held back behind copying a whole RAM head.
  // `mark_dirty`: flushed at the end of this round (off for bytes queued from within
  // Flush itself).
  void Write(Conn& c, std::string bytes, bool response_head = false, bool mark_dirty = true);
  void WriteLoan(Conn& c, const uint8_t* p, size_t n, uint64_t loan, CoreLink::Pools* pools,
                 bool by_ref = false);
  // Writes what `c` has queued (sync: until the socket is full; async: one write in flight).
  // `once`: at most one write now (the caller has more to do before the rest goes).
  void Flush(Conn& c, bool once = false);
  void Close(Conn& c);
  // Erases the closed connections io_uring no longer holds, keeping some for reuse.
  void ReapClosed();
  void FinishExchange(Conn& c);
  void ReleasePieces(Conn& c);
  Conn* Find(uint64_t id) {
    auto it = conns_.find(id);
    return it == conns_.end() || it->second->closed ? nullptr : it->second.get();
  }
  // Registers `c` with epoll for what it waits for now (EPOLLIN while it reads, EPOLLOUT
  // while output or a TLS handshake waits for the socket).
  void UpdateEpoll(Conn& c);
  // ---- HTTPS (http_tls.cpp) ----
  // A TLS connection is readable: the handshake, then requests.
  void OnTlsReadable(Conn& c);
  // Writes what `c` has queued through its TLS session (user-space encryption), record by
  // record, up to `budget` bytes (`once`: one record). false: `c` was closed, or has more
  // than its budget and goes on in the next round.
  bool FlushTls(Conn& c, size_t budget, bool once);
  // ---- the access log (http_access_log.cpp; only with --access-log) ----
  // The exchange's line, queued until its response's last byte is written (`status`: for
  // a response without an exchange, a bad request's).
  void LogExchange(Conn& c);
  void LogBadRequest(Conn& c, int status, uint64_t begin, size_t head_len);
  // The next entry of c's pending lines: the response between `begin` and what is queued now.
  LogEntry& NewLogEntry(Conn& c, uint64_t begin, size_t head_len, uint64_t start_ns,
                        int64_t start_unix);
  // Writes the lines whose responses are out (`all`: every one, the connection is ending).
  void EmitLogs(Conn& c, bool all);
  // A response head going out for `e` (status, TTFB, head length).
  void NoteResponseHead(Exchange& e, std::string_view head);
  std::string_view LogTime(int64_t unix_seconds);
  std::vector<std::string_view> key_scratch_;  // (BuildCacheKey's)
  // The metrics endpoint's copy of the stats.
  LatencyHistogram ttfb_;  // (options_.timing)
  struct Copy {
    HttpStats stats;
    LatencyHistogram ttfb;
  };
  PublishedStats<Copy> published_;
  AccessLog::Ring* log_ = nullptr;
  std::string log_line_;  // (the line being formatted: its capacity is kept)
  std::string log_time_;
  int64_t log_time_second_ = -1;

  // ---- HTTP/2 (http_h2.cpp) ----
  // A response head being made into HEADERS (FlushH2Stream): kept, so their capacity is.
  std::string h2_probe_;
  http::Response h2_response_;
  h2::ResponseHead h2_head_;
  // `c` speaks HTTP/2 from now on (ALPN h2, or the h2c preface on a plain port).
  void StartH2(Conn& c);
  // Feeds what `c` has read to its session (streams start; requests go to stream conns).
  void H2Receive(Conn& c);
  // Lets the session write its frames into `c`'s queue (false: `c` was closed). Only from
  // Flush(c), which writes them next: the session's callbacks queue them with Write(...,
  // mark_dirty = false), so one round writes a connection's share once.
  bool H2Send(Conn& c);
  // A stream conn's new output becomes its response's frames.
  void FlushH2Stream(Conn& s);
  // Resets the stream of stream conn `s` (CANCEL) and closes it.
  void ResetH2Stream(Conn& s);
  // `n` bytes lent by stream conn `child` left the parent (or were dropped with it).
  void H2Returned(uint64_t child, size_t n, bool written);
  void CloseH2Streams(Conn& c);
  // The stream conn `s` has its whole request: it goes to the HTTP/1.1 machinery.
  void DispatchH2Stream(Conn& s);
  // HTTP/1.1's Upgrade to h2c: true if `r` (complete, bodiless, at the front of c.in) asked
  // for it and the connection now speaks HTTP/2 with `r` as its stream 1.
  bool UpgradeToH2(Conn& c, const http::Request& r);
  // A stream conn for stream `id` of `parent`'s session.
  Conn& NewH2Stream(H2Session& h, Conn& parent, int32_t id);
  // (nghttp2's callbacks; user_data is the connection's H2Session)
  static ssize_t H2OnSend(nghttp2_session*, const uint8_t* data, size_t length, int flags,
                          void* user);
  static int H2OnSendData(nghttp2_session*, nghttp2_frame* frame, const uint8_t* framehd,
                          size_t length, nghttp2_data_source* source, void* user);
  static ssize_t H2OnRead(nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t length,
                          uint32_t* data_flags, nghttp2_data_source* source, void* user);
  static int H2OnBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user);
  static int H2OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                        size_t namelen, const uint8_t* value, size_t valuelen, uint8_t flags,
                        void* user);
  static int H2OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user);
  static int H2OnDataChunk(nghttp2_session*, uint8_t flags, int32_t stream_id, const uint8_t* data,
                           size_t len, void* user);
  static int H2OnStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code, void* user);
  static int H2OnFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* user);
  // The stream conn of `id` on `h` (nullptr if none, or closed).
  Conn* H2StreamConn(H2Session& h, int32_t id);
  // --net async
  void PostRecv(Conn& c);
  void OnNetCompletion(uint64_t ud, int32_t res);
  // n output bytes left the process; false: a local head among them changed while it was
  // sent (the caller closes the connection).
  [[nodiscard]] bool Advance(Conn& c, size_t n);
  // What a piece holds is given back (a loan, a mapping; its string to the spares).
  void ReleasePiece(Piece& p);
  // Strings for response heads, reused (bounded): a warm hit allocates none.
  std::string TakeString() {
    if (spare_strings_.empty()) return {};
    std::string s = std::move(spare_strings_.back());
    spare_strings_.pop_back();
    s.clear();
    return s;
  }
  void GiveString(std::string&& s) {
    if (s.capacity() > 15 && s.capacity() <= kSpareStringMax &&
        spare_strings_.size() < kSpareStrings)
      spare_strings_.push_back(std::move(s));
  }
  // The output pieces as iovecs (at most `max`), from the unsent part of the first one.
  // The output's next bytes as iovecs (at most `max`). With `ref_next`, they stop before a
  // piece sent by reference (Piece::by_ref; the caller sends a first one on its own), and
  // *ref_next says when they stopped there: every piece gathered went whole.
  size_t Gather(Conn& c, std::vector<iovec>* iov, size_t max, bool* ref_next = nullptr,
                size_t max_bytes = SIZE_MAX);

  // ---- the core (http_hit.cpp) ----
  // Sends a request that belongs to `c`'s exchange; false (and the exchange answered: 414
  // too large, 503 core away or backlogged) when it could not go.
  bool SendRequest(Conn& c, FunctionRef<size_t(uint8_t*, size_t)> encode, size_t max_bytes,
                   uint16_t shard);
  uint64_t CoreGet(Conn& c, uint64_t offset, uint64_t length, bool follow);
  // The exchange is dropped while its ObjectGet streams (the client left, or it was cut
  // off): the core is told to stop it (ObjectGetCancel), so it does not read and lend the
  // rest of the object for nobody; what arrives for it meanwhile is given back.
  void CancelCoreGet(Conn& c);
  uint64_t CoreHead(Conn& c);
  void Purge(Conn& c);
  // A lookup went to the core: the loop keeps polling for its answer up to
  // options_.core_reply_poll before it sleeps (a client's first byte waits on it).
  void ExpectCoreReply();
  // A hit was answered here: the loop polls as long as it would for the core's answer, for
  // the client's next request (a keep-alive client sends it as soon as it has read this
  // one; a client per connection connects again): sleeping would add a wake-up to its first
  // byte that the same hit through the core does not pay.
  void ExpectNextRequest() { ExpectCoreReply(); }
  void OnCoreMessage(uint16_t shard, std::span<const uint8_t> m);
  void OnExchangeReply(CorrTarget t, uint16_t shard, uint64_t corr, uint16_t template_id,
                       std::span<const uint8_t> m);
  void OnObjectInfo(Conn& c, const wire::ObjectInfoDecoder& info);
  void StartRangePart(Conn& c);
  // `pools`: where a lent piece lives (with loan != 0).
  void OnCoreBody(Conn& c, std::span<const uint8_t> bytes, uint64_t loan, CoreLink::Pools* pools,
                  bool by_ref, bool last);
  void ReleaseLoan(uint64_t loan, CoreLink::Pools* pools) { core_->ReleaseLoan(loan, pools); }
  std::string HitHead(Exchange& ex, int status, std::string_view meta, uint64_t created_ns,
                      std::string_view extra, bool drop_content_type = false,
                      size_t body_bytes = 0);
  // The Date header's value now (formatted once per second, like nginx's cached time).
  std::string_view HttpDate();
  // The core link went down: every exchange waiting on the core is answered (503 before a
  // head, closed after one), every fill continues uncached or ends.
  void OnCoreDown();
  // etcd://: one core was lost alone (its shards [first, first + count)); the others' requests
  // go on, its lookups go to their next owner at once.
  void OnCoreLost(uint16_t first, uint16_t count);
  // What OnCoreDown (whole_link) and OnCoreLost share: ends the requests on the lost shards.
  void EndCoreRequests(uint16_t first, uint16_t count, bool whole_link);
  // The link is back: the lookups OnCoreDown kept are sent again (once per exchange; those
  // still waiting after kRelookWaitNs get 503).
  void OnCoreUp();
  // A lookup lost with its core, asked again (at the key's owner now): Follow or LookUp.
  void Relook(Conn& c);
  void ExpireRelooks(uint64_t now);
  void TakeRelooks(FunctionRef<void(Conn&)> fn);  // each exchange still waiting, once
  static constexpr uint64_t kRelookWaitNs = 5'000'000'000;

  // ---- local hits (http_local.cpp) ----
  // Answers `c`'s GET or HEAD (no range) from a descriptor of this worker's if it is still
  // current; false: nothing was sent, ask the core.
  bool ServeLocal(Conn& c);
  // An ObjectInfo of a hit named the head's entry: remember it for the key's next hits.
  void Learn(const Exchange& ex, const wire::ObjectInfoDecoder& info);
  // The head table entry still carries `stamp` (after an acquire fence: every read of the
  // head's bytes before this call is ordered before it).
  static bool StampHolds(const CoreLink::Pools& p, uint32_t entry, uint64_t stamp);
  // Marks a head read here in the core's touch table (its eviction and demotion see it).
  static void Touch(const CoreLink::Pools& p, uint32_t entry);

  // ---- fills (http_fill.cpp) ----
  void Miss(Conn& c);
  // Miss without the counting: joins the key's fill in this worker or starts one (a
  // revalidation that waited for a fill's commit comes back here, AfterCommits).
  void MissFill(Conn& c);
  // Revalidations that waited for a fill's commit (Fill::revalidators) ask again.
  void AfterCommits();
  Fill* StartFill(Exchange& ex, bool leader_is_client, uint64_t leader);
  // A fill that reserves the key in the core before the origin is asked (nullptr: the core
  // cannot be asked now; StartFill then).
  Fill* Reserve(Exchange& ex, uint64_t leader);
  void OnReservation(Fill& f, uint64_t corr, uint16_t template_id, std::span<const uint8_t> m);
  void OnFillReply(CorrTarget t, uint16_t shard, uint64_t corr, uint16_t template_id,
                   std::span<const uint8_t> m);
  void OnFillHead(Origin& o);                          // the origin's head: store it or not
  void OnFillBody(Origin& o, std::string_view bytes);  // origin body bytes of a fill
  void OnFillOriginDone(Fill& f, bool ok, OriginFault fault);
  void FillGranted(Fill& f);
  void CommitFill(Fill& f);  // PutCommit of everything the origin sent
  // The core will not keep this fill (refused, aborted it, or the link went down): the leader
  // keeps streaming from the origin, waiters fetch for themselves, nothing is stored.
  void Uncache(Fill& f, std::string_view why);
  // The core's side of Uncache: the reservation or lease given back, nothing stored, the
  // key free in fills_ (readers and the origin side are the caller's).
  void Unstore(Fill& f);
  // The origin failed: the core's fill (if any) is aborted, the leader and every waiter are
  // failed, the key is free at once.
  void AbortFill(Fill& f, OriginFault fault);
  void ReleaseWaiters(Fill& f, bool follow);
  void PassToOrigin(Conn& c);  // this request fetches for itself, uncached
  void Follow(Conn& c);
  void EndFill(Fill& f);
  void SendPutData(Fill& f, std::string_view bytes);
  void SendPutAbort(uint64_t put_id, uint16_t shard);
  // The head of a reserved fill (kHeadUncacheable in `flags`: the reservation ends).
  CoreLink::SendResult SendPutHead(const Fill& f, uint64_t expected_size, uint64_t ttl_ns,
                                   uint32_t flags, std::string_view metadata,
                                   std::string_view tags = {});

  // ---- the origin (http_origin.cpp) ----
  VoidResult ParseMirror();
  bool ResolveOrigin();  // getaddrinfo (at start, and again after a connection failure)
  // `key_lines`: the request headers the cache key holds ("name: value\r\n" each; the
  // origin sees those and no other of the client's).
  // Returns null (counted) without trying while the origin is marked sick, unless `probe`.
  Origin* OpenOrigin(const std::string& method, const std::string& target, const std::string& range,
                     const std::string& key_lines, const std::string& content_type = {},
                     const std::string& body = {}, bool probe = false);
  // Why OpenOrigin gave nothing: the origin is sick, or could not be reached.
  OriginFault OpenFault() const {
    return options_.origin_healthy && !options_.origin_healthy->load(std::memory_order_relaxed)
               ? OriginFault::kSick
               : OriginFault::kUnreachable;
  }
  // The health probe (http_origin.cpp): sent by the prober worker every probe_interval.
  void StartProbe(uint64_t now);
  void ProbeDone(bool good, std::string_view why);
  uint64_t next_probe_ = 0;
  bool probe_inflight_ = false;
  uint32_t probe_fails_ = 0;
  void OnOriginEvent(Origin& o, uint32_t events);
  void OnOriginHead(Origin& o);
  void OnOriginBody(Origin& o, std::string_view bytes);
  void OnOriginDone(Origin& o, bool ok, OriginFault fault = OriginFault::kUnreachable);
  void PauseOrigin(Origin& o);
  void ResumeOrigins();
  void CloseOrigin(Origin& o);
  // After a complete answer: back to the keep-alive pool if the origin allows, else closed.
  void ReleaseOrigin(Origin& o);
  bool ConnectOrigin(Origin& o);  // a fresh connection for o (same tag)

  HttpServerOptions options_;
  std::string origin_host_, origin_port_, origin_prefix_, origin_hostport_;
  sockaddr_storage origin_addr_{};
  socklen_t origin_addr_len_ = 0;
  uint64_t last_resolve_ = 0;  // MonotonicNanos of the last getaddrinfo
  bool resolve_again_ = false;
  std::vector<uint64_t> idle_origins_;
  std::unique_ptr<CoreLink> core_;
  HotHeads hot_;  // (local hits)
  static constexpr size_t kSpareStrings = 256, kSpareStringMax = 160 << 10;
  std::vector<std::string> spare_strings_;
  UniqueFd epoll_, listen_, tls_listen_;
  bool async_ = false;
  NetRing net_;
  // Client connections by id; closed ones are erased (once io_uring holds none of their
  // buffers) from closed_, and up to kSpareConns kept whole for the next accepts.
  RecyclingMap<uint64_t, std::unique_ptr<Conn>> conns_;
  std::vector<uint64_t> closed_;
  static constexpr size_t kSpareConns = 64;
  std::vector<std::unique_ptr<Conn>> spare_conns_;
  std::unordered_map<uint64_t, std::unique_ptr<Origin>> origins_;
  // Every fill lives in all_fills_ until it ends; fills_ names the ones a request for the key
  // can still join (not kUncached: the key is free again for the next request).
  std::unordered_map<Fill*, std::unique_ptr<Fill>> all_fills_;
  std::unordered_map<std::string, Fill*> fills_;
  std::vector<std::unique_ptr<Fill>> dead_fills_;  // ended this round, freed at its end
  std::vector<uint64_t> relook_;  // exchanges whose lookup goes again when the link is up
  uint64_t relook_deadline_ = 0;
  RecyclingMap<uint64_t, CorrTarget> corr_;  // (nodes reused: no allocation per request)
  uint64_t date_second_ = 0;
  std::string date_;
  http::Request request_;  // ProcessRequests' parse of the request at hand
  uint64_t next_tag_ = kFirstTag, next_corr_ = 1;
  uint64_t poll_until_ = 0;
  std::vector<Conn*> dirty_;
  // Another worker's listeners (AcceptAlsoFrom), not owned.
  int neighbour_listen_ = -1, neighbour_tls_listen_ = -1;
  // Connections that wrote options_.write_chunk bytes this round and have more (by id: flushed
  // again in the next round, after the events that came meanwhile).
  std::vector<uint64_t> next_round_;
  // Revalidations whose fill ended this round (Fill::revalidators): asked again in the loop.
  std::vector<uint64_t> after_commit_;
};

}  // namespace goblin::gateway
