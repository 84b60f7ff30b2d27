// The RESP2/RESP3 front of goblin-gateway: accepts Redis clients on TCP and/or a unix
// socket and serves Redis 7 pub/sub, connection commands (CLIENT, CONFIG, INFO, ...) and the
// store's objects as Redis strings (GET, SET, EXPIRE, SCAN, ...: each object command waits
// for the core before the client's next command runs), forwarding pub/sub to
// goblin-core over one ring connection (each client is a core `sessionId`; one Delivery
// from the core carries all of this gateway's receivers, the payload formatted once per
// protocol). Replies keep command order per client even when some come from the core;
// a client's commands after a (P|S)(UN)SUBSCRIBE wait until the core confirmed it (so
// subscribed-mode checks are exact). Pub/sub output limits per client (Redis's defaults:
// 32 MiB hard, 8 MiB soft for 60 s) drop a client that does not read. Requests queued for a
// core that falls behind are bounded (core_queue_limit): clients are then not read until the
// queue drains. When the core goes away the front stays up: subscribed clients are closed
// (their subscriptions died with the core), requests in flight get -ERR, commands that need
// the core answer "-ERR goblin-core is unavailable" until it is back (reconnected with
// back-off).
// Threading: one event loop thread (epoll); Run() until the stop fd is readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "goblin/cluster/etcd_client.h"
#include "goblin/common/status.h"

namespace goblin::gateway {

struct RespServerOptions {
  std::string core;            // goblin-core: its ring socket (a path), or ucx://HOST:PORT
  cluster::EtcdSecurity etcd;  // how an etcd:// core target reaches a secured etcd
  std::string listen_address = "127.0.0.1";
  int port = 6379;          // TCP (0: no TCP listener)
  std::string unix_path;    // also listen here (empty: no)
  std::string requirepass;  // AUTH required when set
  size_t output_hard_limit = 32ull << 20;
  size_t output_soft_limit = 8ull << 20;
  std::chrono::nanoseconds output_soft_time = std::chrono::seconds(60);
  uint32_t core_ring_bytes = 1u << 20;
  // Requests waiting for room in the core's ring: past this, clients are not read until it
  // drains to half (TCP pushes back on a publisher flooding a slow core).
  size_t core_queue_limit = 8u << 20;
  size_t max_clients = 10000;
  // Objects: a write that meets another write of its key in progress tries again for this
  // long; a value is held whole in the gateway, up to this size (Redis's proto-max-bulk-len).
  std::chrono::milliseconds key_busy_timeout{10000};
  uint64_t max_value_bytes = 512ull << 20;
  std::chrono::nanoseconds busy_poll = std::chrono::microseconds(50);
  // Yield the CPU between polls while busy-polling (sharing a CPU with goblin-core).
  bool yield_when_polling = false;
};

struct RespStats {
  uint64_t accepted = 0, closed = 0, commands = 0, protocol_errors = 0;
  uint64_t dropped_for_output_limit = 0, messages_out = 0;
  uint64_t stalled_for_core = 0;  // times a client was not read because the core was behind
  uint64_t rejected = 0;          // connections refused past max_clients
  uint64_t cores_lost = 0;        // etcd://: cores lost alone (only the requests there ended)
  uint64_t pubsub_moves = 0;      // etcd://: the pub/sub core moved (its subscribers closed)
  // Filled in Published()'s copy only (the loop keeps them apart: CONFIG RESETSTAT resets
  // the keyspace counts, as Redis's).
  uint64_t keyspace_hits = 0, keyspace_misses = 0, bytes_read = 0, bytes_written = 0;
  uint64_t connected = 0, pubsub_clients = 0;  // (levels)
};

class RespServer {
 public:
  // Connects to the core and binds the listeners (the unix socket appears once it listens).
  static Result<std::unique_ptr<RespServer>> Start(const RespServerOptions& options);
  ~RespServer();
  // Serves until `stop_fd` becomes readable (the core may come and go meanwhile).
  VoidResult Run(int stop_fd);
  const RespStats& stats() const;  // (the loop's thread, or once Run returned)
  // The stats as the loop last handed them over (every 200 ms and before it sleeps), the
  // keyspace and byte counts and client levels included: for any thread (metrics).
  RespStats Published() const;
  int port() const;  // the TCP port bound (useful with port 0... which disables TCP: use -1
                     // for "any free port")

 private:
  class Impl;
  explicit RespServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace goblin::gateway
