#include "admin_service.h"

#include "goblin/common/shard.h"

#include <algorithm>

#include <fmt/ranges.h>

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

// The drive a store's drive directory belongs to, as the operator named it: with several
// shards each has DIR/shard-N of every drive DIR.
std::string DriveDir(const std::string& dir, size_t shards) {
  if (shards <= 1) return dir;
  const size_t slash = dir.rfind('/');
  return slash == std::string::npos ? dir : dir.substr(0, slash);
}

// Adds a shard's part of one drive (present `d`, or `lost`) to its line in `tier`.
void AddDrive(v1::Tier* tier, const std::string& dir, const store::DriveSpace* d,
              const store::LostDrive* lost) {
  v1::TierDrive* x = nullptr;
  for (auto& y : *tier->mutable_drives()) {
    if (y.dir() == dir) x = &y;
  }
  if (x == nullptr) {
    x = tier->add_drives();
    x->set_dir(dir);
  }
  if (d != nullptr) {
    const store::TierStats& s = d->stats();
    x->set_present(true);
    x->set_number(d->drive_no());
    x->set_capacity_bytes(x->capacity_bytes() + d->capacity_bytes());
    x->set_used_bytes(x->used_bytes() + d->used_bytes());
    x->set_read_bytes(x->read_bytes() + s.read_bytes);
    x->set_write_bytes(x->write_bytes() + s.write_bytes);
    x->set_reads(x->reads() + s.reads);
    x->set_writes(x->writes() + s.writes);
    x->set_errors(x->errors() + s.io_errors + s.allocation_failures);
    return;
  }
  if (lost->number >= 0) x->set_number(static_cast<uint32_t>(lost->number));
  x->set_error(lost->error);
  x->set_objects_dropped(x->objects_dropped() + lost->objects_dropped);
}

}  // namespace

grpc::Status CoreAdmin::OnShard(const CoreAdminShard& shard,
                                const std::function<grpc::Status()>& fn) {
  grpc::Status result;
  auto r = shard.loop->Call([&] { result = fn(); }, kLoopTimeout);
  if (!r) return ToGrpc(r.error());
  return result;
}

grpc::Status CoreAdmin::OnShards(Ctx* context,
                                 const std::function<grpc::Status(const CoreAdminShard&)>& fn) {
  if (auto a = admin::Authorize(*context, ctx_.token); !a.ok()) return a;
  return EachShard(fn);
}

grpc::Status CoreAdmin::EachShard(const std::function<grpc::Status(const CoreAdminShard&)>& fn) {
  for (const CoreAdminShard& shard : ctx_.shards) {
    grpc::Status st = OnShard(shard, [&] { return fn(shard); });
    if (!st.ok()) return st;
  }
  return grpc::Status::OK;
}

grpc::Status CoreAdmin::NeedStore() const {
  if (ctx_.shards.front().store != nullptr) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      "goblin-core has no object store (start it with --ssd-dir)");
}

const CoreAdminShard& CoreAdmin::ShardFor(std::string_view key) const {
  return ctx_.shards[ShardOf(key, static_cast<uint16_t>(ctx_.shards.size()))];
}

grpc::Status CoreAdmin::GetPool(Ctx* context, const v1::GetPoolRequest*, v1::PoolInfo* out) {
  // The shards' pool slices together: sizes and counts add up; backing, locking and node
  // are the same for every slice (reported as the first's; locked only if all are).
  std::map<int, uint64_t> page_nodes;
  bool locked = true, first = true;
  double fragmented = 0;  // bytes lost to fragmentation, summed
  grpc::Status st = OnShards(context, [&](const CoreAdminShard& sh) {
    const store::HeadPool& p = *sh.pool;
    const store::PoolStats& s = p.stats();
    out->set_size_bytes(out->size_bytes() + p.size());
    out->set_block_bytes(p.block_size());
    out->set_head_bytes(ctx_.ram_head);
    out->set_used_bytes(out->used_bytes() + s.bytes_reserved);
    out->set_requested_bytes(out->requested_bytes() + s.bytes_requested);
    out->set_free_bytes(out->free_bytes() + p.size() - s.bytes_reserved);
    out->set_heads(out->heads() + s.slots_used);
    out->set_blocks_total(out->blocks_total() + s.blocks_total);
    out->set_blocks_free(out->blocks_free() + s.blocks_free);
    fragmented += s.Fragmentation() * static_cast<double>(p.size());
    if (first) {
      out->set_backing(std::string(store::BackingName(p.backing())));
      out->set_numa_node(p.numa_node());
      first = false;
    }
    locked = locked && p.locked();
    out->set_allocation_failures(out->allocation_failures() + s.allocation_failures);
    if (auto nodes = p.PageNodes()) {
      for (auto [n, c] : *nodes) page_nodes[n] += c;
    }
    if (sh.store != nullptr) {
      out->set_head_table_entries(out->head_table_entries() + sh.store->head_table().capacity());
      out->set_head_table_in_use(out->head_table_in_use() + sh.store->head_table().in_use());
      const store::Store::PoolUse u = sh.store->PoolUseByKind();
      out->set_whole_objects(out->whole_objects() + u.whole_objects);
      out->set_whole_object_bytes(out->whole_object_bytes() + u.whole_object_bytes);
      out->set_large_heads(out->large_heads() + u.large_heads);
      out->set_large_head_bytes(out->large_head_bytes() + u.large_head_bytes);
      out->set_tails(out->tails() + u.tails);
      out->set_tail_bytes(out->tail_bytes() + u.tail_bytes);
    }
    return grpc::Status::OK;
  });
  if (!st.ok()) return st;
  out->set_locked(locked);
  out->set_fragmentation(
      out->size_bytes() == 0 ? 0.0 : fragmented / static_cast<double>(out->size_bytes()));
  for (auto [n, c] : page_nodes) {
    auto* e = out->add_page_nodes();
    e->set_node(n);
    e->set_pages(c);
  }
  return grpc::Status::OK;
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
  std::map<int, uint64_t> page_nodes;
  in.pool_hugetlb = in.pool_locked = true;
  grpc::Status st = OnShards(context, [&](const CoreAdminShard& sh) {  // each slice, on its loop
    if (in.pool_backing.empty())
      in.pool_backing = std::string(store::BackingName(sh.pool->backing()));
    in.pool_hugetlb = in.pool_hugetlb && sh.pool->backing() == store::Backing::kHugeTlb2M;
    in.pool_locked = in.pool_locked && sh.pool->locked();
    if (auto nodes = sh.pool->PageNodes()) {
      for (auto [n, c] : *nodes) page_nodes[n] += c;
    }
    return grpc::Status::OK;
  });
  in.pool_page_nodes.assign(page_nodes.begin(), page_nodes.end());
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
  if (auto s = NeedStore(); !s.ok()) return s;
  // Each tier as the operator named it: its shards' parts summed.
  return OnShards(context, [&](const CoreAdminShard& sh) {
    store::Store& store = *sh.store;
    std::vector<uint64_t> objects(store.tier_count(), 0);
    store.ForEachObject([&](const store::ObjectRecord& r, uint64_t) {
      std::vector<bool> on(objects.size(), false);
      for (const store::Extent& e : r.extents) {
        if (e.tier < on.size()) on[e.tier] = true;
      }
      for (size_t i = 0; i < on.size(); ++i) objects[i] += on[i] ? 1 : 0;
    });
    for (size_t i = 0; i < store.tier_count(); ++i) {
      const store::TierSpace& t = store.tier(i);
      const store::TierStats s = t.stats();
      while (out->tiers_size() <= static_cast<int>(i)) {
        auto* o = out->add_tiers();
        o->set_index(static_cast<uint32_t>(out->tiers_size() - 1));
        o->set_dir(i < ctx_.tier_dirs.size() ? fmt::format("{}", fmt::join(ctx_.tier_dirs[i], ","))
                                             : t.path());
        o->set_id(t.drives().front()->dir().identity().IdString());
      }
      auto* o = out->mutable_tiers(static_cast<int>(i));
      o->set_capacity_bytes(o->capacity_bytes() + t.capacity_bytes());
      o->set_used_bytes(o->used_bytes() + t.used_bytes());
      o->set_objects(o->objects() + objects[i]);
      o->set_files(o->files() + s.files);
      o->set_read_bytes(o->read_bytes() + s.read_bytes);
      o->set_write_bytes(o->write_bytes() + s.write_bytes);
      o->set_reads(o->reads() + s.reads);
      o->set_writes(o->writes() + s.writes);
      o->set_errors(o->errors() + s.io_errors + s.allocation_failures);
      // Its drives (a shard's part of each drive summed into the drive; numbered alike in
      // every shard only by chance, so drives are matched by their configured directory).
      for (const auto& d : t.drives()) {
        AddDrive(o, DriveDir(d->dir().path(), ctx_.shards.size()), d.get(), nullptr);
      }
      for (const store::LostDrive& l : t.lost()) {
        AddDrive(o,
                 l.dir.empty() ? fmt::format("(drive {})", l.number)
                               : DriveDir(l.dir, ctx_.shards.size()),
                 nullptr, &l);
      }
    }
    out->set_objects(out->objects() + store.stats().objects);
    return grpc::Status::OK;
  });
}

grpc::Status CoreAdmin::ListObjects(Ctx* context, const v1::ListObjectsRequest* req,
                                    v1::ListObjectsResponse* out) {
  if (auto s = NeedStore(); !s.ok()) return s;
  const size_t page = req->page_size() == 0 ? 100 : std::min<uint32_t>(req->page_size(), 10000);
  // Each shard's first page + 1 keys after the token (to know whether more follow), merged.
  std::vector<v1::ObjectSummary> all;
  grpc::Status st = OnShards(context, [&](const CoreAdminShard& sh) {
    using Item = std::pair<const store::ObjectRecord*, uint64_t>;
    auto later = [](const Item& a, const Item& b) { return a.first->key < b.first->key; };
    std::vector<Item> heap;  // a max-heap of the smallest keys seen
    sh.store->ForEachObject([&](const store::ObjectRecord& r, uint64_t head) {
      if (!r.key.starts_with(req->prefix()) || r.key <= req->page_token()) return;
      if (heap.size() == page + 1 && !(r.key < heap.front().first->key)) return;
      heap.emplace_back(&r, head);
      std::push_heap(heap.begin(), heap.end(), later);
      if (heap.size() > page + 1) {
        std::pop_heap(heap.begin(), heap.end(), later);
        heap.pop_back();
      }
    });
    for (const auto& [r, head] : heap) FillSummary(*r, head, &all.emplace_back());
    return grpc::Status::OK;
  });
  if (!st.ok()) return st;
  std::sort(all.begin(), all.end(), [](const v1::ObjectSummary& a, const v1::ObjectSummary& b) {
    return a.key() < b.key();
  });
  bool more = all.size() > page;
  if (more) all.resize(page);
  for (auto& o : all) *out->add_objects() = std::move(o);
  if (more) out->set_next_page_token(out->objects(out->objects_size() - 1).key());
  return grpc::Status::OK;
}

grpc::Status CoreAdmin::GetObject(Ctx* context, const v1::GetObjectRequest* req,
                                  v1::ObjectDetail* out) {
  if (auto a = admin::Authorize(*context, ctx_.token); !a.ok()) return a;
  if (auto s = NeedStore(); !s.ok()) return s;
  const CoreAdminShard& sh = ShardFor(req->key());
  return OnShard(sh, [&] {
    const store::ObjectRecord* r = sh.store->Record(req->key());
    if (r == nullptr) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no object " + req->key());
    uint64_t head = sh.store->HeadBytesInRam(*r);
    FillSummary(*r, head, out->mutable_summary());
    out->set_metadata(r->metadata);
    out->set_head_bytes_in_ram(head);
    for (const store::Extent& e : r->extents) {
      auto* o = out->add_extents();
      o->set_tier(e.tier);
      o->set_file(e.file);
      o->set_drive(e.drive);
      o->set_offset(e.offset);
      o->set_length(e.length);
      o->set_checksum(e.checksum);
    }
    return grpc::Status::OK;
  });
}

grpc::Status CoreAdmin::EvictObjects(Ctx* context, const v1::EvictObjectsRequest* req,
                                     v1::EvictObjectsResponse* out) {
  if (auto a = admin::Authorize(*context, ctx_.token); !a.ok()) return a;
  if (auto s = NeedStore(); !s.ok()) return s;
  if (req->has_key()) {
    const CoreAdminShard& sh = ShardFor(req->key());
    return OnShard(sh, [&] {
      auto d = sh.store->Delete(req->key());
      if (!d) return ToGrpc(d.error());
      out->set_evicted(*d ? 1 : 0);
      return grpc::Status::OK;
    });
  }
  if (!req->has_prefix()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "name a key or a prefix");
  }
  return OnShards(context, [&](const CoreAdminShard& sh) {
    auto d = sh.store->DeletePrefix(req->prefix());
    if (!d) return ToGrpc(d.error());
    out->set_evicted(out->evicted() + *d);
    return grpc::Status::OK;
  });
}

grpc::Status CoreAdmin::GetPubsub(Ctx* context, const v1::GetPubsubRequest*, v1::PubsubInfo* out) {
  if (auto a = admin::Authorize(*context, ctx_.token); !a.ok()) return a;
  const CoreAdminShard& sh = ctx_.shards.front();  // the pub/sub engine's shard
  return OnShard(sh, [&] {
    const pubsub::Engine& e = sh.service->pubsub();
    for (bool shard : {false, true}) {
      for (const std::string& name : e.Channels("", shard, false)) {
        auto* c = shard ? out->add_shard_channels() : out->add_channels();
        c->set_name(name);
        c->set_subscribers(e.NumSub(name, shard));
      }
    }
    out->set_patterns(e.NumPat());
    out->set_subscribers(e.subscribers());
    for (const auto& v : sh.service->Sessions()) {
      if (v.subscribers == 0) continue;
      auto* s = out->add_sessions();
      s->set_client_id(v.session->id());
      s->set_client_name(v.session->name());
      s->set_subscribers(v.subscribers);
      s->set_output_bytes(v.session->queued_bytes());
    }
    const CoreCounters& k = sh.service->counters();
    out->set_publishes(k.publishes);
    out->set_deliveries(k.deliveries_sent);
    out->set_dropped_for_limits(k.slow_subscribers_dropped);
    return grpc::Status::OK;
  });
}

grpc::Status CoreAdmin::ListClients(Ctx* context, const v1::ListClientsRequest*,
                                    v1::ClientsInfo* out) {
  return OnShards(context, [&](const CoreAdminShard& sh) {
    for (const auto& v : sh.service->Sessions()) {
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
      c->set_shard(sh.service->shard());
    }
    return grpc::Status::OK;
  });
}

grpc::Status CoreAdmin::GetStats(Ctx* context, const v1::GetStatsRequest*, v1::Stats* out) {
  if (auto a = admin::Authorize(*context, ctx_.token); !a.ok()) return a;
  return CollectStats(out);
}

grpc::Status CoreAdmin::CollectStats(v1::Stats* out) {
  // Every shard's counters summed (a newest-checkpoint figure: the largest), histograms merged.
  auto& m = *out->mutable_counters();
  CoreHistograms h;
  grpc::Status st = EachShard([&](const CoreAdminShard& sh) {
    const CoreCounters& k = sh.service->counters();
    m["sessions_opened"] += k.sessions_opened;
    m["sessions_closed"] += k.sessions_closed;
    m["pings"] += k.pings;
    m["errors_sent"] += k.errors_sent;
    m["malformed"] += k.malformed;
    m["puts"] += k.puts;
    m["gets"] += k.gets;
    m["bytes_in"] += k.bytes_in;
    m["payloads_placed"] += k.payloads_placed;
    m["bytes_out"] += k.bytes_out;
    m["bytes_lent"] += k.bytes_lent;
    m["loans"] += k.loans;
    m["publishes"] += k.publishes;
    m["deliveries_sent"] += k.deliveries_sent;
    m["slow_subscribers_dropped"] += k.slow_subscribers_dropped;
    m["reservations"] += k.reservations;
    m["gets_parked"] += k.gets_parked;
    m["gets_cancelled"] += k.gets_cancelled;
    m["scans"] += k.scans;
    m["loan_pauses"] += k.loan_pauses;
    m["loans_taken_back"] += k.loans_taken_back;
    const ring::ServerStats& rs = sh.ring->stats();
    m["ring_accepted"] += rs.accepted;
    m["ring_rejected"] += rs.rejected;
    m["ring_messages"] += rs.messages;
    m["ring_corrupt"] += rs.corrupt;
    m["loop_sleeps"] += sh.reactor->stats().sleeps;
    m["loop_preempted"] += sh.reactor->stats().preempted;
#if GOBLIN_HAVE_UCX
    if (sh.ucx != nullptr) {
      const verbs::UcxServerStats& us = sh.ucx->stats();
      m["ucx_accepted"] += us.accepted;
      m["ucx_rejected"] += us.rejected;
      m["ucx_messages"] += us.messages;
      m["ucx_messages_by_own_id"] += us.by_own_id;
      m["ucx_own_id_late"] += us.own_id_late;
      m["ucx_failed_endpoints"] += us.failed_endpoints;
      m["ucx_hello_timeouts"] += us.hello_timeouts;
      m["ucx_payloads_by_rendezvous"] += us.payloads_by_rendezvous;
      m["ucx_payloads_waited"] += us.payloads_waited;
      m["ucx_payloads_placed"] += us.payloads_placed;
      m["ucx_worker_restarts"] += us.worker_restarts;
      m["ucx_busy_dozes"] += us.busy_dozes;
      m["ucx_late_completions"] += sh.ucx->late_completions();
    }
#endif
    if (sh.store != nullptr) {
      const store::StoreStats& s = sh.store->stats();
      m["objects"] += s.objects;
      m["hits"] += s.hits;
      m["misses"] += s.misses;
      m["expired"] += s.expired;
      m["evicted"] += s.evicted;
      m["variants_evicted"] += s.variants_evicted;
      m["fills_committed"] += s.fills_committed;
      m["fills_aborted"] += s.fills_aborted;
      m["fills_refused"] += s.fills_refused;
      m["puts_refused_by_condition"] += s.puts_refused_by_condition;
      m["touches"] += s.touches;
      m["heads_in_ram"] += s.heads_in_ram;
      m["head_refills"] += s.head_refills;
      m["heads_demoted"] += s.heads_demoted;
      m["corrupt_dropped"] += s.corrupt_dropped;
      m["drives_lost"] += s.drives_lost;
      m["lost_drive_objects"] += s.lost_drive_objects;
      m["loans_out"] += s.loans_out;
      m["streams_open"] += s.streams_open;
      m["heads_described"] += s.heads_described;
      m["descriptors_withdrawn"] += s.descriptors_withdrawn;
      m["heads_touched"] += s.heads_touched;
      m["fills_timed_out"] += s.fills_timed_out;
      m["inline_syncs"] += s.inline_syncs;
      m["fill_disk_waits"] += s.fill_disk_waits;
      m["tail_bytes_in_ram"] += s.tail_bytes_in_ram;
      m["tail_blocks_filled"] += s.tail_blocks_filled;
      m["tail_blocks_adopted"] += s.tail_blocks_adopted;
      m["tails_dropped"] += s.tails_dropped;
      m["tail_bytes_served"] += s.tail_bytes_served;
      m["served_bytes_ram_head"] += s.head_bytes_served;  // (one labelled metric family)
      m["served_bytes_ram_tail"] += s.tail_bytes_served;
      m["served_bytes_disk"] += s.disk_bytes_served;
      m["chunks_parked"] += s.chunks_parked;
      m["chunks_unparked"] += s.chunks_unparked;
      m["served_bytes_fill"] += s.fill_bytes_served;
      m["pool_blocks_punched"] += sh.store->pool().stats().blocks_punched;
      // The head pool's use: live slots' capacities, and the blocks their classes hold.
      m["pool_reserved_bytes"] += sh.store->pool().stats().bytes_reserved;
      m["pool_class_block_bytes"] += sh.store->pool().stats().bytes_in_class_blocks;
      // I/O buffers lent (reads, writes, placements a transport still receives into).
      m["io_buffers_out"] += sh.store->buffers().count() - sh.store->buffers().free_count();
      const store::Index& index = sh.store->index();
      const store::IndexStats& is = index.stats();
      m["journal_group_syncs"] += is.group_syncs;
      m["journal_synced_records"] += is.synced_records;
      m["journal_bytes"] += index.journal_bytes();
      m["journal_records"] += index.journal_records();
      m["checkpoints"] += is.checkpoints;
      m["checkpoint_failures"] += is.checkpoint_failures;
      m["last_checkpoint_objects"] += is.last_checkpoint_objects;
      m["last_checkpoint_encode_us"] =
          std::max<uint64_t>(m["last_checkpoint_encode_us"], is.last_checkpoint_encode_ns / 1000);
      m["last_checkpoint_slice_us"] =
          std::max<uint64_t>(m["last_checkpoint_slice_us"], is.last_checkpoint_slice_ns / 1000);
      for (size_t i = 0; i < sh.store->tier_count(); ++i) {  // --watch turns these into rates
        const store::TierStats& t = sh.store->tier(i).stats();
        m[fmt::format("tier{}_read_bytes", i)] += t.read_bytes;
        m[fmt::format("tier{}_write_bytes", i)] += t.write_bytes;
        m[fmt::format("tier{}_io_errors", i)] += t.io_errors;
        // Disk use: slots taken (whole extents and packed slots) against the bytes extents take.
        m[fmt::format("tier{}_slot_bytes", i)] += t.slots_used * sh.store->tier(i).extent_bytes();
        m[fmt::format("tier{}_allocated_bytes", i)] += t.allocated_bytes;
        m[fmt::format("tier{}_packed_extents", i)] += t.packed_extents;
        m[fmt::format("tier{}_packed_slots", i)] += t.packed_slots;
      }
    }
    const CoreHistograms& sh_h = sh.service->histograms();
    h.get_first_piece += sh_h.get_first_piece;
    h.put_commit += sh_h.put_commit;
    h.publish += sh_h.publish;
    return grpc::Status::OK;
  });
  if (!st.ok()) return st;
  m["shards"] = ctx_.shards.size();
  {
    std::lock_guard lock(membership_mu_);
    if (membership_.registered) {  // --etcd: in the membership now, and how often it joined
      m["etcd_registered"] = membership_.registered() ? 1 : 0;
      m["etcd_registrations"] = membership_.registrations();
    }
  }
  if (const PreloadProgress* p = ctx_.preload) {  // --source: how far the preload is
    m["preload_files_total"] = p->files_total;
    m["preload_bytes_total"] = p->bytes_total;
    m["preload_files_stored"] = p->files_stored;
    m["preload_bytes_stored"] = p->bytes_stored;
    m["preload_files_skipped"] = p->files_skipped;
    m["preload_errors"] = p->errors;
    m["preload_listed"] = p->listed ? 1 : 0;
    m["preload_finished"] = p->finished ? 1 : 0;
  }
  FillHistogram("get_first_piece", h.get_first_piece, out->add_histograms());
  FillHistogram("put_commit", h.put_commit, out->add_histograms());
  FillHistogram("publish", h.publish, out->add_histograms());
  out->set_uptime_ns(MonotonicNanos() - ctx_.started_ns);
  return grpc::Status::OK;
}

grpc::Status CoreAdmin::GetConfig(Ctx* context, const v1::GetConfigRequest*, v1::Config* out) {
  if (auto a = admin::Authorize(*context, ctx_.token); !a.ok()) return a;
  for (const auto& [k, v] : ctx_.config) (*out->mutable_settings())[k] = v;
  out->set_version(GOBLIN_VERSION);
  return grpc::Status::OK;
}

}  // namespace goblin::core
