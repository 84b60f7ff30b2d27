// fill_rate_bench: how many small objects goblin-core stores per second, and how fast it
// comes back after a long history of fills and purges.
//   1. Fill rate: --clients libgoblin connections (one thread each) put objects of random
//      size in [--min-size, --max-size] as fast as the core acknowledges them (each Put
//      waits for its PutResult, i.e. for the commit to be durable), for --seconds. Prints
//      objects/s, MB/s and the put latency percentiles.
//   2. With --churn N: N more operations over --keep keys (4 puts : 1 delete, so the
//      journal sees replacements and purges), then the core is stopped (SIGTERM) and
//      restarted, and the time from spawning it to the first hit on a kept key is measured,
//      with the journal and checkpoint sizes the restart found.
// It starts its own goblin-core (--core) on a private socket and tier directory.
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "bench/core_launcher.h"
#include "bench/stats.h"
#include "goblin/client/connection.h"
#include "goblin/common/cli.h"
#include "goblin/common/clock.h"
#include "goblin/common/units.h"

namespace {

using namespace goblin;
namespace fs = std::filesystem;

uint64_t FileSize(const std::string& p) {
  std::error_code ec;
  auto n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

std::string LastLineWith(const std::string& path, std::string_view what) {
  std::ifstream f(path);
  std::string found;
  for (std::string line; std::getline(f, line);) {
    if (line.find(what) != std::string::npos) found = line;
  }
  return found;
}

std::string FirstLineWith(const std::string& path, std::string_view what) {
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    if (line.find(what) != std::string::npos) return line;
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("fill_rate_bench: small-object fill rate and restart time of goblin-core",
               "fill_rate_bench");
  std::string core_bin, dir = "/var/tmp/goblin-fill-bench";
  uint64_t min_size = 4 << 10, max_size = 64 << 10, extent = 64 << 10, tier_file = 4ull << 30;
  int clients = 16;
  double seconds = 5;
  uint64_t churn = 0, keep = 20000, ring_bytes = 1 << 20, memory = 512 << 20;
  std::vector<std::string> core_extra;
  app.add_option("--core", core_bin, "Path of goblin-core")->required();
  app.add_option("--dir", dir, "Scratch directory on the disk to measure (emptied)")
      ->capture_default_str();
  app.add_option("--clients", clients, "Concurrent putting connections")->capture_default_str();
  app.add_option("--seconds", seconds, "Length of the fill-rate phase")->capture_default_str();
  AddSizeOption(app, "--min-size", &min_size, "Smallest object");
  AddSizeOption(app, "--max-size", &max_size, "Largest object");
  AddSizeOption(app, "--extent-size", &extent, "--extent-size of the core");
  AddSizeOption(app, "--tier-file-size", &tier_file, "--tier-file-size of the core");
  app.add_option("--churn", churn, "Operations of the restart phase (0: skip it)")
      ->capture_default_str();
  app.add_option("--keep", keep, "Keys the churn phase spreads over")->capture_default_str();
  AddSizeOption(app, "--memory", &memory, "--memory of the core (its head pool)");
  AddSizeOption(app, "--ring-bytes", &ring_bytes,
                "Ring size of each client connection (a gateway's is 1M; libgoblin's default 4K)");
  app.add_option("--core-arg", core_extra, "Extra goblin-core argument (repeatable)");
  if (int rc = ParseCommandLine(app, argc, argv); rc >= 0) return rc;
  if (min_size == 0 || max_size < min_size || clients < 1) {
    fmt::print(stderr, "fill_rate_bench: bad sizes or clients\n");
    return 2;
  }

  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string tier = dir + "/tier", sock = dir + "/core.sock", log = dir + "/core.log";
  if (bench::CoreLauncher::RunToEnd({core_bin, "--prepare", tier}) != 0) {
    fmt::print(stderr, "fill_rate_bench: goblin-core --prepare failed\n");
    return 1;
  }
  std::vector<std::string> args{core_bin,
                                "--listen-unix",
                                sock,
                                "--ssd-dir",
                                tier,
                                "--memory",
                                FormatSize(memory),
                                "--block",
                                "64K",
                                "--ram-head",
                                "64K",
                                "--extent-size",
                                FormatSize(extent),
                                "--tier-file-size",
                                FormatSize(tier_file),
                                "--max-objects",
                                "1000000",
                                "--log-level",
                                "info"};
  args.insert(args.end(), core_extra.begin(), core_extra.end());
  bench::CoreLauncher core;
  if (!core.Start(args, sock, log)) {
    fmt::print(stderr, "fill_rate_bench: goblin-core did not start; see {}\n", log);
    return 1;
  }
  auto connect = [&] {
    auto c = client::Connection::Open(
        "unix:" + sock,
        {.ring_bytes = static_cast<uint32_t>(ring_bytes), .timeout = std::chrono::seconds(60)});
    if (!c) {
      fmt::print(stderr, "fill_rate_bench: {}\n", c.error());
      std::exit(1);
    }
    return std::move(*c);
  };
  std::vector<uint8_t> data(max_size);
  std::mt19937_64 fill_rng(0x9e3779b97f4a7c15ULL);
  for (auto& b : data) b = static_cast<uint8_t>(fill_rng());

  fmt::print("# fill_rate_bench: {} clients ({} rings), objects {}-{}, extent {}, dir {}\n",
             clients, FormatSize(ring_bytes), FormatSize(min_size), FormatSize(max_size),
             FormatSize(extent), dir);

  // Phase 1: the fill rate.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> objects{0}, bytes{0}, failures{0};
  std::mutex mu;
  std::vector<double> latencies;
  std::vector<std::thread> threads;
  const uint64_t t0 = MonotonicNanos();
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      auto c = connect();
      std::mt19937_64 rng(static_cast<uint64_t>(t) * 7919 + 1);
      std::vector<double> mine;
      for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        uint64_t n = min_size + rng() % (max_size - min_size + 1);
        std::string key = fmt::format("/fill/{}/{}", t, i);
        uint64_t s = MonotonicNanos();
        auto r = c->Put(key, std::span<const uint8_t>(data.data(), n));
        if (!r) {
          ++failures;
          if (failures.load() < 5) fmt::print(stderr, "fill_rate_bench: put: {}\n", r.error());
          continue;
        }
        mine.push_back(static_cast<double>(MonotonicNanos() - s));
        ++objects;
        bytes += n;
      }
      std::lock_guard<std::mutex> g(mu);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& th : threads) th.join();
  threads.clear();
  const double secs = static_cast<double>(MonotonicNanos() - t0) / 1e9;
  auto lat = bench::Summarize(std::move(latencies));
  fmt::print("{:<28} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9}\n", "fill rate", "objects/s", "MB/s",
             "put p50", "p90", "p99", "p99.9");
  fmt::print("{:<28} {:>10.0f} {:>10.1f} {:>9.0f} {:>9.0f} {:>9.0f} {:>9.0f}\n",
             fmt::format("{} clients, {:.1f} s", clients, secs),
             static_cast<double>(objects.load()) / secs,
             static_cast<double>(bytes.load()) / secs / 1e6, lat.p50 / 1e3, lat.p90 / 1e3,
             lat.p99 / 1e3, lat.p999 / 1e3);
  fmt::print("(put latencies in us; {} objects, {} failures)\n", objects.load(), failures.load());

  if (churn > 0) {
    // Phase 2: a long history over `keep` keys, then a restart.
    std::atomic<uint64_t> done{0}, puts{0}, deletes{0};
    const uint64_t c0 = MonotonicNanos();
    for (int t = 0; t < clients; ++t) {
      threads.emplace_back([&, t] {
        auto c = connect();
        std::mt19937_64 rng(static_cast<uint64_t>(t) * 104729 + 3);
        while (done.fetch_add(1) < churn) {
          std::string key = fmt::format("/keep/{}", rng() % keep);
          if (rng() % 5 == 4) {
            if (c->Delete(key)) ++deletes;
          } else {
            uint64_t n = min_size + rng() % (max_size - min_size + 1);
            if (c->Put(key, std::span<const uint8_t>(data.data(), n))) ++puts;
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    // Every kept key once more, so the restart has `keep` known objects to hit.
    {
      auto c = connect();
      for (uint64_t k = 0; k < keep; ++k) {
        if (!c->Put(fmt::format("/keep/{}", k), std::span<const uint8_t>(data.data(), min_size))) {
          fmt::print(stderr, "fill_rate_bench: final put failed\n");
          return 1;
        }
      }
    }
    const double churn_secs = static_cast<double>(MonotonicNanos() - c0) / 1e9;
    uint64_t journal = FileSize(tier + "/index.journal");
    uint64_t checkpoint = FileSize(tier + "/index.checkpoint");
    core.Stop();
    uint64_t journal_after_stop = FileSize(tier + "/index.journal");
    const uint64_t r0 = MonotonicNanos();
    if (!core.Start(args, sock, log)) {
      fmt::print(stderr, "fill_rate_bench: goblin-core did not restart; see {}\n", log);
      return 1;
    }
    const uint64_t socket_up = MonotonicNanos();
    auto c = connect();
    std::vector<uint8_t> buf(max_size);
    auto m = c->GetInto("/keep/0", buf);
    const uint64_t first_hit = MonotonicNanos();
    if (!m || !m->found) {
      fmt::print(stderr, "fill_rate_bench: the kept object is gone after the restart\n");
      return 1;
    }
    uint64_t missing = 0;
    for (uint64_t k = 0; k < keep; k += std::max<uint64_t>(1, keep / 200)) {
      auto h = c->Head(fmt::format("/keep/{}", k));
      if (!h || !h->found) ++missing;
    }
    fmt::print("churn: {} puts + {} deletes over {} keys (+{} final puts) in {:.1f} s\n",
               puts.load(), deletes.load(), keep, keep, churn_secs);
    fmt::print("before the stop: journal {} , checkpoint {}; after the clean stop: journal {}\n",
               HumanSize(journal), HumanSize(checkpoint), HumanSize(journal_after_stop));
    fmt::print(
        "restart: socket after {:.0f} ms, first hit after {:.0f} ms; {} of ~200 sampled "
        "kept keys missing\n",
        static_cast<double>(socket_up - r0) / 1e6, static_cast<double>(first_hit - r0) / 1e6,
        missing);
    fmt::print("core: {}\n", LastLineWith(log, "store: "));
  }
  core.Stop();
  // (the first run's: the one that did the fills)
  if (auto j = FirstLineWith(log, "journal: "); !j.empty()) fmt::print("core: {}\n", j);
  fs::remove_all(dir);
  return 0;
}
