// http_load: the concurrency benchmark's HTTP/1.1 load client. It reads a manifest (one
// "PATH SIZE" per line), builds the request order (--passes shuffled passes over it, fixed
// seed 0x243f6a8885a308d3, the same order for every server measured) and serves it from a
// shared task counter to --connections persistent keep-alive connections spread over
// --threads epoll loops: a connection that finishes takes the next request at once, so no
// connection idles while work is left. Every response's status (200) and body length (the
// manifest's) are checked. Nanosecond times of the request, the first response byte and the
// last body byte stay in RAM (preallocated) until the run ends; then a summary (aggregate
// payload Gbit/s, requests/s, completion and first-byte percentiles by size class, the
// client's CPU time) goes to stdout, with --json one machine-readable line, and --trace
// one CSV row per request.
//   http_load --target http://127.0.0.1:8080 --manifest M --connections 64
//       [--threads 2] [--passes 1 | --seconds S] [--label goblin] [--json] [--trace out.csv]
// Exit status 1 when any request failed (connect error, status, length, framing).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench/manifest.h"
#include "bench/stats.h"
#include "goblin/common/cli.h"
#include "goblin/common/clock.h"
#include "goblin/common/fd.h"
#include "goblin/gateway/http.h"

namespace {

using namespace goblin;
namespace http = goblin::gateway::http;

using Item = bench::ManifestItem;

struct Sample {
  uint32_t item = 0;
  uint16_t status = 0;
  bool ok = false;
  uint64_t start_ns = 0, first_byte_ns = 0, done_ns = 0, received = 0;
};

// The shared work: the order, and how far it has been handed out.
struct Work {
  const std::vector<Item>* items = nullptr;
  std::vector<uint32_t> order;
  bool cycle = false;        // --seconds: go round the order until the deadline
  uint64_t deadline_ns = 0;  // (with cycle)
  std::atomic<uint64_t> next{0};
  // The next request's item, or -1 when the run is over.
  int64_t Take() {
    if (cycle && MonotonicNanos() >= deadline_ns) return -1;
    uint64_t i = next.fetch_add(1, std::memory_order_relaxed);
    if (!cycle && i >= order.size()) return -1;
    return order[i % order.size()];
  }
};

struct Target {
  sockaddr_in addr{};
  std::string host_header;
};

class Loop {
 public:
  Loop(Work* work, const Target* target, int connections, size_t expected_requests)
      : work_(work), target_(target), conns_(static_cast<size_t>(connections)) {
    samples_.reserve(expected_requests);
  }

  void Run() {
    epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
    for (size_t i = 0; i < conns_.size(); ++i) Next(i);
    std::vector<epoll_event> events(256);
    while (open_ > 0) {
      int n = epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), 1000);
      if (n < 0 && errno != EINTR) break;
      for (int k = 0; k < n; ++k) {
        const epoll_event& e = events[static_cast<size_t>(k)];
        OnEvent(e.data.u64, e.events);
      }
    }
  }
  std::vector<Sample>& samples() { return samples_; }
  uint64_t connect_errors() const { return connect_errors_; }

 private:
  enum class Phase { kIdle, kSending, kHead, kBody };
  struct Conn {
    UniqueFd fd;
    Phase phase = Phase::kIdle;
    bool want_out = false;  // EPOLLOUT registered (connecting, or a send that did not fit)
    bool keep_alive = true;
    std::string out;
    size_t out_off = 0;
    std::string head;  // response bytes until the head parses
    uint64_t want = 0;
    Sample s;
  };

  bool Open(Conn& c, size_t i) {
    c.fd = UniqueFd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!c.fd) return false;
    int one = 1;
    setsockopt(c.fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int r = connect(c.fd.get(), reinterpret_cast<const sockaddr*>(&target_->addr),
                    sizeof target_->addr);
    if (r != 0 && errno != EINPROGRESS) {
      c.fd.Reset();
      return false;
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
    ev.data.u64 = i;
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c.fd.get(), &ev) != 0) {
      c.fd.Reset();
      return false;
    }
    c.want_out = true;
    c.keep_alive = true;
    ++open_;
    return true;
  }
  void Close(Conn& c) {
    if (!c.fd) return;
    c.fd.Reset();
    --open_;
  }
  void WantOut(Conn& c, size_t i, bool on) {
    if (c.want_out == on) return;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (on ? EPOLLOUT : 0u);
    ev.data.u64 = i;
    epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
    c.want_out = on;
  }

  // The connection's next request (or its end).
  void Next(size_t i) {
    Conn& c = conns_[i];
    for (;;) {
      int64_t item = work_->Take();
      if (item < 0) {
        Close(c);
        c.phase = Phase::kIdle;
        return;
      }
      if (!c.fd && !Open(c, i)) {  // counted as a failed request; try the next one
        ++connect_errors_;
        Sample s;
        s.item = static_cast<uint32_t>(item);
        s.start_ns = s.done_ns = MonotonicNanos();
        samples_.push_back(s);
        continue;
      }
      const Item& it = (*work_->items)[static_cast<size_t>(item)];
      c.out = fmt::format("GET {} HTTP/1.1\r\nHost: {}\r\n\r\n", it.path, target_->host_header);
      c.out_off = 0;
      c.head.clear();
      c.want = 0;
      c.s = Sample{};
      c.s.item = static_cast<uint32_t>(item);
      c.s.start_ns = MonotonicNanos();
      c.phase = Phase::kSending;
      Send(i);
      return;
    }
  }

  void Send(size_t i) {
    Conn& c = conns_[i];
    while (c.out_off < c.out.size()) {
      ssize_t n =
          send(c.fd.get(), c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == ENOTCONN) return WantOut(c, i, true);  // (connecting)
        return Failed(i);
      }
      c.out_off += static_cast<size_t>(n);
    }
    WantOut(c, i, false);
    c.phase = Phase::kHead;
  }

  void OnEvent(uint64_t i, uint32_t events) {
    Conn& c = conns_[i];
    if (!c.fd) return;
    if (c.phase == Phase::kSending) {
      if (events & (EPOLLERR | EPOLLHUP)) return Failed(i);
      if (events & EPOLLOUT) Send(i);
    }
    if ((c.phase == Phase::kHead || c.phase == Phase::kBody) &&
        (events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP))) {
      Receive(i);
    }
  }

  void Receive(size_t i) {
    Conn& c = conns_[i];
    for (;;) {
      ssize_t n = recv(c.fd.get(), buf_.data(), buf_.size(), 0);
      if (n < 0) {
        if (errno == EAGAIN) return;
        return Failed(i);
      }
      if (n == 0) return Failed(i);  // closed before the body ended (or between requests)
      if (c.s.first_byte_ns == 0) c.s.first_byte_ns = MonotonicNanos();
      if (c.phase == Phase::kHead) {
        // The head is parsed in place when it came whole in this read (almost always): the
        // body bytes behind it are counted, never copied (copying them cost this client a
        // third of its CPU at 1,024 connections). A head split over reads is gathered.
        const std::string_view got(buf_.data(), static_cast<size_t>(n));
        if (!c.head.empty()) c.head.append(got);
        const std::string_view in = c.head.empty() ? got : std::string_view(c.head);
        http::Response resp;
        auto p = http::ParseResponse(in, http::Limits{}, false, &resp);
        if (p == http::Parse::kNeedMore) {  // (at most Limits::max_header_bytes so far)
          if (c.head.empty()) c.head.assign(got);
          continue;
        }
        if (p == http::Parse::kError || !resp.framing.content_length) return Failed(i);
        c.s.status = static_cast<uint16_t>(resp.status);
        c.want = *resp.framing.content_length;
        c.keep_alive = resp.keep_alive;
        const uint64_t body = in.size() - resp.head_bytes;
        c.head.clear();
        if (body > c.want) return Failed(i);  // (one request outstanding: nothing may follow)
        c.s.received = body;
        c.phase = Phase::kBody;
      } else {
        c.s.received += static_cast<uint64_t>(n);
        if (c.s.received > c.want) return Failed(i);
      }
      if (c.s.received == c.want) {
        c.s.done_ns = MonotonicNanos();
        c.s.ok = c.s.status == 200 && c.want == (*work_->items)[c.s.item].size;
        samples_.push_back(c.s);
        c.phase = Phase::kIdle;
        if (!c.keep_alive) Close(c);
        return Next(i);  // (level-triggered: the next answer comes with its own event)
      }
    }
  }

  void Failed(size_t i) {
    Conn& c = conns_[i];
    if (c.phase != Phase::kIdle) {
      c.s.done_ns = MonotonicNanos();
      c.s.ok = false;
      samples_.push_back(c.s);
    }
    Close(c);
    c.phase = Phase::kIdle;
    Next(i);
  }

  Work* work_;
  const Target* target_;
  std::vector<Conn> conns_;
  std::vector<Sample> samples_;
  std::vector<char> buf_ = std::vector<char>(1 << 20);
  UniqueFd epoll_;
  int open_ = 0;
  uint64_t connect_errors_ = 0;
};

// Size classes of the report (upper bounds, inclusive).
struct SizeClass {
  const char* name;
  uint64_t max;
};
constexpr SizeClass kClasses[] = {{"<=64K", 64 << 10},
                                  {"64K-1M", 1 << 20},
                                  {"1M-16M", 16 << 20},
                                  {"16M-256M", 256ull << 20},
                                  {">256M", UINT64_MAX}};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("http_load: concurrent HTTP/1.1 load client of the concurrency benchmark",
               "http_load");
  std::string target_url, manifest, label = "server", trace;
  int connections = 16, threads = 0, passes = 1;
  double seconds = 0;
  bool json = false;
  app.add_option("--target", target_url, "http://HOST:PORT (IPv4)")->required();
  app.add_option("--manifest", manifest, "PATH SIZE per line")->required();
  app.add_option("--connections", connections, "Persistent connections")->capture_default_str();
  app.add_option("--threads", threads, "Event loops (0: min(connections, CPUs))");
  app.add_option("--passes", passes, "Shuffled passes over the manifest")->capture_default_str();
  app.add_option("--seconds", seconds, "Run this long instead (round the order)");
  app.add_option("--label", label, "Name of the server in the output")->capture_default_str();
  app.add_flag("--json", json, "Also print one JSON line");
  app.add_option("--trace", trace, "CSV of every request");
  if (int rc = ParseCommandLine(app, argc, argv); rc >= 0) return rc;

  const std::vector<Item> items = bench::ReadManifest(manifest);
  if (items.empty()) {
    fmt::print(stderr, "http_load: cannot read a manifest from {}\n", manifest);
    return 2;
  }
  Target target;
  {
    auto t = bench::ParseHttpTarget(target_url);
    if (!t || inet_pton(AF_INET, t->host.c_str(), &target.addr.sin_addr) != 1) {
      fmt::print(stderr, "http_load: --target needs http://IPv4:PORT: {}\n", target_url);
      return 2;
    }
    target.addr.sin_family = AF_INET;
    target.addr.sin_port = htons(static_cast<uint16_t>(t->port));
    target.host_header = t->host_header;
  }
  connections = std::max(1, connections);
  if (threads <= 0) {
    threads = std::min<int>(connections, static_cast<int>(std::thread::hardware_concurrency()));
  }
  threads = std::clamp(threads, 1, connections);

  Work work;
  work.items = &items;
  work.order = bench::ShuffledPasses(items.size(), std::max(1, passes));
  size_t expect = work.order.size();
  if (seconds > 0) {
    work.cycle = true;
    expect = std::max<size_t>(expect, 1 << 20);
  }

  std::vector<std::unique_ptr<Loop>> loops;
  for (int t = 0; t < threads; ++t) {
    int mine = connections / threads + (t < connections % threads ? 1 : 0);
    loops.push_back(
        std::make_unique<Loop>(&work, &target, mine, expect / static_cast<size_t>(threads) + 1024));
  }
  rusage ru0{};
  getrusage(RUSAGE_SELF, &ru0);
  const uint64_t t0 = MonotonicNanos();
  if (work.cycle) work.deadline_ns = t0 + static_cast<uint64_t>(seconds * 1e9);
  std::vector<std::thread> running;
  for (auto& l : loops) running.emplace_back([&l] { l->Run(); });
  for (auto& th : running) th.join();
  const uint64_t t1 = MonotonicNanos();
  rusage ru1{};
  getrusage(RUSAGE_SELF, &ru1);
  auto cpu = [](const rusage& r) {
    return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
  };

  std::vector<Sample> all;
  uint64_t connect_errors = 0;
  for (auto& l : loops) {
    all.insert(all.end(), l->samples().begin(), l->samples().end());
    connect_errors += l->connect_errors();
  }
  uint64_t ok = 0, errors = 0, bytes = 0;
  for (const Sample& s : all) {
    if (s.ok) {
      ++ok;
      bytes += s.received;
    } else {
      ++errors;
    }
  }
  const double wall = static_cast<double>(t1 - t0) / 1e9;
  const double gbit = wall > 0 ? static_cast<double>(bytes) * 8 / wall / 1e9 : 0;
  const double rps = wall > 0 ? static_cast<double>(ok) / wall : 0;
  fmt::print(
      "{}: {} connections on {} threads, {} requests ({} failed, {} connect errors) in "
      "{:.2f} s: {:.2f} Gbit/s payload, {:.0f} requests/s, client CPU {:.2f} s\n",
      label, connections, threads, all.size(), errors, connect_errors, wall, gbit, rps,
      cpu(ru1) - cpu(ru0));
  fmt::print("  {:>9} {:>8} {:>12} {:>12} {:>12} {:>12}\n", "size", "requests", "done p50 ms",
             "done p99 ms", "ttfb p50 ms", "ttfb p99 ms");
  std::string classes_json;
  for (const SizeClass& sc : kClasses) {
    std::vector<double> done, ttfb;
    uint64_t lo = &sc == kClasses ? 0 : (&sc - 1)->max;
    for (const Sample& s : all) {
      uint64_t size = items[s.item].size;
      if (!s.ok || size <= lo || size > sc.max) continue;
      if (&sc == kClasses && size == 0) continue;
      done.push_back(static_cast<double>(s.done_ns - s.start_ns) / 1e6);
      ttfb.push_back(static_cast<double>(s.first_byte_ns - s.start_ns) / 1e6);
    }
    if (done.empty()) continue;
    auto d = bench::Summarize(done), f = bench::Summarize(ttfb);
    fmt::print("  {:>9} {:>8} {:>12.3f} {:>12.3f} {:>12.3f} {:>12.3f}\n", sc.name, d.count, d.p50,
               d.p99, f.p50, f.p99);
    classes_json += fmt::format(
        "{}\"{}\":{{\"requests\":{},\"done_p50_ms\":{:.4f},\"done_p99_ms\":{:.4f},"
        "\"ttfb_p50_ms\":{:.4f},\"ttfb_p99_ms\":{:.4f}}}",
        classes_json.empty() ? "" : ",", sc.name, d.count, d.p50, d.p99, f.p50, f.p99);
  }
  if (json) {
    fmt::print(
        "{{\"label\":\"{}\",\"connections\":{},\"threads\":{},\"requests\":{},"
        "\"failed\":{},\"seconds\":{:.4f},\"bytes\":{},\"gbit_s\":{:.4f},"
        "\"requests_s\":{:.1f},\"client_cpu_s\":{:.3f},\"classes\":{{{}}}}}\n",
        label, connections, threads, all.size(), errors, wall, bytes, gbit, rps,
        cpu(ru1) - cpu(ru0), classes_json);
  }
  if (!trace.empty()) {
    std::FILE* f = std::fopen(trace.c_str(), "w");
    if (f == nullptr) {
      fmt::print(stderr, "http_load: cannot write {}\n", trace);
      return 2;
    }
    fmt::print(f, "label,connections,path,size,status,ok,start_ns,first_byte_ns,done_ns,bytes\n");
    for (const Sample& s : all) {
      fmt::print(f, "{},{},{},{},{},{},{},{},{},{}\n", label, connections, items[s.item].path,
                 items[s.item].size, s.status, s.ok ? 1 : 0, s.start_ns - t0,
                 s.first_byte_ns == 0 ? 0 : s.first_byte_ns - t0, s.done_ns - t0, s.received);
    }
    std::fclose(f);
  }
  return errors == 0 ? 0 : 1;
}
