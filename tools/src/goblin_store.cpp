// goblin-store: the launcher with the seed's command line. It starts goblin-core (the
// object store and pub/sub) and goblin-gateway (HTTP mirror; memcache on --memcache-port,
// 11211, unless --no-memcache; RESP with --resp-port) from
// its own directory, connected by a private unix socket, and supervises them: SIGINT or
// SIGTERM stops both in order; if either exits on its own, goblin-store says which and how,
// stops the other and exits non-zero (never half-running).
//
//   goblin-store --mirror http://127.0.0.1:18000 --listen-address 10.88.88.20 --http-port 8080
//     --no-memcache --net async --numa 0 --memory 64G --block 32M --ram-head 32M
//     --no-numa-promotion --ssd-dir /var/tmp/test/goblin
//
// A tier directory that does not exist or is empty is prepared on first use; anything else
// must already be a Goblin tier (goblin-core refuses foreign data, never wipes it).
#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "goblin/common/cli.h"
#include "goblin/common/log.h"
#include "goblin/common/signals.h"
#include "goblin/common/topology.h"
#include "goblin/common/units.h"
#include "goblin/store/tier_dir.h"

using namespace goblin;
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kLog = "store";

int Fail(const std::string& msg) {
  std::fprintf(stderr, "goblin-store: %s\n", msg.c_str());
  return 1;
}

// Starts a child that gets SIGTERM when goblin-store dies, however it dies (SIGKILL too):
// a core or gateway never outlives its launcher.
pid_t Spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid != 0) return pid;  // the parent (or -1)
  if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent) _exit(127);
  execv(argv[0], argv.data());
  _exit(127);
}

std::string Describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
  return "stopped";
}

bool EmptyOrMissing(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return true;
  return fs::is_directory(dir, ec) && fs::is_empty(dir, ec);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("goblin-store: goblin-core + goblin-gateway with the seed's command line",
               "goblin-store");
  std::string mirror, listen_address = "127.0.0.1", net = "sync", ssd_dir, hdd_dir, socket_dir;
  int http_port = 8080, https_port = 0, resp_port = 0, memcache_port = 11211, numa = -1;
  std::vector<std::string> tls_certs, tls_keys;
  bool no_memcache = false, no_promotion = false;
  uint64_t memory = 256ull << 20, block = 256 << 10, ram_head = 256 << 10, ssd_prefix = 0;
  std::string hugepages = "auto";
  std::vector<std::string> core_extra, gateway_extra;
  app.add_option("--mirror", mirror, "Origin to mirror (http://HOST[:PORT][/PREFIX])")->required();
  app.add_option("--listen-address", listen_address, "Address to serve HTTP on")
      ->capture_default_str();
  app.add_option("--http-port", http_port, "HTTP port (0: none)")->capture_default_str();
  app.add_option("--https-port", https_port, "HTTPS port (0: none; needs --tls-cert/--tls-key)")
      ->capture_default_str();
  app.add_option("--tls-cert", tls_certs,
                 "HTTPS certificate chain (PEM); repeat with --tls-key, chosen by SNI");
  app.add_option("--tls-key", tls_keys, "Private key (PEM) of the --tls-cert in the same place");
  std::string access_log = "none";
  app.add_option("--access-log", access_log,
                 "HTTP access log: FILE, - (standard output) or none (SIGUSR1 to goblin-store "
                 "or goblin-gateway reopens it)")
      ->capture_default_str();
  app.add_option("--resp-port", resp_port, "Also serve Redis pub/sub on this port (0: no)")
      ->capture_default_str();
  app.add_option("--memcache-port", memcache_port,
                 "Serve the memcache text protocol on this port (the same objects as HTTP: a "
                 "memcache key is the object's key)")
      ->capture_default_str();
  app.add_flag("--no-memcache", no_memcache, "Do not serve memcache");
  app.add_option("--net", net, "Network I/O of the gateway: sync (epoll) or async (io_uring)")
      ->check(CLI::IsMember({"sync", "async"}))
      ->capture_default_str();
  app.add_option("--numa", numa, "NUMA node for the core's threads and RAM pool");
  int cores = 0;
  app.add_option("--cores", cores,
                 "CPUs to serve with: goblin-core's shards (--cores) and goblin-gateway's HTTP "
                 "workers (--threads); 0: a worker per CPU of --numa (else of the allowed CPUs) "
                 "and a shard per two, at least one each. A disk tier keeps the shard count it "
                 "was first used with")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  AddSizeOption(app, "--memory", &memory, "Head pool size");
  AddSizeOption(app, "--block", &block, "Head pool block");
  AddSizeOption(app, "--ram-head", &ram_head, "Bytes of each object kept in RAM");
  app.add_option("--hugepages", hugepages, "auto, on or off")->capture_default_str();
  app.add_flag("--no-numa-promotion", no_promotion, "Keep heads where they are");
  app.add_option("--ssd-dir", ssd_dir, "First disk tier (DIR, or DIR,DIR,... one per drive)")
      ->required();
  app.add_option("--hdd-dir", hdd_dir, "Second disk tier (like --ssd-dir)");
  AddSizeOption(app, "--ssd-prefix", &ssd_prefix,
                "With both tiers: bytes after the head on the first", true);
  std::chrono::nanoseconds origin_timeout = std::chrono::seconds(30);
  AddDurationOption(app, "--origin-timeout", &origin_timeout,
                    "Origin silence after which a fetch fails (504, or a cut body); a fill that "
                    "receives nothing this long is also aborted by goblin-core");
  app.add_option("--socket-dir", socket_dir,
                 "Where the core's ring socket goes (default: a private "
                 "directory under /tmp)");
  std::string source, source_host;
  app.add_option("--source", source,
                 "Preload this directory tree at start: each file is stored as the mirror would "
                 "store http://HOST/its/path (progress in the log and goblinctl stats)");
  app.add_option("--source-host", source_host,
                 "The Host clients send for --source's files (default: --listen-address:"
                 "--http-port)");
  app.add_option("--core-arg", core_extra,
                 "Pass one more argument to goblin-core (repeatable; --core-arg=--read-ahead=8)");
  app.add_option("--gateway-arg", gateway_extra,
                 "Pass one more argument to goblin-gateway (repeatable; "
                 "--gateway-arg=--busy-poll=0)");
  AddLogLevelOption(app);
  if (int rc = ParseCommandLine(app, argc, argv); rc >= 0) return rc;

  char self[PATH_MAX] = {};
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return Fail("cannot find my own directory");
  fs::path exe(std::string(self, static_cast<size_t>(n)));
  // Installed side by side, or in the build tree (tools/ next to core/ and gateway/).
  auto find = [&](const char* name, const char* build_dir) -> std::string {
    fs::path same = exe.parent_path() / name;
    if (fs::exists(same)) return same;
    fs::path tree = exe.parent_path().parent_path() / build_dir / name;
    if (fs::exists(tree)) return tree;
    return {};
  };
  std::string core_bin = find("goblin-core", "core"), gw_bin = find("goblin-gateway", "gateway");
  if (core_bin.empty() || gw_bin.empty()) {
    return Fail(fmt::format("goblin-core and goblin-gateway must be next to {}", exe.string()));
  }
  // Each tier may be several drives (DIR,DIR,...); a new (empty or missing) one is prepared.
  std::vector<std::string> drives;
  for (const std::string& list : {ssd_dir, hdd_dir}) {
    auto parsed = store::ParseDriveList(list);
    if (!parsed) return Fail(parsed.error().ToString());
    drives.insert(drives.end(), parsed->begin(), parsed->end());
  }
  for (const std::string& dir : drives) {
    if (!EmptyOrMissing(dir)) continue;
    pid_t p = Spawn({core_bin, "--prepare", dir});
    int st = 0;
    if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      return Fail(fmt::format("could not prepare the tier {}", dir));
    }
  }
  // Both processes share the host (and its clients). Hits are served by the gateway's
  // workers (heads locally, the rest lent by the core), so the workers get every CPU and
  // the core a shard per two (measured on 2 CPUs: 2 workers and 1 shard beat 1 and 1 by
  // 10-60% from 16 to 1,024 connections, docs/benchmarks/concurrency.md). A store that
  // already has a layout keeps its shard count (goblin-core reads it from the tier).
  int core_shards = cores, gw_threads = cores;
  if (cores == 0) {
    std::vector<int> cpus;
    if (numa >= 0) {
      if (auto topo = ProbeTopology(); topo && topo->Node(numa) != nullptr) {
        cpus = topo->Node(numa)->cpus;
      }
    }
    if (cpus.empty()) {
      if (auto a = CurrentThreadAffinity(); a) cpus = std::move(*a);
    }
    gw_threads = std::max<int>(1, static_cast<int>(cpus.size()));
    core_shards = std::max<int>(1, static_cast<int>(cpus.size()) / 2);
    for (const std::string& dir : drives) {
      auto layout = store::TierShardLayout(dir);
      if (!layout) return Fail(layout.error().ToString());
      if (*layout) core_shards = 0;
    }
  }
  if (socket_dir.empty()) {
    char tmpl[] = "/tmp/goblin-store-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return Fail("mkdtemp failed");
    socket_dir = tmpl;
  }
  std::string sock = socket_dir + "/core.sock";

  auto signals = ShutdownSignal::Install();
  if (!signals) return Fail(signals.error().ToString());

  std::vector<std::string> core_args{
      core_bin,  "--listen-unix",   sock,         "--memory",           FormatSize(memory),
      "--block", FormatSize(block), "--ram-head", FormatSize(ram_head), "--hugepages",
      hugepages, "--ssd-dir",       ssd_dir};
  if (!hdd_dir.empty()) {
    core_args.insert(core_args.end(),
                     {"--hdd-dir", hdd_dir, "--ssd-prefix", FormatSize(ssd_prefix)});
  }
  if (numa >= 0) core_args.insert(core_args.end(), {"--numa", std::to_string(numa)});
  if (no_promotion) core_args.push_back("--no-numa-promotion");
  if (core_shards != 0) {
    core_args.insert(core_args.end(), {"--cores", std::to_string(core_shards)});
  }
  // The core's own guard against a fill nobody feeds: a little longer than the gateway's
  // origin timeout, so the gateway normally reports the origin's silence first.
  core_args.insert(core_args.end(),
                   {"--fill-timeout", FormatDuration(origin_timeout + origin_timeout / 4)});
  if (!source.empty()) {
    // The mirror's key is Host + URL, the Host lower-cased (as the gateway keys requests).
    std::string host =
        source_host.empty()
            ? fmt::format("{}:{}",
                          listen_address.find(':') != std::string::npos ? "[" + listen_address + "]"
                                                                        : listen_address,
                          http_port)
            : source_host;
    for (char& c : host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    core_args.insert(core_args.end(), {"--source", source, "--source-prefix", host});
  }
  core_args.insert(core_args.end(), core_extra.begin(), core_extra.end());
  pid_t core = Spawn(core_args);
  if (core < 0) return Fail("cannot start goblin-core");
  for (int i = 0; i < 600 && !fs::exists(sock); ++i) {
    int st = 0;
    if (waitpid(core, &st, WNOHANG) == core) {
      return Fail(fmt::format("goblin-core {} before it was ready", Describe(st)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!fs::exists(sock)) {
    kill(core, SIGTERM);
    waitpid(core, nullptr, 0);
    return Fail("goblin-core did not come up within 30 s");
  }
  std::vector<std::string> gw_args{gw_bin,
                                   "--core",
                                   "unix:" + sock,
                                   "--mirror",
                                   mirror,
                                   "--listen-address",
                                   listen_address,
                                   "--http-port",
                                   std::to_string(http_port),
                                   "--net",
                                   net,
                                   "--origin-timeout",
                                   FormatDuration(origin_timeout)};
  if (https_port != 0) gw_args.insert(gw_args.end(), {"--https-port", std::to_string(https_port)});
  for (const auto& c : tls_certs) gw_args.insert(gw_args.end(), {"--tls-cert", c});
  for (const auto& k : tls_keys) gw_args.insert(gw_args.end(), {"--tls-key", k});
  if (access_log != "none") gw_args.insert(gw_args.end(), {"--access-log", access_log});
  if (resp_port != 0) gw_args.insert(gw_args.end(), {"--resp-port", std::to_string(resp_port)});
  if (!no_memcache && memcache_port != 0) {
    gw_args.insert(gw_args.end(), {"--memcache-port", std::to_string(memcache_port),
                                   "--memcache-threads", std::to_string(gw_threads)});
  }
  gw_args.insert(gw_args.end(), {"--threads", std::to_string(gw_threads)});
  gw_args.insert(gw_args.end(), gateway_extra.begin(), gateway_extra.end());
  pid_t gw = Spawn(gw_args);
  if (gw < 0) {
    kill(core, SIGTERM);
    waitpid(core, nullptr, 0);
    return Fail("cannot start goblin-gateway");
  }
  GOBLIN_LOG_INFO(kLog,
                  "goblin-store pid {}: goblin-core pid {}, goblin-gateway pid {}, mirror {} on "
                  "http://{}:{}/{}",
                  getpid(), core, gw, mirror, listen_address, http_port,
                  https_port != 0 ? fmt::format(" and https://{}:{}/", listen_address, https_port)
                                  : std::string());
  // Supervise: the first child to exit (or a signal) stops everything; SIGUSR1 (rotate the
  // access log) is passed on to the gateway.
  static std::atomic<bool> usr1{false};
  struct sigaction sa {};
  sa.sa_handler = [](int) { usr1.store(true, std::memory_order_relaxed); };
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  int rc = 0;
  for (;;) {
    if (usr1.exchange(false, std::memory_order_relaxed)) kill(gw, SIGUSR1);
    int st = 0;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p == core || p == gw) {
      const char* who = p == core ? "goblin-core" : "goblin-gateway";
      GOBLIN_LOG_ERROR(kLog, "{} {}; stopping goblin-store", who, Describe(st));
      pid_t other = p == core ? gw : core;
      kill(other, SIGTERM);
      waitpid(other, nullptr, 0);
      rc = 1;
      break;
    }
    if ((*signals)->Wait(std::chrono::milliseconds(100))) {
      GOBLIN_LOG_INFO(kLog, "stopping: goblin-gateway first, then goblin-core");
      kill(gw, SIGTERM);
      waitpid(gw, nullptr, 0);
      kill(core, SIGTERM);
      waitpid(core, nullptr, 0);
      break;
    }
  }
  std::error_code ec;
  fs::remove(sock, ec);
  if (socket_dir.starts_with("/tmp/goblin-store-")) fs::remove(socket_dir, ec);
  return rc;
}
