// goblin-core: the daemon that owns Goblin's state and serves the local ring plane.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <sys/eventfd.h>

#include <atomic>
#include <map>
#include <sstream>

#include "admin_service.h"
#include "goblin/admin/admin_server.h"
#include "goblin/admin/loop_executor.h"
#include "goblin/cluster/etcd_flags.h"
#include "goblin/cluster/registration.h"
#include "goblin/common/cli.h"
#include "goblin/common/clock.h"
#include "goblin/common/config.h"
#include "goblin/common/file.h"
#include "goblin/common/log.h"
#include "goblin/common/metrics.h"
#include "goblin/common/signals.h"
#include "goblin/common/topology.h"
#include "goblin/common/units.h"
#include "goblin/core/core_service.h"
#include "goblin/core/keyspace_events.h"
#include "goblin/ring/server.h"
#include "goblin/store/head_pool.h"
#include "goblin/store/tier_dir.h"
#include "preloader.h"
#include "shard.h"
#if GOBLIN_HAVE_UCX
#include "goblin/verbs/ucx_server.h"
#endif
#if GOBLIN_HAVE_VERBS
#include "goblin/verbs/devices.h"
#endif

namespace {

constexpr std::string_view kLog = "core";

int Fail(const goblin::Status& s) {
  std::fprintf(stderr, "goblin-core: error: %s\n", s.ToString().c_str());
  return 1;
}

// The admin token: the file's first line, blanks trimmed; refused when empty.
goblin::Result<std::string> ReadTokenFile(const std::string& path) {
  GOBLIN_ASSIGN_OR_RETURN(std::string token, goblin::ReadSecretFile(path, "--admin-token-file"));
  if (token.size() < 16) {
    return goblin::Err(goblin::StatusCode::kInvalidArgument,
                       "--admin-token-file {}: the token must be at least 16 characters", path);
  }
  return token;
}

// Every option in force (defaults included), as CLI11 writes a config file: name=value.
std::map<std::string, std::string> ConfigMap(const CLI::App& app) {
  std::map<std::string, std::string> out;
  std::istringstream in(app.config_to_str(/*default_also=*/true, /*write_description=*/false));
  for (std::string line; std::getline(in, line);) {
    size_t eq = line.find('=');
    if (line.empty() || line[0] == '#' || line[0] == '[' || eq == std::string::npos) continue;
    std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front()) {
      v = v.substr(1, v.size() - 2);
    }
    out[k] = v;
  }
  return out;
}

// How many shards to run: --cores when given; else the count the disk tiers are laid out
// for (a restart keeps every object without repeating --cores); else, for a new store, one
// per CPU the shards may run on (--cpus/--numa, else the allowed CPUs), at most one per
// --block of --memory.
struct ShardCount {
  uint16_t count = 1;
  std::string why;
};
goblin::Result<ShardCount> ChooseShardCount(unsigned cores, const std::vector<int>& pin,
                                            const std::vector<std::vector<std::string>>& tiers,
                                            const goblin::store::PoolOptions& pool) {
  if (cores != 0) return ShardCount{static_cast<uint16_t>(cores), "--cores"};
  for (const auto& drives : tiers) {
    for (const std::string& dir : drives) {
      auto layout = goblin::store::TierShardLayout(dir);
      if (!layout && drives.size() > 1) continue;  // (a lost drive: the others tell)
      if (!layout) return goblin::Err(layout.error());
      if (*layout) return ShardCount{**layout, fmt::format("the layout of tier {}", dir)};
    }
  }
  std::vector<int> cpus = pin;
  if (cpus.empty()) {
    GOBLIN_ASSIGN_OR_RETURN(cpus, goblin::CurrentThreadAffinity());
  }
  const uint64_t blocks = std::max<uint64_t>(1, pool.memory / pool.block);
  const uint64_t n = std::clamp<uint64_t>(cpus.size(), 1, std::min<uint64_t>(256, blocks));
  return ShardCount{static_cast<uint16_t>(n),
                    pin.empty() ? "one per allowed CPU" : "one per CPU of --cpus/--numa"};
}

// Where shard `shard` of the UCX plane listens: HOST:PORT+shard (HOST:0 stays "any port");
// with `bound_port` >= 0, the port it got.
std::string ShardListenAddress(const std::string& listen, uint16_t shard, int bound_port = -1) {
  size_t colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? listen : listen.substr(0, colon);
  unsigned long port =
      colon == std::string::npos ? 0 : std::strtoul(listen.c_str() + colon + 1, nullptr, 10);
  if (bound_port >= 0) return fmt::format("{}:{}", host, bound_port);
  return fmt::format("{}:{}", host, port == 0 ? 0 : port + shard);
}

// The etcd record's address: --advertise, else --rdma-listen's host with shard 0's port.
goblin::Result<goblin::cluster::Member> MemberRecord(const std::string& listen,
                                                     const std::string& advertise,
                                                     uint16_t bound_port) {
  goblin::cluster::Member m;
  if (!advertise.empty()) {
    m.address = advertise;
    return m;
  }
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]" || host == "*") {
    return goblin::Err(goblin::StatusCode::kInvalidArgument,
                       "--rdma-listen {} names no address routers could use: give --advertise",
                       listen);
  }
  m.address = fmt::format("ucx://{}:{}", host, bound_port);
  return m;
}

// "HOSTNAME:PORT" of the advertised address (unique per host and port).
std::string MemberNameFor(const goblin::cluster::Member& m) {
  std::string host = goblin::cluster::ThisHostName();
  return fmt::format("{}:{}", host.empty() ? "core" : host,
                     m.address.substr(m.address.rfind(':') + 1));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace goblin;
  CLI::App app("goblin-core: Goblin's storage and messaging daemon", "goblin-core");
  app.set_version_flag("--version", GOBLIN_VERSION);
  ring::ServerOptions opts;
  opts.socket_path = "/run/goblin/core.sock";
  uint64_t ring_bytes = opts.default_ring_bytes, max_ring_bytes = opts.max_ring_bytes;
  // Redis's pub/sub client limits: 32 MiB hard, 8 MiB soft for 60 s.
  uint64_t output_limit = 32ull << 20, output_soft_limit = 8ull << 20;
  std::chrono::nanoseconds output_soft_time = std::chrono::seconds(60);
  std::chrono::nanoseconds busy_poll = reactor::LoopOptions{}.busy_poll;
  std::string wake = "spin";
  int numa = -1;
  std::string cpus;
  app.add_option("--listen-unix", opts.socket_path, "Unix socket of the ring plane")
      ->capture_default_str();
  AddSizeOption(app, "--ring-bytes", &ring_bytes,
                "Default ring size per direction (power of two, >= 4K); clients may ask for more");
  AddSizeOption(app, "--max-ring-bytes", &max_ring_bytes, "Largest ring a client may ask for");
  AddSizeOption(app, "--client-output-limit", &output_limit,
                "Bytes queued for a client whose ring is full before it is dropped (hard limit)");
  AddSizeOption(app, "--client-output-soft-limit", &output_soft_limit,
                "Queued bytes a client may stay above for --client-output-soft-time (0: none)",
                true);
  AddDurationOption(app, "--client-output-soft-time", &output_soft_time,
                    "How long a client may stay above the soft limit");
  app.add_option("--max-clients", opts.max_clients,
                 "Concurrent clients per shard and plane (ring, UCX)")
      ->capture_default_str();
  AddDurationOption(app, "--busy-poll", &busy_poll,
                    "Busy-poll this long after the last work before sleeping");
  app.add_option("--wake", wake, "spin (spin, then sleep on doorbells) or busy (never sleep)")
      ->check(CLI::IsMember({"spin", "busy"}))
      ->capture_default_str();
  PollingOption polling;
  AddPollingOption(app, &polling, "the shards");
  store::PoolOptions pool_opts;
  pool_opts.memory = 256ull << 20;
  pool_opts.block = 256 << 10;
  uint64_t ram_head = 256 << 10;
  std::string hugepages = "auto";
  bool no_promotion = false;
  std::string ssd_dir, hdd_dir, prepare_dir;
  uint64_t ssd_prefix = 0;
  AddSizeOption(app, "--memory", &pool_opts.memory, "Head pool size (RAM for object heads)");
  AddSizeOption(app, "--block", &pool_opts.block, "Head pool allocation block (power of two)");
  AddSizeOption(app, "--ram-head", &ram_head, "Bytes of each object kept in RAM (<= --block)");
  app.add_option("--hugepages", hugepages,
                 "auto (HugeTLB, else THP, else 4K), on (HugeTLB or fail), off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_flag("--no-numa-promotion", no_promotion,
               "Keep head pages where they are: strict binding, no migration");
  app.add_option("--ssd-dir", ssd_dir,
                 "First disk tier: a directory made with --prepare, or several (DIR,DIR,...: "
                 "one per drive, extents striped over them)");
  app.add_option("--hdd-dir", hdd_dir, "Second disk tier (like --ssd-dir)");
  AddSizeOption(app, "--ssd-prefix", &ssd_prefix,
                "With both tiers: bytes after the head that go to the first tier", true);
  uint64_t ssd_size = 0, hdd_size = 0;
  AddSizeOption(app, "--ssd-size", &ssd_size,
                "Capacity of the first tier; objects are evicted beyond it (default: 95% of "
                "the file system's free space)",
                true);
  AddSizeOption(app, "--hdd-size", &hdd_size, "Capacity of the second tier (same default)", true);
  std::string io = "auto";
  uint64_t extent_bytes = 4 << 20, tier_file_bytes = 1ull << 30;
  app.add_option("--io", io, "Disk I/O: auto (io_uring, else pread/pwrite), uring, sync")
      ->check(CLI::IsMember({"auto", "uring", "sync"}))
      ->capture_default_str();
  AddSizeOption(app, "--extent-size", &extent_bytes,
                "Disk extent (I/O and checksum unit) size, a multiple of 4K");
  AddSizeOption(app, "--tier-file-size", &tier_file_bytes,
                "Size of each preallocated extent file in a tier");
  store::StoreOptions so;
  app.add_option("--io-depth", so.io_depth, "Disk requests in flight (all streams together)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--io-buffers", so.io_buffers,
                 "I/O buffers of --extent-size each, shared by every stream (bounds disk memory)")
      ->check(CLI::Range(4, 65536))
      ->capture_default_str();
  app.add_option("--read-ahead", so.read_ahead, "Extents read ahead per streamed object")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--max-objects", so.max_objects,
                 "Evict beyond this many objects (0: only when a tier is full)")
      ->capture_default_str();
  so.max_variants = 8;
  app.add_option("--max-variants", so.max_variants,
                 "Variants kept per HTTP object (Vary; the least recently used goes; 0: no "
                 "limit)")
      ->capture_default_str();
  uint64_t checkpoint_bytes = 64ull << 20, checkpoint_records = 100000;
  AddSizeOption(app, "--checkpoint-journal-size", &checkpoint_bytes,
                "Write an index checkpoint (in the background) once the journal is this large");
  app.add_option("--checkpoint-journal-records", checkpoint_records,
                 "... or once it holds this many records (0: no limit)")
      ->capture_default_str();
  AddSizeOption(app, "--fill-staging", &so.fill_staging_bytes,
                "Heap memory fills may stage extents in when every I/O buffer is out (many "
                "fills at once; past it a fill waits for the disk)");
  std::chrono::nanoseconds fill_timeout = std::chrono::seconds(30);
  AddDurationOption(app, "--fill-timeout", &fill_timeout,
                    "A fill that receives no data for this long is aborted (its readers are "
                    "cut off, the key is free again); 0: never");
  app.add_option("--stable-blocks", pool_opts.stable_blocks,
                 "Punch a block out of the pool when the slot it held alone is freed, so that "
                 "what is lent from such blocks may be sent by reference (goblin-gateway "
                 "--net sync: sendfile); each page costs a fault on the block's next use. Off: "
                 "on loopback with 4 KiB pages a copy measured faster (docs/hot-path.md)")
      ->capture_default_str();
  app.add_option("--ram-tails", so.ram_tails,
                 "Keep bytes past each head in RAM too while the pool has blocks to spare "
                 "(taken as fills write them and as reads bring them from disk; the first thing "
                 "given back when heads need room)")
      ->capture_default_str();
  so.head_descriptors = 0;
  app.add_option("--head-descriptors", so.head_descriptors,
                 "Heads describable at once for one-sided reads and the gateway's local hits "
                 "(the head table's entries, 32 bytes each; 0: one per 16 KiB of --memory, "
                 "65,536 to 4,194,304)")
      ->check(CLI::Range(0u, 1u << 26))
      ->capture_default_str();
  app.add_option("--prepare", prepare_dir,
                 "Mark DIR (empty or new; DIR,DIR,... for several drives) as a Goblin disk "
                 "tier, then exit");
  core::PreloadOptions preload;
  std::string source_metadata = "http";
  app.add_option("--source", preload.dir,
                 "Store this directory tree at start (every file under key PREFIX/path; "
                 "files already stored unchanged are skipped); progress in the log and "
                 "goblinctl stats (preload_*)");
  app.add_option("--source-prefix", preload.prefix,
                 "Key prefix of --source's files (goblin-store: the Host its clients send)");
  app.add_option("--source-metadata", source_metadata,
                 "http: Content-Type, Last-Modified and ETag for each file (the mirror serves "
                 "them); none")
      ->check(CLI::IsMember({"http", "none"}))
      ->capture_default_str();
  app.add_option("--source-threads", preload.threads, "Files stored at once by --source")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  std::chrono::nanoseconds source_ttl{0};
  AddDurationOption(app, "--source-ttl", &source_ttl,
                    "Time to live of --source's objects (0: until evicted)");
  unsigned cores = 0;
  std::string notify_keyspace_events;
  app.add_option("--notify-keyspace-events", notify_keyspace_events,
                 "Redis's keyspace notifications for object events, published on the pub/sub "
                 "engine: classes as Redis's (K keyspace, E keyevent, g del/expire/persist, $ "
                 "set, x expired, e evicted, A all); empty: off. RESP CONFIG SET changes it "
                 "while running");
  app.add_option("--cores", cores,
                 "Shards: loop threads that share nothing, each with its part of the keys, the "
                 "index and journal, the head pool (--memory), the I/O buffers and the disk "
                 "space; shard i runs on the i-th CPU of --cpus/--numa. A tier keeps the shard "
                 "count it was first used with. Default: that count; for a new store one per "
                 "CPU of --cpus/--numa, else of the allowed CPUs")
      ->check(CLI::Range(1u, 256u));
  app.add_option("--numa", numa, "Run on this NUMA node's CPUs and memory");
  app.add_option("--cpus", cpus, "Run on these CPUs (e.g. 2-3); overrides --numa");
  std::string rdma_listen;
  uint64_t rdma_max_message = 256 << 10;
  app.add_option("--rdma-listen", rdma_listen,
                 "Also serve the native UCX plane on HOST:PORT (verbs on InfiniBand, tcp or "
                 "shared memory as UCX_TLS allows; port 0: any)");
  AddSizeOption(app, "--rdma-max-message", &rdma_max_message,
                "Largest message on the UCX plane (object data travels in chunks of it)");
  std::chrono::nanoseconds rdma_hello_timeout = std::chrono::seconds(5);
  AddDurationOption(app, "--rdma-hello-timeout", &rdma_hello_timeout,
                    "Drop a UCX client that sends no Hello this long after connecting");
  // Membership (issue #26): the core registers its UCX address in etcd under a lease.
  std::string etcd_endpoints, advertise, zone, member_name, etcd_prefix = "/goblin";
  std::chrono::nanoseconds etcd_ttl = std::chrono::seconds(10);
  app.add_option("--etcd", etcd_endpoints,
                 "Register in etcd (v3 API) at these endpoints (http://HOST:PORT or https://, "
                 "comma-separated): "
                 "routers (goblin-gateway, libgoblin's etcd:// targets) find the core there. "
                 "Needs --rdma-listen");
  app.add_option("--advertise", advertise,
                 "The address routers connect to, ucx://HOST:PORT (default: --rdma-listen's, "
                 "with the port bound; its host must then be a concrete address)");
  app.add_option("--zone", zone, "Failure domain written into the etcd record (free text)");
  app.add_option("--member-name", member_name,
                 "Name of the etcd record (unique per deployment; default: the hostname and the "
                 "advertised port)");
  app.add_option("--etcd-prefix", etcd_prefix, "etcd key prefix (records at PREFIX/cores/NAME)")
      ->capture_default_str();
  cluster::EtcdSecurityFlags etcd_security;
  cluster::AddEtcdSecurityOptions(app, &etcd_security);
  AddDurationOption(app, "--etcd-ttl", &etcd_ttl,
                    "Lease of the etcd record: a core that dies leaves the membership this long "
                    "after (a clean stop at once); renewed every third of it");
  std::string metrics_listen;
  app.add_option("--metrics-listen", metrics_listen,
                 "Serve Prometheus metrics on HOST:PORT (GET /metrics; port 0: any free one)");
  std::string admin_socket = "auto", admin_listen, admin_token_file;
  unsigned admin_socket_mode = 0600;
  std::chrono::nanoseconds shutdown_grace{0};
  app.add_option("--admin-socket", admin_socket,
                 "Unix socket of the gRPC admin API (auto: --listen-unix + '.admin'; none: off)")
      ->capture_default_str();
  app.add_option("--admin-socket-mode", admin_socket_mode,
                 "File mode of the admin socket (who may call it), e.g. 0660")
      ->transform([](std::string s) {
        if (s.empty() || s.size() > 4 || s.find_first_not_of("01234567") != std::string::npos) {
          throw CLI::ValidationError("'" + s + "' is not an octal file mode (e.g. 0660)");
        }
        return std::to_string(std::stoul(s, nullptr, 8));
      })
      ->default_str("0600");
  app.add_option("--admin-listen", admin_listen,
                 "Also serve the admin API on TCP HOST:PORT (calls must carry the token)");
  app.add_option("--admin-token-file", admin_token_file,
                 "File holding the token TCP admin callers send ('authorization: Bearer TOKEN')")
      ->check(CLI::ExistingFile);
  AddDurationOption(app, "--shutdown-grace", &shutdown_grace,
                    "On SIGTERM, report NOT_SERVING through the health service this long "
                    "before closing sessions (lets load balancers drain)");
  AddLogLevelOption(app);
  if (int rc = ParseCommandLine(app, argc, argv); rc >= 0) return rc;
  const uint64_t started_ns = MonotonicNanos();

  opts.default_ring_bytes = static_cast<uint32_t>(ring_bytes);
  opts.max_ring_bytes = static_cast<uint32_t>(max_ring_bytes);
  opts.output_limit = output_limit;
  opts.output_soft_limit = output_soft_limit;
  opts.output_soft_time = output_soft_time;
  opts.wake = wake == "busy" ? ring::WakeMode::kBusyPoll : ring::WakeMode::kSpinThenSleep;
  if (auto v = ring::ValidateCapacity(ring_bytes); !v)
    return Fail(v.error().WithContext("--ring-bytes"));
  if (auto v = ring::ValidateCapacity(max_ring_bytes); !v) {
    return Fail(v.error().WithContext("--max-ring-bytes"));
  }
  if (ring_bytes > max_ring_bytes) {
    return Fail(
        Status(StatusCode::kInvalidArgument, "--ring-bytes is larger than --max-ring-bytes"));
  }

  if (!prepare_dir.empty()) {
    auto dirs = store::ParseDriveList(prepare_dir);  // (a tier's drives: DIR,DIR,...)
    if (!dirs) return Fail(dirs.error().WithContext("--prepare"));
    for (const std::string& dir : *dirs) {
      auto id = store::PrepareTier(dir);
      if (!id) return Fail(id.error());
      std::printf("goblin-core: %s is a Goblin disk tier (id %s)\n", dir.c_str(),
                  id->IdString().c_str());
    }
    return 0;
  }
  if (ram_head > pool_opts.block) {
    return Fail(Status(StatusCode::kInvalidArgument,
                       fmt::format("--ram-head {} is larger than --block {}", FormatSize(ram_head),
                                   FormatSize(pool_opts.block))));
  }
  cluster::EtcdOptions etcd_options;
  if (!etcd_endpoints.empty()) {
    bool tls = false;
    auto endpoints = cluster::ParseEtcdEndpoints(etcd_endpoints, &tls);
    if (!endpoints) return Fail(endpoints.error().WithContext("--etcd"));
    etcd_options.endpoints = std::move(*endpoints);
    auto security = cluster::ResolveEtcdSecurity(etcd_security);
    if (!security) return Fail(security.error());
    etcd_options.security = std::move(*security);
    etcd_options.security.tls = etcd_options.security.tls || tls;
    // (reads the certificate files now: a bad path is an error at start, not in the log)
    if (auto c = cluster::EtcdClient::Open(etcd_options); !c) return Fail(c.error());
    if (rdma_listen.empty()) {
      return Fail(Status(StatusCode::kInvalidArgument,
                         "--etcd registers the UCX plane's address: give --rdma-listen"));
    }
    if (!advertise.empty() && !advertise.starts_with("ucx://")) {
      return Fail(Status(StatusCode::kInvalidArgument,
                         fmt::format("--advertise '{}': want ucx://HOST:PORT", advertise)));
    }
    if (etcd_ttl < std::chrono::seconds(1)) {
      return Fail(Status(StatusCode::kInvalidArgument, "--etcd-ttl: at least 1s"));
    }
  } else if (!advertise.empty() || !zone.empty() || !member_name.empty() ||
             !etcd_security.ca_file.empty() || !etcd_security.cert_file.empty() ||
             !etcd_security.user.empty()) {
    return Fail(Status(StatusCode::kInvalidArgument,
                       "--advertise, --zone, --member-name and --etcd-* are for --etcd"));
  }
  if (!hdd_dir.empty() && ssd_dir.empty()) {
    return Fail(Status(StatusCode::kInvalidArgument, "--hdd-dir needs --ssd-dir (the first tier)"));
  }
  if (hdd_size > 0 && hdd_dir.empty()) {
    return Fail(Status(StatusCode::kInvalidArgument, "--hdd-size needs --hdd-dir"));
  }
  if (ssd_prefix > 0 && hdd_dir.empty()) {
    return Fail(
        Status(StatusCode::kInvalidArgument, "--ssd-prefix needs both --ssd-dir and --hdd-dir"));
  }
  auto topo = ProbeTopology();
  if (!topo) return Fail(topo.error());
  std::vector<int> pin;
  if (!cpus.empty()) {
    auto list = ParseCpuList(cpus);
    if (!list) return Fail(list.error().WithContext("--cpus"));
    pin = *list;
  } else if (numa >= 0) {
    const NumaNode* node = topo->Node(numa);
    if (node == nullptr) {
      return Fail(Status(
          StatusCode::kInvalidArgument,
          fmt::format("--numa {}: this machine has no such node ({})", numa, topo->Describe())));
    }
    pin = node->cpus;
  }
  if (!pin.empty()) {
    if (auto r = PinCurrentThread(pin); !r) return Fail(r.error());
  }

  pool_opts.numa_node = numa;
  pool_opts.hugepages = *store::ParseHugePages(hugepages);
  pool_opts.allow_promotion = !no_promotion;
  std::vector<std::vector<std::string>> tier_drives;
  for (const std::string* list : {&ssd_dir, &hdd_dir}) {
    auto drives = store::ParseDriveList(*list);
    if (!drives)
      return Fail(drives.error().WithContext(list == &ssd_dir ? "--ssd-dir" : "--hdd-dir"));
    if (!drives->empty()) tier_drives.push_back(std::move(*drives));
  }
  auto shard_count = ChooseShardCount(cores, pin, tier_drives, pool_opts);
  if (!shard_count) return Fail(shard_count.error());
  const uint16_t n_shards = shard_count->count;
  GOBLIN_LOG_INFO(kLog, "{} shard{} ({})", n_shards, n_shards == 1 ? "" : "s", shard_count->why);
  // A shard pauses between polls only on a CPU of its own; otherwise it yields, so it never
  // holds a CPU another thread (a gateway worker, a client, another shard) has work for.
  const bool yield_when_polling = polling.Yield(!pin.empty() && pin.size() >= n_shards);
  // Each shard gets its slice of what is sized for the whole core.
  store::PoolOptions shard_pool = pool_opts;
  shard_pool.memory = pool_opts.memory / n_shards / pool_opts.block * pool_opts.block;
  if (shard_pool.memory < pool_opts.block) {
    return Fail(
        Status(StatusCode::kInvalidArgument,
               fmt::format("--memory {} is less than one --block ({}) per shard ({} shards)",
                           FormatSize(pool_opts.memory), FormatSize(pool_opts.block), n_shards)));
  }
  // With a disk tier the stores own the head pools; without one the pools stand alone and
  // object requests are refused. A tier serving several shards holds one directory each.
  // Per tier, per drive. A drive of several that cannot be laid out is left to the stores:
  // a lost drive of a store that ran before is reported and the others serve.
  std::vector<std::vector<store::ShardedTier>> tiers;
  for (const auto& drives : tier_drives) {
    tiers.emplace_back();
    for (const std::string& dir : drives) {
      auto t = store::OpenShardedTier(dir, n_shards);
      if (!t) {
        auto layout = store::TierShardLayout(dir);
        const bool wrong_layout = layout && *layout && **layout != n_shards;
        if (drives.size() == 1 || wrong_layout || t.error().code() == StatusCode::kUnavailable) {
          return Fail(t.error());
        }
        GOBLIN_LOG_WARN(kLog, "drive {}: {}", dir, t.error().ToString());
        store::ShardedTier lost;
        for (uint16_t i = 0; i < n_shards; ++i) {
          lost.shard_dirs.push_back(n_shards == 1 ? dir : fmt::format("{}/shard-{}", dir, i));
        }
        t = std::move(lost);
      }
      tiers.back().push_back(std::move(*t));
    }
  }
#if GOBLIN_HAVE_VERBS
  if (auto devs = verbs::ListVerbsDevices(); devs) {
    GOBLIN_LOG_INFO(kLog, "RDMA devices: {}", verbs::DescribeDevices(*devs));
    // The UCX plane uses the HCA ports on the core's own node unless told otherwise.
    if (!rdma_listen.empty() && numa >= 0 && std::getenv("UCX_NET_DEVICES") == nullptr) {
      std::string nd = verbs::UcxNetDevicesFor(*devs, numa);
      if (!nd.empty()) {
        setenv("UCX_NET_DEVICES", nd.c_str(), 1);
        GOBLIN_LOG_INFO(kLog, "UCX_NET_DEVICES={} (the active RDMA ports on node {})", nd, numa);
      }
    }
  }
#endif
  // (Declared before the shards, so destroyed after them: their sockets close first and a
  // preload put waiting on a stopped core ends at once.)
  std::unique_ptr<core::Preloader> preloader;
  if (!preload.dir.empty()) {
    if (tier_drives.empty()) {
      return Fail(Status(StatusCode::kInvalidArgument, "--source needs a disk tier (--ssd-dir)"));
    }
    if (opts.socket_path.empty()) {
      return Fail(Status(StatusCode::kInvalidArgument, "--source needs --listen-unix"));
    }
    preload.target = "unix:" + opts.socket_path;
    preload.http_metadata = source_metadata == "http";
    preload.ttl_ns = static_cast<uint64_t>(source_ttl.count());
    auto p = core::Preloader::Create(preload);
    if (!p) return Fail(p.error());
    preloader = std::move(*p);
  }
  auto keyspace = core::KeyspaceEvents::Create();  // (outlives the shards)
  if (!keyspace) return Fail(keyspace.error());
  if (auto classes = core::KeyspaceEvents::ParseClasses(notify_keyspace_events)) {
    (*keyspace)->set_classes(*classes);
  } else {
    return Fail(Status(StatusCode::kInvalidArgument,
                       fmt::format("--notify-keyspace-events '{}': invalid event class "
                                   "character (use Ag$lshzxeKEtmdn)",
                                   notify_keyspace_events)));
  }
  std::vector<std::unique_ptr<core::Shard>> shards;
  std::vector<ring::RingServer*> servers;
  for (uint16_t i = 0; i < n_shards; ++i) {
    core::ShardOptions sh;
    sh.index = i;
    sh.count = n_shards;
    sh.keyspace = keyspace->get();
    sh.loop.busy_poll = busy_poll;
    sh.loop.never_sleep = wake == "busy";
    sh.loop.yield_when_polling = yield_when_polling;
    sh.ring = opts;
    sh.ring.shard = i;
    sh.ring.shard_count = n_shards;
    sh.ring.socket_path.clear();  // shard 0 binds it once everything is ready (below)
    if (!pin.empty()) {
      sh.cpus = n_shards == 1 ? pin : std::vector<int>{pin[i % pin.size()]};
    }
    sh.lone_pool = shard_pool;
    sh.admin = true;
    if (!tier_drives.empty()) {
      store::StoreOptions o = so;
      o.pool = shard_pool;
      o.ram_head = ram_head;
      for (const auto& drives : tiers) {
        o.tier_dirs.emplace_back();
        for (const auto& t : drives) o.tier_dirs.back().push_back(t.shard_dirs[i]);
      }
      o.ssd_prefix = ssd_prefix;
      o.tier_capacity = {ssd_size / n_shards, hdd_size / n_shards};
      o.tier.extent_bytes = static_cast<uint32_t>(extent_bytes);
      o.tier.file_bytes = tier_file_bytes;
      o.tier.free_space_share = n_shards;
      o.io = *store::ParseIoChoice(io);
      o.fill_timeout_ns = static_cast<uint64_t>(fill_timeout.count());
      o.group_commit = true;
      o.checkpoint.journal_bytes = checkpoint_bytes;
      o.checkpoint.journal_records = checkpoint_records;
      o.io_buffers = std::max<uint32_t>(4, so.io_buffers / n_shards);
      o.fill_staging_bytes = so.fill_staging_bytes / n_shards;
      o.max_objects = so.max_objects == 0 ? 0 : std::max<uint64_t>(1, so.max_objects / n_shards);
      o.max_variants = so.max_variants;  // (an object's variants are on its shard: ShardOf)
      // (a table too small for the heads RAM holds leaves the rest to the core: a small
      // object's head takes one 4 KiB class slot, so the default covers heads of 16 KiB)
      uint64_t descriptors =
          so.head_descriptors != 0
              ? so.head_descriptors
              : std::clamp<uint64_t>(pool_opts.memory / (16 << 10), 65536, uint64_t{1} << 22);
      o.head_descriptors = static_cast<uint32_t>(std::max<uint64_t>(1, descriptors / n_shards));
      sh.store = o;
    }
#if GOBLIN_HAVE_UCX
    if (!rdma_listen.empty()) {
      verbs::UcxServerOptions uo;
      uo.listen = ShardListenAddress(rdma_listen, i);
      uo.max_message =
          static_cast<uint32_t>(std::clamp<uint64_t>(rdma_max_message, 4096, 64 << 20));
      uo.output_limit = std::max<size_t>(output_limit, uo.max_message);
      uo.output_soft_limit = output_soft_limit;
      uo.output_soft_time = output_soft_time;
      uo.hello_timeout = rdma_hello_timeout;
      uo.max_clients = opts.max_clients;
      uo.shard = i;
      uo.shard_count = n_shards;
      uo.first_session_id = (1ull << 48) + i;
      sh.ucx = uo;
    }
#endif
    auto shard = core::Shard::Open(sh);
    if (!shard) return Fail(shard.error());
    servers.push_back(&(*shard)->ring());
    shards.push_back(std::move(*shard));
  }
  for (auto& sh : shards) sh->ring().SetShards(servers);
#if GOBLIN_HAVE_UCX
  if (!rdma_listen.empty()) {  // every shard's Welcome lists where all shards listen
    std::string all;
    for (auto& sh : shards) {
      all += fmt::format("{}{}", all.empty() ? "" : ",",
                         ShardListenAddress(rdma_listen, sh->index(), sh->ucx()->port()));
    }
    for (auto& sh : shards) sh->ucx()->SetShardAddresses(all);
  }
#else
  if (!rdma_listen.empty()) {
    return Fail(Status(StatusCode::kUnimplemented, "--rdma-listen: built without UCX"));
  }
#endif
  core::Shard& first = *shards.front();
  const store::HeadPool& pool = first.pool();

  auto signals = ShutdownSignal::Install();
  if (!signals) return Fail(signals.error());

  GOBLIN_LOG_INFO(
      kLog, "head pool: {} ({} shard{} of {}: {} blocks of {}, heads up to {}{}), {}, {}, node {}",
      FormatSize(pool.size() * n_shards), n_shards, n_shards == 1 ? "" : "s",
      FormatSize(pool.size()), pool.stats().blocks_total, FormatSize(pool.block_size()),
      FormatSize(ram_head), so.ram_tails ? ", tails while there is room" : "",
      store::BackingName(pool.backing()), pool.locked() ? "locked" : "not locked",
      numa >= 0 ? std::to_string(numa) : std::string("any"));
  if (first.store() != nullptr) {
    uint64_t objects = 0;
    for (auto& sh : shards) objects += sh->store()->stats().objects;
    for (size_t i = 0; i < first.store()->tier_count(); ++i) {
      GOBLIN_LOG_INFO(
          kLog, "disk tier {} {}{}", i, i == 0 ? ssd_dir : hdd_dir,
          n_shards == 1 && tier_drives[i].size() == 1
              ? fmt::format(" (id {})",
                            first.store()->tier(i).drives().front()->dir().identity().IdString())
              : fmt::format(" ({} drive{}, {} shard{} each)", tier_drives[i].size(),
                            tier_drives[i].size() == 1 ? "" : "s", n_shards,
                            n_shards == 1 ? "" : "s"));
    }
    GOBLIN_LOG_INFO(kLog, "{} objects; I/O per shard: depth {}, {} buffers of {}, read-ahead {}",
                    objects, so.io_depth, std::max<uint32_t>(4, so.io_buffers / n_shards),
                    FormatSize(extent_bytes), so.read_ahead);
  } else {
    GOBLIN_LOG_INFO(kLog, "no disk tier (--ssd-dir): objects are not served");
  }
  // The admin plane: gRPC on its own threads; whatever a call reads is read on the shards'
  // loops.
  std::unique_ptr<core::CoreAdmin> admin_service;
  std::unique_ptr<admin::AdminServer> admin_server;
  if (admin_socket == "auto") admin_socket = opts.socket_path + ".admin";
  if (admin_socket == "none") admin_socket.clear();
  admin::AdminOptions ao;
  if (!admin_socket.empty() || !admin_listen.empty() || !metrics_listen.empty()) {
    ao.unix_path = admin_socket;
    ao.unix_mode = admin_socket_mode;
    ao.tcp_listen = admin_listen;
    if (!admin_listen.empty()) {
      if (admin_token_file.empty()) {
        return Fail(Status(StatusCode::kInvalidArgument,
                           "--admin-listen needs --admin-token-file (TCP callers send the token)"));
      }
      auto token = ReadTokenFile(admin_token_file);
      if (!token) return Fail(token.error());
      ao.token = *token;
    }
    core::CoreAdminContext ac;
    for (auto& sh : shards) ac.shards.push_back(sh->AdminView());
    ac.tier_dirs = tier_drives;
    ac.ram_head = ram_head;
    ac.numa_node = numa;
    ac.topology = *topo;
    ac.config = ConfigMap(app);
    ac.config["admin-socket"] = admin_socket.empty() ? "none" : admin_socket;  // as resolved
    ac.config["admin-socket-mode"] = fmt::format("0{:o}", admin_socket_mode);
    ac.token = ao.token;
    ac.started_ns = started_ns;
    ac.preload = preloader ? &preloader->progress() : nullptr;
    admin_service = std::make_unique<core::CoreAdmin>(std::move(ac));
  }
  std::unique_ptr<MetricsServer> metrics;  // (the admin service's reader: stopped before it)
  if (!metrics_listen.empty()) {
    core::CoreAdmin* a = admin_service.get();
    auto m = MetricsServer::Start(metrics_listen, [a] {
      std::string error;
      std::string text = a->PrometheusText(&error);
      if (!error.empty()) GOBLIN_LOG_WARN(kLog, "metrics: {}", error);
      return text;
    });
    if (!m) return Fail(m.error());
    metrics = std::move(*m);
    GOBLIN_LOG_INFO(kLog, "Prometheus metrics on http://{}/metrics", metrics->address());
  }
  if (!admin_socket.empty() || !admin_listen.empty()) {
    auto as = admin::AdminServer::Start(ao, admin_service.get());
    if (!as) return Fail(as.error().WithContext("admin API"));
    admin_server = std::move(*as);
    GOBLIN_LOG_INFO(kLog, "admin API (gRPC goblin.admin.v1 + grpc.health.v1) on {}{}{}",
                    admin_socket.empty()
                        ? ""
                        : fmt::format("unix:{} (mode {:o})", admin_socket, admin_socket_mode),
                    admin_socket.empty() || admin_listen.empty() ? "" : " and ",
                    admin_listen.empty() ? ""
                                         : fmt::format("tcp {} (port {}, token required)",
                                                       admin_listen, admin_server->tcp_port()));
  }
  // The socket appears last: a client that sees it finds a core ready to serve. Shard 0
  // accepts on it and hands each Hello to the shard it names.
  if (auto r = first.ring().BindSocket(opts.socket_path); !r) return Fail(r.error());
  GOBLIN_LOG_INFO(kLog,
                  "goblin-core {} pid {} serving the ring plane on unix:{} ({} shard{}, ring {} "
                  "per direction, {}, busy-poll {}, {} between polls)",
                  GOBLIN_VERSION, getpid(), opts.socket_path, n_shards, n_shards == 1 ? "" : "s",
                  FormatSize(ring_bytes), wake, FormatDuration(busy_poll),
                  yield_when_polling ? "yielding" : "pausing");
#if GOBLIN_HAVE_UCX
  if (!rdma_listen.empty()) {
    std::string ports;
    for (auto& sh : shards)
      ports += fmt::format("{}{}", ports.empty() ? "" : ",", sh->ucx()->port());
    GOBLIN_LOG_INFO(kLog, "UCX plane on {} (port{} {})", rdma_listen, n_shards == 1 ? "" : "s",
                    ports);
  }
#endif
  // Membership last: routers that find the core in etcd find it serving.
  std::shared_ptr<cluster::Registration> registration;  // (shared with the admin stats)
  std::mutex registration_mu;  // (the signal watcher reads it; it is set once the loops run)
  cluster::RegistrationOptions registration_options;  // (member.name empty: not registering)
#if GOBLIN_HAVE_UCX
  if (!etcd_options.endpoints.empty()) {
    auto member = MemberRecord(rdma_listen, advertise, shards.front()->ucx()->port());
    if (!member) return Fail(member.error());
    member->name = member_name.empty() ? MemberNameFor(*member) : member_name;
    member->zone = zone;
    member->shards = n_shards;
    // The routing weight: what this core may hold, not what its disks have free now (that
    // moves from one start to the next, and with it keys between live cores).
    member->capacity = pool.size() * n_shards;
    if (first.store() != nullptr) {
      for (auto& sh : shards) {
        for (size_t i = 0; i < sh->store()->tier_count(); ++i) {
          member->capacity += sh->store()->tier(i).nominal_bytes();
        }
      }
    }
    member->pid = static_cast<uint32_t>(getpid());
    member->host = cluster::ThisHostName();
    member->ring = std::filesystem::absolute(opts.socket_path).string();  // (for routers here)
    member->version = GOBLIN_VERSION;
    member->started_unix_ms =
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count());
    registration_options.etcd = etcd_options;
    registration_options.prefix = etcd_prefix;
    registration_options.member = std::move(*member);
    registration_options.ttl = std::chrono::duration_cast<std::chrono::seconds>(etcd_ttl);
  }
#endif
  GOBLIN_LOG_INFO(kLog, "topology: {}; loop CPUs: {}", topo->Describe(),
                  pin.empty() ? std::string("any") : FormatCpuList(pin));
  GOBLIN_LOG_INFO(kLog, "features: ucx={} io_uring={} numa={} verbs={}", GOBLIN_HAVE_UCX,
                  GOBLIN_HAVE_URING, GOBLIN_HAVE_NUMA, GOBLIN_HAVE_VERBS);
  // SIGTERM/SIGINT: health NOT_SERVING first, then (after --shutdown-grace) the loop stops.
  UniqueFd stop(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop) return Fail(ErrnoStatus("eventfd", errno));
  std::atomic<bool> quit{false};
  std::thread watcher([&] {
    while (!quit.load() && !(*signals)->Wait(std::chrono::milliseconds(200))) {
    }
    if (quit.load()) return;
    if (admin_server) admin_server->SetServing(false);
    {
      std::lock_guard lock(registration_mu);
      if (registration) registration->Stop();  // routers stop sending here first
    }
    if (preloader) preloader->RequestStop();
    GOBLIN_LOG_INFO(kLog, "shutdown requested: health NOT_SERVING; closing sessions in {}",
                    FormatDuration(shutdown_grace));
    const uint64_t end = MonotonicNanos() + static_cast<uint64_t>(shutdown_grace.count());
    while (!quit.load() && MonotonicNanos() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    uint64_t one = 1;
    (void)!write(stop.get(), &one, sizeof one);
  });
  for (auto& sh : shards) sh->Start(stop.get());
  // Membership once the loops serve: a router that finds the core in etcd connects at once
  // (registered before, a client's UCX connect could wait for loops not yet running).
  if (!registration_options.member.name.empty()) {
    auto r = cluster::Registration::Start(registration_options);
    if (!r) {
      GOBLIN_LOG_ERROR(kLog, "--etcd: {}", r.error());
      uint64_t one = 1;
      (void)!write(stop.get(), &one, sizeof one);  // (the loops stop; the core exits)
    } else {
      std::lock_guard lock(registration_mu);
      registration = std::move(*r);
      if (admin_service) {
        admin_service->SetMembership({[reg = registration] { return reg->registered(); },
                                      [reg = registration] { return reg->registrations(); }});
      }
    }
  }
  if (preloader) preloader->Start();
  Status ran;
  for (auto& sh : shards) {
    if (auto r = sh->Join(); !r && ran.ok()) ran = r.error();
  }
  quit.store(true);
  watcher.join();
  if (registration) registration->Stop();
  metrics.reset();  // (its scrapes read the shards' loops)
  if (admin_server) admin_server->Shutdown(std::chrono::seconds(1));
  for (auto& sh : shards) sh->CloseStore();
  if (!ran.ok()) return Fail(ran);
  uint64_t served = 0, messages = 0;
  for (auto& sh : shards) {
    served += sh->ring().stats().accepted;
    messages += sh->ring().stats().messages;
  }
  GOBLIN_LOG_INFO(kLog, "shutting down: {} client connections served, {} messages, {} shard{}",
                  served, messages, n_shards, n_shards == 1 ? "" : "s");
  for (auto& sh : shards) sh->LogSummary();
  admin_server.reset();
  admin_service.reset();
  shards.clear();
  preloader.reset();
  return 0;
}
