// The memcache front of goblin-gateway: memcached 1.6's text protocol (get, gets, gat,
// gats, set, add, replace, append, prepend, cas, delete, incr, decr, touch, flush_all,
// stats, version, verbosity, quit, mn) on TCP and/or a unix socket, over the objects of
// goblin-core. A memcache key is a core key as it is (so "example.com/a.jpg" is the object
// the HTTP mirror serves for http://example.com/a.jpg); client flags live in the object's
// metadata (an `X-Memcache-Flags` line); the CAS unique is the object's generation. Values
// are any size the store takes: a set streams into the core as it arrives, a get streams
// out head first, asked for in pieces of `chunk_bytes` as the client takes them. add,
// replace and cas are conditional puts checked by the core (at begin and at commit);
// append, prepend, incr and decr read the value and write it back conditionally on its
// generation, again until no other write came between. Replies are memcached's, byte for
// byte (tests/system/memcache_differential_test.cpp runs both side by side).
// One command of a connection is carried out at a time (pipelined commands wait in its
// input, replies keep their order). When the core goes away the front stays up: commands
// that need it answer "SERVER_ERROR goblin-core is unavailable" and a value being sent is
// cut off (the connection closed), until it is back.
// Threading: one event loop thread per server (several share the port with SO_REUSEPORT);
// Run() until the stop fd is readable.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "goblin/cluster/etcd_client.h"
#include "goblin/common/status.h"

namespace goblin::gateway {

struct MemcacheServerOptions {
  std::string core;            // goblin-core: its ring socket (a path), or ucx://HOST:PORT
  cluster::EtcdSecurity etcd;  // how an etcd:// core target reaches a secured etcd
  std::string listen_address = "127.0.0.1";
  int port = 11211;       // TCP (0: none; -1: any free port)
  std::string unix_path;  // also listen here (empty: no)
  bool reuse_port = false;
  int worker = 0;
  uint32_t core_ring_bytes = 1u << 20;
  size_t core_queue_limit = 8u << 20;
  size_t max_clients = 10000;
  // A get's value is asked of the core in pieces of this size, the next once the client's
  // pending output is below output_limit: a slow reader holds at most about this much here.
  size_t chunk_bytes = 2u << 20;
  size_t output_limit = 4u << 20;
  std::chrono::nanoseconds busy_poll{0};
  bool yield_when_polling = true;
  // How long a write waits for another write of the same key (another client's set, a
  // fill from the origin) before it answers SERVER_ERROR.
  std::chrono::milliseconds key_busy_timeout{10000};
};

struct MemcacheStats {
  uint64_t accepted = 0, closed = 0, commands = 0, protocol_errors = 0;
  uint64_t cmd_get = 0, get_hits = 0, get_misses = 0, cmd_set = 0, cmd_touch = 0, cmd_flush = 0;
  uint64_t delete_hits = 0, delete_misses = 0, incr_hits = 0, incr_misses = 0;
  uint64_t decr_hits = 0, decr_misses = 0, cas_hits = 0, cas_misses = 0, cas_badval = 0;
  uint64_t touch_hits = 0, touch_misses = 0;
  uint64_t bytes_read = 0, bytes_written = 0;
  uint64_t write_retries = 0;  // read-modify-writes and key-busy waits tried again
  uint64_t cut_off = 0;        // values cut off mid-send (core gone, object replaced)
  uint64_t bytes_lent = 0;     // value bytes written from the core's pools (not copied here)
  uint64_t cores_lost = 0;     // etcd://: cores lost alone (only the ops waiting there ended)
  // (not a counter: how many `stats reset`s of its group these count from; += keeps it)
  uint64_t resets = 0;
  MemcacheStats& operator+=(const MemcacheStats& o);
};

class MemcacheServer;

// The loops of one gateway answering `stats` as one server (memcached's totals over its
// threads): a loop adds the others' published copies (at most 200 ms old; fresh once a loop
// is idle) to its own counters, and `stats reset` on any loop resets them all.
// Threading: `loops` is set before any loop runs and read-only after; `resets` is atomic.
struct MemcacheStatsGroup {
  std::vector<const MemcacheServer*> loops;
  std::atomic<uint64_t> resets{0};
};

class MemcacheServer {
 public:
  static Result<std::unique_ptr<MemcacheServer>> Start(const MemcacheServerOptions& options);
  ~MemcacheServer();
  VoidResult Run(int stop_fd);
  const MemcacheStats& stats() const;  // (the loop's thread, or once Run returned)
  // The stats as the loop last handed them over (every 200 ms and before it sleeps): for
  // any thread (the metrics endpoint).
  MemcacheStats Published() const;
  int port() const;
  // Before Run: `stats` answers for every loop of `group` (which lists this one).
  void JoinStatsGroup(std::shared_ptr<MemcacheStatsGroup> group);

 private:
  class Impl;
  explicit MemcacheServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace goblin::gateway
