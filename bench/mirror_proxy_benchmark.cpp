// mirror_proxy_benchmark: the client of the seed's mirror benchmark. It reads a manifest
// (one "PATH SIZE" per line), makes --passes independently shuffled passes over it with the
// fixed seed 0x243f6a8885a308d3, on one persistent HTTP/1.1 connection with one request
// outstanding, and takes nanosecond timestamps immediately before sending, at the first
// response byte, at the first body byte and after the last declared body byte. Results stay
// in memory until the case ends, then go to --trace (CSV, one row per request) and a summary:
// TTFB percentiles, request-to-last-byte bandwidth percentiles in the seed's degradation
// ordering (p99.9 is the slow tail), aggregate payload Gbit/s. Body lengths are verified
// against the manifest, and with --verify every body's XXH3-64 against the manifest's third
// column; a mismatch or an error is counted and makes the exit status 1.
//   mirror_proxy_benchmark --target http://127.0.0.1:8080 --manifest M [--passes 3]
//       [--trace out.csv] [--label goblin] [--head /warmed/key] [--verify]
//   mirror_proxy_benchmark --hash FILE...           (XXH3-64 of files, for the manifest)
//   mirror_proxy_benchmark --loopback-ceiling 8G   (the loopback TCP stream ceiling, MB/s)
//   mirror_proxy_benchmark --disk-ceiling FILE... [--depths 1,4,16]  (O_DIRECT ceiling, MB/s)
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <xxhash.h>

#include "bench/manifest.h"
#include "bench/stats.h"
#include "goblin/common/cli.h"
#include "goblin/common/clock.h"
#include "goblin/common/fd.h"
#include "goblin/gateway/http.h"
#include "goblin/store/disk_io.h"

namespace {

using namespace goblin;
namespace http = goblin::gateway::http;

using Item = bench::ManifestItem;

struct Sample {
  int pass = 0;
  size_t index = 0;  // into the manifest
  int status = 0;
  uint64_t query_start_ns = 0, response_first_byte_ns = 0, body_first_byte_ns = 0, complete_ns = 0;
  uint64_t received = 0;
  uint64_t xxh3 = 0;  // of the body, with --verify
  bool ok = false;
};

class Client {
 public:
  Client(std::string host, int port, bool hash)
      : host_(std::move(host)), port_(port), hash_(hash ? XXH3_createState() : nullptr) {}
  ~Client() { XXH3_freeState(hash_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  bool Connect() {
    fd_ = UniqueFd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd_) return false;
    int one = 1;
    setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    if (inet_pton(AF_INET, host_.c_str(), &a.sin_addr) != 1) return false;
    buf_.clear();
    return connect(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  // One request, measured. `head`: a bodyless HEAD.
  Sample Request(const std::string& path, bool head) {
    Sample s;
    if (!fd_ && !Connect()) return s;
    std::string req = fmt::format("{} {} HTTP/1.1\r\nHost: {}:{}\r\n\r\n", head ? "HEAD" : "GET",
                                  path, host_, port_);
    s.query_start_ns = MonotonicNanos();
    if (send(fd_.get(), req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
      fd_.Reset();
      return s;
    }
    http::Response resp;
    size_t head_end = 0;
    for (;;) {  // the head
      if (!Read(&s)) return s;
      auto p = http::ParseResponse(buf_, http::Limits{}, head, &resp);
      if (p == http::Parse::kError) {
        fd_.Reset();
        return s;
      }
      if (p == http::Parse::kComplete) {
        head_end = resp.head_bytes;
        break;
      }
    }
    s.status = resp.status;
    uint64_t want = resp.framing.content_length.value_or(0);
    uint64_t have = std::min<uint64_t>(buf_.size() - head_end, want);
    if (have > 0) s.body_first_byte_ns = s.response_first_byte_ns;
    if (hash_ != nullptr) {
      XXH3_64bits_reset(hash_);
      XXH3_64bits_update(hash_, buf_.data() + head_end, have);
    }
    if (resp.framing.chunked) {  // (caches answer hits with a length; kept simple)
      fd_.Reset();
      return s;
    }
    while (have < want) {
      buf_.clear();  // body bytes are counted, not kept
      ssize_t n = recv(fd_.get(), chunk_.data(), chunk_.size(), 0);
      if (n <= 0) {
        fd_.Reset();
        s.received = have;
        return s;
      }
      if (s.body_first_byte_ns == 0) s.body_first_byte_ns = MonotonicNanos();
      if (hash_ != nullptr) XXH3_64bits_update(hash_, chunk_.data(), static_cast<size_t>(n));
      have += static_cast<uint64_t>(n);
    }
    s.complete_ns = MonotonicNanos();
    s.received = want;
    if (hash_ != nullptr) s.xxh3 = XXH3_64bits_digest(hash_);
    buf_.clear();
    s.ok = true;
    if (!resp.keep_alive) fd_.Reset();
    return s;
  }

 private:
  bool Read(Sample* s) {
    ssize_t n = recv(fd_.get(), chunk_.data(), chunk_.size(), 0);
    if (n <= 0) {
      fd_.Reset();
      return false;
    }
    if (s->response_first_byte_ns == 0) s->response_first_byte_ns = MonotonicNanos();
    buf_.append(chunk_.data(), static_cast<size_t>(n));
    return true;
  }
  std::string host_;
  int port_;
  UniqueFd fd_;
  XXH3_state_t* hash_;
  std::string buf_;
  std::vector<char> chunk_ = std::vector<char>(1 << 20);
};

// XXH3-64 of a whole file, or nullopt when it cannot be read.
std::optional<uint64_t> HashFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<char> buf(4 << 20);
  ssize_t n = 0;
  while (fd && (n = read(fd.get(), buf.data(), buf.size())) > 0)
    XXH3_64bits_update(st, buf.data(), static_cast<size_t>(n));
  uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  if (!fd || n < 0) return std::nullopt;
  return h;
}

// The loopback TCP ceiling: one connection, a sender thread writing `bytes` from memory and
// this thread reading them into a 1 MiB buffer (the client's own receive size). MB/s.
double LoopbackCeiling(uint64_t bytes) {
  UniqueFd listener(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (!listener || bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      listen(listener.get(), 1) != 0 ||
      getsockname(listener.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return 0;
  std::thread sender([&] {
    UniqueFd c(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    std::vector<char> buf(1 << 20, 'x');
    for (uint64_t sent = 0; c && sent < bytes;) {
      ssize_t n =
          send(c.get(), buf.data(), std::min<uint64_t>(buf.size(), bytes - sent), MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<uint64_t>(n);
    }
  });
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  uint64_t got = 0, t0 = MonotonicNanos();
  if (fd && connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    std::vector<char> buf(1 << 20);
    for (;;) {
      ssize_t n = recv(fd.get(), buf.data(), buf.size(), 0);
      if (n <= 0) break;
      got += static_cast<uint64_t>(n);
    }
  }
  double secs = static_cast<double>(MonotonicNanos() - t0) / 1e9;
  sender.join();
  return got == bytes ? static_cast<double>(got) / secs / 1e6 : 0;
}

constexpr uint32_t kBlock = 4u << 20;

// Reads `file` from its start to its end (whole 4 MiB blocks) with O_DIRECT, as many
// requests in flight as the engine's depth. Bytes read, or 0 on an error.
uint64_t DiskReadFile(const std::string& file, store::IoEngine& engine, store::IoBufferPool& pool) {
  UniqueFd fd(open(file.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC));
  struct stat st {};
  if (!fd || fstat(fd.get(), &st) != 0) return 0;
  uint64_t want = static_cast<uint64_t>(st.st_size) / kBlock * kBlock;
  uint64_t done = 0, submitted = 0;
  while (done < want) {
    while (submitted < want) {
      auto b = pool.Acquire();
      if (!b) break;
      engine.Submit({fd.get(), submitted, pool.Buffer(*b), kBlock, false, *b});
      submitted += kBlock;
    }
    if (!engine.Flush()) return 0;
    store::IoCompletion cq[64];
    auto n = engine.Reap(cq, 1);
    if (!n) return 0;
    for (size_t i = 0; i < *n; ++i) {
      if (cq[i].result != static_cast<int32_t>(kBlock)) return 0;
      done += kBlock;
      pool.Release(static_cast<uint32_t>(cq[i].user_data));
    }
  }
  return done;
}

// The O_DIRECT disk ceiling at one queue depth: each file read from its start to its end
// in 4 MiB requests through the store's own engine (io_uring), `depth` requests in flight,
// the files one after another. MB/s, or 0 on an error.
double DiskCeiling(const std::vector<std::string>& files, uint32_t depth) {
  auto engine = store::IoEngine::Create(store::IoChoice::kAuto, depth);
  auto pool = store::IoBufferPool::Create(depth, kBlock);
  if (!engine || !pool) return 0;
  uint64_t t0 = MonotonicNanos(), total = 0;
  for (const std::string& file : files) {
    uint64_t got = DiskReadFile(file, **engine, **pool);
    if (got == 0) return 0;
    total += got;
  }
  return static_cast<double>(total) / (static_cast<double>(MonotonicNanos() - t0) / 1e9) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("mirror_proxy_benchmark: the seed's serial large-object HTTP client",
               "mirror_proxy_benchmark");
  std::string target, manifest, trace, label = "cache", head_path;
  int passes = 3;
  uint64_t seed = bench::kOrderSeed;
  uint64_t ceiling_bytes = 0;
  AddSizeOption(app, "--loopback-ceiling", &ceiling_bytes,
                "Only measure a loopback TCP stream of this many bytes (MB/s) and exit", true);
  std::vector<std::string> disk_files, hash_files;
  std::vector<uint32_t> depths{1, 4, 16};
  bool verify = false;
  app.add_option("--disk-ceiling", disk_files,
                 "Only measure O_DIRECT reads of these files at --depths (MB/s) and exit");
  app.add_option("--hash", hash_files, "Only print \"XXH3-64 FILE\" for these files and exit");
  app.add_flag("--verify", verify,
               "Check every body's XXH3-64 against the manifest's third column (hex)");
  app.add_option("--depths", depths, "Queue depths for --disk-ceiling")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--target", target, "http://HOST:PORT of the cache");
  app.add_option("--manifest", manifest, "File of \"PATH SIZE\" lines");
  app.add_option("--passes", passes, "Shuffled passes over the manifest")->capture_default_str();
  app.add_option("--seed", seed, "Shuffle seed")->capture_default_str();
  app.add_option("--trace", trace, "Write one CSV row per request here");
  app.add_option("--label", label, "Name of the case in the output")->capture_default_str();
  app.add_option("--head", head_path, "First check this warmed key with a bodyless HEAD");
  if (int rc = ParseCommandLine(app, argc, argv); rc >= 0) return rc;
  if (ceiling_bytes > 0) {
    double mbs = LoopbackCeiling(ceiling_bytes);
    fmt::print("ceiling: loopback {:.0f} MB/s ({} bytes on one TCP connection)\n", mbs,
               ceiling_bytes);
    return mbs > 0 ? 0 : 1;
  }
  if (!hash_files.empty()) {
    for (const std::string& f : hash_files) {
      auto h = HashFile(f);
      if (!h) {
        std::fprintf(stderr, "mirror_proxy_benchmark: cannot read %s\n", f.c_str());
        return 1;
      }
      fmt::print("{:016x} {}\n", *h, f);
    }
    return 0;
  }
  if (!disk_files.empty()) {
    double best = 0;
    for (uint32_t d : depths) {
      double mbs = d > 0 && d <= 64 ? DiskCeiling(disk_files, d) : 0;
      if (mbs <= 0) {
        std::fprintf(stderr, "mirror_proxy_benchmark: O_DIRECT reads at depth %u failed\n", d);
        return 1;
      }
      fmt::print("disk: depth {} {:.0f} MB/s\n", d, mbs);
      best = std::max(best, mbs);
    }
    fmt::print("ceiling: disk {:.0f} MB/s (O_DIRECT 4 MiB reads of {} file(s), best depth)\n", best,
               disk_files.size());
    return 0;
  }
  if (manifest.empty()) {
    std::fprintf(stderr, "mirror_proxy_benchmark: --target and --manifest are required\n");
    return 2;
  }
  auto parsed = bench::ParseHttpTarget(target);
  if (!parsed) {
    std::fprintf(stderr, "mirror_proxy_benchmark: --target must be http://HOST:PORT\n");
    return 2;
  }
  const std::string host = parsed->host;
  const int port = parsed->port;
  std::vector<Item> items = bench::ReadManifest(manifest);
  for (const Item& it : items) {
    if (verify && !it.has_hash) {
      std::fprintf(stderr, "mirror_proxy_benchmark: --verify: no hash for %s in %s\n",
                   it.path.c_str(), manifest.c_str());
      return 2;
    }
  }
  if (items.empty()) {
    std::fprintf(stderr, "mirror_proxy_benchmark: the manifest %s is empty\n", manifest.c_str());
    return 2;
  }
  Client client(host, port, verify);
  if (!client.Connect()) {
    std::fprintf(stderr, "mirror_proxy_benchmark: cannot connect to %s\n", target.c_str());
    return 1;
  }
  if (!head_path.empty()) {
    Sample h = client.Request(head_path, /*head=*/true);
    fmt::print("# HEAD {}: status {}\n", head_path, h.status);
    if (h.status != 200) return 1;
  }
  // The request sequence: independent shuffles with one generator, fixed seed.
  std::vector<std::pair<int, size_t>> order;
  {
    const std::vector<uint32_t> seq = bench::ShuffledPasses(items.size(), passes, seed);
    for (size_t k = 0; k < seq.size(); ++k)
      order.emplace_back(static_cast<int>(k / items.size()) + 1, seq[k]);
  }
  std::vector<Sample> samples;
  samples.reserve(order.size());
  uint64_t t0 = MonotonicNanos();
  for (auto [p, i] : order) {
    Sample s = client.Request(items[i].path, false);
    s.pass = p;
    s.index = i;
    if (s.ok && s.received != items[i].size) s.ok = false;
    if (s.ok && verify && s.xxh3 != items[i].xxh3) {
      std::fprintf(stderr, "mirror_proxy_benchmark: %s: body XXH3 %016lx, expected %016lx\n",
                   items[i].path.c_str(), s.xxh3, items[i].xxh3);
      s.ok = false;
    }
    samples.push_back(s);
  }
  double wall_s = static_cast<double>(MonotonicNanos() - t0) / 1e9;
  // Results leave memory only now.
  uint64_t bytes = 0;
  size_t errors = 0;
  std::vector<double> ttfb_us, mbs;
  for (const Sample& s : samples) {
    if (!s.ok || s.status != 200) {
      ++errors;
      continue;
    }
    bytes += s.received;
    ttfb_us.push_back(static_cast<double>(s.response_first_byte_ns - s.query_start_ns) / 1e3);
    mbs.push_back(static_cast<double>(s.received) /
                  (static_cast<double>(s.complete_ns - s.query_start_ns) / 1e9) / 1e6);
  }
  if (!trace.empty()) {
    std::ofstream t(trace);
    t << "label,pass,seq,path,size,status,query_start_ns,response_first_byte_ns,"
         "body_first_byte_ns,complete_ns,received\n";
    for (size_t k = 0; k < samples.size(); ++k) {
      const Sample& s = samples[k];
      t << fmt::format("{},{},{},{},{},{},{},{},{},{},{}\n", label, s.pass, k, items[s.index].path,
                       items[s.index].size, s.status, s.query_start_ns, s.response_first_byte_ns,
                       s.body_first_byte_ns, s.complete_ns, s.received);
    }
  }
  auto ttfb = bench::Summarize(ttfb_us);
  // Throughput in the seed's degradation ordering: p99.9 is the slow 0.1%.
  std::vector<double> neg;
  for (double x : mbs) neg.push_back(-x);
  auto bw = bench::Summarize(neg);
  fmt::print(
      "{}: {} requests ({} passes x {} objects), {} errors{}, {:.3f} GB in {:.3f} s = {:.3f} "
      "Gbit/s aggregate\n",
      label, samples.size(), passes, items.size(), errors, verify ? " (bodies hash-verified)" : "",
      static_cast<double>(bytes) / 1e9, wall_s, static_cast<double>(bytes) * 8 / wall_s / 1e9);
  fmt::print("{}: TTFB us p50 {:.1f} p90 {:.1f} p99 {:.1f} p99.9 {:.1f}\n", label, ttfb.p50,
             ttfb.p90, ttfb.p99, ttfb.p999);
  fmt::print("{}: request MB/s p50 {:.1f} p90 {:.1f} p99 {:.1f} p99.9 {:.1f}\n", label, -bw.p50,
             -bw.p90, -bw.p99, -bw.p999);
  return errors == 0 ? 0 : 1;
}
