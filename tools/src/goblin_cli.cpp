// goblin: command-line client of goblin-core (libgoblin underneath).
//   goblin --target unix:PATH ping [-c COUNT] [-s SIZE] [-i INTERVAL]
#include <cstdio>
#include <thread>

#include "goblin/client/connection.h"
#include "goblin/common/cli.h"
#include "goblin/common/config.h"
#include "goblin/common/units.h"

int main(int argc, char** argv) {
  using namespace goblin;
  CLI::App app("goblin: command-line client of goblin-core", "goblin");
  app.set_version_flag("--version", GOBLIN_VERSION);
  std::string target = "unix:/run/goblin/core.sock";
  app.add_option("--target", target, "unix:PATH (ring plane) or ucx://HOST:PORT")
      ->capture_default_str();
  app.require_subcommand(1);
  auto* ping = app.add_subcommand("ping", "Round trips to the core over the chosen plane");
  int count = 4;
  uint64_t size = 16;
  std::chrono::nanoseconds interval = std::chrono::milliseconds(200);
  ping->add_option("-c,--count", count, "Number of pings")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  AddSizeOption(*ping, "-s,--size", &size, "Payload bytes", /*allow_zero=*/true);
  AddDurationOption(*ping, "-i,--interval", &interval, "Pause between pings");
  AddLogLevelOption(app);
  if (int rc = ParseCommandLine(app, argc, argv); rc >= 0) return rc;

  auto conn = client::Connection::Open(target, {.name = "goblin-cli"});
  if (!conn) {
    std::fprintf(stderr, "goblin: cannot connect to %s: %s\n", target.c_str(),
                 conn.error().ToString().c_str());
    return 1;
  }
  if (ping->parsed()) {
    std::string payload(size, 'g');
    std::printf("PING %s: %zu-byte payload, client %llu of core pid %u\n", target.c_str(),
                payload.size(), static_cast<unsigned long long>((*conn)->client_id()),
                (*conn)->server_pid());
    double min = 1e300, max = 0, sum = 0;
    for (int i = 0; i < count; ++i) {
      auto rtt = (*conn)->Ping(payload);
      if (!rtt) {
        std::fprintf(stderr, "goblin: ping %d: %s\n", i + 1, rtt.error().ToString().c_str());
        return 1;
      }
      double us = static_cast<double>(rtt->count()) / 1000.0;
      min = std::min(min, us);
      max = std::max(max, us);
      sum += us;
      std::printf("pong seq=%d time=%.2f us\n", i + 1, us);
      std::fflush(stdout);
      if (i + 1 < count) std::this_thread::sleep_for(interval);
    }
    std::printf("%d pings: min/avg/max = %.2f/%.2f/%.2f us\n", count, min, sum / count, max);
  }
  return 0;
}
