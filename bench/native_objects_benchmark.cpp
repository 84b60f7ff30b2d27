// native_objects_benchmark: the native plane in the seed system's form (issue #21). Exact
// OBJECT_SIZE objects held in the core's RAM heads, read in a fixed-seed key order:
//   native_objects_benchmark --target unix:PATH|ucx://HOST:PORT [--objects 256]
//       [--object-size 256K] [--samples 5000] [--connections 1,2,4,8] [--seconds 3]
//       [--seed 42] [--label L] [--no-store] [--keep] [--window 1] [--copy] [--pause-spin]
//       [--spin 50us] [--read-all] [--idle 0]
//   1. stores OBJECTS objects under bench/o/NNNNN (each byte a function of the key's index
//      and the offset, so a wrong object or offset is seen; --no-store: a run with --keep
//      stored them, e.g. before the core restarted), then reads each once;
//   2. serial: one connection, SAMPLES gets one after another; per get the time to the
//      response header (the core's ObjectInfo, Connection::Get's on_meta), to the payload
//      being ready (the first sink call) and to completion (the last byte), all percentiles;
//   3. throughput: for each N in CONNECTIONS, N threads each with its own Connection run
//      gets back to back for SECONDS (closed loop, each its own seeded order): aggregate
//      MB/s and Gbit/s of payload, gets/s, completion p50/p99; with --window W each
//      connection keeps W gets in flight (Connection::StartGet/WaitGets, out of order).
// Every get's length is checked and its bytes spot-checked (every 4 KiB and both ends:
// checking each byte would measure the check); --read-all copies every byte into the
// reader's own buffer first (what a reader that needs the bytes elsewhere pays). --idle N
// opens N more connections before the serial part and keeps them open, silent, to the end:
// what many connected clients cost the ones that talk. Prints Markdown
// rows; the caller chooses UCX_TLS for ucx:// targets (bench/native_objects_benchmark.sh runs
// ucx_perftest beside it).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bench/bench_clock.h"
#include "bench/stats.h"
#include "goblin/client/connection.h"
#include "goblin/common/cli.h"
#include "goblin/common/clock.h"

namespace {

using namespace goblin;

uint8_t ObjectByte(uint32_t object, uint64_t i) {
  return static_cast<uint8_t>(((i + object * 0x9e3779b1ull) * 2654435761u) >> 13);
}

std::string KeyOf(uint32_t object) { return fmt::format("bench/o/{:05d}", object); }

// Every object's key, made once: a get's time is the store's and the plane's, not the
// formatting of its key (ucx_perftest's loop formats nothing either).
std::vector<std::string> g_keys;

struct Times {
  double header_ns = 0, ready_ns = 0, done_ns = 0;
};

// What a get's steps are timed with (--clock; bench/bench_clock.h).
bench::BenchClock g_clock;

bool g_read_all = false;  // --read-all

// What a sink does with a piece of `object` at `off`: spot-checks it where it is, or
// (--read-all) first copies all of it into the reader's own buffer, as GetInto does, and
// checks the copy. False when a byte differs.
bool TakePiece(uint32_t object, uint64_t off, std::span<const uint8_t> b) {
  if (g_read_all) {
    thread_local std::vector<uint8_t> own;
    if (own.size() < off + b.size()) own.resize(off + b.size());
    std::memcpy(own.data() + off, b.data(), b.size());
    b = {own.data() + off, b.size()};
  }
  bool ok = true;
  for (size_t i = 0; i < b.size(); i += 4096) ok &= b[i] == ObjectByte(object, off + i);
  return ok && (b.empty() || b.back() == ObjectByte(object, off + b.size() - 1));
}

// One verified get of `object`: times from t0, or an error.
Result<Times> ReadObject(client::Connection& c, uint32_t object, uint64_t size) {
  // (raw readings in the window, converted after it)
  uint64_t got = 0, header = 0, ready = 0;
  bool ok = true;
  const uint64_t t0 = g_clock.Now();
  auto m = c.Get(
      g_keys[object],
      [&](uint64_t off, std::span<const uint8_t> b) {
        if (got == 0) ready = g_clock.Now();
        ok &= TakePiece(object, off, b);
        got += b.size();
        return VoidResult();
      },
      0, UINT64_MAX, false, [&](const client::Connection::ObjectMeta&) { header = g_clock.Now(); });
  const uint64_t done = g_clock.Now();
  Times t;
  t.header_ns = header == 0 ? 0 : g_clock.Nanos(header - t0);
  t.ready_ns = ready == 0 ? 0 : g_clock.Nanos(ready - t0);
  t.done_ns = g_clock.Nanos(done - t0);
  if (!m) return Err(m.error());
  if (!m->found) return Err(StatusCode::kNotFound, "{} is not stored", KeyOf(object));
  if (!ok || got != size) {
    return Err(StatusCode::kCorruption, "{}: {} bytes of {}, or bytes differ from what was stored",
               KeyOf(object), got, size);
  }
  return t;
}

// Closed loop with `window` gets in flight on one connection (StartGet/WaitGets): a new get
// starts as soon as one finishes, until `stop_at`; then the rest are drained. Each get's
// bytes and length are checked; its completion time (from its start) goes to `lat`.
VoidResult WindowedGets(client::Connection& c, std::mt19937_64& rng, uint32_t objects,
                        uint64_t size, uint32_t window, uint64_t stop_at, uint64_t* bytes,
                        std::vector<double>* lat) {
  struct InFlight {
    uint32_t object = 0;
    uint64_t t0 = 0, got = 0;
    bool ok = true;
  };
  std::unordered_map<uint64_t, std::shared_ptr<InFlight>> flying;
  bool stopping = false;
  for (;;) {
    while (!stopping && flying.size() < window) {
      auto f = std::make_shared<InFlight>();
      f->object = static_cast<uint32_t>(rng() % objects);
      f->t0 = MonotonicNanos();
      GOBLIN_ASSIGN_OR_RETURN(
          uint64_t id, c.StartGet(g_keys[f->object], [f](uint64_t off, std::span<const uint8_t> b) {
            f->ok &= TakePiece(f->object, off, b);
            f->got += b.size();
            return VoidResult();
          }));
      flying.emplace(id, std::move(f));
    }
    if (flying.empty()) return {};
    GOBLIN_ASSIGN_OR_RETURN(auto done, c.WaitGets(std::chrono::seconds(5)));
    if (done.empty()) return Err(StatusCode::kTimeout, "no get finished within 5 s");
    const uint64_t now = MonotonicNanos();
    for (auto& d : done) {
      auto it = flying.find(d.id);
      if (it == flying.end()) return Err(StatusCode::kInternal, "get {} finished twice", d.id);
      const InFlight& f = *it->second;
      if (!d.result) return Err(d.result.error());
      if (!d.result->found || !f.ok || f.got != size) {
        return Err(StatusCode::kCorruption, "{}: {} bytes of {}, or bytes differ", KeyOf(f.object),
                   f.got, size);
      }
      *bytes += size;
      lat->push_back(static_cast<double>(now - f.t0) / 1e3);
      flying.erase(it);
    }
    stopping = now >= stop_at;
  }
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "native_objects_benchmark: %s\n", what.c_str());
  return 1;
}

std::string Row(const bench::Summary& s) {
  // (hundredths: a first byte is 1-2 us over shared memory, and a change of 50 ns matters)
  return fmt::format("{:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.1f} | {:.1f}", s.min, s.p50,
                     s.mean, s.p90, s.p99, s.p999, s.max);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("native_objects_benchmark: exact-size RAM-head objects over one plane",
               "native_objects_benchmark");
  std::string target, label, connections = "1,2,4,8";
  uint64_t object_size = 256 << 10;
  uint32_t objects = 256;
  uint64_t seed = 42;
  int samples = 5000;
  double seconds = 3;
  app.add_option("--target", target, "unix:PATH or ucx://HOST:PORT (libgoblin)")->required();
  app.add_option("--objects", objects, "How many objects")->capture_default_str();
  AddSizeOption(app, "--object-size", &object_size, "Each object's size");
  app.add_option("--samples", samples, "Serial gets")->capture_default_str();
  app.add_option("--connections", connections, "Throughput: connection counts, comma-separated")
      ->capture_default_str();
  app.add_option("--seconds", seconds, "Throughput: seconds per connection count")
      ->capture_default_str();
  app.add_option("--seed", seed, "Key order seed")->capture_default_str();
  app.add_option("--label", label, "Row label");
  bool no_store = false, keep = false, pause_spin = false, copy = false, compare = false;
  uint32_t window = 1;
  app.add_option("--window", window,
                 "Throughput: gets in flight per connection (StartGet/WaitGets; 1: one at a time)")
      ->capture_default_str();
  app.add_flag("--copy", copy,
               "Every byte copied through the ring or received by UCX's rendezvous "
               "(ConnectOptions::zero_copy = false) instead of lent in place from the core's "
               "pools the client maps");
  app.add_flag("--read-all", g_read_all,
               "Each sink copies every byte it is given into its own buffer (as GetInto does) "
               "before checking, instead of spot-checking the bytes where they are");
  app.add_flag("--pause-spin", pause_spin,
               "Clients spin with pause, not yielding (a client with a CPU of its own)");
  std::chrono::nanoseconds spin = client::ConnectOptions{}.spin;
  AddDurationOption(app, "--spin", &spin,
                    "Clients poll this long for an answer before sleeping (ConnectOptions::spin)");
  app.add_flag("--compare-answer-loans", compare,
               "Serial part: alternate gets between a connection whose first piece comes lent "
               "in the core's answer (the default) and one whose answer and first Loan come "
               "apart (ConnectOptions::loan_in_answer = false), and print both tables: the "
               "same core, the same moment");
  uint32_t idle = 0;
  app.add_option("--idle", idle,
                 "Connections opened before the serial part and kept open without traffic to "
                 "the end (many connected clients, a few talking)")
      ->capture_default_str();
  int pings = 0;
  app.add_option("--pings", pings,
                 "Serial part: after the gets, this many Pings one after another on the same "
                 "connection (the core's loop and both sides' transport glue without the store: "
                 "a row of its own)")
      ->capture_default_str();
  std::string clock = "tsc";
  app.add_option("--clock", clock,
                 "What the serial part times a get's steps with: tsc (the CPU's counter where "
                 "it is constant and nonstop, as ucx_perftest times its iterations; else "
                 "CLOCK_MONOTONIC) or monotonic (clock_gettime, 34 ns a read in a KVM guest)")
      ->check(CLI::IsMember({"tsc", "monotonic"}))
      ->capture_default_str();
  app.add_flag("--no-store", no_store, "The objects are stored already (a run with --keep)");
  app.add_flag("--keep", keep, "Leave the objects stored at the end");
  if (int rc = ParseCommandLine(app, argc, argv); rc >= 0) return rc;
  if (label.empty()) label = target;
  g_clock.Calibrate(clock == "tsc");
  for (uint32_t o = 0; o < objects; ++o) g_keys.push_back(KeyOf(o));
  const client::ConnectOptions copts{.name = "native_objects_benchmark",
                                     .zero_copy = !copy,
                                     .spin = spin,
                                     .spin_yield = !pause_spin};

  auto conn = client::Connection::Open(target, copts);
  if (!conn) return Fail(fmt::format("{}: {}", target, conn.error().ToString()));
  client::Connection& c = **conn;
  std::vector<uint8_t> body(object_size);
  for (uint32_t o = 0; o < objects && !no_store; ++o) {
    for (uint64_t i = 0; i < object_size; ++i) body[i] = ObjectByte(o, i);
    if (auto r = c.Put(KeyOf(o), body); !r) {
      return Fail(fmt::format("put {}: {}", KeyOf(o), r.error().ToString()));
    }
  }
  for (uint32_t o = 0; o < objects; ++o) {  // each read once (and checked) before timing
    if (auto r = ReadObject(c, o, object_size); !r) return Fail(r.error().ToString());
  }

  std::vector<std::unique_ptr<client::Connection>> idlers;
  for (uint32_t k = 0; k < idle; ++k) {
    auto cn = client::Connection::Open(target, copts);
    if (!cn) return Fail(fmt::format("idle connection {}: {}", k, cn.error().ToString()));
    idlers.push_back(std::move(*cn));
  }

  // Serial: one get at a time in a fixed-seed order (--compare-answer-loans: every other one
  // on a second connection without the first piece lent in the answer).
  std::unique_ptr<client::Connection> apart;
  if (compare) {
    client::ConnectOptions o = copts;
    o.loan_in_answer = false;
    auto a = client::Connection::Open(target, o);
    if (!a) return Fail(fmt::format("{}: {}", target, a.error().ToString()));
    apart = std::move(*a);
  }
  struct Serial {
    std::vector<double> header_us, ready_us, done_us;
  } serial[2];
  for (Serial& s : serial) {  // (no reallocation, and its page faults, between two gets)
    for (auto* v : {&s.header_us, &s.ready_us, &s.done_us})
      v->reserve(static_cast<size_t>(samples));
  }
  std::mt19937_64 rng(seed);
  for (int i = 0; i < samples; ++i) {
    auto object = static_cast<uint32_t>(rng() % objects);
    const int which = apart && (i & 1) ? 1 : 0;
    auto r = ReadObject(which == 1 ? *apart : c, object, object_size);
    if (!r) return Fail(r.error().ToString());
    serial[which].header_us.push_back(r->header_ns / 1e3);
    serial[which].ready_us.push_back(r->ready_ns / 1e3);
    serial[which].done_us.push_back(r->done_ns / 1e3);
  }
  for (int which = 0; which < (apart ? 2 : 1); ++which) {
    const Serial& s = serial[which];
    fmt::print(
        "\n{}: one connection{}{}, {} gets of {}-byte objects one after another (us; timed "
        "with {})\n\n",
        label,
        !apart       ? ""
        : which == 0 ? " (first piece lent in the answer)"
                     : " (answer and first Loan apart; interleaved with the above)",
        idle == 0 ? "" : fmt::format(" ({} more connected, idle)", idle), s.header_us.size(),
        object_size, g_clock.Describe());
    fmt::print(
        "| time to | min | p50 | mean | p90 | p99 | p99.9 | max |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|\n");
    fmt::print("| response header | {} |\n", Row(bench::Summarize(s.header_us)));
    fmt::print("| payload ready | {} |\n", Row(bench::Summarize(s.ready_us)));
    fmt::print("| complete | {} |\n", Row(bench::Summarize(s.done_us)));
  }
  if (pings > 0) {
    std::vector<double> ping_us;
    ping_us.reserve(static_cast<size_t>(pings));
    for (int i = 0; i < pings; ++i) {
      auto r = c.Ping();
      if (!r) return Fail(fmt::format("ping: {}", r.error().ToString()));
      ping_us.push_back(static_cast<double>(r->count()) / 1e3);
    }
    fmt::print("| ping (no store) | {} |\n", Row(bench::Summarize(ping_us)));
  }

  // Throughput: N connections, closed loop.
  fmt::print("\n{}: N connections, {} get{} in flight on each, for {} s each\n\n", label, window,
             window == 1 ? "" : "s", seconds);
  fmt::print(
      "| connections | MB/s | Gbit/s | gets/s | complete p50 (us) | p99 (us) |\n"
      "|---:|---:|---:|---:|---:|---:|\n");
  std::stringstream list(connections);
  for (std::string item; std::getline(list, item, ',');) {
    const int n = std::stoi(item);
    std::vector<std::unique_ptr<client::Connection>> conns;
    for (int k = 0; k < n; ++k) {
      auto cn = client::Connection::Open(target, copts);
      if (!cn) return Fail(fmt::format("{}: {}", target, cn.error().ToString()));
      conns.push_back(std::move(*cn));
    }
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::vector<double>> lat(static_cast<size_t>(n));
    std::vector<uint64_t> bytes(static_cast<size_t>(n), 0);
    std::vector<std::string> errors(static_cast<size_t>(n));
    uint64_t start = 0, stop_at = 0;
    std::vector<std::thread> threads;
    for (int k = 0; k < n; ++k) {
      threads.emplace_back([&, k] {
        std::mt19937_64 r(seed + 1 + static_cast<uint64_t>(k));
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        if (window > 1) {
          auto e =
              WindowedGets(*conns[static_cast<size_t>(k)], r, objects, object_size, window, stop_at,
                           &bytes[static_cast<size_t>(k)], &lat[static_cast<size_t>(k)]);
          if (!e) errors[static_cast<size_t>(k)] = e.error().ToString();
          return;
        }
        do {  // (at least one get per connection, however short the turn)
          auto object = static_cast<uint32_t>(r() % objects);
          auto t = ReadObject(*conns[static_cast<size_t>(k)], object, object_size);
          if (!t) {
            errors[static_cast<size_t>(k)] = t.error().ToString();
            return;
          }
          bytes[static_cast<size_t>(k)] += object_size;
          lat[static_cast<size_t>(k)].push_back(t->done_ns / 1e3);
        } while (MonotonicNanos() < stop_at);
      });
    }
    while (ready.load() < n) std::this_thread::yield();
    start = MonotonicNanos();
    stop_at = start + static_cast<uint64_t>(seconds * 1e9);
    go.store(true, std::memory_order_release);
    for (auto& t : threads) t.join();
    const double secs = static_cast<double>(MonotonicNanos() - start) / 1e9;
    std::vector<double> all;
    uint64_t total = 0;
    for (int k = 0; k < n; ++k) {
      if (!errors[static_cast<size_t>(k)].empty()) {
        return Fail(fmt::format("{} connections: {}", n, errors[static_cast<size_t>(k)]));
      }
      total += bytes[static_cast<size_t>(k)];
      all.insert(all.end(), lat[static_cast<size_t>(k)].begin(), lat[static_cast<size_t>(k)].end());
    }
    auto s = bench::Summarize(all);
    fmt::print("| {} | {:.0f} | {:.2f} | {:.0f} | {:.1f} | {:.1f} |\n", n,
               static_cast<double>(total) / secs / 1e6, static_cast<double>(total) * 8 / secs / 1e9,
               static_cast<double>(s.count) / secs, s.p50, s.p99);
    std::fflush(stdout);
  }
  for (uint32_t o = 0; o < objects && !keep; ++o) (void)c.Delete(KeyOf(o));
  return 0;
}
