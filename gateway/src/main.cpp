// goblin-gateway: Redis clients (RESP2/RESP3 over TCP or a unix socket) into goblin-core's
// pub/sub. (The HTTP/1.1 mirror front joins this process with its own flags.)
#include <unistd.h>

#include <cstdio>

#include "goblin/common/cli.h"
#include "goblin/common/log.h"
#include "goblin/common/signals.h"
#include "goblin/common/units.h"
#include "goblin/gateway/resp_server.h"

using namespace goblin;

namespace {
constexpr std::string_view kLog = "gateway";
int Fail(const Status& s) {
  std::fprintf(stderr, "goblin-gateway: %s\n", s.ToString().c_str());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app("goblin-gateway: RESP (Redis protocol) front end of goblin-core", "goblin-gateway");
  gateway::RespServerOptions o;
  std::string core = "unix:/run/goblin/core.sock";
  app.add_option("--core", core, "goblin-core's ring socket (unix:PATH)")->capture_default_str();
  app.add_option("--listen-address", o.listen_address, "Address of the TCP listeners")
      ->capture_default_str();
  app.add_option("--resp-port", o.port, "RESP TCP port (0: none)")->capture_default_str();
  app.add_option("--resp-unix", o.unix_path, "Also serve RESP on this unix socket");
  app.add_option("--requirepass", o.requirepass, "Password clients must AUTH with");
  AddSizeOption(app, "--pubsub-output-limit", &o.output_hard_limit,
                "Output a client may have pending before it is dropped (0: none)", true);
  AddSizeOption(app, "--pubsub-output-soft-limit", &o.output_soft_limit,
                "Output a client may stay above for --pubsub-output-soft-time (0: none)", true);
  AddDurationOption(app, "--pubsub-output-soft-time", &o.output_soft_time,
                    "How long a client may stay above the soft limit");
  uint64_t ring = o.core_ring_bytes;
  AddSizeOption(app, "--core-ring-bytes", &ring, "Ring size towards goblin-core (per direction)");
  app.add_option("--max-clients", o.max_clients, "Concurrent RESP clients")->capture_default_str();
  AddLogLevelOption(app);
  if (int rc = ParseCommandLine(app, argc, argv); rc >= 0) return rc;
  o.core_socket = core.starts_with("unix:") ? core.substr(5) : core;
  o.core_ring_bytes = static_cast<uint32_t>(ring);
  if (o.port == 0 && o.unix_path.empty()) {
    return Fail(
        Status(StatusCode::kInvalidArgument, "nothing to serve: give --resp-port or --resp-unix"));
  }
  auto signals = ShutdownSignal::Install();
  if (!signals) return Fail(signals.error());
  auto server = gateway::RespServer::Start(o);
  if (!server) return Fail(server.error());
  GOBLIN_LOG_INFO(kLog, "goblin-gateway pid {}: RESP on {}{}{}; core {}", getpid(),
                  o.port != 0 ? fmt::format("{}:{}", o.listen_address, (*server)->port()) : "",
                  o.port != 0 && !o.unix_path.empty() ? " and " : "",
                  o.unix_path.empty() ? "" : "unix:" + o.unix_path, core);
  auto r = (*server)->Run((*signals)->fd());
  const auto& st = (*server)->stats();
  GOBLIN_LOG_INFO(kLog,
                  "shutting down: {} clients, {} commands, {} messages out, {} dropped "
                  "for output limits, {} protocol errors",
                  st.accepted, st.commands, st.messages_out, st.dropped_for_output_limit,
                  st.protocol_errors);
  if (!r) return Fail(r.error());
  return 0;
}
