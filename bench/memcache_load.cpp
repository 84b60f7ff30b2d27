// memcache_load: the memcache benchmark's client (docs/benchmarks/memcache.md). Keys and
// value sizes come from a generated set (a seed, a count and a size distribution: a
// generalized Pareto of the seed system's benchmark, or a fixed/small range), so the same
// command gives every server the same values.
//   fill:  sets every key once (values of a pattern derived from the key), `--connections`
//          at a time, each pipelining up to 4 MiB of sets (--fill-rate: at most so many MiB/s,
//          each set waiting for its turn); reports the time taken.
//   get:   closed loop (or with --rate, an open loop at a fixed schedule; --client-gbps: each
//          connection reading no faster than a link of that speed) for `--seconds`:
//          each connection gets a random key (fixed seed per
//          connection), reads the whole reply, checks its length (and with --verify the
//          bytes; a miss is counted, not fatal, and not in the latencies); reports
//          requests/s, misses, Gbit/s of values, and p50/p99/p99.9 of the time
//          from request to the last byte and to the first value byte.
// One blocking thread per connection (the servers under test, not this client, are what is
// measured; on a shared machine its CPU is reported beside theirs by the script).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench/stats.h"
#include "goblin/common/cli.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Item {
  std::string key;
  uint32_t size = 0;
};

// Generalized Pareto by inverse transform, clamped to [lo, hi]: xi 0.2, sigma chosen for a
// mean near `mean` once clamped (the seed system's "256 KiB - 8 MiB, mean ~1 MiB" mix).
uint32_t Pareto(std::mt19937_64& rng, double lo, double hi, double mean) {
  const double xi = 0.2;
  const double sigma = (mean - lo) * (1 - xi);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  double x = lo + sigma / xi * (std::pow(1 - u(rng), -xi) - 1);
  return static_cast<uint32_t>(std::clamp(x, lo, hi));
}

std::vector<Item> MakeSet(uint64_t seed, size_t count, const std::string& dist, double lo,
                          double hi, double mean) {
  std::mt19937_64 rng(seed);
  std::vector<Item> items(count);
  std::uniform_int_distribution<uint32_t> uni(static_cast<uint32_t>(lo), static_cast<uint32_t>(hi));
  for (size_t i = 0; i < count; ++i) {
    items[i].key = fmt::format("mcbench:{}:{}", seed, i);
    items[i].size = dist == "pareto" ? Pareto(rng, lo, hi, mean) : uni(rng);
  }
  return items;
}

char PatternByte(size_t key_index, size_t offset) {
  return static_cast<char>('a' + (key_index * 7 + offset * 13 + (offset >> 12)) % 26);
}

class Conn {
 public:
  Conn(const std::string& host, int port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, host.c_str(), &a.sin_addr);
    ok_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Conn() { close(fd_); }
  bool ok() const { return ok_; }
  bool SendAll(const char* p, size_t n) {
    while (n > 0) {
      ssize_t w = send(fd_, p, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }
  // Reads until buf holds at least `n` bytes past `pos`.
  bool Need(size_t n) {
    while (buf_.size() - pos_ < n) {
      if (pos_ > 0 && pos_ == buf_.size()) {
        buf_.clear();
        pos_ = 0;
      }
      char tmp[1 << 16];
      ssize_t r = recv(fd_, tmp, sizeof tmp, 0);
      if (r <= 0) return false;
      buf_.append(tmp, static_cast<size_t>(r));
    }
    return true;
  }
  // Need(n), reading no faster than `bytes_per_s` counted from `from` (a client behind a
  // link of that speed: the server's bytes wait in the socket buffers, then in the server).
  bool NeedPaced(size_t n, Clock::time_point from, double bytes_per_s) {
    size_t got = buf_.size() - pos_;
    while (buf_.size() - pos_ < n) {
      char tmp[1 << 16];
      ssize_t r = recv(fd_, tmp, sizeof tmp, 0);
      if (r <= 0) return false;
      buf_.append(tmp, static_cast<size_t>(r));
      got += static_cast<size_t>(r);
      std::this_thread::sleep_until(from + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(got / bytes_per_s)));
    }
    return true;
  }
  // One line (without "\r\n").
  bool Line(std::string* out) {
    for (;;) {
      size_t eol = buf_.find("\r\n", pos_);
      if (eol != std::string::npos) {
        out->assign(buf_, pos_, eol - pos_);
        pos_ = eol + 2;
        return true;
      }
      char tmp[1 << 16];
      ssize_t r = recv(fd_, tmp, sizeof tmp, 0);
      if (r <= 0) return false;
      buf_.append(tmp, static_cast<size_t>(r));
    }
  }
  std::string_view Take(size_t n) {
    std::string_view v(buf_.data() + pos_, n);
    pos_ += n;
    return v;
  }
  void Compact() {
    if (pos_ > (1 << 20)) {
      buf_.erase(0, pos_);
      pos_ = 0;
    }
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
  std::string buf_;
  size_t pos_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"memcache_load: fill a generated value set, or get it in a closed loop"};
  std::string mode = "get", host = "127.0.0.1", dist = "pareto", label = "server";
  int port = 11211, connections = 16;
  uint64_t seed = 1;
  size_t count = 1000;
  double lo = 256 << 10, hi = 8 << 20, mean = 1 << 20, seconds = 10;
  bool verify = false;
  app.add_option("mode", mode, "fill or get")->check(CLI::IsMember({"fill", "get"}));
  app.add_option("--host", host)->capture_default_str();
  app.add_option("--port", port)->capture_default_str();
  app.add_option("--connections", connections)->capture_default_str();
  app.add_option("--seed", seed)->capture_default_str();
  app.add_option("--count", count, "Keys in the set")->capture_default_str();
  app.add_option("--dist", dist, "pareto (lo..hi, mean) or uniform (lo..hi)")
      ->check(CLI::IsMember({"pareto", "uniform"}))
      ->capture_default_str();
  app.add_option("--min", lo, "Smallest value (bytes)")->capture_default_str();
  app.add_option("--max", hi, "Largest value (bytes)")->capture_default_str();
  app.add_option("--mean", mean, "Pareto: the mean to aim for (bytes)")->capture_default_str();
  app.add_option("--seconds", seconds, "get: how long")->capture_default_str();
  double rate = 0;
  app.add_option("--rate", rate,
                 "get: an open loop of this many gets/s in all (each connection its share, on "
                 "a fixed schedule; a get's time counts from when it was due, so a server that "
                 "falls behind is charged for the wait); 0: closed loop")
      ->capture_default_str();
  double fill_mib_s = 0;
  app.add_option("--fill-rate", fill_mib_s,
                 "fill: at most this many MiB/s of values (each set waits for its time: a "
                 "store that writes behind the fill, as memcached's extstore, can keep up); 0: "
                 "as fast as the server takes them")
      ->capture_default_str();
  double client_gbps = 0;
  app.add_option("--client-gbps", client_gbps,
                 "get: each connection takes its replies no faster than this (a client behind "
                 "a link of that speed); 0: as fast as it can")
      ->capture_default_str();
  app.add_flag("--verify", verify, "get: check every byte (slower: for tests)");
  app.add_option("--label", label)->capture_default_str();
  if (int rc = goblin::ParseCommandLine(app, argc, argv); rc >= 0) return rc;

  const auto items = MakeSet(seed, count, dist, lo, hi, mean);
  uint64_t total_bytes = 0;
  for (const auto& it : items) total_bytes += it.size;
  std::atomic<bool> failed{false};
  std::atomic<size_t> next{0};

  if (mode == "fill") {
    std::vector<uint64_t> before(items.size(), 0);  // value bytes ahead of each in the set
    for (size_t i = 1; i < items.size(); ++i) before[i] = before[i - 1] + items[i - 1].size;
    const auto t0 = Clock::now();
    std::vector<std::thread> ts;
    for (int c = 0; c < connections; ++c) {
      ts.emplace_back([&] {
        Conn conn(host, port);
        if (!conn.ok()) {
          failed = true;
          return;
        }
        std::string req, line;
        for (;;) {
          size_t i = next.fetch_add(1);
          if (i >= items.size()) break;
          const Item& it = items[i];
          if (fill_mib_s > 0) {
            std::this_thread::sleep_until(
                t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                         static_cast<double>(before[i]) / (fill_mib_s * 1048576.0))));
          }
          req = fmt::format("set {} 0 0 {}\r\n", it.key, it.size);
          size_t off = req.size();
          req.resize(off + it.size + 2);
          for (size_t k = 0; k < it.size; ++k) req[off + k] = PatternByte(i, k);
          req[off + it.size] = '\r';
          req[off + it.size + 1] = '\n';
          if (!conn.SendAll(req.data(), req.size()) || !conn.Line(&line) || line != "STORED") {
            fmt::print(stderr, "fill: {} -> '{}'\n", it.key, line);
            failed = true;
            return;
          }
        }
      });
    }
    for (auto& t : ts) t.join();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    fmt::print("{} fill: {} values, {:.1f} MiB in {:.2f} s ({:.2f} Gbit/s){}\n", label,
               items.size(), total_bytes / 1048576.0, s, total_bytes * 8 / s / 1e9,
               failed ? " FAILED" : "");
    return failed ? 1 : 0;
  }

  struct Result {
    uint64_t requests = 0, bytes = 0, errors = 0, misses = 0;
    std::vector<double> total_us, first_us;
  };
  std::vector<Result> results(static_cast<size_t>(connections));
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  std::vector<std::thread> ts;
  for (int c = 0; c < connections; ++c) {
    ts.emplace_back([&, c] {
      Result& r = results[static_cast<size_t>(c)];
      Conn conn(host, port);
      if (!conn.ok()) {
        failed = true;
        return;
      }
      std::mt19937_64 rng(seed * 1000 + static_cast<uint64_t>(c));
      std::uniform_int_distribution<size_t> pick(0, items.size() - 1);
      std::string req, line;
      const auto start = Clock::now();
      const std::chrono::duration<double> interval(rate > 0 ? connections / rate : 0.0);
      uint64_t sent = 0;
      while (Clock::now() < deadline) {
        const size_t i = pick(rng);
        const Item& it = items[i];
        req = "get " + it.key + "\r\n";
        auto t0 = Clock::now();
        if (rate > 0) {  // open loop: due at start + sent * interval
          const auto due = start + std::chrono::duration_cast<Clock::duration>(
                                       interval * static_cast<double>(sent));
          ++sent;
          if (due > t0) std::this_thread::sleep_until(due);
          if (due >= deadline) break;
          t0 = due;
        }
        if (!conn.SendAll(req.data(), req.size()) || !conn.Line(&line)) {
          ++r.errors;
          failed = true;
          return;
        }
        const auto t1 = Clock::now();
        if (line == "END") {  // a miss (a cache may drop values: counted, not fatal)
          ++r.misses;
          continue;
        }
        if (line.starts_with("SERVER_ERROR")) {  // (extstore out of read buffers): counted
          ++r.errors;
          if (r.errors == 1) fmt::print(stderr, "get {}: '{}'\n", it.key, line);
          continue;
        }
        const std::string want = fmt::format("VALUE {} 0 {}", it.key, it.size);
        const bool have = client_gbps > 0 ? conn.NeedPaced(it.size + 7, t1, client_gbps * 1e9 / 8)
                                          : conn.Need(it.size + 7);
        if (line != want || !have) {
          ++r.errors;
          fmt::print(stderr, "get {}: '{}'\n", it.key, line.substr(0, 100));
          failed = true;
          return;
        }
        std::string_view v = conn.Take(it.size);
        if (verify) {
          for (size_t k = 0; k < it.size; ++k) {
            if (v[k] != PatternByte(i, k)) {
              fmt::print(stderr, "get {}: byte {} differs\n", it.key, k);
              failed = true;
              return;
            }
          }
        }
        if (conn.Take(7) != "\r\nEND\r\n") {
          failed = true;
          return;
        }
        conn.Compact();
        const auto t2 = Clock::now();
        ++r.requests;
        r.bytes += it.size;
        r.total_us.push_back(std::chrono::duration<double, std::micro>(t2 - t0).count());
        r.first_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
    });
  }
  for (auto& t : ts) t.join();
  Result all;
  for (auto& r : results) {
    all.requests += r.requests;
    all.bytes += r.bytes;
    all.errors += r.errors;
    all.misses += r.misses;
    all.total_us.insert(all.total_us.end(), r.total_us.begin(), r.total_us.end());
    all.first_us.insert(all.first_us.end(), r.first_us.begin(), r.first_us.end());
  }
  auto tot = goblin::bench::Summarize(all.total_us);
  auto first = goblin::bench::Summarize(all.first_us);
  if (rate > 0) fmt::print("open loop at {:.0f} gets/s: ", rate);
  if (client_gbps > 0) fmt::print("clients at {:g} Gbit/s each: ", client_gbps);
  fmt::print(
      "{}: {} connections, {:.0f} s: {} gets ({:.0f}/s), {} misses, {} errors, {:.2f} Gbit/s of "
      "values; "
      "complete p50 {:.0f} us p99 {:.0f} us p99.9 {:.0f} us; first line p50 {:.0f} us p99 {:.0f} "
      "us{}\n",
      label, connections, seconds, all.requests, all.requests / seconds, all.misses, all.errors,
      all.bytes * 8 / seconds / 1e9, tot.p50, tot.p99, tot.p999, first.p50, first.p99,
      failed ? " FAILED" : "");
  return failed ? 1 : 0;
}
