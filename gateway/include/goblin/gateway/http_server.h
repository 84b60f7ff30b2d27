// The HTTP/1.1 front of goblin-gateway: a reverse cache in front of an origin (mirror
// mode) that keeps no cache state of its own: objects live in goblin-core.
// - GET/HEAD: a hit is answered from the core (the RAM head first; the body lent in place
//   from the core's pools, which this process maps read-only, and written to the socket
//   from there); once a worker knows where an object's head sits in the core's RAM, its
//   hits are served from the pools here without asking the core (local hits: checked
//   against the core's head table before and after the bytes are read; a tail beyond the
//   head still comes from the core, asked at once); 206 for one range, multipart/byteranges for
//   several, 416, 304 for If-None-Match / If-Modified-Since; Age, Via and X-Cache: HIT|MISS.
// - A miss is fetched from the origin once: streamed to the client while it is written to
//   the core as a fill; other requests for the same key meanwhile follow that fill through
//   the core (one origin request per object). Uncacheable answers (no-store, private,
//   non-200, Set-Cookie) pass through and are never stored. A range request on a miss is
//   answered by a ranged origin request at once while the whole object fills behind it.
// - Freshness: s-maxage, max-age, Expires, else --default-ttl.
// - Other methods are proxied to the origin uncached (bodies with Content-Length up to
//   max_body, else 413; chunked request bodies 411).
// - PURGE of one URL (X-Purge: prefix for every key under Host + path, X-Purge: all for
//   everything) from --purge-allow addresses or with the X-Purge-Token header.
// - Limits: 400 for malformed requests, 414, 431; idle connections and clients that stop
//   reading (send_timeout) are closed.
// - --net sync: client sockets by epoll readiness and read/writev; --net async: client
//   sockets read and written through io_uring (the same state machine on completions).
// Threading: one event loop thread (epoll); Run() until the stop fd is readable. A
// gateway runs several (--threads): each worker is its own HttpServer with its own
// listening socket on the same port (SO_REUSEPORT: the kernel spreads connections), its own
// core connection and nothing shared; one origin request per key across workers (and
// gateways) comes from the core's fill reservations (PutBegin with kPutReserve).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "goblin/cluster/etcd_client.h"
#include "goblin/common/histogram.h"
#include "goblin/common/status.h"
#include "goblin/gateway/access_log.h"
#include "goblin/gateway/cache_policy.h"
#include "goblin/gateway/http.h"
#include "goblin/gateway/tls.h"

namespace goblin::gateway {

struct HttpServerOptions {
  std::string core;            // goblin-core: its ring socket (a path), or ucx://HOST:PORT
  cluster::EtcdSecurity etcd;  // how an etcd:// core target reaches a secured etcd
  std::string listen_address = "127.0.0.1";
  int port = 8080;  // plain HTTP; -1: any free port (see port()); 0: none
  // HTTPS (TLS, see tls.h): -1 any free port (see https_port()), 0 none; needs `tls`.
  int https_port = 0;
  std::shared_ptr<const TlsContext> tls;
  std::string mirror;  // http://host:port[/prefix]
  std::chrono::seconds default_ttl{120};
  // How long an object with a validator is kept past its freshness, to be revalidated
  // (If-None-Match / If-Modified-Since) instead of fetched whole again; 0: not kept.
  std::chrono::seconds keep{600};
  // Grace (Varnish's): how long past its freshness an object is served stale while it is
  // revalidated in the background, and when the origin fails or is sick. A response's
  // stale-while-revalidate / stale-if-error (RFC 5861) set their own windows;
  // must-revalidate, proxy-revalidate and no-cache allow none. 0: only what responses ask.
  std::chrono::seconds grace{0};
  std::vector<std::string> purge_allow = {"127.0.0.1"};
  std::string purge_token;
  http::Limits limits;
  std::chrono::seconds idle_timeout{60};
  std::chrono::seconds origin_timeout{30};
  std::chrono::seconds send_timeout{60};  // a client that takes no bytes this long is closed
  // On the stop signal: no more connections are taken, idle ones close, and the loop goes
  // on while fills to the core are in flight (their objects stored, their clients served),
  // for at most this long (nginx's graceful stop; 0: stop at once, fills aborted).
  std::chrono::milliseconds drain_timeout{5000};
  uint64_t max_body = 64ull << 20;  // request bodies proxied to the origin (413 above)
  uint32_t core_ring_bytes = 1u << 20;
  size_t max_clients = 10000;
  bool net_async = false;   // --net async: client socket I/O through io_uring
  bool reuse_port = false;  // SO_REUSEPORT on the listener (several workers on one port)
  int worker = 0;           // its number among the workers (names its core client)
  // After asking the core for an object, poll (rather than sleep) this long for the answer:
  // a sleeping event loop adds a wake-up to every first byte.
  std::chrono::nanoseconds core_reply_poll{500'000};
  // After the last work, poll (epoll_wait without sleeping) this long before sleeping.
  std::chrono::nanoseconds busy_poll{50'000};
  // While polling (no work, not yet asleep), give the CPU to other runnable threads between
  // rounds (sched_yield): for workers that share CPUs with goblin-core's shards and clients,
  // so a polling worker never holds a CPU another thread has work for.
  bool yield_when_polling = false;
  // Hits whose head is in the core's RAM are served from its pools here (a descriptor per
  // key learned from an earlier hit, checked against the head table on every use); off:
  // every hit asks the core.
  bool local_hits = true;
  // --net sync: send lent bytes in stable pool blocks with sendfile (no copy) instead of
  // writev (docs/hot-path.md "Sending by reference").
  bool send_by_reference = true;
  size_t hot_heads = 16384;  // descriptors per worker
  // --net sync: bytes one connection writes per loop round before the others get their
  // turn (nginx's sendfile_max_chunk): a big response does not hold up a request that
  // arrives on the same worker behind its copy into a socket buffer of several MiB. A
  // response's first rounds write less (64 KiB, doubling up to this). 0: no limit (until
  // the socket is full).
  uint64_t write_chunk = 1 << 20;
  // SO_SNDBUF of the HTTP(S) listeners, which their connections inherit (no system call per
  // connection; nginx's `listen ... sndbuf=`). 0: the kernel's autotuning, which grows a
  // busy socket's buffer to net.ipv4.tcp_wmem's maximum. Linux doubles the value.
  uint64_t send_buffer = 0;
  // Without send_buffer: SO_SNDBUF of connections from this host (loopback, or a client that
  // dialled one of the host's own addresses), set at accept; 0: autotuned like the others.
  // Measured on loopback: 512K served large objects 1.2-1.7x faster than the autotuned
  // buffer (docs/benchmarks/concurrency.md, "Send buffers"); a remote client's buffer must
  // cover its path's bandwidth-delay product, which only autotuning knows.
  uint64_t same_host_send_buffer = 512 << 10;
  // HTTP/2 (h2 by ALPN on the HTTPS port, h2c by prior knowledge on the plain one): streams
  // a client may open at once, and the window it may send a request body into.
  bool http2 = true;
  uint32_t h2_max_streams = 128;
  uint32_t h2_window = 16u << 20;
  // With several workers: each also takes connections from its neighbour's listener
  // (AcceptAlsoFrom), so one that is awake does not leave a connection waiting for a
  // sleeping sibling's wake-up.
  bool accept_from_neighbour = true;
  // How a request maps to its cache key (Host + URL, normalized: cache_policy.h).
  policy::CacheKeyOptions cache_key;
  // Time every response head (a TTFB histogram, published with the stats: --metrics-listen).
  bool timing = false;
  // The origin's health (Varnish's probe): `probe_path` is asked every `probe_interval`
  // by the worker with `prober` set; `probe_threshold` failures in a row (an error, a
  // timeout of `probe_timeout`, a status outside 2xx/3xx) mark it sick until a probe
  // succeeds. Every worker reads `origin_healthy`: while it is false, misses and passes
  // are answered 503 without asking the origin; hits are served. Empty path: no probe.
  std::string probe_path;
  std::chrono::milliseconds probe_interval{5000}, probe_timeout{2000};
  uint32_t probe_threshold = 3;
  bool prober = false;
  std::shared_ptr<std::atomic<bool>> origin_healthy;
  // The access log's ring for this worker (see access_log.h); nullptr: no access log.
  AccessLog::Ring* access_log = nullptr;
};

struct HttpStats {
  uint64_t accepted = 0, requests = 0, hits = 0, misses = 0, passes = 0, coalesced = 0;
  uint64_t accepted_for_neighbour = 0;  // of `accepted`: from the neighbour's listener
  uint64_t same_host_buffers = 0;       // of `accepted`: given same_host_send_buffer (on this host)
  uint64_t origin_requests = 0, fills = 0, fills_aborted = 0;
  uint64_t purges = 0, bad_requests = 0, bytes_lent = 0, slow_clients_dropped = 0;
  uint64_t bytes_by_reference = 0;  // lent bytes sent with sendfile from the pool (no copy)
  uint64_t core_unavailable = 0, core_disconnects = 0;  // 503s while the core was away; losses
  // Lookups in flight when the link went down, sent again once it was back (to the key's
  // owner then: over etcd://, a dead core's keys go to their next owner).
  uint64_t core_retries = 0;
  // etcd://: cores lost alone (died, left or registered again; not the first one): only the
  // requests on them ended, the link to the others stayed up.
  uint64_t cores_lost = 0;
  // Hits served from the mapped pools without the core; descriptors found stale (the request
  // then went to the core); responses cut off because a head changed while it was sent.
  uint64_t local_hits = 0, local_stale = 0, local_cut = 0;
  // TLS: handshakes completed (of them resumed sessions), failed, and connections whose
  // writes (reads) the kernel encrypts (decrypts): kTLS.
  uint64_t tls_handshakes = 0, tls_resumed = 0, tls_failed = 0, ktls_send = 0, ktls_recv = 0;
  // HTTP/2: connections (h2 by ALPN, h2c by prior knowledge or by HTTP/1.1's Upgrade), of
  // them upgraded, streams, streams the client reset, connections ended for misbehaving
  // (floods: resets, SETTINGS/PING, CONTINUATION; protocol errors).
  uint64_t h2_connections = 0, h2_upgrades = 0, h2_streams = 0, h2_resets = 0, h2_goaways = 0;
  // Origin faults by kind (kOriginFaultNames); origin_errors() is their sum.
  std::array<uint64_t, 9> origin_faults{};
  uint64_t origin_errors() const {
    uint64_t n = 0;
    for (uint64_t f : origin_faults) n += f;
    return n;
  }
  // The origin's health probe (--origin-probe; worker 0 sends it): probes, failed ones.
  uint64_t probes = 0, probe_failures = 0;
  // Stale objects revalidated with a conditional request, and of those answered 304 (the
  // stored object refreshed in place: new headers and TTL, the same bytes).
  uint64_t revalidations = 0, not_modified = 0;
  // Stale objects served: in grace while revalidated in the background (background counts
  // those revalidations), and because the origin failed or was sick (stale-if-error).
  uint64_t stale_served = 0, background_revalidations = 0, stale_if_error = 0;
  HttpStats& operator+=(const HttpStats& o);
};

// The kinds of origin_faults, in order (the metrics' kind label).
inline constexpr std::array<std::string_view, 9> kOriginFaultNames = {
    "unreachable", "reset",     "closed",   "truncated", "timeout",
    "malformed",   "bad_chunk", "too_long", "sick"};

class HttpServer {
 public:
  static Result<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options);
  ~HttpServer();
  VoidResult Run(int stop_fd);
  const HttpStats& stats() const;  // (the loop thread's, or after Run)
  // A copy of the stats and the TTFB histogram as the loop last published them (every
  // 200 ms while it runs); any thread.
  HttpStats Published(LatencyHistogram* ttfb) const;
  int port() const;        // 0: no plain HTTP listener
  int https_port() const;  // 0: no HTTPS listener
  // Its listening sockets (SO_REUSEPORT: one per worker; -1 where none).
  int listen_fd() const;
  int tls_listen_fd() const;
  // Before Run: also accept connections from `fd` and `tls_fd` (either -1), another
  // worker's listeners (which must outlive this worker's Run). Registered with EPOLLEXCLUSIVE: a
  // connection queued there wakes its owner and at most this one of the sleeping, and whichever is
  // first takes it; an awake worker takes it at its next round.
  VoidResult AcceptAlsoFrom(int fd, int tls_fd = -1);

 private:
  class Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace goblin::gateway
