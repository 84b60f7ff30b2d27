// CoreAdmin: goblin-core's implementation of goblin.admin.v1.Admin (admin/proto). Every call
// checks the caller (admin::Authorize), then reads what it reports on each shard's loop
// thread through that shard's LoopExecutor, one shard after the other (the store, pools and
// sessions are never touched from gRPC's threads), and merges: sums for counters, pools and
// tiers, a merge of each shard's first keys for listings, the key's own shard for one
// object, shard 0 for pub/sub; sysfs/procfs inspection (NUMA, devices, the audit's kernel side)
// runs on the calling gRPC thread. A call the loop does not take within 5 s fails UNAVAILABLE.
// Threading: gRPC threads call the methods; the closures they post run on the loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "goblin/admin/loop_executor.h"
#include "goblin/admin/v1/admin.grpc.pb.h"
#include "goblin/common/topology.h"
#include "goblin/core/core_service.h"
#include "goblin/reactor/loop.h"
#include "goblin/ring/server.h"
#include "preloader.h"

namespace goblin::verbs {
class UcxServer;
}

namespace goblin::core {

// One shard's state, read on that shard's loop.
struct CoreAdminShard {
  admin::LoopExecutor* loop = nullptr;
  CoreService* service = nullptr;
  store::Store* store = nullptr;  // null: no disk tier
  const store::HeadPool* pool = nullptr;
  const ring::RingServer* ring = nullptr;
  const reactor::Loop* reactor = nullptr;
  const verbs::UcxServer* ucx = nullptr;  // null: no UCX plane
};

struct CoreAdminContext {
  std::vector<CoreAdminShard> shards;               // in shard order; pub/sub lives on shard 0
  std::vector<std::vector<std::string>> tier_dirs;  // per tier, its drives (--ssd-dir A,B,...)
  uint64_t ram_head = 0;
  int numa_node = -1;
  Topology topology;
  std::map<std::string, std::string> config;  // every option in force
  std::string token;                          // for TCP callers
  uint64_t started_ns = 0;                    // MonotonicNanos at start
  const PreloadProgress* preload = nullptr;   // --source (null: none)
};

// The etcd membership's state as stats read it (goblin-core --etcd; set once registered).
struct MembershipView {
  std::function<bool()> registered;
  std::function<uint64_t()> registrations;
};

class CoreAdmin final : public goblin::admin::v1::Admin::Service {
 public:
  explicit CoreAdmin(CoreAdminContext ctx) : ctx_(std::move(ctx)) {}
  // --etcd: the registration, which outlives the admin server (set before clients can see
  // the core in etcd; read by stats from gRPC threads).
  void SetMembership(MembershipView view) {
    std::lock_guard lock(membership_mu_);
    membership_ = std::move(view);
  }
  using Ctx = grpc::ServerContext;
  grpc::Status GetPool(Ctx*, const admin::v1::GetPoolRequest*, admin::v1::PoolInfo*) override;
  grpc::Status GetNuma(Ctx*, const admin::v1::GetNumaRequest*, admin::v1::NumaInfo*) override;
  grpc::Status Audit(Ctx*, const admin::v1::AuditRequest*, admin::v1::AuditReport*) override;
  grpc::Status GetTiers(Ctx*, const admin::v1::GetTiersRequest*, admin::v1::TiersInfo*) override;
  grpc::Status ListObjects(Ctx*, const admin::v1::ListObjectsRequest*,
                           admin::v1::ListObjectsResponse*) override;
  grpc::Status GetObject(Ctx*, const admin::v1::GetObjectRequest*,
                         admin::v1::ObjectDetail*) override;
  grpc::Status EvictObjects(Ctx*, const admin::v1::EvictObjectsRequest*,
                            admin::v1::EvictObjectsResponse*) override;
  grpc::Status GetPubsub(Ctx*, const admin::v1::GetPubsubRequest*, admin::v1::PubsubInfo*) override;
  grpc::Status ListClients(Ctx*, const admin::v1::ListClientsRequest*,
                           admin::v1::ClientsInfo*) override;
  grpc::Status GetStats(Ctx*, const admin::v1::GetStatsRequest*, admin::v1::Stats*) override;
  grpc::Status GetConfig(Ctx*, const admin::v1::GetConfigRequest*, admin::v1::Config*) override;

  // GetStats without a caller to authorize (the metrics endpoint's; any thread).
  grpc::Status CollectStats(admin::v1::Stats* out);
  // The same as Prometheus text (core_metrics.cpp): goblin_core_* counters, gauges and
  // latency histograms; "" and the reason in *error if a shard's loop did not answer.
  std::string PrometheusText(std::string* error);

 private:
  // Authorizes the call, then runs `fn` on each shard's loop in turn (stopping at the first
  // error); `fn` returns the shard's status.
  grpc::Status OnShards(Ctx* context, const std::function<grpc::Status(const CoreAdminShard&)>& fn);
  grpc::Status EachShard(const std::function<grpc::Status(const CoreAdminShard&)>& fn);
  // Runs `fn` on one shard's loop (the caller authorized).
  grpc::Status OnShard(const CoreAdminShard& shard, const std::function<grpc::Status()>& fn);
  grpc::Status NeedStore() const;
  const CoreAdminShard& ShardFor(std::string_view key) const;
  CoreAdminContext ctx_;
  std::mutex membership_mu_;
  MembershipView membership_;
};

}  // namespace goblin::core
