// goblin-core: the daemon that owns Goblin's state and serves the local ring plane.
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "goblin/common/cli.h"
#include "goblin/common/config.h"
#include "goblin/common/log.h"
#include "goblin/common/signals.h"
#include "goblin/common/topology.h"
#include "goblin/common/units.h"
#include "goblin/core/core_service.h"
#include "goblin/ring/server.h"

namespace {

constexpr std::string_view kLog = "core";

int Fail(const goblin::Status& s) {
  std::fprintf(stderr, "goblin-core: error: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace goblin;
  CLI::App app("goblin-core: Goblin's storage and messaging daemon", "goblin-core");
  app.set_version_flag("--version", GOBLIN_VERSION);
  ring::ServerOptions opts;
  opts.socket_path = "/run/goblin/core.sock";
  uint64_t ring_bytes = opts.default_ring_bytes, max_ring_bytes = opts.max_ring_bytes;
  uint64_t output_limit = opts.output_limit;
  std::chrono::nanoseconds busy_poll = opts.busy_poll;
  std::string wake = "spin";
  int numa = -1;
  std::string cpus;
  app.add_option("--listen-unix", opts.socket_path, "Unix socket of the ring plane")
      ->capture_default_str();
  AddSizeOption(app, "--ring-bytes", &ring_bytes,
                "Default ring size per direction (power of two, >= 4K); clients may ask for more");
  AddSizeOption(app, "--max-ring-bytes", &max_ring_bytes, "Largest ring a client may ask for");
  AddSizeOption(app, "--client-output-limit", &output_limit,
                "Bytes queued for a client whose ring is full before it counts as too slow");
  app.add_option("--max-clients", opts.max_clients, "Concurrent clients")->capture_default_str();
  AddDurationOption(app, "--busy-poll", &busy_poll,
                    "Busy-poll this long after the last work before sleeping");
  app.add_option("--wake", wake, "spin (spin, then sleep on doorbells) or busy (never sleep)")
      ->check(CLI::IsMember({"spin", "busy"}))
      ->capture_default_str();
  app.add_option("--numa", numa, "Run on this NUMA node's CPUs");
  app.add_option("--cpus", cpus, "Run on these CPUs (e.g. 2-3); overrides --numa");
  AddLogLevelOption(app);
  if (int rc = ParseCommandLine(app, argc, argv); rc >= 0) return rc;

  opts.default_ring_bytes = static_cast<uint32_t>(ring_bytes);
  opts.max_ring_bytes = static_cast<uint32_t>(max_ring_bytes);
  opts.output_limit = output_limit;
  opts.busy_poll = busy_poll;
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

  auto signals = ShutdownSignal::Install();
  if (!signals) return Fail(signals.error());

  core::CoreService service;
  auto server = ring::RingServer::Listen(opts, &service);
  if (!server) return Fail(server.error());
  GOBLIN_LOG_INFO(kLog,
                  "goblin-core {} pid {} serving the ring plane on unix:{} (ring {} per direction, "
                  "{}, busy-poll {})",
                  GOBLIN_VERSION, getpid(), opts.socket_path, FormatSize(ring_bytes), wake,
                  FormatDuration(busy_poll));
  GOBLIN_LOG_INFO(kLog, "topology: {}; loop CPUs: {}", topo->Describe(),
                  pin.empty() ? std::string("any") : FormatCpuList(pin));
  GOBLIN_LOG_INFO(kLog, "features: ucx={} io_uring={} numa={} verbs={}", GOBLIN_HAVE_UCX,
                  GOBLIN_HAVE_URING, GOBLIN_HAVE_NUMA, GOBLIN_HAVE_VERBS);
  if (auto r = (*server)->Run((*signals)->fd()); !r) return Fail(r.error());
  const auto& st = (*server)->stats();
  GOBLIN_LOG_INFO(
      kLog, "shutting down: {} clients served, {} messages, {} pings, {} refused, {} corrupt rings",
      st.accepted, st.messages, service.counters().pings, st.rejected, st.corrupt);
  server->reset();
  return 0;
}
