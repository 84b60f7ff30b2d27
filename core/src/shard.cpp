#include "shard.h"

#include "goblin/common/log.h"
#include "goblin/common/topology.h"
#include "goblin/common/units.h"

namespace goblin::core {
namespace {
constexpr std::string_view kLog = "core";
}  // namespace

Result<std::unique_ptr<Shard>> Shard::Open(const ShardOptions& o) {
  std::unique_ptr<Shard> s(new Shard());
  s->options_ = o;
  auto ctx = [&o](const Status& st) {
    return o.count > 1 ? st.WithContext(fmt::format("shard {}", o.index)) : st;
  };
  if (o.store) {
    auto st = store::Store::Open(*o.store);
    if (!st) return Err(ctx(st.error()));
    s->store_ = std::move(*st);
  } else {
    auto p = store::HeadPool::Create(o.lone_pool);
    if (!p) return Err(ctx(p.error().WithContext("head pool")));
    s->lone_pool_ = std::move(*p);
  }
  s->service_ = std::make_unique<CoreService>(s->store_.get(), o.index, o.count);
  GOBLIN_ASSIGN_OR_RETURN(s->loop_, reactor::Loop::Create(o.loop, s->service_.get()));
  if (o.keyspace != nullptr) {
    KeyspaceEvents* k = o.keyspace;
    s->service_->set_keyspace(k);
    if (s->store_) {
      s->store_->set_event_sink(
          [k](store::ObjectEvent e, std::string_view key) { k->Post(e, key); });
    }
    if (o.index == 0) {  // the engine's shard publishes them
      CoreService* svc = s->service_.get();
      k->set_publisher([svc](std::string_view channel, std::string_view message) {
        svc->PublishMessage(channel, message, false);
      });
      GOBLIN_RETURN_IF_ERROR(s->loop_->AddSource(k));
    }
  }
  auto server = ring::RingServer::Listen(o.ring, s->service_.get());
  if (!server) return Err(ctx(server.error()));
  s->server_ = std::move(*server);
  GOBLIN_RETURN_IF_ERROR(s->loop_->AddSource(s->server_.get()));
  if (s->store_) {
    GOBLIN_RETURN_IF_ERROR(s->loop_->AddWakeFd(s->store_->event_fd()));
    GOBLIN_RETURN_IF_ERROR(s->loop_->AddWakeFd(s->store_->sync_event_fd()));
  }
#if GOBLIN_HAVE_UCX
  if (o.ucx) {
    verbs::UcxServerOptions uo = *o.ucx;
    // Puts' pieces that cross no extent land whole in the extent's write buffer.
    if (s->store_) {
      uo.put_alignment = s->store_->tier().extent_bytes();
      uo.put_head_cut =
          static_cast<uint32_t>(std::min<uint64_t>(s->store_->ram_head(), uint64_t{UINT32_MAX}));
    }
    auto u = verbs::UcxServer::Listen(uo, s->service_.get());
    if (!u) return Err(ctx(u.error().WithContext("--rdma-listen")));
    s->ucx_ = std::move(*u);
    GOBLIN_RETURN_IF_ERROR(s->loop_->AddSource(s->ucx_.get()));
    if (s->store_) {  // object bytes are sent from these without registering per send
      store::Store& st = *s->store_;
      const store::IoBufferPool& b = st.buffers();
      for (auto [base, bytes] :
           {std::pair<void*, size_t>{st.pool().data(), st.pool().size()},
            std::pair<void*, size_t>{b.Buffer(0), uint64_t{b.count()} * b.buffer_bytes()},
            std::pair<void*, size_t>{st.head_table().data(), st.head_table().bytes()}}) {
        if (auto r = s->ucx_->RegisterMemory(base, bytes); !r) {
          return Err(ctx(r.error().WithContext("registering the pools with UCX")));
        }
      }
    }
  }
#endif
  if (o.admin) {
    GOBLIN_ASSIGN_OR_RETURN(s->admin_loop_, admin::LoopExecutor::Create());
    GOBLIN_RETURN_IF_ERROR(s->loop_->AddSource(s->admin_loop_.get()));
  }
  return s;
}

Shard::~Shard() {
  if (thread_.joinable()) thread_.join();
  loop_.reset();
  server_.reset();  // closes the sessions (CoreService::OnClose) before the service goes
  admin_loop_.reset();
#if GOBLIN_HAVE_UCX
  if (ucx_ != nullptr) {
    const verbs::UcxServerStats& us = ucx_->stats();
    GOBLIN_LOG_INFO(kLog,
                    "UCX plane: {} clients accepted, {} messages, {} payloads received by "
                    "rendezvous ({} into their fill's buffer), {} worker restarts",
                    us.accepted, us.messages, us.payloads_by_rendezvous, us.payloads_placed,
                    us.worker_restarts);
  }
  ucx_.reset();
#endif
  service_.reset();
}

CoreAdminShard Shard::AdminView() {
  CoreAdminShard v;
  v.loop = admin_loop_.get();
  v.service = service_.get();
  v.store = store_.get();
  v.pool = &pool();
  v.ring = server_.get();
  v.reactor = loop_.get();
#if GOBLIN_HAVE_UCX
  v.ucx = ucx_.get();
#endif
  return v;
}

void Shard::Start(int stop_fd) {
  thread_ = std::thread([this, stop_fd] {
    if (!options_.cpus.empty()) {
      if (auto r = PinCurrentThread(options_.cpus); !r) {
        GOBLIN_LOG_WARN(kLog, "shard {}: {}", options_.index, r.error());
      }
    }
    auto r = loop_->Run(stop_fd);
    if (!r) ran_ = r.error();
  });
}

VoidResult Shard::Join() {
  if (thread_.joinable()) thread_.join();
  if (!ran_.ok()) return Err(ran_);
  return {};
}

void Shard::CloseStore() {
  if (!store_) return;
  // Everything acknowledged is durable already; make the rest durable and checkpoint, so
  // the next start loads the checkpoint and replays nothing.
  const auto& is = store_->index().stats();
  GOBLIN_LOG_INFO(kLog,
                  "shard {} journal: {} group syncs carried {} records; {} background "
                  "checkpoints ({} failed), {} inline syncs to make room",
                  options_.index, is.group_syncs, is.synced_records, is.checkpoints,
                  is.checkpoint_failures, store_->stats().inline_syncs);
  if (auto r = store_->Close(); !r)
    GOBLIN_LOG_ERROR(kLog, "shard {} store at shutdown: {}", options_.index, r.error());
}

void Shard::LogSummary() const {
  const auto& st = server_->stats();
  GOBLIN_LOG_INFO(kLog,
                  "shard {}: {} clients served, {} messages, {} pings, {} refused, {} corrupt "
                  "rings, {} gets ({} cancelled by their reader)",
                  options_.index, st.accepted, st.messages, service_->counters().pings, st.rejected,
                  st.corrupt, service_->counters().gets, service_->counters().gets_cancelled);
  if (!store_) return;
  const auto& ss = store_->stats();
  const auto& ps = store_->pool().stats();
  GOBLIN_LOG_INFO(kLog,
                  "shard {} store: {} objects, {} hits, {} misses, {} fills ({} aborted), {} "
                  "evicted, {} expired, {} heads demoted, {} corrupt dropped; pool {} of {} in "
                  "use ({} of it tails, {} served from them), fragmentation {:.1f}%; {} lent, "
                  "{} copied",
                  options_.index, ss.objects, ss.hits, ss.misses, ss.fills_committed,
                  ss.fills_aborted, ss.evicted, ss.expired, ss.heads_demoted, ss.corrupt_dropped,
                  HumanSize(ps.bytes_reserved), HumanSize(ps.pool_bytes),
                  HumanSize(ss.tail_bytes_in_ram), HumanSize(ss.tail_bytes_served),
                  100.0 * ps.Fragmentation(), HumanSize(service_->counters().bytes_lent),
                  HumanSize(service_->counters().bytes_out));
}

}  // namespace goblin::core
