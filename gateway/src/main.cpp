// goblin-gateway: the client-protocol fronts of goblin-core.
//   HTTP/1.1 reverse cache (mirror mode):  --mirror http://ORIGIN --http-port 8080
//                                          and/or --https-port 8443 --tls-cert F --tls-key F
//   Redis clients (RESP2/RESP3: pub/sub, the objects as strings): --resp-port 6379 and/or
//                                          --resp-unix PATH
//   memcache clients (text protocol):      --memcache-port 11211 and/or --memcache-unix PATH
// Each front runs its own event loop thread(s) with its own ring connection(s) to the core,
// and stays up when the core goes away (503 / -ERR meanwhile; it reconnects with back-off).
// HTTP runs --threads workers (default one per allowed CPU), each with its own listener
// on the port (SO_REUSEPORT), loop and core connection.
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/ranges.h>

#include "goblin/cluster/etcd_flags.h"
#include "goblin/common/cli.h"
#include "goblin/common/file.h"
#include "goblin/common/log.h"
#include "goblin/common/metrics.h"
#include "goblin/common/signals.h"
#include "goblin/common/topology.h"
#include "goblin/common/units.h"
#include "goblin/gateway/http_server.h"
#include "goblin/gateway/memcache_server.h"
#include "goblin/gateway/resp_server.h"
#include "goblin/gateway/tls.h"

using namespace goblin;

namespace {
constexpr std::string_view kLog = "gateway";
int Fail(const Status& s) {
  std::fprintf(stderr, "goblin-gateway: %s\n", s.ToString().c_str());
  return 1;
}
}  // namespace

// What the metrics endpoint reports on: the fronts this gateway runs.
struct Fronts {
  const std::vector<std::unique_ptr<gateway::HttpServer>>& http;
  const std::unique_ptr<gateway::AccessLog>& access_log;
  const std::shared_ptr<std::atomic<bool>>& origin_healthy;
  const std::vector<std::unique_ptr<gateway::MemcacheServer>>& memcache;
  const std::unique_ptr<gateway::RespServer>& resp;
};

// Single-sample families named `prefix` + name (counters end in _total).
struct Families {
  PromText& t;
  std::string_view prefix;
  void Counter(std::string_view name, std::string_view help, uint64_t v) const {
    One(fmt::format("{}{}_total", prefix, name), "counter", help, v);
  }
  void Gauge(std::string_view name, std::string_view help, uint64_t v) const {
    One(fmt::format("{}{}", prefix, name), "gauge", help, v);
  }
  void One(const std::string& full, std::string_view type, std::string_view help,
           uint64_t v) const {
    t.Family(full, type, help);
    t.Sample(full, "", v);
  }
};

// The HTTP front's Prometheus text: every worker's published stats summed.
static void RenderHttpMetrics(const std::vector<std::unique_ptr<gateway::HttpServer>>& workers,
                              const gateway::AccessLog* log, bool healthy, PromText& t) {
  gateway::HttpStats st;
  LatencyHistogram ttfb;
  for (const auto& w : workers) {
    LatencyHistogram h;
    st += w->Published(&h);
    ttfb += h;
  }
  const Families f{t, "goblin_gateway_http_"};
  auto counter = [&f](std::string_view name, std::string_view help, uint64_t v) {
    f.Counter(name, help, v);
  };
  counter("requests", "Requests parsed (HTTP/1.1 and HTTP/2 streams)", st.requests);
  counter("same_host_send_buffers",
          "Client connections from this host given --same-host-send-buffer", st.same_host_buffers);
  counter("hits", "Requests answered from the cache", st.hits);
  counter("local_hits", "Hits served from the mapped pools without asking the core", st.local_hits);
  counter("misses", "Requests that missed (fetched, or following a fill)", st.misses);
  counter("coalesced_misses", "Misses that followed another request's fill", st.coalesced);
  counter("passes", "Requests passed to the origin uncached", st.passes);
  counter("purges", "PURGE requests carried out", st.purges);
  counter("bad_requests", "Malformed or refused requests", st.bad_requests);
  counter("origin_requests", "Requests sent to the origin", st.origin_requests);
  t.Family("goblin_gateway_http_origin_errors_total", "counter", "Origin faults by kind");
  for (size_t i = 0; i < st.origin_faults.size(); ++i) {
    t.Sample("goblin_gateway_http_origin_errors_total",
             PromText::Label("kind", gateway::kOriginFaultNames[i]), st.origin_faults[i]);
  }
  counter("fills", "Fills of the core from the origin", st.fills);
  counter("fills_aborted", "Fills aborted (origin fault, core error)", st.fills_aborted);
  counter("core_unavailable", "Requests answered 503 while the core was away", st.core_unavailable);
  counter("core_disconnects", "Times the core link was lost", st.core_disconnects);
  counter("core_retries", "Lookups sent again after the core link came back", st.core_retries);
  counter("cores_lost", "Cores of an etcd:// link lost alone (the others' requests went on)",
          st.cores_lost);
  counter("core_lent_bytes", "Bytes the core lent (sent from its pools)", st.bytes_lent);
  counter("sent_by_reference_bytes", "Lent bytes sent with sendfile (no copy)",
          st.bytes_by_reference);
  counter("connections", "Client connections accepted", st.accepted);
  counter("slow_clients_dropped", "Clients closed for taking nothing for --send-timeout",
          st.slow_clients_dropped);
  counter("tls_handshakes", "TLS handshakes completed", st.tls_handshakes);
  counter("tls_resumed", "TLS handshakes that resumed a session", st.tls_resumed);
  counter("tls_failed", "TLS handshakes that failed", st.tls_failed);
  counter("ktls_send_connections", "Connections whose sends the kernel encrypts (kTLS)",
          st.ktls_send);
  counter("h2_connections", "HTTP/2 connections", st.h2_connections);
  counter("h2_upgrades", "HTTP/2 connections upgraded from HTTP/1.1", st.h2_upgrades);
  counter("h2_streams", "HTTP/2 streams", st.h2_streams);
  counter("h2_client_resets", "HTTP/2 streams the client reset", st.h2_resets);
  counter("h2_connections_ended", "HTTP/2 connections ended for errors or floods", st.h2_goaways);
  t.Family("goblin_gateway_http_ttfb_seconds", "histogram",
           "Seconds from a request to its response head");
  t.Histogram("goblin_gateway_http_ttfb_seconds", "", ttfb);
  if (log != nullptr) {
    counter("access_log_lines", "Access log lines written", log->lines_written());
    counter("access_log_dropped", "Access log lines dropped (its rings were full)", log->dropped());
  }
  counter("origin_probes", "Health probes sent to the origin (--origin-probe)", st.probes);
  counter("origin_probe_failures", "Health probes that failed", st.probe_failures);
  counter("revalidations", "Stale objects revalidated with a conditional origin request",
          st.revalidations);
  counter("revalidations_not_modified",
          "Revalidations answered 304: the stored object refreshed in place", st.not_modified);
  counter("stale_served", "Stale objects served (in grace, or because the origin failed)",
          st.stale_served);
  counter("background_revalidations",
          "Revalidations started in the background while a stale object was served",
          st.background_revalidations);
  counter("stale_if_error", "Stale objects served because the origin failed or was sick",
          st.stale_if_error);
  f.One("goblin_gateway_origin_healthy", "gauge", "1 unless the health probe marks the origin sick",
        healthy ? 1 : 0);
  f.Gauge("workers", "HTTP worker threads", workers.size());
}

// The memcache front's: every loop's published stats summed (names after memcached's
// `stats` and the memcached exporter's commands_total{command,status}).
static void RenderMemcacheMetrics(
    const std::vector<std::unique_ptr<gateway::MemcacheServer>>& loops, PromText& t) {
  gateway::MemcacheStats st;
  for (const auto& l : loops) st += l->Published();
  const Families f{t, "goblin_gateway_memcache_"};
  auto counter = [&f](std::string_view name, std::string_view help, uint64_t v) {
    f.Counter(name, help, v);
  };
  counter("connections", "Client connections accepted", st.accepted);
  f.Gauge("current_connections", "Client connections open",
          st.accepted >= st.closed ? st.accepted - st.closed : 0);
  counter("requests", "Commands parsed", st.commands);
  counter("protocol_errors", "Malformed commands (ERROR / CLIENT_ERROR)", st.protocol_errors);
  const std::string cmds = "goblin_gateway_memcache_commands_total";
  t.Family(cmds, "counter", "Commands by command and outcome");
  const struct {
    const char* command;
    const char* status;
    uint64_t v;
  } by[] = {{"get", "hit", st.get_hits},          {"get", "miss", st.get_misses},
            {"set", "all", st.cmd_set},           {"delete", "hit", st.delete_hits},
            {"delete", "miss", st.delete_misses}, {"incr", "hit", st.incr_hits},
            {"incr", "miss", st.incr_misses},     {"decr", "hit", st.decr_hits},
            {"decr", "miss", st.decr_misses},     {"cas", "hit", st.cas_hits},
            {"cas", "miss", st.cas_misses},       {"cas", "badval", st.cas_badval},
            {"touch", "hit", st.touch_hits},      {"touch", "miss", st.touch_misses},
            {"flush", "all", st.cmd_flush}};
  for (const auto& b : by) {
    t.Sample(cmds,
             fmt::format("{},{}", PromText::Label("command", b.command),
                         PromText::Label("status", b.status)),
             b.v);
  }
  counter("read_bytes", "Bytes read from clients", st.bytes_read);
  counter("written_bytes", "Bytes written to clients", st.bytes_written);
  counter("lent_bytes", "Value bytes written from the core's pools (not copied)", st.bytes_lent);
  counter("values_cut_off", "Values cut off mid-send (the core went away, the object changed)",
          st.cut_off);
  counter("write_retries", "Read-modify-writes and key-busy waits tried again", st.write_retries);
  counter("cores_lost", "Cores of an etcd:// link lost alone (the others' requests went on)",
          st.cores_lost);
}

// The RESP front's (names after Redis's INFO and the redis exporter's).
static void RenderRespMetrics(const gateway::RespServer& rs, PromText& t) {
  const gateway::RespStats st = rs.Published();
  const Families f{t, "goblin_gateway_resp_"};
  auto counter = [&f](std::string_view name, std::string_view help, uint64_t v) {
    f.Counter(name, help, v);
  };
  auto gauge = [&f](std::string_view name, std::string_view help, uint64_t v) {
    f.Gauge(name, help, v);
  };
  counter("connections", "Client connections accepted", st.accepted);
  counter("rejected_connections", "Connections refused past --maxclients", st.rejected);
  gauge("connected_clients", "Clients connected", st.connected);
  gauge("pubsub_clients", "Clients subscribed to a channel or pattern", st.pubsub_clients);
  counter("commands_processed", "Commands processed", st.commands);
  counter("error_replies", "Error replies (malformed or refused commands)", st.protocol_errors);
  counter("keyspace_hits", "Key lookups that found the key (reset by CONFIG RESETSTAT)",
          st.keyspace_hits);
  counter("keyspace_misses", "Key lookups that did not (reset by CONFIG RESETSTAT)",
          st.keyspace_misses);
  counter("net_input_bytes", "Bytes read from clients", st.bytes_read);
  counter("net_output_bytes", "Bytes written to clients", st.bytes_written);
  counter("pubsub_messages_out", "Pub/sub messages delivered to subscribers", st.messages_out);
  counter("output_limit_disconnections", "Clients closed past their output buffer limit",
          st.dropped_for_output_limit);
  counter("stalled_for_core", "Times clients were not read while the core was behind",
          st.stalled_for_core);
  counter("cores_lost", "Cores of an etcd:// link lost alone (the others' requests went on)",
          st.cores_lost);
  counter("pubsub_moves",
          "Times the pub/sub core of an etcd:// link moved (channel subscribers were closed)",
          st.pubsub_moves);
}

static std::string RenderMetrics(const Fronts& f) {
  PromText t;
  if (!f.http.empty()) {
    RenderHttpMetrics(f.http, f.access_log.get(), f.origin_healthy->load(), t);
  }
  if (!f.memcache.empty()) RenderMemcacheMetrics(f.memcache, t);
  if (f.resp) RenderRespMetrics(*f.resp, t);
  return t.Take();
}

int main(int argc, char** argv) {
  CLI::App app("goblin-gateway: HTTP/1.1 mirror cache and Redis pub/sub fronts of goblin-core",
               "goblin-gateway");
  std::string core = "unix:/run/goblin/core.sock";
  std::string listen_address = "127.0.0.1";
  app.add_option("--core", core,
                 "goblin-core: its ring socket (unix:PATH, this host: hits read its pools in "
                 "place), its UCX plane (ucx://HOST:PORT, goblin-core --rdma-listen: bytes "
                 "travel in messages), or every core registered in etcd "
                 "(etcd://HOST:PORT[,HOST:PORT][/prefix][?ring=off], goblin-core --etcd: each "
                 "key at its core by rendezvous hashing, over UCX or, for a core on this host, "
                 "its ring socket)")
      ->capture_default_str();
  app.add_option("--listen-address", listen_address, "Address of the TCP listeners")
      ->capture_default_str();
  cluster::EtcdSecurityFlags etcd_flags;  // (an etcd:// --core behind TLS and auth)
  cluster::AddEtcdSecurityOptions(app, &etcd_flags);
  // HTTP
  gateway::HttpServerOptions h;
  std::string net = "sync", purge_allow = "127.0.0.1";
  std::chrono::nanoseconds default_ttl = std::chrono::seconds(120);
  app.add_option("--mirror", h.mirror,
                 "Origin to mirror (http://HOST[:PORT][/PREFIX]); enables HTTP");
  app.add_option("--http-port", h.port, "HTTP port (0: none)")->capture_default_str();
  std::vector<std::string> tls_certs, tls_keys;
  bool no_ktls = false;
  app.add_option("--https-port", h.https_port, "HTTPS port (0: none)")->capture_default_str();
  app.add_option("--tls-cert", tls_certs,
                 "HTTPS certificate chain (PEM); repeat with --tls-key for more, chosen by SNI "
                 "(the first is the default)");
  app.add_option("--tls-key", tls_keys, "Private key (PEM) of the --tls-cert in the same place");
  bool no_http2 = false;
  app.add_flag("--no-http2", no_http2,
               "Serve HTTP/1.1 only (no h2 by ALPN, no h2c by prior knowledge)");
  app.add_flag("--no-ktls", no_ktls,
               "Encrypt HTTPS in user space even where the kernel offers kTLS");
  std::string key_query = "keep";
  app.add_option("--cache-key-query", key_query,
                 "The query string in the cache key: keep, sort (parameters in byte order) or "
                 "ignore")
      ->check(CLI::IsMember({"keep", "sort", "ignore"}))
      ->capture_default_str();
  app.add_option("--cache-key-strip", h.cache_key.strip,
                 "Query parameter left out of the cache key (repeatable; NAME* for a prefix, "
                 "e.g. utm_*)");
  app.add_option("--cache-key-header", h.cache_key.headers,
                 "Request header whose value is part of the cache key (repeatable)");
  std::string metrics_listen;
  app.add_option("--metrics-listen", metrics_listen,
                 "Serve Prometheus metrics of the fronts (HTTP, memcache, RESP) on HOST:PORT "
                 "(GET /metrics; port 0: any free one)");
  std::string access_log_path = "none";
  app.add_option("--access-log", access_log_path,
                 "HTTP access log: FILE (appended; reopened on SIGUSR1), - (standard output) or "
                 "none; NCSA combined + cache status, TTFB, duration, bytes")
      ->capture_default_str();
  app.add_option("--net", net, "Network I/O: sync (epoll) or async (io_uring)")
      ->check(CLI::IsMember({"sync", "async"}))
      ->capture_default_str();
  AddDurationOption(app, "--default-ttl", &default_ttl,
                    "TTL of cacheable responses without max-age/s-maxage/Expires");
  std::chrono::nanoseconds keep = std::chrono::seconds(600);
  AddDurationOption(app, "--keep", &keep,
                    "How long an object with an ETag or Last-Modified is kept past its "
                    "freshness, to be revalidated with a conditional request (0: not kept; "
                    "no-cache responses are stored only with it)");
  std::chrono::nanoseconds grace = std::chrono::seconds(0);
  AddDurationOption(app, "--grace", &grace,
                    "How long past its freshness an object is served stale while revalidated "
                    "in the background, or when the origin fails or is sick (responses' "
                    "stale-while-revalidate / stale-if-error set their own)");
  app.add_option("--purge-allow", purge_allow, "Comma-separated addresses allowed to PURGE")
      ->capture_default_str();
  app.add_option("--purge-token", h.purge_token, "PURGE also allowed with X-Purge-Token: TOKEN");
  std::chrono::nanoseconds origin_timeout = std::chrono::seconds(30),
                           idle = std::chrono::seconds(60);
  AddDurationOption(app, "--origin-timeout", &origin_timeout,
                    "Silence from the origin after which a fetch fails (504, or a cut body)");
  std::chrono::nanoseconds probe_interval = std::chrono::seconds(5),
                           probe_timeout = std::chrono::seconds(2);
  app.add_option("--origin-probe", h.probe_path,
                 "Health probe: GET this path of the origin every --origin-probe-interval; "
                 "--origin-probe-threshold failures in a row mark the origin sick (misses then "
                 "answered 503 at once, hits served) until a probe succeeds");
  AddDurationOption(app, "--origin-probe-interval", &probe_interval, "Time between probes");
  AddDurationOption(app, "--origin-probe-timeout", &probe_timeout,
                    "A probe not answered in this long failed");
  app.add_option("--origin-probe-threshold", h.probe_threshold,
                 "Failed probes in a row that mark the origin sick")
      ->check(CLI::Range(1u, 1000u))
      ->capture_default_str();
  AddDurationOption(app, "--idle-timeout", &idle, "Idle client connections close after this");
  std::chrono::nanoseconds send_timeout = std::chrono::seconds(60);
  AddDurationOption(app, "--send-timeout", &send_timeout,
                    "A client that takes no response bytes for this long is closed");
  std::chrono::nanoseconds drain_timeout = std::chrono::seconds(5);
  AddDurationOption(app, "--drain-timeout", &drain_timeout,
                    "On SIGTERM, how long HTTP fills in flight may finish (and their clients be "
                    "served) before the gateway exits; 0: at once");
  AddSizeOption(app, "--max-body", &h.max_body, "Largest request body proxied to the origin");
  app.add_option("--accept-from-neighbour", h.accept_from_neighbour,
                 "HTTP front, several workers: each also accepts from the next worker's "
                 "listener, so an awake worker takes a connection a sleeping one would wake for")
      ->capture_default_str();
  AddSizeOption(app, "--write-chunk", &h.write_chunk,
                "HTTP front, --net sync: bytes one connection writes per loop round before the "
                "worker's other connections get their turn; a response's first rounds write "
                "64 KiB, doubling up to this (0: no limit, until its socket is full)",
                /*allow_zero=*/true);
  AddSizeOption(
      app, "--send-buffer", &h.send_buffer,
      "HTTP front: SO_SNDBUF of client connections, at least 256K (Linux doubles it; 0: the "
      "kernel's autotuning). A fixed size caps a connection at about twice it per "
      "round trip: for clients near the cache (docs/benchmarks/concurrency.md)",
      /*allow_zero=*/true);
  AddSizeOption(app, "--same-host-send-buffer", &h.same_host_send_buffer,
                "HTTP front, without --send-buffer: SO_SNDBUF of client connections from this "
                "host (loopback, or one of its own addresses), at least 256K; others keep the "
                "kernel's autotuning (0: everyone does)",
                /*allow_zero=*/true);
  AddDurationOption(app, "--core-reply-poll", &h.core_reply_poll,
                    "HTTP front: after asking the core for an object, poll this long for the "
                    "answer before sleeping (0: sleep at once)");
  app.add_option("--send-by-reference", h.send_by_reference,
                 "HTTP front, --net sync: send what the core lends from stable pool blocks with "
                 "sendfile (the socket references the pages) instead of copying it")
      ->capture_default_str();
  app.add_option("--local-hits", h.local_hits,
                 "HTTP front: serve hits whose head is in the core's RAM from its pools here, "
                 "without asking the core (validated against its head table)")
      ->capture_default_str();
  app.add_option("--hot-heads", h.hot_heads,
                 "HTTP front: head descriptors each worker keeps for local hits")
      ->capture_default_str();
  // RESP
  gateway::RespServerOptions r;
  r.port = 0;
  app.add_option("--resp-port", r.port, "RESP TCP port (0: none)")->capture_default_str();
  app.add_option("--resp-unix", r.unix_path, "Serve RESP on this unix socket");
  app.add_option("--requirepass", r.requirepass, "Password Redis clients must AUTH with");
  std::string requirepass_file;
  app.add_option("--requirepass-file", requirepass_file,
                 "Read that password from this file's first line (not visible in ps)")
      ->check(CLI::ExistingFile)
      ->excludes("--requirepass");
  AddSizeOption(app, "--resp-max-value", &r.max_value_bytes,
                "Largest value a RESP GET returns (held whole in the gateway; Redis's "
                "proto-max-bulk-len)",
                true);
  AddSizeOption(app, "--pubsub-output-limit", &r.output_hard_limit,
                "Output a client may have pending before it is dropped (0: none)", true);
  AddSizeOption(app, "--pubsub-output-soft-limit", &r.output_soft_limit,
                "Output a client may stay above for --pubsub-output-soft-time (0: none)", true);
  AddDurationOption(app, "--pubsub-output-soft-time", &r.output_soft_time,
                    "How long a client may stay above the soft limit");
  uint64_t ring = r.core_ring_bytes;
  AddSizeOption(app, "--core-ring-bytes", &ring, "Ring size towards goblin-core (per direction)");
  AddSizeOption(app, "--core-queue-limit", &r.core_queue_limit,
                "RESP front: requests queued for a busy goblin-core before clients are not "
                "read (back-pressure)");
  app.add_option("--max-clients", r.max_clients, "Concurrent clients per front (per HTTP worker)")
      ->capture_default_str();
  CLI::Option* busy_poll =
      AddDurationOption(app, "--busy-poll", &r.busy_poll,
                        "Poll this long after the last work before sleeping (0: sleep at once; "
                        "give the core and the gateway their own CPUs before raising it). The "
                        "HTTP workers poll only where they pause (CPUs of their own) unless this "
                        "is given");
  // memcache
  gateway::MemcacheServerOptions mc;
  mc.port = 0;
  app.add_option("--memcache-port", mc.port, "memcache (text protocol) TCP port (0: none)")
      ->capture_default_str();
  app.add_option("--memcache-unix", mc.unix_path, "Serve memcache on this unix socket");
  int memcache_threads = 1;
  app.add_option("--memcache-threads", memcache_threads,
                 "memcache loops, each with its own listener on the port (SO_REUSEPORT) and "
                 "core connection")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  AddSizeOption(app, "--memcache-chunk", &mc.chunk_bytes,
                "A get's value is asked of the core in pieces this large, the next once the "
                "client has taken the last",
                true);
  PollingOption polling;
  AddPollingOption(app, &polling, "the fronts");
  std::string cpus;
  app.add_option("--cpus", cpus, "Run on these CPUs (e.g. 2-3; HTTP worker i on the i-th)");
  int threads = 0;
  app.add_option("--threads", threads,
                 "HTTP workers, each with its own loop, listener and core connection (0: one per "
                 "CPU of --cpus, else of the allowed CPUs; given twice, the last counts, so "
                 "goblin-store --gateway-arg=--threads=N overrides its choice)")
      ->check(CLI::Range(0, 1024))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  AddLogLevelOption(app);
  if (int rc = ParseCommandLine(app, argc, argv); rc >= 0) return rc;
  if (!requirepass_file.empty()) {
    auto pass = ReadSecretFile(requirepass_file, "--requirepass-file");
    if (!pass) return Fail(pass.error());
    r.requirepass = std::move(*pass);
  }
  std::vector<int> cpu_list;
  if (!cpus.empty()) {
    auto list = ParseCpuList(cpus);
    if (!list) return Fail(list.error().WithContext("--cpus"));
    if (auto p = PinCurrentThread(*list); !p) return Fail(p.error());
    cpu_list = std::move(*list);
  } else if (auto a = CurrentThreadAffinity(); a) {
    cpu_list = std::move(*a);
  }
  // Default: one worker per CPU (a gateway host of its own). Where goblin-core and clients
  // share the CPUs, the launcher (goblin-store) gives half of them: measured on 2 CPUs, two
  // shards and two workers delivered 24% less than one of each at 16 connections
  // (docs/benchmarks/concurrency.md).
  if (threads == 0) threads = std::max<int>(1, static_cast<int>(cpu_list.size()));
  // Polling: a loop pauses between polls only on a CPU of its own (every HTTP worker and
  // the RESP front one each); otherwise it yields, so it never holds a CPU another thread
  // has work for (measured: docs/benchmarks/concurrency.md).
  const size_t loops = static_cast<size_t>(threads) + 1;
  r.yield_when_polling = polling.Yield(!cpus.empty() && cpu_list.size() >= loops);

  // The core: its ring socket on this host, or its UCX plane (another host, or this one).
  std::string core_target = core.starts_with("unix:") ? core.substr(5) : core;
  // (loopback's segments are 64 KiB: a buffer of a few of them waits for each delayed ACK)
  for (auto [flag, v] : {std::pair{"--send-buffer", h.send_buffer},
                         std::pair{"--same-host-send-buffer", h.same_host_send_buffer}}) {
    if (v != 0 && v < (256 << 10)) {
      return Fail(Status(StatusCode::kInvalidArgument,
                         fmt::format("{}: at least 256K (or 0, the kernel's autotuning); a "
                                     "smaller buffer stalls on the client's delayed "
                                     "acknowledgements",
                                     flag)));
    }
  }
  bool http = !h.mirror.empty();
  bool resp = r.port != 0 || !r.unix_path.empty();
  bool memcache = mc.port != 0 || !mc.unix_path.empty();
  if (!http && !resp && !memcache) {
    return Fail(Status(StatusCode::kInvalidArgument,
                       "nothing to serve: give --mirror (HTTP), --resp-port/--resp-unix and/or "
                       "--memcache-port/--memcache-unix"));
  }
  if (!http && h.https_port != 0) {
    return Fail(
        Status(StatusCode::kInvalidArgument, "--https-port serves the HTTP mirror: give --mirror"));
  }
  if (http && h.https_port != 0) {
    if (tls_certs.size() != tls_keys.size()) {
      return Fail(Status(StatusCode::kInvalidArgument,
                         fmt::format("{} --tls-cert but {} --tls-key: give them in pairs",
                                     tls_certs.size(), tls_keys.size())));
    }
    std::vector<gateway::TlsCertPair> pairs;
    for (size_t i = 0; i < tls_certs.size(); ++i) pairs.push_back({tls_certs[i], tls_keys[i]});
    gateway::TlsOptions to;
    to.ktls = !no_ktls;
    if (!no_http2) to.alpn = {"h2", "http/1.1"};
    auto tls = gateway::TlsContext::Load(pairs, to);
    if (!tls) return Fail(tls.error().WithContext("HTTPS"));
    h.tls = std::move(*tls);
  } else if (!tls_certs.empty() || !tls_keys.empty()) {
    return Fail(Status(StatusCode::kInvalidArgument,
                       "--tls-cert/--tls-key serve HTTPS: give --https-port (and --mirror)"));
  }
  if (memcache_threads > 1 && !mc.unix_path.empty()) {
    return Fail(Status(StatusCode::kInvalidArgument,
                       "--memcache-unix serves one loop: use --memcache-threads 1 with it"));
  }
  h.cache_key.query = key_query == "sort"     ? gateway::policy::CacheKeyOptions::Query::kSort
                      : key_query == "ignore" ? gateway::policy::CacheKeyOptions::Query::kIgnore
                                              : gateway::policy::CacheKeyOptions::Query::kKeep;
  for (std::string& name : h.cache_key.headers) {
    for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  h.timing = !metrics_listen.empty();
  h.net_async = net == "async";
  h.http2 = !no_http2;
  h.core = r.core = core_target;
  if (core_target.starts_with("etcd://")) {
    auto security = cluster::ResolveEtcdSecurity(etcd_flags);
    if (!security) return Fail(security.error());
    h.etcd = r.etcd = mc.etcd = std::move(*security);
  } else if (!etcd_flags.ca_file.empty() || !etcd_flags.cert_file.empty() ||
             !etcd_flags.user.empty()) {
    return Fail(Status(StatusCode::kInvalidArgument, "--etcd-* are for an etcd:// --core"));
  }
  h.listen_address = r.listen_address = listen_address;
  h.core_ring_bytes = r.core_ring_bytes = static_cast<uint32_t>(ring);
  h.max_clients = r.max_clients;
  h.yield_when_polling = r.yield_when_polling;
  // HTTP workers on shared CPUs sleep at once: each empty poll is an epoll_wait and a yield
  // the client on the same CPU pays for (measured: small mix, 1,024 connections +7%, server
  // CPU per GB 0.36 -> 0.32 s; docs/benchmarks/concurrency.md). The RESP front keeps its
  // poll: a pub/sub message crosses it twice and its latency is measured.
  const bool http_polls = busy_poll->count() > 0 || !r.yield_when_polling;
  h.busy_poll = http_polls ? r.busy_poll : std::chrono::nanoseconds(0);
  h.default_ttl = std::chrono::duration_cast<std::chrono::seconds>(default_ttl);
  h.keep = std::chrono::duration_cast<std::chrono::seconds>(keep);
  h.grace = std::chrono::duration_cast<std::chrono::seconds>(grace);
  h.probe_interval =
      std::max(std::chrono::milliseconds(10),
               std::chrono::duration_cast<std::chrono::milliseconds>(probe_interval));
  h.probe_timeout = std::max(std::chrono::milliseconds(10),
                             std::chrono::duration_cast<std::chrono::milliseconds>(probe_timeout));
  if (!h.probe_path.empty() && !h.probe_path.starts_with('/')) {
    return Fail(Status(StatusCode::kInvalidArgument,
                       fmt::format("--origin-probe '{}': give a path (/...)", h.probe_path)));
  }
  h.origin_healthy = std::make_shared<std::atomic<bool>>(true);
  h.origin_timeout = std::max(std::chrono::seconds(1),
                              std::chrono::duration_cast<std::chrono::seconds>(origin_timeout));
  h.idle_timeout =
      std::max(std::chrono::seconds(1), std::chrono::duration_cast<std::chrono::seconds>(idle));
  h.send_timeout = std::max(std::chrono::seconds(1),
                            std::chrono::duration_cast<std::chrono::seconds>(send_timeout));
  h.drain_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(drain_timeout);
  h.purge_allow.clear();
  std::stringstream ss(purge_allow);
  for (std::string a; std::getline(ss, a, ',');) {
    if (!a.empty()) h.purge_allow.push_back(a);
  }
  mc.core = core_target;
  mc.listen_address = listen_address;
  mc.core_ring_bytes = static_cast<uint32_t>(ring);
  mc.max_clients = r.max_clients;
  mc.yield_when_polling = r.yield_when_polling;
  mc.busy_poll = busy_poll->count() > 0 ? r.busy_poll : std::chrono::nanoseconds(0);
  auto signals = ShutdownSignal::Install();
  if (!signals) return Fail(signals.error());

  std::unique_ptr<gateway::AccessLog> access_log;  // (outlives the workers writing to it)
  std::vector<std::unique_ptr<gateway::HttpServer>> workers;
  std::unique_ptr<gateway::RespServer> rs;
  if (http && access_log_path != "none") {
    auto log = gateway::AccessLog::Open(access_log_path, static_cast<size_t>(threads));
    if (!log) return Fail(log.error());
    access_log = std::move(*log);
    gateway::AccessLog::ReopenOnSigusr1(access_log.get());
  }
  if (http) {
    h.reuse_port = threads > 1;
    for (int i = 0; i < threads; ++i) {
      gateway::HttpServerOptions w = h;
      w.worker = i;
      w.prober = i == 0 && !h.probe_path.empty();
      if (access_log) w.access_log = access_log->ring(static_cast<size_t>(i));
      if (i > 0) {  // (the first may have taken any free ports)
        w.port = workers[0]->port();
        w.https_port = workers[0]->https_port();
      }
      auto s = gateway::HttpServer::Start(w);
      if (!s) return Fail(s.error().WithContext(fmt::format("HTTP worker {}", i)));
      workers.push_back(std::move(*s));
    }
    if (workers.size() > 1 && h.accept_from_neighbour) {  // worker i also takes i+1's
      for (size_t i = 0; i < workers.size(); ++i) {
        const auto& next = workers[(i + 1) % workers.size()];
        if (auto r = workers[i]->AcceptAlsoFrom(next->listen_fd(), next->tls_listen_fd()); !r)
          return Fail(r.error().WithContext(fmt::format("HTTP worker {}", i)));
      }
    }
    GOBLIN_LOG_INFO(kLog,
                    "HTTP mirror of {} {} (--net {}, {} worker{}, {} us busy-poll, {} "
                    "between polls)",
                    h.mirror,
                    workers[0]->port() != 0
                        ? fmt::format("on {}:{}", listen_address, workers[0]->port())
                        : std::string("(no plain HTTP port)"),
                    net, threads, threads == 1 ? "" : "s", h.busy_poll.count() / 1000,
                    h.yield_when_polling ? "yielding" : "pausing");
    if (!h.cache_key.plain()) {
      GOBLIN_LOG_INFO(kLog, "cache key: Host + URL, query {}{}{}{}{}", key_query,
                      h.cache_key.strip.empty() ? "" : ", without ",
                      fmt::join(h.cache_key.strip, ","),
                      h.cache_key.headers.empty() ? "" : ", with headers ",
                      fmt::join(h.cache_key.headers, ","));
    }
    if (h.tls) {
      std::string certs;
      for (size_t i = 0; i < h.tls->pairs(); ++i) {
        certs += fmt::format("{}{}", i == 0 ? "" : "; ", fmt::join(h.tls->names(i), ","));
      }
      GOBLIN_LOG_INFO(kLog, "HTTPS on {}:{} (TLS 1.2/1.3, ALPN {}, kTLS {}; certificates: {})",
                      listen_address, workers[0]->https_port(),
                      no_http2 ? "http/1.1" : "h2 http/1.1",
                      no_ktls ? "off" : "where the kernel has it", certs);
    }
  }
  if (resp) {
    auto s = gateway::RespServer::Start(r);
    if (!s) return Fail(s.error().WithContext("RESP"));
    rs = std::move(*s);
    GOBLIN_LOG_INFO(kLog, "RESP on {}{}{}",
                    r.port != 0 ? fmt::format("{}:{}", listen_address, rs->port()) : "",
                    r.port != 0 && !r.unix_path.empty() ? " and " : "",
                    r.unix_path.empty() ? "" : "unix:" + r.unix_path);
  }
  std::vector<std::unique_ptr<gateway::MemcacheServer>> mcs;
  if (memcache) {
    mc.reuse_port = memcache_threads > 1;
    for (int i = 0; i < memcache_threads; ++i) {
      gateway::MemcacheServerOptions w = mc;
      w.worker = i;
      if (i > 0) {
        w.port = mcs[0]->port();
        w.unix_path.clear();
      }
      auto s = gateway::MemcacheServer::Start(w);
      if (!s) return Fail(s.error().WithContext("memcache"));
      mcs.push_back(std::move(*s));
    }
    auto group = std::make_shared<gateway::MemcacheStatsGroup>();  // (`stats`: all loops)
    for (const auto& m : mcs) group->loops.push_back(m.get());
    for (const auto& m : mcs) m->JoinStatsGroup(group);
    GOBLIN_LOG_INFO(kLog, "memcache on {}{}{} ({} loop{})",
                    mc.port != 0 ? fmt::format("{}:{}", listen_address, mcs[0]->port()) : "",
                    mc.port != 0 && !mc.unix_path.empty() ? " and " : "",
                    mc.unix_path.empty() ? "" : "unix:" + mc.unix_path, mcs.size(),
                    mcs.size() == 1 ? "" : "s");
  }
  std::unique_ptr<MetricsServer> metrics;  // (reads the workers: stopped before them)
  if (!metrics_listen.empty()) {
    auto m = MetricsServer::Start(
        metrics_listen, [fronts = Fronts{workers, access_log, h.origin_healthy, mcs, rs}] {
          return RenderMetrics(fronts);
        });
    if (!m) return Fail(m.error());
    metrics = std::move(*m);
    GOBLIN_LOG_INFO(kLog, "Prometheus metrics on http://{}/metrics", metrics->address());
  }
  GOBLIN_LOG_INFO(kLog, "goblin-gateway pid {}; core {}{}{}", getpid(),
                  core_target.starts_with("/") ? "unix:" : "", core_target,
                  core_target.starts_with("/") ? ""
                  : core_target.starts_with("etcd://")
                      ? " (cores on this host through their ring socket "
                        "unless ?ring=off, others over UCX)"
                      : " (UCX plane: object bytes in messages, no local hits)");
  std::vector<Status> http_results(workers.size());
  std::vector<std::thread> http_threads;
  for (size_t i = 0; i < workers.size(); ++i) {
    http_threads.emplace_back([&, i] {
      if (cpu_list.size() > 1 && workers.size() > 1) {  // worker i on the i-th CPU
        const int cpu = cpu_list[i % cpu_list.size()];
        if (auto p = PinCurrentThread(std::span<const int>(&cpu, 1)); !p) {
          GOBLIN_LOG_WARN(kLog, "HTTP worker {}: {}", i, p.error());
        }
      }
      auto res = workers[i]->Run((*signals)->fd());
      if (!res) http_results[i] = res.error();
      (*signals)->Request();  // one front ending ends the process
    });
  }
  std::vector<Status> mc_results(mcs.size());
  std::vector<std::thread> mc_threads;
  for (size_t i = 0; i < mcs.size(); ++i) {
    mc_threads.emplace_back([&, i] {
      auto res = mcs[i]->Run((*signals)->fd());
      if (!res) mc_results[i] = res.error();
      (*signals)->Request();
    });
  }
  Status resp_result;
  if (rs) {
    auto res = rs->Run((*signals)->fd());
    if (!res) resp_result = res.error();
    (*signals)->Request();
  }
  for (auto& t : http_threads) t.join();
  metrics.reset();
  for (auto& t : mc_threads) t.join();
  if (!workers.empty()) {
    gateway::HttpStats st;
    for (const auto& w : workers) st += w->stats();
    GOBLIN_LOG_INFO(kLog,
                    "HTTP: {} requests, {} hits ({} local, {} stale descriptors, {} cut off "
                    "when a head changed mid-send), {} misses ({} coalesced), {} passes, {} "
                    "origin requests ({} errors), {} fills ({} aborted), {} purges, {} bad "
                    "requests, {} answered 503 for the core ({} core disconnects, {} cores lost "
                    "alone, {} lookups sent again after one); {} lent by "
                    "the core, {} of it sent by reference; {} connections, {} taken from a "
                    "neighbour worker's listener, {} given the same-host send buffer; TLS: {} "
                    "handshakes ({} resumed, {} failed), "
                    "{} with kTLS send, {} with kTLS receive; HTTP/2: {} connections ({} "
                    "upgraded from HTTP/1.1), {} streams, {} reset by clients, {} connections "
                    "ended for errors or floods",
                    st.requests, st.hits, st.local_hits, st.local_stale, st.local_cut, st.misses,
                    st.coalesced, st.passes, st.origin_requests, st.origin_errors(), st.fills,
                    st.fills_aborted, st.purges, st.bad_requests, st.core_unavailable,
                    st.core_disconnects, st.cores_lost, st.core_retries, HumanSize(st.bytes_lent),
                    HumanSize(st.bytes_by_reference), st.accepted, st.accepted_for_neighbour,
                    st.same_host_buffers, st.tls_handshakes, st.tls_resumed, st.tls_failed,
                    st.ktls_send, st.ktls_recv, st.h2_connections, st.h2_upgrades, st.h2_streams,
                    st.h2_resets, st.h2_goaways);
    if (access_log) {
      GOBLIN_LOG_INFO(kLog, "access log '{}': {} lines, {} dropped (its rings were full)",
                      access_log->path(), access_log->lines_written(), access_log->dropped());
    }
  }
  if (rs) {
    const auto& st = rs->stats();
    GOBLIN_LOG_INFO(kLog,
                    "RESP: {} clients, {} commands, {} messages out, {} dropped for output "
                    "limits, {} protocol errors, {} waits for a busy core, {} cores lost alone, {} "
                    "pub/sub moves",
                    st.accepted, st.commands, st.messages_out, st.dropped_for_output_limit,
                    st.protocol_errors, st.stalled_for_core, st.cores_lost, st.pubsub_moves);
  }
  if (!mcs.empty()) {
    gateway::MemcacheStats st;
    for (const auto& m : mcs) st += m->stats();
    GOBLIN_LOG_INFO(kLog,
                    "memcache: {} clients, {} commands ({} gets: {} hits, {} misses; {} "
                    "writes), {} protocol errors, {} writes tried again, {} values cut off, {} "
                    "cores lost alone",
                    st.accepted, st.commands, st.cmd_get, st.get_hits, st.get_misses, st.cmd_set,
                    st.protocol_errors, st.write_retries, st.cut_off, st.cores_lost);
  }
  for (const Status& r : mc_results) {
    if (!r.ok()) return Fail(r);
  }
  for (const Status& r : http_results) {
    if (!r.ok()) return Fail(r);
  }
  if (!resp_result.ok()) return Fail(resp_result);
  return 0;
}
