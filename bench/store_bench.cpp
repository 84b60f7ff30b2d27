// store_bench: the object store through goblin-core's ring plane.
//   1. Time to the first body byte of a GET whose head is in RAM (ObjectGet sent -> first
//      ObjectData record received), p50/p99/p99.9 over many gets of stored objects.
//   2. The same after a restart, when the head must first be read back from disk.
//   3. Whole-object GET throughput (RAM head + O_DIRECT tail) against the ceiling measured
//      in the same run: sequential O_DIRECT reads of the tier's extent file with io_uring at
//      the same I/O size and depth.
//   Each for zero-copy loans (libgoblin's default: the client maps the core's pools) and for
//   copies through the ring; and the first-byte latency of hits while --streams other
//   clients stream whole objects from disk at the same time (the core's loop never waits
//   for the disk).
// It starts its own goblin-core (given by --core) on a private socket and tier directory.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "bench/core_launcher.h"
#include "bench/stats.h"
#include "goblin/client/connection.h"
#include "goblin/common/cli.h"
#include "goblin/common/clock.h"
#include "goblin/common/units.h"
#include "goblin/store/disk_io.h"

namespace {

using namespace goblin;
namespace fs = std::filesystem;

// Nanoseconds from sending ObjectGet to the first body bytes, for each key. Reads only the
// first `head` bytes so each sample does not stream the whole object.
std::vector<double> FirstByte(client::Connection& c, const std::vector<std::string>& keys,
                              int rounds, uint64_t head) {
  std::vector<double> out;
  for (int r = 0; r < rounds; ++r) {
    for (const auto& k : keys) {
      uint64_t t0 = MonotonicNanos(), first = 0;
      auto m = c.Get(
          k,
          [&](uint64_t, std::span<const uint8_t>) -> VoidResult {
            if (first == 0) first = MonotonicNanos();
            return {};
          },
          0, head);
      if (!m || !m->found) {
        fmt::print(stderr, "store_bench: get {} failed\n", k);
        std::exit(1);
      }
      out.push_back(static_cast<double>(first - t0));
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("store_bench: first-byte latency and streaming throughput of the object store",
               "store_bench");
  std::string core_bin, dir = "/var/tmp/goblin-store-bench";
  uint64_t object_bytes = 256ull << 20, ram_head = 256 << 10, extent = 4 << 20;
  int objects = 8, rounds = 50, streams = 2;
  app.add_option("--core", core_bin, "Path of goblin-core")->required();
  app.add_option("--dir", dir, "Scratch directory on the disk to measure (emptied)")
      ->capture_default_str();
  AddSizeOption(app, "--object-size", &object_bytes, "Size of each object");
  AddSizeOption(app, "--ram-head", &ram_head, "--ram-head of the core");
  AddSizeOption(app, "--extent-size", &extent, "--extent-size of the core (I/O size)");
  app.add_option("--objects", objects, "Objects stored")->capture_default_str();
  app.add_option("--rounds", rounds, "First-byte samples per object")->capture_default_str();
  app.add_option("--streams", streams, "Concurrent whole-object readers in the last phase")
      ->capture_default_str();
  if (int rc = ParseCommandLine(app, argc, argv); rc >= 0) return rc;

  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string tier = dir + "/tier", sock = dir + "/core.sock", log = dir + "/core.log";
  if (bench::CoreLauncher::RunToEnd({core_bin, "--prepare", tier}) != 0) {
    fmt::print(stderr, "store_bench: goblin-core --prepare failed\n");
    return 1;
  }
  uint64_t tier_file =
      std::max<uint64_t>(1ull << 30, (object_bytes * objects / extent + 1) * extent);
  tier_file = (tier_file + extent - 1) / extent * extent;
  std::vector<std::string> args{core_bin,
                                "--listen-unix",
                                sock,
                                "--ssd-dir",
                                tier,
                                "--memory",
                                "256M",
                                "--block",
                                FormatSize(std::max<uint64_t>(ram_head, 64 << 10)),
                                "--ram-head",
                                FormatSize(ram_head),
                                "--extent-size",
                                FormatSize(extent),
                                "--tier-file-size",
                                FormatSize(tier_file),
                                "--log-level",
                                "warn"};
  bench::CoreLauncher core;
  if (!core.Start(args, sock, log)) {
    fmt::print(stderr, "store_bench: goblin-core did not start; see {}\n", log);
    return 1;
  }
  auto conn = client::Connection::Open("unix:" + sock, {.timeout = std::chrono::seconds(60)});
  if (!conn) {
    fmt::print(stderr, "store_bench: {}\n", conn.error());
    return 1;
  }
  std::vector<std::string> keys;
  std::vector<uint8_t> data(object_bytes);
  std::mt19937_64 rng(0x243f6a8885a308d3ULL);
  for (int i = 0; i < objects; ++i) {
    for (size_t j = 0; j + 8 <= data.size(); j += 8) {
      uint64_t v = rng();
      std::memcpy(&data[j], &v, 8);
    }
    keys.push_back(fmt::format("/bench/{}", i));
    if (auto g = (*conn)->Put(keys.back(), data); !g) {
      fmt::print(stderr, "store_bench: put: {}\n", g.error());
      return 1;
    }
  }
  fmt::print("# store_bench: {} objects of {}, ram head {}, extent {}, dir {}\n", objects,
             FormatSize(object_bytes), FormatSize(ram_head), FormatSize(extent), dir);
  auto connect = [&](bool zero_copy) {
    auto c = client::Connection::Open(
        "unix:" + sock, {.timeout = std::chrono::seconds(60), .zero_copy = zero_copy});
    if (!c) {
      fmt::print(stderr, "store_bench: {}\n", c.error());
      std::exit(1);
    }
    return std::move(*c);
  };
  auto copy_conn = connect(false);
  auto warm = bench::Summarize(FirstByte(**conn, keys, rounds, ram_head));
  auto warm_copy = bench::Summarize(FirstByte(*copy_conn, keys, rounds, ram_head));

  // Throughput of whole-object GETs.
  auto get_all = [&](client::Connection& c, uint64_t* bytes) {
    uint64_t t0 = MonotonicNanos();
    for (const auto& k : keys) {
      auto m = c.Get(k, [&](uint64_t, std::span<const uint8_t> d) -> VoidResult {
        *bytes += d.size();
        return {};
      });
      if (!m) std::exit(1);
    }
    return static_cast<double>(MonotonicNanos() - t0) / 1e9;
  };
  uint64_t bytes = 0, copy_bytes = 0;
  double get_secs = get_all(**conn, &bytes);
  double copy_secs = get_all(*copy_conn, &copy_bytes);
  copy_conn.reset();

  // First byte of hits while other clients stream whole objects from disk.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> streamed{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < streams; ++t) {
    readers.emplace_back([&, t] {
      auto c = connect(true);
      for (size_t i = static_cast<size_t>(t); !stop.load(); ++i) {
        (void)c->Get(keys[i % keys.size()], [&](uint64_t, std::span<const uint8_t> d) {
          streamed += d.size();
          return stop.load() ? VoidResult(Err(StatusCode::kAborted, "stop")) : VoidResult();
        });
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  uint64_t s0 = streamed.load(), b0 = MonotonicNanos();
  std::vector<double> busy_samples;
  do {  // at least a second of concurrent streaming
    auto more = FirstByte(**conn, keys, rounds, ram_head);
    busy_samples.insert(busy_samples.end(), more.begin(), more.end());
  } while (MonotonicNanos() - b0 < 1'000'000'000ULL);
  auto busy = bench::Summarize(std::move(busy_samples));
  double busy_secs = static_cast<double>(MonotonicNanos() - b0) / 1e9;
  uint64_t busy_bytes = streamed.load() - s0;
  stop = true;
  for (auto& r : readers) r.join();

  // Restart: heads come back from disk on their first read.
  conn->reset();
  core.Stop();
  if (!core.Start(args, sock, log)) return 1;
  conn = client::Connection::Open("unix:" + sock, {.timeout = std::chrono::seconds(60)});
  if (!conn) return 1;
  auto cold = bench::Summarize(FirstByte(**conn, keys, 1, ram_head));
  conn->reset();
  core.Stop();

  // The ceiling: O_DIRECT sequential reads of the extent file, same size and depth.
  auto engine = store::IoEngine::Create(store::IoChoice::kAuto, 4);
  auto pool = store::IoBufferPool::Create(4, static_cast<uint32_t>(extent));
  std::string file = tier + "/extent-000000.dat";
  int fd = open(file.c_str(), O_RDONLY | O_DIRECT);
  uint64_t want = std::min<uint64_t>(object_bytes * objects, fs::file_size(file));
  uint64_t c0 = MonotonicNanos(), read = 0, submitted = 0;
  while (read < want) {
    while (submitted < want && (*engine)->in_flight() < 4) {
      auto b = (*pool)->Acquire();
      if (!b) break;
      (*engine)->Submit(
          {fd, submitted, (*pool)->Buffer(*b), static_cast<uint32_t>(extent), false, *b});
      submitted += extent;
    }
    (void)(*engine)->Flush();
    store::IoCompletion cq[4];
    auto n = (*engine)->Reap(cq, 1);
    if (!n) return 1;
    for (size_t i = 0; i < *n; ++i) {
      read += cq[i].result > 0 ? static_cast<uint64_t>(cq[i].result) : extent;
      (*pool)->Release(static_cast<uint32_t>(cq[i].user_data));
    }
  }
  double ceiling_secs = static_cast<double>(MonotonicNanos() - c0) / 1e9;
  close(fd);

  auto us = [](double ns) { return ns / 1000.0; };
  fmt::print("{:<34} {:>8} {:>9} {:>9} {:>9} {:>9}\n", "first body byte (us)", "samples", "p50",
             "p90", "p99", "p99.9");
  auto row = [&](const char* name, const bench::Summary& x) {
    fmt::print("{:<34} {:>8} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f}\n", name, x.count, us(x.p50),
               us(x.p90), us(x.p99), us(x.p999));
  };
  row("head in RAM (zero-copy loan)", warm);
  row("head in RAM (copied through ring)", warm_copy);
  std::string busy_name = fmt::format("head in RAM, {} streams running", streams);
  row(busy_name.c_str(), busy);
  fmt::print("{:<34} {:>8} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f}\n", "after restart (head from disk)",
             cold.count, us(cold.p50), us(cold.p90), us(cold.p99), us(cold.p999));
  double get_mbs = static_cast<double>(bytes) / get_secs / 1e6;
  double ceil_mbs = static_cast<double>(read) / ceiling_secs / 1e6;
  fmt::print("whole-object GET, zero-copy loans:  {:.0f} MB/s ({} in {:.3f} s)\n", get_mbs,
             HumanSize(bytes), get_secs);
  fmt::print("whole-object GET, copies via ring:  {:.0f} MB/s ({} in {:.3f} s)\n",
             static_cast<double>(copy_bytes) / copy_secs / 1e6, HumanSize(copy_bytes), copy_secs);
  fmt::print("{} concurrent streams meanwhile:      {:.0f} MB/s together\n", streams,
             static_cast<double>(busy_bytes) / busy_secs / 1e6);
  fmt::print("O_DIRECT ceiling ({} reads, depth 4): {:.0f} MB/s ({} in {:.3f} s)\n",
             FormatSize(extent), ceil_mbs, HumanSize(read), ceiling_secs);
  fmt::print("GET (zero-copy) / ceiling: {:.0f}%\n", 100.0 * get_mbs / ceil_mbs);
  fs::remove_all(dir);
  return 0;
}
