#include "admin_service.h"

#include <algorithm>

#include "goblin/admin/admin_server.h"
#include "goblin/admin/inspect.h"
#include "goblin/common/clock.h"
#include "goblin/common/config.h"
#include "goblin/wire/goblin_wire.h"
#if GOBLIN_HAVE_UCX
#include "goblin/verbs/ucx_server.h"
#endif

namespace goblin::core {
namespace {

namespace v1 = admin::v1;
constexpr auto kLoopTimeout = std::chrono::seconds(5);

grpc::Status ToGrpc(const Status& s) {
  grpc::StatusCode c = grpc::StatusCode::UNKNOWN;
  switch (s.code()) {
    case StatusCode::kOk:
      return grpc::Status::OK;
    case StatusCode::kInvalidArgument:
      c = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case StatusCode::kNotFound:
      c = grpc::StatusCode::NOT_FOUND;
      break;
    case StatusCode::kAlreadyExists:
      c = grpc::StatusCode::ALREADY_EXISTS;
      break;
    case StatusCode::kOutOfRange:
      c = grpc::StatusCode::OUT_OF_RANGE;
      break;
    case StatusCode::kResourceExhausted:
      c = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case StatusCode::kFailedPrecondition:
      c = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case StatusCode::kUnavailable:
      c = grpc::StatusCode::UNAVAILABLE;
      break;
    case StatusCode::kTimeout:
      c = grpc::StatusCode::DEADLINE_EXCEEDED;
      break;
    case StatusCode::kPermissionDenied:
      c = grpc::StatusCode::PERMISSION_DENIED;
      break;
    case StatusCode::kUnimplemented:
      c = grpc::StatusCode::UNIMPLEMENTED;
      break;
    case StatusCode::kAborted:
      c = grpc::StatusCode::ABORTED;
      break;
    default:
      c = grpc::StatusCode::INTERNAL;
      break;
  }
  return grpc::Status(c, s.message());
}

std::string PeerKindName(uint8_t k) {
  switch (static_cast<wire::PeerKind>(k)) {
    case wire::PeerKind::kClient:
      return "client";
    case wire::PeerKind::kGateway:
      return "gateway";
    case wire::PeerKind::kBenchmark:
      return "benchmark";
    case wire::PeerKind::kTool:
      return "tool";
    default:
      return "unknown";
  }
}

void FillSummary(const store::ObjectRecord& r, uint64_t head_in_ram, v1::ObjectSummary* s) {
  s->set_key(r.key);
  s->set_size(r.size);
  s->set_generation(r.generation);
  s->set_created_unix_ns(r.created_unix_ns);
  s->set_expires_unix_ns(r.expires_unix_ns);
  s->set_head_in_ram(head_in_ram > 0);
}

void FillHistogram(const std::string& name, const LatencyHistogram& h, v1::Histogram* out) {
  out->set_name(name);
  out->set_unit("us");
  for (uint64_t b : LatencyHistogram::kUpperBoundsUs) out->add_upper_bounds(b);
  for (uint64_t c : h.counts()) out->add_counts(c);
  out->set_count(h.count());
  out->set_sum(h.sum_us());
}

}  // namespace

grpc::Status CoreAdmin::OnLoop(Ctx* context, const std::function<grpc::Status()>& fn) {
  if (auto a = admin::Authorize(*context, ctx_.token); !a.ok()) return a;
  grpc::Status result;
  auto r = ctx_.loop->Call([&] { result = fn(); }, kLoopTimeout);
  if (!r) return ToGrpc(r.error());
  return result;
}

grpc::Status CoreAdmin::NeedStore() const {
  if (ctx_.store != nullptr) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      "goblin-core has no object store (start it with --ssd-dir)");
}

grpc::Status CoreAdmin::GetPool(Ctx* context, const v1::GetPoolRequest*, v1::PoolInfo* out) {
  return OnLoop(context, [&] {
    const store::HeadPool& p = *ctx_.pool;
    const store::PoolStats& s = p.stats();
    out->set_size_bytes(p.size());
    out->set_block_bytes(p.block_size());
    out->set_head_bytes(ctx_.ram_head);
    out->set_used_bytes(s.bytes_reserved);
    out->set_requested_bytes(s.bytes_requested);
    out->set_free_bytes(p.size() - s.bytes_reserved);
    out->set_heads(s.slots_used);
    out->set_blocks_total(s.blocks_total);
    out->set_blocks_free(s.blocks_free);
    out->set_fragmentation(s.Fragmentation());
    out->set_backing(std::string(store::BackingName(p.backing())));
    out->set_locked(p.locked());
    out->set_numa_node(p.numa_node());
    out->set_allocation_failures(s.allocation_failures);
    if (auto nodes = p.PageNodes()) {
      for (auto [n, c] : *nodes) {
        auto* e = out->add_page_nodes();
        e->set_node(n);
        e->set_pages(c);
      }
    }
    if (ctx_.store != nullptr) {
      out->set_head_table_entries(ctx_.store->head_table().capacity());
      out->set_head_table_in_use(ctx_.store->head_table().in_use());
    }
    return grpc::Status::OK;
  });
}

grpc::Status CoreAdmin::GetNuma(Ctx* context, const v1::GetNumaRequest*, v1::NumaInfo* out) {
  if (auto a = admin::Authorize(*context, ctx_.token); !a.ok()) return a;
  auto topo = ProbeTopology();  // now, not at start: free memory and hugepages change
  if (!topo) return ToGrpc(topo.error());
  out->set_numa_available(topo->numa_available);
  out->set_allowed_cpus(FormatCpuList(ctx_.topology.allowed_cpus));
  for (const NumaNode& n : topo->nodes) {
    auto* o = out->add_nodes();
    o->set_id(n.id);
    o->set_cpus(FormatCpuList(n.cpus));
    o->set_mem_total_bytes(n.mem_total_bytes);
    o->set_mem_free_bytes(n.mem_free_bytes);
    o->set_hugepages_2m_total(n.hugepages_2m_total);
    o->set_hugepages_2m_free(n.hugepages_2m_free);
    for (int d : n.distances) o->add_distances(d);
  }
  for (const admin::DeviceInfo& d : admin::ReadDevices()) {
    auto* o = out->add_devices();
    o->set_name(d.name);
    o->set_kind(d.kind);
    o->set_numa_node(d.numa_node);
    o->set_pci_address(d.pci_address);
    o->set_detail(d.detail);
  }
  return grpc::Status::OK;
}

grpc::Status CoreAdmin::Audit(Ctx* context, const v1::AuditRequest*, v1::AuditReport* out) {
  admin::AuditInput in;
  in.node = ctx_.numa_node;
  if (const NumaNode* n = ctx_.topology.Node(ctx_.numa_node)) in.node_cpus = n->cpus;
  in.memfds = {"goblin-head-pool", "goblin-io-buffers", "goblin-head-table"};
  grpc::Status st = OnLoop(context, [&] {  // the pool's side, read on the loop
    in.pool_backing = std::string(store::BackingName(ctx_.pool->backing()));
    in.pool_hugetlb = ctx_.pool->backing() == store::Backing::kHugeTlb2M;
    in.pool_locked = ctx_.pool->locked();
    if (auto nodes = ctx_.pool->PageNodes()) in.pool_page_nodes = *nodes;
    return grpc::Status::OK;
  });
  if (!st.ok()) return st;
  out->set_node(in.node);
  bool passed = true;
  for (const admin::AuditLine& l : admin::RunAudit(in)) {
    auto* c = out->add_checks();
    c->set_name(l.name);
    c->set_evidence(l.evidence);
    switch (l.result) {
      case admin::CheckResult::kPass:
        c->set_result(v1::AuditCheck::PASS);
        break;
      case admin::CheckResult::kFail:
        c->set_result(v1::AuditCheck::FAIL);
        passed = false;
        break;
      case admin::CheckResult::kSkip:
        c->set_result(v1::AuditCheck::SKIP);
        break;
    }
  }
  out->set_passed(passed);
  return grpc::Status::OK;
}

grpc::Status CoreAdmin::GetTiers(Ctx* context, const v1::GetTiersRequest*, v1::TiersInfo* out) {
  return OnLoop(context, [&] {
    if (auto s = NeedStore(); !s.ok()) return s;
    std::vector<uint64_t> objects(ctx_.store->tier_count(), 0);
    ctx_.store->ForEachObject([&](const store::ObjectRecord& r, uint64_t) {
      std::vector<bool> on(objects.size(), false);
      for (const store::Extent& e : r.extents) {
        if (e.tier < on.size()) on[e.tier] = true;
      }
      for (size_t i = 0; i < on.size(); ++i) objects[i] += on[i] ? 1 : 0;
    });
    for (size_t i = 0; i < ctx_.store->tier_count(); ++i) {
      const store::TierSpace& t = ctx_.store->tier(i);
      const store::TierStats& s = t.stats();
      auto* o = out->add_tiers();
      o->set_index(static_cast<uint32_t>(i));
      o->set_dir(t.dir().path());
      o->set_id(t.dir().identity().IdString());
      o->set_capacity_bytes(t.capacity_bytes());
      o->set_used_bytes(t.used_bytes());
      o->set_objects(objects[i]);
      o->set_files(s.files);
      o->set_read_bytes(s.read_bytes);
      o->set_write_bytes(s.write_bytes);
      o->set_reads(s.reads);
      o->set_writes(s.writes);
      o->set_errors(s.io_errors + s.allocation_failures);
    }
    out->set_objects(ctx_.store->stats().objects);
    return grpc::Status::OK;
  });
}

grpc::Status CoreAdmin::ListObjects(Ctx* context, const v1::ListObjectsRequest* req,
                                    v1::ListObjectsResponse* out) {
  const size_t page = req->page_size() == 0 ? 100 : std::min<uint32_t>(req->page_size(), 10000);
  return OnLoop(context, [&] {
    if (auto s = NeedStore(); !s.ok()) return s;
    // Keys in order after the token: the first `page` + 1 (to know whether more follow).
    using Item = std::pair<const store::ObjectRecord*, uint64_t>;
    auto later = [](const Item& a, const Item& b) { return a.first->key < b.first->key; };
    std::vector<Item> heap;  // a max-heap of the smallest keys seen
    ctx_.store->ForEachObject([&](const store::ObjectRecord& r, uint64_t head) {
      if (!r.key.starts_with(req->prefix()) || r.key <= req->page_token()) return;
      if (heap.size() == page + 1 && !(r.key < heap.front().first->key)) return;
      heap.emplace_back(&r, head);
      std::push_heap(heap.begin(), heap.end(), later);
      if (heap.size() > page + 1) {
        std::pop_heap(heap.begin(), heap.end(), later);
        heap.pop_back();
      }
    });
    std::sort_heap(heap.begin(), heap.end(), later);
    bool more = heap.size() > page;
    if (more) heap.pop_back();
    for (const auto& [r, head] : heap) FillSummary(*r, head, out->add_objects());
    if (more) out->set_next_page_token(heap.back().first->key);
    return grpc::Status::OK;
  });
}

grpc::Status CoreAdmin::GetObject(Ctx* context, const v1::GetObjectRequest* req,
                                  v1::ObjectDetail* out) {
  return OnLoop(context, [&] {
    if (auto s = NeedStore(); !s.ok()) return s;
    const store::ObjectRecord* r = ctx_.store->Record(req->key());
    if (r == nullptr) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no object " + req->key());
    uint64_t head = ctx_.store->HeadBytesInRam(*r);
    FillSummary(*r, head, out->mutable_summary());
    out->set_metadata(r->metadata);
    out->set_head_bytes_in_ram(head);
    for (const store::Extent& e : r->extents) {
      auto* o = out->add_extents();
      o->set_tier(e.tier);
      o->set_file(e.file);
      o->set_offset(e.offset);
      o->set_length(e.length);
      o->set_checksum(e.checksum);
    }
    return grpc::Status::OK;
  });
}

grpc::Status CoreAdmin::EvictObjects(Ctx* context, const v1::EvictObjectsRequest* req,
                                     v1::EvictObjectsResponse* out) {
  return OnLoop(context, [&] {
    if (auto s = NeedStore(); !s.ok()) return s;
    if (req->has_key()) {
      auto d = ctx_.store->Delete(req->key());
      if (!d) return ToGrpc(d.error());
      out->set_evicted(*d ? 1 : 0);
    } else if (req->has_prefix()) {
      auto d = ctx_.store->DeletePrefix(req->prefix());
      if (!d) return ToGrpc(d.error());
      out->set_evicted(*d);
    } else {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "name a key or a prefix");
    }
    return grpc::Status::OK;
  });
}

grpc::Status CoreAdmin::GetPubsub(Ctx* context, const v1::GetPubsubRequest*, v1::PubsubInfo* out) {
  return OnLoop(context, [&] {
    const pubsub::Engine& e = ctx_.service->pubsub();
    for (bool shard : {false, true}) {
      for (const std::string& name : e.Channels("", shard, false)) {
        auto* c = shard ? out->add_shard_channels() : out->add_channels();
        c->set_name(name);
        c->set_subscribers(e.NumSub(name, shard));
      }
    }
    out->set_patterns(e.NumPat());
    out->set_subscribers(e.subscribers());
    for (const auto& v : ctx_.service->Sessions()) {
      if (v.subscribers == 0) continue;
      auto* s = out->add_sessions();
      s->set_client_id(v.session->id());
      s->set_client_name(v.session->name());
      s->set_subscribers(v.subscribers);
      s->set_output_bytes(v.session->queued_bytes());
    }
    const CoreCounters& k = ctx_.service->counters();
    out->set_publishes(k.publishes);
    out->set_deliveries(k.deliveries_sent);
    out->set_dropped_for_limits(k.slow_subscribers_dropped);
    return grpc::Status::OK;
  });
}

grpc::Status CoreAdmin::ListClients(Ctx* context, const v1::ListClientsRequest*,
                                    v1::ClientsInfo* out) {
  return OnLoop(context, [&] {
    for (const auto& v : ctx_.service->Sessions()) {
      auto* c = out->add_clients();
      c->set_id(v.session->id());
      c->set_name(v.session->name());
      c->set_pid(v.session->pid());
      c->set_plane(v.session->local() ? "ring" : "ucx");
      c->set_kind(PeerKindName(v.session->peer_kind()));
      c->set_output_bytes(v.session->queued_bytes());
      c->set_loans_out(v.loans);
      c->set_downloads(v.downloads);
      c->set_subscribers(v.subscribers);
    }
    return grpc::Status::OK;
  });
}

grpc::Status CoreAdmin::GetStats(Ctx* context, const v1::GetStatsRequest*, v1::Stats* out) {
  return OnLoop(context, [&] {
    auto& m = *out->mutable_counters();
    const CoreCounters& k = ctx_.service->counters();
    m["sessions_opened"] = k.sessions_opened;
    m["sessions_closed"] = k.sessions_closed;
    m["pings"] = k.pings;
    m["errors_sent"] = k.errors_sent;
    m["malformed"] = k.malformed;
    m["puts"] = k.puts;
    m["gets"] = k.gets;
    m["bytes_in"] = k.bytes_in;
    m["bytes_out"] = k.bytes_out;
    m["bytes_lent"] = k.bytes_lent;
    m["loans"] = k.loans;
    m["publishes"] = k.publishes;
    m["deliveries_sent"] = k.deliveries_sent;
    m["slow_subscribers_dropped"] = k.slow_subscribers_dropped;
    m["reservations"] = k.reservations;
    m["gets_parked"] = k.gets_parked;
    const ring::ServerStats& rs = ctx_.ring->stats();
    m["ring_accepted"] = rs.accepted;
    m["ring_rejected"] = rs.rejected;
    m["ring_messages"] = rs.messages;
    m["ring_corrupt"] = rs.corrupt;
    m["loop_sleeps"] = rs.sleeps;
#if GOBLIN_HAVE_UCX
    if (ctx_.ucx != nullptr) {
      const verbs::UcxServerStats& us = ctx_.ucx->stats();
      m["ucx_accepted"] = us.accepted;
      m["ucx_rejected"] = us.rejected;
      m["ucx_messages"] = us.messages;
      m["ucx_failed_endpoints"] = us.failed_endpoints;
      m["ucx_hello_timeouts"] = us.hello_timeouts;
    }
#endif
    if (ctx_.store != nullptr) {
      const store::StoreStats& s = ctx_.store->stats();
      m["objects"] = s.objects;
      m["hits"] = s.hits;
      m["misses"] = s.misses;
      m["expired"] = s.expired;
      m["evicted"] = s.evicted;
      m["fills_committed"] = s.fills_committed;
      m["fills_aborted"] = s.fills_aborted;
      m["fills_refused"] = s.fills_refused;
      m["heads_in_ram"] = s.heads_in_ram;
      m["head_refills"] = s.head_refills;
      m["heads_demoted"] = s.heads_demoted;
      m["corrupt_dropped"] = s.corrupt_dropped;
      m["loans_out"] = s.loans_out;
      m["streams_open"] = s.streams_open;
      m["heads_described"] = s.heads_described;
      m["descriptors_withdrawn"] = s.descriptors_withdrawn;
      m["fills_timed_out"] = s.fills_timed_out;
      m["inline_syncs"] = s.inline_syncs;
      m["fill_disk_waits"] = s.fill_disk_waits;
      const store::Index& index = ctx_.store->index();
      const store::IndexStats& is = index.stats();
      m["journal_group_syncs"] = is.group_syncs;
      m["journal_synced_records"] = is.synced_records;
      m["journal_bytes"] = index.journal_bytes();
      m["journal_records"] = index.journal_records();
      m["checkpoints"] = is.checkpoints;
      m["checkpoint_failures"] = is.checkpoint_failures;
      m["last_checkpoint_objects"] = is.last_checkpoint_objects;
      m["last_checkpoint_encode_us"] = is.last_checkpoint_encode_ns / 1000;
      for (size_t i = 0; i < ctx_.store->tier_count(); ++i) {  // --watch turns these into rates
        const store::TierStats& t = ctx_.store->tier(i).stats();
        m[fmt::format("tier{}_read_bytes", i)] = t.read_bytes;
        m[fmt::format("tier{}_write_bytes", i)] = t.write_bytes;
        m[fmt::format("tier{}_io_errors", i)] = t.io_errors;
      }
    }
    const CoreHistograms& h = ctx_.service->histograms();
    FillHistogram("get_first_piece", h.get_first_piece, out->add_histograms());
    FillHistogram("put_commit", h.put_commit, out->add_histograms());
    FillHistogram("publish", h.publish, out->add_histograms());
    out->set_uptime_ns(MonotonicNanos() - ctx_.started_ns);
    return grpc::Status::OK;
  });
}

grpc::Status CoreAdmin::GetConfig(Ctx* context, const v1::GetConfigRequest*, v1::Config* out) {
  if (auto a = admin::Authorize(*context, ctx_.token); !a.ok()) return a;
  for (const auto& [k, v] : ctx_.config) (*out->mutable_settings())[k] = v;
  out->set_version(GOBLIN_VERSION);
  return grpc::Status::OK;
}

}  // namespace goblin::core
