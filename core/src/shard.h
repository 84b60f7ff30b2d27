// One shard of goblin-core. The core runs `--cores` shards that share nothing: each is a
// loop thread (a reactor::Loop serving the ring plane's server, the UCX plane's worker and
// the admin executor side by side) with its own request handler (CoreService),
// its own store (its keys' part of the index and journal, its slice of the head pool and
// I/O buffers, its own I/O engine), its own UCX worker and listener, and its own admin
// executor. A key belongs to shard goblin::ShardOf(key, count); clients connect to every
// shard and send each request to its key's shard, so a GET, PUT or hit never crosses
// shards. Shard 0 also owns the ring plane's socket (it hands each Hello to the shard it
// names) and the pub/sub engine.
// Threading: Open/Start/Join/Close from the main thread; after Start everything a shard
// owns is touched only by its loop thread (the admin plane goes through admin_loop()).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "admin_service.h"
#include "goblin/admin/loop_executor.h"
#include "goblin/common/config.h"
#include "goblin/common/status.h"
#include "goblin/core/core_service.h"
#include "goblin/core/keyspace_events.h"
#include "goblin/reactor/loop.h"
#include "goblin/ring/server.h"
#include "goblin/store/head_pool.h"
#include "goblin/store/store.h"
#if GOBLIN_HAVE_UCX
#include "goblin/verbs/ucx_server.h"
#endif

namespace goblin::core {

struct ShardOptions {
  uint16_t index = 0, count = 1;
  reactor::LoopOptions loop;                 // busy-polling and sleeping
  ring::ServerOptions ring;                  // (no socket_path: shard 0 binds it when all are open)
  std::optional<store::StoreOptions> store;  // nullopt: no disk tier (a lone head pool)
  store::PoolOptions lone_pool;              // the pool without a store
  std::vector<int> cpus;                     // pin the loop thread here (empty: no pinning)
  bool admin = false;                        // serve admin calls (a LoopExecutor)
  // Keyspace notifications (shared by every shard; shard 0 publishes them). Null: none.
  KeyspaceEvents* keyspace = nullptr;
#if GOBLIN_HAVE_UCX
  std::optional<verbs::UcxServerOptions> ucx;  // the UCX plane's listener for this shard
#endif
};

class Shard {
 public:
  static Result<std::unique_ptr<Shard>> Open(const ShardOptions& options);
  ~Shard();

  uint16_t index() const { return options_.index; }
  store::Store* store() { return store_.get(); }
  const store::HeadPool& pool() const { return store_ ? store_->pool() : *lone_pool_; }
  CoreService& service() { return *service_; }
  ring::RingServer& ring() { return *server_; }
  const reactor::Loop& loop() const { return *loop_; }
#if GOBLIN_HAVE_UCX
  verbs::UcxServer* ucx() { return ucx_.get(); }
#endif
  CoreAdminShard AdminView();

  // Runs the loop on a thread of its own until `stop_fd` is readable (shared by all shards:
  // the loops never read it).
  void Start(int stop_fd);
  VoidResult Join();
  // Makes everything durable, checkpoints and closes the store (after Join).
  void CloseStore();
  void LogSummary() const;

 private:
  Shard() = default;
  ShardOptions options_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<store::HeadPool> lone_pool_;
  std::unique_ptr<CoreService> service_;
  std::unique_ptr<admin::LoopExecutor> admin_loop_;
  std::unique_ptr<ring::RingServer> server_;
  std::unique_ptr<reactor::Loop> loop_;  // serves the three above (declared last: goes first)
#if GOBLIN_HAVE_UCX
  std::unique_ptr<verbs::UcxServer> ucx_;
#endif
  std::thread thread_;
  Status ran_;
};

}  // namespace goblin::core
