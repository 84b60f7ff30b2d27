// ring_latency: round-trip and one-way latency of Goblin's shared-memory ring plane.
//
// In-process (default): a pinger thread and a ponger thread, pinned to two CPUs, bounce a
// record of N bytes through a RingChannel (4 KiB rings unless told otherwise). The pinger
// stamps the TSC into the payload, so the ponger measures the one-way hand-off directly;
// the pinger measures the round trip. With --via-core, the pinger is a RingClient of a
// running goblin-core and sends SBE Ping/Pong (the core's full request path).
//
// Modes: busy (both sides poll without ever sleeping), spin (poll 50 us, then sleep on the
// eventfd doorbell: the default of goblin-core) and sleep (no spin: every message wakes the
// peer through its doorbell).
#include <sched.h>
#include <unistd.h>

#include <emmintrin.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "bench/stats.h"
#include "goblin/common/cli.h"
#include "goblin/common/clock.h"
#include "goblin/common/topology.h"
#include "goblin/common/units.h"
#include "goblin/ring/channel.h"
#include "goblin/ring/client.h"
#include "goblin/wire/goblin_wire.h"

namespace {

using namespace goblin;
using namespace std::chrono_literals;

struct Config {
  uint64_t messages = 200'000;
  uint64_t warmup = 20'000;
  std::vector<uint64_t> sizes{16, 256};
  std::vector<std::string> modes{"busy", "spin", "sleep"};
  std::vector<int> cpus;
  uint32_t ring_bytes = 4096;
  std::string via_core;
  std::string csv;
};

struct Row {
  std::string path, mode;
  uint64_t size;
  bench::Summary rtt, oneway;
  double rate;
};

std::chrono::nanoseconds SpinFor(const std::string& mode) { return mode == "sleep" ? 0ns : 50us; }

void Pin(int cpu) {
  if (cpu >= 0) (void)PinCurrentThread(std::vector<int>{cpu});
}

// Waits for data on `ch` in the given mode. Busy mode checks the clock only every 4,096
// pauses (off the measured path); either way a peer that stops answering ends the run.
void WaitData(ring::RingChannel& ch, const std::string& mode) {
  const uint64_t deadline = MonotonicNanos() + 10'000'000'000ULL;
  for (uint32_t i = 1; !ch.HasData(); ++i) {
    if (mode == "busy") {
      _mm_pause();
      if ((i & 4095) != 0) continue;
    } else {
      ch.Wait(SpinFor(mode), 5s, false, -1);
    }
    if (MonotonicNanos() > deadline) {
      fmt::print(stderr, "ring_latency: the peer stopped answering for 10 s\n");
      std::exit(1);
    }
  }
}

Row RunInProcess(const Config& cfg, const std::string& mode, uint64_t size, const TscClock& tsc) {
  ring::WakeMode wm = mode == "busy" ? ring::WakeMode::kBusyPoll : ring::WakeMode::kSpinThenSleep;
  auto server = ring::RingChannel::Create(cfg.ring_bytes, wm, wm);
  if (!server) {
    fmt::print(stderr, "ring_latency: {}\n", server.error());
    std::exit(1);
  }
  auto client = ring::RingChannel::Attach(
      UniqueFd(dup(server->memfd())), UniqueFd(dup(server->server_doorbell_fd())),
      UniqueFd(dup(server->client_doorbell_fd())), cfg.ring_bytes, wm, wm);
  const uint64_t total = cfg.warmup + cfg.messages;
  std::vector<double> oneway;
  oneway.reserve(cfg.messages);
  std::thread ponger([&] {
    Pin(cfg.cpus.size() > 1 ? cfg.cpus[1] : -1);
    std::vector<uint8_t> copy(size);
    for (uint64_t i = 0; i < total; ++i) {
      WaitData(*server, mode);
      uint64_t now = 0;
      server->Poll([&](int32_t, std::span<const uint8_t> m) {
        now = ReadTsc();
        std::memcpy(copy.data(), m.data(), m.size());
      });
      uint64_t sent;
      std::memcpy(&sent, copy.data(), 8);
      if (i >= cfg.warmup) oneway.push_back(tsc.ToNanos(now - sent));
      while (server->TrySend(1, copy) != ring::SendStatus::kOk) _mm_pause();
    }
  });
  Pin(cfg.cpus.empty() ? -1 : cfg.cpus[0]);
  std::vector<double> rtt;
  rtt.reserve(cfg.messages);
  std::vector<uint8_t> msg(size, 0x5a);
  uint64_t start_ns = 0;
  for (uint64_t i = 0; i < total; ++i) {
    if (i == cfg.warmup) start_ns = MonotonicNanos();
    uint64_t t0 = ReadTsc();
    std::memcpy(msg.data(), &t0, 8);
    while (client->TrySend(1, msg) != ring::SendStatus::kOk) _mm_pause();
    WaitData(*client, mode);
    client->Poll([](int32_t, std::span<const uint8_t>) {});
    uint64_t t1 = ReadTsc();
    if (i >= cfg.warmup) rtt.push_back(tsc.ToNanos(t1 - t0));
  }
  double secs = static_cast<double>(MonotonicNanos() - start_ns) / 1e9;
  ponger.join();
  return {"ring (in-process)",
          mode,
          size,
          bench::Summarize(rtt),
          bench::Summarize(oneway),
          static_cast<double>(cfg.messages) / secs};
}

Row RunViaCore(const Config& cfg, const std::string& mode, uint64_t size, const TscClock& tsc) {
  Pin(cfg.cpus.empty() ? -1 : cfg.cpus[0]);
  ring::ClientOptions o;
  o.name = "ring_latency";
  o.ring_bytes = cfg.ring_bytes;
  o.peer_kind = static_cast<uint8_t>(wire::PeerKind::kBenchmark);
  o.wake = mode == "busy" ? ring::WakeMode::kBusyPoll : ring::WakeMode::kSpinThenSleep;
  o.spin = SpinFor(mode);
  std::string path = cfg.via_core.starts_with("unix:") ? cfg.via_core.substr(5) : cfg.via_core;
  auto c = ring::RingClient::Connect(path, o);
  if (!c) {
    fmt::print(stderr, "ring_latency: {}\n", c.error());
    std::exit(1);
  }
  std::string payload(size, 'p');
  std::vector<uint8_t> buf(size + 64);
  std::vector<double> rtt;
  rtt.reserve(cfg.messages);
  const uint64_t total = cfg.warmup + cfg.messages;
  uint64_t start_ns = 0;
  for (uint64_t i = 0; i < total; ++i) {
    if (i == cfg.warmup) start_ns = MonotonicNanos();
    uint64_t t0 = ReadTsc();
    uint8_t* p = (*c)->Reserve(static_cast<uint32_t>(buf.size()));
    while (p == nullptr) {
      _mm_pause();
      p = (*c)->Reserve(static_cast<uint32_t>(buf.size()));
    }
    wire::PingEncoder e(p, buf.size());
    (*c)->Commit(static_cast<uint32_t>(e.set_correlation_id(i + 1).set_payload(payload).Finish()));
    bool got = false;
    while (!got) {
      if (mode == "busy") {
        (void)(*c)->Poll([&](std::span<const uint8_t>) { got = true; });
        if (!got) _mm_pause();
      } else {
        auto w = (*c)->Wait(5s);
        if (!w) {
          fmt::print(stderr, "ring_latency: {}\n", w.error());
          std::exit(1);
        }
        (void)(*c)->Poll([&](std::span<const uint8_t>) { got = true; });
      }
    }
    uint64_t t1 = ReadTsc();
    if (i >= cfg.warmup) rtt.push_back(tsc.ToNanos(t1 - t0));
  }
  double secs = static_cast<double>(MonotonicNanos() - start_ns) / 1e9;
  return {"goblin-core (SBE Ping)", mode, size,
          bench::Summarize(rtt),    {},   static_cast<double>(cfg.messages) / secs};
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app("ring_latency: latency of Goblin's shared-memory ring plane", "ring_latency");
  std::string cpus, sizes, modes;
  uint64_t ring_bytes = cfg.ring_bytes;
  app.add_option("-n,--messages", cfg.messages, "Measured round trips per case")
      ->capture_default_str();
  app.add_option("--warmup", cfg.warmup, "Unmeasured round trips first")->capture_default_str();
  app.add_option("--sizes", sizes, "Payload sizes, comma separated (default 16,256)");
  app.add_option("--modes", modes, "busy,spin,sleep (default all)");
  app.add_option("--cpus", cpus, "Two CPUs for pinger,ponger (default: the last two allowed)");
  AddSizeOption(app, "--ring-bytes", &ring_bytes, "Ring size per direction");
  app.add_option("--via-core", cfg.via_core, "unix:PATH of a running goblin-core (pinger only)");
  app.add_option("--csv", cfg.csv, "Also write the rows as CSV to this file");
  if (int rc = ParseCommandLine(app, argc, argv); rc >= 0) return rc;
  cfg.ring_bytes = static_cast<uint32_t>(ring_bytes);
  auto split = [](const std::string& s) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= s.size()) {
      size_t c = s.find(',', start);
      out.push_back(s.substr(start, c == std::string::npos ? std::string::npos : c - start));
      if (c == std::string::npos) break;
      start = c + 1;
    }
    return out;
  };
  if (!sizes.empty()) {
    cfg.sizes.clear();
    for (auto& s : split(sizes)) cfg.sizes.push_back(ParseSize(s).value_or(16));
  }
  if (!modes.empty()) cfg.modes = split(modes);
  auto allowed = CurrentThreadAffinity().value_or(std::vector<int>{});
  if (!cpus.empty()) {
    for (auto& s : split(cpus)) cfg.cpus.push_back(std::stoi(s));
  } else if (allowed.size() >= 2) {
    cfg.cpus = {allowed[allowed.size() - 2], allowed[allowed.size() - 1]};
  }
  for (uint64_t s : cfg.sizes) {
    if (s < 8) {
      fmt::print(stderr, "ring_latency: sizes must be at least 8 bytes (the TSC stamp)\n");
      return 2;
    }
  }
  auto tsc = TscClock::Calibrate(std::chrono::milliseconds(100), /*allow_variant=*/true);
  if (!tsc) {
    fmt::print(stderr, "ring_latency: {}\n", tsc.error());
    return 1;
  }
  fmt::print(
      "# ring_latency: {} measured + {} warm-up round trips per case, ring {} B, CPUs {} "
      "(of {} allowed), TSC {:.3f} GHz{}\n",
      cfg.messages, cfg.warmup, cfg.ring_bytes, FormatCpuList(cfg.cpus), FormatCpuList(allowed),
      tsc->ticks_per_ns(), TscIsInvariant() ? "" : " (TSC not advertised invariant)");
  fmt::print("{:<24} {:<6} {:>5} | {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} | {:>8} {:>8} | {:>10}\n",
             "path", "mode", "bytes", "rtt min", "p50", "p90", "p99", "p99.9", "mean", "1-way50",
             "1-way99", "rt/s");
  std::vector<Row> rows;
  for (const auto& mode : cfg.modes) {
    if (mode != "busy" && mode != "spin" && mode != "sleep") {
      fmt::print(stderr, "ring_latency: unknown mode '{}'\n", mode);
      return 2;
    }
    for (uint64_t size : cfg.sizes) {
      Row r = cfg.via_core.empty() ? RunInProcess(cfg, mode, size, *tsc)
                                   : RunViaCore(cfg, mode, size, *tsc);
      auto us = [](double ns) { return ns / 1000.0; };
      auto ow = [&](double ns) {
        return r.oneway.count == 0 ? std::string("-") : fmt::format("{:.3f}", us(ns));
      };
      fmt::print(
          "{:<24} {:<6} {:>5} | {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f} | {:>8} "
          "{:>8} | {:>10.0f}\n",
          r.path, r.mode, r.size, us(r.rtt.min), us(r.rtt.p50), us(r.rtt.p90), us(r.rtt.p99),
          us(r.rtt.p999), us(r.rtt.mean), ow(r.oneway.p50), ow(r.oneway.p99), r.rate);
      std::fflush(stdout);
      rows.push_back(r);
    }
  }
  fmt::print("# latencies in microseconds; rt/s = completed round trips per second\n");
  if (!cfg.csv.empty()) {
    std::ofstream out(cfg.csv);
    out << "path,mode,bytes,samples,rtt_min_us,rtt_p50_us,rtt_p90_us,rtt_p99_us,rtt_p999_us,"
           "rtt_mean_us,oneway_min_us,oneway_p50_us,oneway_p90_us,oneway_p99_us,oneway_p999_us,"
           "roundtrips_per_s\n";
    for (auto& r : rows) {
      out << fmt::format(
          "{},{},{},{},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f}"
          ",{:.0f}\n",
          r.path, r.mode, r.size, r.rtt.count, r.rtt.min / 1e3, r.rtt.p50 / 1e3, r.rtt.p90 / 1e3,
          r.rtt.p99 / 1e3, r.rtt.p999 / 1e3, r.rtt.mean / 1e3, r.oneway.min / 1e3,
          r.oneway.p50 / 1e3, r.oneway.p90 / 1e3, r.oneway.p99 / 1e3, r.oneway.p999 / 1e3, r.rate);
    }
  }
  return 0;
}
