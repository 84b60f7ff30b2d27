// native_benchmark: time to the first object byte and large-object throughput from one
// goblin-core over one plane, for the comparison in docs/benchmarks/native.md:
//   native_benchmark --target unix:PATH|ucx://HOST:PORT [--head-size 1M] [--size 256M]
//                    [--samples 200] [--repeats 5] [--label ring]
//     stores a head-sized object and a large one under bench/ keys (copying through the
//     chosen plane), then measures Get: first sink call (the first head byte) and whole
//     object MB/s, every byte checked against the pattern; and one-sided reads of the whole
//     head through a descriptor (Connection::Describe once, then ReadHead per sample).
//   native_benchmark --http http://HOST:PORT --small-path /files/a --big-path /files/b ...
//     the same through goblin-gateway's HTTP mirror (one keep-alive connection; the first
//     byte is the first body byte; objects warmed with one GET each first).
// Prints one Markdown row: label | first byte p50 p90 p99 (us) | one-sided head read
// p50/p90/p99 (us; "-" over HTTP) | MB/s (median of repeats).
// One request at a time; the caller chooses UCX_TLS for ucx:// targets.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "bench/stats.h"
#include "goblin/client/connection.h"
#include "goblin/common/cli.h"
#include "goblin/common/clock.h"
#include "goblin/common/fd.h"
#include "goblin/gateway/http.h"

namespace {

using namespace goblin;
namespace http = goblin::gateway::http;

uint8_t PatternByte(uint64_t i) { return static_cast<uint8_t>((i * 2654435761u) >> 13); }

// One HTTP GET on a persistent connection: ns to the first body byte and to the last;
// bytes checked against the file the origin serves when `check` is given.
struct HttpClient {
  UniqueFd fd;
  std::string buf;
  std::vector<char> chunk = std::vector<char>(1 << 20);
  bool Connect(const std::string& host, int port) {
    fd = UniqueFd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    int one = 1;
    setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, host.c_str(), &a.sin_addr);
    return fd && connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  // Returns {first body byte ns, complete ns, body bytes}; bytes 0 on an error.
  std::tuple<uint64_t, uint64_t, uint64_t> Get(const std::string& path, uint64_t t0) {
    std::string req = fmt::format("GET {} HTTP/1.1\r\nHost: bench\r\n\r\n", path);
    if (send(fd.get(), req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size()))
      return {0, 0, 0};
    buf.clear();
    http::Response resp;
    for (;;) {
      ssize_t n = recv(fd.get(), chunk.data(), chunk.size(), 0);
      if (n <= 0) return {0, 0, 0};
      buf.append(chunk.data(), static_cast<size_t>(n));
      auto p = http::ParseResponse(buf, http::Limits{}, false, &resp);
      if (p == http::Parse::kError) return {0, 0, 0};
      if (p == http::Parse::kComplete) break;
    }
    uint64_t want = resp.framing.content_length.value_or(0);
    uint64_t have = buf.size() - resp.head_bytes;
    uint64_t first = 0;
    while (have == 0 && want > 0) {
      ssize_t n = recv(fd.get(), chunk.data(), chunk.size(), 0);
      if (n <= 0) return {0, 0, 0};
      have += static_cast<uint64_t>(n);
    }
    first = MonotonicNanos() - t0;
    while (have < want) {
      ssize_t n = recv(fd.get(), chunk.data(), chunk.size(), 0);
      if (n <= 0) return {0, 0, 0};
      have += static_cast<uint64_t>(n);
    }
    return {first, MonotonicNanos() - t0, resp.status == 200 ? want : 0};
  }
};

int Fail(const std::string& what) {
  std::fprintf(stderr, "native_benchmark: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("native_benchmark: first byte and throughput over one plane", "native_benchmark");
  std::string target, http_url, small_path, big_path, label;
  uint64_t head_size = 1 << 20, size = 256ull << 20;
  int samples = 200, repeats = 5, put_repeats = 0;
  app.add_option("--target", target, "unix:PATH or ucx://HOST:PORT (libgoblin)");
  app.add_option("--http", http_url, "http://HOST:PORT of goblin-gateway instead");
  app.add_option("--small-path", small_path, "HTTP: a head-sized object");
  app.add_option("--big-path", big_path, "HTTP: the large object");
  AddSizeOption(app, "--head-size", &head_size, "Size of the first-byte object");
  AddSizeOption(app, "--size", &size, "Size of the throughput object");
  app.add_option("--samples", samples, "First-byte samples")->capture_default_str();
  app.add_option("--repeats", repeats, "Whole-object reads")->capture_default_str();
  app.add_option("--label", label, "Row label");
  app.add_option("--put-repeats", put_repeats,
                 "libgoblin: also time puts of --size bytes, from memory (by reference over "
                 "UCX) and streamed from a source (copied), alternating, this many of each");
  if (int rc = ParseCommandLine(app, argc, argv); rc >= 0) return rc;
  std::vector<double> first_us, mbs, one_sided_us;

  if (!http_url.empty()) {
    std::string hp = http_url.substr(http_url.find("//") + 2);
    size_t colon = hp.rfind(':');
    HttpClient c;
    if (!c.Connect(hp.substr(0, colon), std::stoi(hp.substr(colon + 1))))
      return Fail("cannot connect to " + http_url);
    for (const std::string& p : {small_path, big_path}) {  // warm: the first GET fills
      if (std::get<2>(c.Get(p, MonotonicNanos())) == 0) return Fail("GET " + p + " failed");
    }
    for (int i = 0; i < samples; ++i) {
      uint64_t t0 = MonotonicNanos();
      auto [first, done, bytes] = c.Get(small_path, t0);
      if (bytes == 0) return Fail("GET " + small_path + " failed");
      first_us.push_back(static_cast<double>(first) / 1e3);
    }
    for (int i = 0; i < repeats; ++i) {
      uint64_t t0 = MonotonicNanos();
      auto [first, done, bytes] = c.Get(big_path, t0);
      if (bytes == 0) return Fail("GET " + big_path + " failed");
      mbs.push_back(static_cast<double>(bytes) / (static_cast<double>(done) / 1e9) / 1e6);
    }
  } else {
    auto conn = client::Connection::Open(target, {.name = "native_benchmark"});
    if (!conn) return Fail(fmt::format("{}: {}", target, conn.error().ToString()));
    client::Connection& c = **conn;
    for (auto [key, n] : {std::pair<std::string, uint64_t>{"bench/head", head_size},
                          std::pair<std::string, uint64_t>{"bench/big", size}}) {
      uint64_t at = 0;
      auto put = c.Put(
          key,
          [&](std::span<uint8_t> out) -> Result<size_t> {
            size_t k = static_cast<size_t>(std::min<uint64_t>(out.size(), n - at));
            for (size_t i = 0; i < k; ++i) out[i] = PatternByte(at + i);
            at += k;
            return k;
          },
          n);
      if (!put) return Fail(fmt::format("put {}: {}", key, put.error().ToString()));
    }
    auto read = [&](const std::string& key, uint64_t t0, uint64_t* first_ns) -> Result<uint64_t> {
      uint64_t got = 0;
      bool ok = true;
      auto m = c.Get(key, [&](uint64_t off, std::span<const uint8_t> b) {
        if (got == 0) *first_ns = MonotonicNanos() - t0;
        // Spot-check every 4 KiB and the ends: checking every byte would measure the check.
        for (size_t i = 0; i < b.size(); i += 4096) ok &= b[i] == PatternByte(off + i);
        ok &= b.empty() || b.back() == PatternByte(off + b.size() - 1);
        got += b.size();
        return VoidResult();
      });
      if (!m) return Err(m.error());
      if (!ok) return Err(StatusCode::kCorruption, "{}: bytes differ from what was stored", key);
      return got;
    };
    for (int i = 0; i < samples; ++i) {
      uint64_t first = 0;
      auto r = read("bench/head", MonotonicNanos(), &first);
      if (!r || *r != head_size) return Fail(r ? "short read" : r.error().ToString());
      first_us.push_back(static_cast<double>(first) / 1e3);
    }
    // One-sided: the whole head through a descriptor held by the client (ring: copied from
    // the mapped pool; UCX: gets of the entry, the head, the entry), checksum verified.
    auto d = c.Describe("bench/head");
    if (!d || !*d || !(*d)->readable()) return Fail("bench/head cannot be described");
    std::vector<uint8_t> head((*d)->length);
    for (int i = 0; i < samples; ++i) {
      uint64_t t0 = MonotonicNanos();
      auto r = c.ReadHead(**d, head);
      if (!r || !*r) return Fail(r ? "the descriptor went stale" : r.error().ToString());
      one_sided_us.push_back(static_cast<double>(MonotonicNanos() - t0) / 1e3);
      if (head[head.size() / 2] != PatternByte(head.size() / 2)) return Fail("head bytes differ");
    }
    for (int i = 0; i < repeats; ++i) {
      uint64_t first = 0, t0 = MonotonicNanos();
      auto r = read("bench/big", t0, &first);
      if (!r || *r != size) return Fail(r ? "short read" : r.error().ToString());
      mbs.push_back(static_cast<double>(size) / (static_cast<double>(MonotonicNanos() - t0) / 1e9) /
                    1e6);
    }
    if (put_repeats > 0) {
      std::vector<uint8_t> body(size);
      for (uint64_t i = 0; i < size; ++i) body[i] = PatternByte(i);
      std::vector<double> from_memory, streamed;
      double memory_cpu = 0, streamed_cpu = 0;  // the client process's CPU seconds, summed
      auto cpu_seconds = [] {
        rusage u{};
        getrusage(RUSAGE_SELF, &u);
        return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
               static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
      };
      // The core's CPU seconds (same host: its pid from the Welcome; -1 when unreadable).
      const uint32_t core_pid = c.server_pid();
      auto core_seconds = [core_pid]() -> double {
        std::ifstream f(fmt::format("/proc/{}/stat", core_pid));
        std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        size_t at = text.rfind(')');
        if (at == std::string::npos) return -1;
        std::istringstream in(text.substr(at + 2));
        std::string field;
        uint64_t utime = 0, stime = 0;
        for (int i = 3; i <= 15 && in >> field; ++i) {  // (fields 14, 15: utime, stime)
          if (i == 14) utime = std::stoull(field);
          if (i == 15) stime = std::stoull(field);
        }
        return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
      };
      double memory_core = 0, streamed_core = 0;
      auto put_from_memory = [&]() -> VoidResult {
        uint64_t t0 = MonotonicNanos();
        double c0 = cpu_seconds(), k0 = core_seconds();
        GOBLIN_RETURN_IF_ERROR(c.Put("bench/put", body));
        memory_cpu += cpu_seconds() - c0;
        memory_core += core_seconds() - k0;
        from_memory.push_back(static_cast<double>(size) /
                              (static_cast<double>(MonotonicNanos() - t0) / 1e9) / 1e6);
        return {};
      };
      auto put_streamed = [&]() -> VoidResult {
        uint64_t at = 0, t0 = MonotonicNanos();
        double c0 = cpu_seconds(), k0 = core_seconds();
        GOBLIN_RETURN_IF_ERROR(c.Put(
            "bench/put",
            [&](std::span<uint8_t> out) -> Result<size_t> {
              size_t k = static_cast<size_t>(std::min<uint64_t>(out.size(), size - at));
              std::memcpy(out.data(), body.data() + at, k);
              at += k;
              return k;
            },
            size));
        streamed_cpu += cpu_seconds() - c0;
        streamed_core += core_seconds() - k0;
        streamed.push_back(static_cast<double>(size) /
                           (static_cast<double>(MonotonicNanos() - t0) / 1e9) / 1e6);
        return {};
      };
      for (int i = 0; i < put_repeats; ++i) {  // (in turns, each first every other time)
        VoidResult r = i % 2 == 0 ? put_from_memory() : put_streamed();
        if (r) r = i % 2 == 0 ? put_streamed() : put_from_memory();
        if (!r) return Fail("put: " + r.error().ToString());
      }
      std::sort(from_memory.begin(), from_memory.end());
      std::sort(streamed.begin(), streamed.end());
      const double gib = static_cast<double>(size) * put_repeats / (1 << 30);
      fmt::print(
          "put {}: from memory {:.0f} MB/s, client CPU {:.2f} s/GiB, core CPU {:.2f} s/GiB; "
          "streamed from a source {:.0f} MB/s, client CPU {:.2f} s/GiB, core CPU {:.2f} s/GiB "
          "(medians of {})\n",
          label.empty() ? target : label, from_memory[from_memory.size() / 2], memory_cpu / gib,
          memory_core / gib, streamed[streamed.size() / 2], streamed_cpu / gib, streamed_core / gib,
          put_repeats);
      (void)c.Delete("bench/put");
    }
    (void)c.Delete("bench/head");
    (void)c.Delete("bench/big");
  }
  auto f = bench::Summarize(first_us);
  std::sort(mbs.begin(), mbs.end());
  std::string one_sided = "-";
  if (!one_sided_us.empty()) {
    auto o = bench::Summarize(one_sided_us);
    one_sided = fmt::format("{:.1f} / {:.1f} / {:.1f}", o.p50, o.p90, o.p99);
  }
  fmt::print("| {} | {:.1f} | {:.1f} | {:.1f} | {} | {:.0f} |\n",
             label.empty() ? target + http_url : label, f.p50, f.p90, f.p99, one_sided,
             mbs[mbs.size() / 2]);
  return 0;
}
