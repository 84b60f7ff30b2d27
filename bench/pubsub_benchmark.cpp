// pubsub_benchmark: the native harness of seed 002's pub/sub benchmark. One publisher and
// N subscriber connections on one thread, closed loop: one PUBLISH, wait for its reply and
// every expected delivery (channel, pattern and payload validated, each subscriber exactly
// once), then the next. Acknowledgement latency (send -> PUBLISH reply) and delivery latency
// (send -> the last subscriber's validated message) are taken with rdtscp, calibrated
// against CLOCK_MONOTONIC. Setup (subscriptions, in 32-name batches) is outside the timing.
//
// Engines:
//   --engine resp --socket PATH   any RESP2 server on a unix socket (Redis, goblin-gateway):
//                                 one encoder, parser (goblin_resp's ParseReply), validator
//                                 and timer for all of them
//   --engine ring --socket PATH   goblin-core's typed SBE over shared-memory rings
//                                 (libgoblin's non-blocking PublishAsync/PollPubsub),
//                                 --ring-bytes per direction (4 KiB in the seed)
// One scenario per run (bench/pubsub_benchmark.sh starts a fresh server for each); the
// server's RSS (VmRSS + HugetlbPages of every --server-pid) is read once connected (the
// baseline) and again once subscribed. Results append to --csv (26 columns); --report CSV
// prints Markdown tables with ratios against --baseline-engine. --list names the scenarios.
//
// Waiting: the harness polls its connections for --spin-us after each send, then sleeps in
// epoll (sockets, or ring doorbells after PrepareSleep). Never two busy threads of its own.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/stats.h"
#include "goblin/client/connection.h"
#include "goblin/common/cli.h"
#include "goblin/common/clock.h"
#include "goblin/common/fd.h"
#include "goblin/common/topology.h"
#include "goblin/gateway/resp.h"
#include "goblin/sbe/runtime.h"
#include "goblin/wire/goblin_wire.h"

namespace {

using namespace goblin;
using client::Connection;

// ---------------------------------------------------------------- scenarios

struct Scenario {
  std::string group;  // one-to-one, fanout, literal, pattern-hit, pattern-miss, many
  std::string name;
  size_t payload = 16;
  size_t listeners = 0;  // subscriber connections
  bool pattern = false;  // PSUBSCRIBE
  // The names listener `l` subscribes to.
  std::function<std::vector<std::string>(size_t l)> names;
  std::string channel;    // published to
  std::string match;      // the pattern the deliveries name (pattern scenarios)
  size_t deliveries = 0;  // expected per publish (one per listener or none)
  int64_t receivers = 0;  // expected PUBLISH reply
  size_t samples = 0, warmup = 0;
  size_t subscriptions() const {
    size_t n = 0;
    for (size_t l = 0; l < listeners; ++l) n += names(l).size();
    return n;
  }
};

std::vector<Scenario> Scenarios(bool quick) {
  // The seed's counts; --quick divides them by 20.
  auto counts = [&](size_t samples, size_t warmup) {
    return quick ? std::make_pair(samples / 20, warmup / 20) : std::make_pair(samples, warmup);
  };
  std::vector<Scenario> out;
  auto add = [&](Scenario s, size_t samples, size_t warmup) {
    std::tie(s.samples, s.warmup) = counts(samples, warmup);
    out.push_back(std::move(s));
  };
  for (size_t bytes : {16, 256, 4096}) {
    Scenario s{"one-to-one", fmt::format("1to1-{}B", bytes), bytes, 1};
    s.names = [](size_t) { return std::vector<std::string>{"bench:1to1"}; };
    s.channel = "bench:1to1";
    s.deliveries = 1;
    s.receivers = 1;
    add(std::move(s), 100000, 10000);
  }
  for (size_t n : {1, 8, 32, 64}) {
    Scenario s{"fanout", fmt::format("fanout-{}", n), 16, n};
    s.names = [](size_t) { return std::vector<std::string>{"bench:fanout"}; };
    s.channel = "bench:fanout";
    s.deliveries = n;
    s.receivers = static_cast<int64_t>(n);
    add(std::move(s), 20000, 2000);
  }
  for (size_t n : {1, 1024, 16384}) {
    Scenario s{"literal", fmt::format("literal-{}", n), 16, 1};
    s.names = [n](size_t) {
      std::vector<std::string> v;
      for (size_t i = 0; i < n; ++i) v.push_back(fmt::format("bench:lit:{}", i));
      return v;
    };
    s.channel = fmt::format("bench:lit:{}", n - 1);
    s.deliveries = 1;
    s.receivers = 1;
    add(std::move(s), 20000, 2000);
  }
  auto patterns = [](size_t n) {
    return [n](size_t) {
      std::vector<std::string> v;
      for (size_t i = 0; i < n; ++i) v.push_back(fmt::format("bench:pat:{}:*", i));
      return v;
    };
  };
  for (size_t n : {1, 64, 1024, 8192}) {
    Scenario s{"pattern-hit", fmt::format("pattern-hit-{}", n), 16, 1, true, patterns(n)};
    s.channel = fmt::format("bench:pat:{}:evt", n - 1);  // matches exactly one pattern
    s.match = fmt::format("bench:pat:{}:*", n - 1);
    s.deliveries = 1;
    s.receivers = 1;
    if (n == 8192) {
      add(std::move(s), 5000, 500);
    } else {
      add(std::move(s), 20000, 2000);
    }
  }
  for (size_t n : {0, 64, 1024, 8192}) {
    Scenario s{"pattern-miss", fmt::format("pattern-miss-{}", n), 16, n == 0 ? 0u : 1u, true,
               patterns(n)};
    s.channel = "bench:miss:evt";
    if (n == 8192) {
      add(std::move(s), 5000, 500);
    } else {
      add(std::move(s), 20000, 2000);
    }
  }
  for (bool pattern : {false, true}) {
    Scenario s{"many", pattern ? "many-pattern" : "many-literal", 16, 32, pattern};
    s.names = [pattern](size_t l) {
      std::vector<std::string> v;
      for (size_t j = 0; j < 32; ++j)
        v.push_back(fmt::format("bench:client:{}:private:{}{}", l, j, pattern ? ":*" : ""));
      v.push_back(pattern ? "bench:shared:*" : "bench:shared");
      return v;
    };
    s.channel = pattern ? "bench:shared:evt" : "bench:shared";
    s.match = pattern ? "bench:shared:*" : "";
    s.deliveries = 32;
    s.receivers = 32;
    add(std::move(s), 20000, 2000);
  }
  return out;
}

// ---------------------------------------------------------------- a closed-loop cycle

// What one publication must produce; the engines report into it.
struct Expect {
  std::string_view channel, payload, pattern;
  bool is_pattern = false;
  int64_t receivers = 0;
  size_t deliveries = 0;
};

struct CycleState {
  const Expect* expect = nullptr;
  std::vector<uint8_t> got;  // per listener: delivered this cycle
  size_t delivered = 0;
  bool acked = false;
  uint64_t send_tsc = 0, ack_tsc = 0, last_tsc = 0;  // stamped by the engines
  std::string error;                                 // first validation error
  void Reset(const Expect& e, size_t listeners) {
    expect = &e;
    got.assign(listeners, 0);
    delivered = 0;
    acked = false;
    error.clear();
  }
  bool done() const { return acked && delivered == expect->deliveries; }
  void Ack(int64_t receivers) {
    uint64_t t = ReadTsc();
    if (acked) return Fail("a second PUBLISH reply");
    if (receivers != expect->receivers)
      return Fail(fmt::format("PUBLISH replied {} (expected {})", receivers, expect->receivers));
    acked = true;
    ack_tsc = t;
  }
  void Delivery(size_t listener, bool pattern, std::string_view pat, std::string_view channel,
                std::string_view payload) {
    uint64_t t = ReadTsc();
    if (listener >= got.size()) return Fail("a message on the publisher's connection");
    if (got[listener]) return Fail(fmt::format("listener {} got a second message", listener));
    if (pattern != expect->is_pattern) return Fail("message kind (message/pmessage) differs");
    if (pattern && pat != expect->pattern)
      return Fail(fmt::format("pmessage names pattern '{}'", pat));
    if (channel != expect->channel) return Fail(fmt::format("message on '{}'", channel));
    if (payload != expect->payload) return Fail("payload differs");
    got[listener] = 1;
    ++delivered;
    last_tsc = t;
  }
  void Fail(std::string e) {
    if (error.empty()) error = std::move(e);
  }
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Connects the publisher and `listeners` subscriber connections.
  virtual VoidResult Connect(size_t listeners) = 0;
  // Subscribes listener `l` to `names` (32 per request), waiting for every confirmation.
  virtual VoidResult Subscribe(size_t l, bool pattern, const std::vector<std::string>& names) = 0;
  // Why this publication cannot run on this engine (empty: it can).
  virtual std::string Unsupported(const Expect&) const { return {}; }
  // Publishes and polls until `st` is done, an error, or the timeout.
  virtual VoidResult Cycle(const Expect& e, CycleState& st, uint64_t spin_ticks) = 0;
};

constexpr uint64_t kCycleTimeoutNs = 10'000'000'000;

// ---------------------------------------------------------------- RESP over a unix socket

struct RespConn {
  static constexpr size_t kCapacity = 4 << 20;  // > any reply here (16,384 confirmations)
  UniqueFd fd;
  std::unique_ptr<char[]> buf = std::make_unique_for_overwrite<char[]>(kCapacity);
  size_t len = 0, pos = 0;  // buffered bytes; the parser's position
  std::vector<gateway::RespItem> items;
  std::string_view in() const { return {buf.get(), len}; }
};

class RespEngine final : public Engine {
 public:
  explicit RespEngine(std::string path) : path_(std::move(path)) {}

  VoidResult Connect(size_t listeners) override {
    epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_) return ErrnoErr("epoll_create1", errno);
    conns_.resize(listeners + 1);
    for (size_t i = 0; i < conns_.size(); ++i) {
      int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) return ErrnoErr("socket", errno);
      conns_[i].fd = UniqueFd(fd);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path_.c_str());
      if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
        return ErrnoErr("connect " + path_, errno);
      conns_[i].items.reserve(64);
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = i;
      if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return ErrnoErr("epoll_ctl", errno);
    }
    out_.reserve(1 << 16);
    return {};
  }

  VoidResult Subscribe(size_t l, bool pattern, const std::vector<std::string>& names) override {
    RespConn& c = conns_[l + 1];
    for (size_t at = 0; at < names.size(); at += 32) {
      size_t end = std::min(names.size(), at + 32);
      out_.clear();
      Header('*', static_cast<int64_t>(end - at + 1));
      Bulk(pattern ? "PSUBSCRIBE" : "SUBSCRIBE");
      for (size_t i = at; i < end; ++i) Bulk(names[i]);
      GOBLIN_RETURN_IF_ERROR(SendAll(c));
      for (size_t i = at; i < end; ++i) {
        GOBLIN_RETURN_IF_ERROR(NextReply(c));
        const auto& it = c.items;
        std::string_view want = pattern ? "psubscribe" : "subscribe";
        if (it.size() != 4 || it[0].type != '*' || it[1].text != want || it[2].text != names[i] ||
            it[3].type != ':' || it[3].integer != static_cast<int64_t>(i + 1)) {
          return Err(StatusCode::kCorruption, "unexpected reply to {} {}", want, names[i]);
        }
      }
    }
    return {};
  }

  VoidResult Cycle(const Expect& e, CycleState& st, uint64_t spin_ticks) override {
    out_.clear();
    Header('*', 3);
    Bulk("PUBLISH");
    Bulk(e.channel);
    Bulk(e.payload);
    const uint64_t t0 = ReadTsc();
    st.send_tsc = st.ack_tsc = st.last_tsc = t0;
    GOBLIN_RETURN_IF_ERROR(SendAll(conns_[0]));
    const uint64_t deadline = MonotonicNanos() + kCycleTimeoutNs;
    epoll_event evs[128];
    while (!st.done() && st.error.empty()) {
      int timeout = ReadTsc() - t0 < spin_ticks ? 0 : 100;
      int n = epoll_wait(epoll_.get(), evs, 128, timeout);
      if (n < 0 && errno != EINTR) return ErrnoErr("epoll_wait", errno);
      for (int i = 0; i < n; ++i) {
        size_t idx = evs[i].data.u64;
        GOBLIN_RETURN_IF_ERROR(Drain(conns_[idx], idx, st));
      }
      if (n <= 0 && timeout != 0 && MonotonicNanos() > deadline)
        return Err(StatusCode::kTimeout, "no reply or delivery within 10 s");
    }
    return {};
  }

 private:
  void Header(char type, int64_t n) {
    out_.push_back(type);
    char b[24];
    auto r = std::to_chars(b, b + sizeof b, n);
    out_.append(b, r.ptr);
    out_.append("\r\n");
  }
  void Bulk(std::string_view s) {
    Header('$', static_cast<int64_t>(s.size()));
    out_.append(s);
    out_.append("\r\n");
  }
  VoidResult SendAll(RespConn& c) {
    size_t off = 0;
    while (off < out_.size()) {
      ssize_t w = send(c.fd.get(), out_.data() + off, out_.size() - off, MSG_NOSIGNAL);
      if (w < 0) {
        if (errno == EINTR) continue;
        return ErrnoErr("send", errno);
      }
      off += static_cast<size_t>(w);
    }
    return {};
  }
  // Reads what is there (without blocking) into c.in.
  VoidResult ReadSome(RespConn& c, bool block) {
    if (c.pos == c.len) {
      c.len = c.pos = 0;
    } else if (c.pos > RespConn::kCapacity / 2) {
      std::memmove(c.buf.get(), c.buf.get() + c.pos, c.len - c.pos);
      c.len -= c.pos;
      c.pos = 0;
    }
    if (c.len == RespConn::kCapacity)
      return Err(StatusCode::kResourceExhausted, "a reply larger than the read buffer");
    ssize_t r = recv(c.fd.get(), c.buf.get() + c.len, RespConn::kCapacity - c.len,
                     block ? 0 : MSG_DONTWAIT);
    if (r > 0) c.len += static_cast<size_t>(r);
    if (r == 0) return Err(StatusCode::kUnavailable, "the server closed the connection");
    if (r < 0 && errno != EAGAIN && errno != EINTR) return ErrnoErr("recv", errno);
    return {};
  }
  // Blocks until the next whole reply is in c.items (setup only).
  VoidResult NextReply(RespConn& c) {
    std::string err;
    for (;;) {
      auto st = gateway::ParseReply(c.in(), &c.pos, &c.items, &err);
      if (st == gateway::ReplyStatus::kReply) return {};
      if (st == gateway::ReplyStatus::kError) return Err(StatusCode::kCorruption, "RESP: {}", err);
      GOBLIN_RETURN_IF_ERROR(ReadSome(c, true));
    }
  }
  VoidResult Drain(RespConn& c, size_t idx, CycleState& st) {
    GOBLIN_RETURN_IF_ERROR(ReadSome(c, false));
    std::string err;
    for (;;) {
      auto r = gateway::ParseReply(c.in(), &c.pos, &c.items, &err);
      if (r == gateway::ReplyStatus::kNeedMore) return {};
      if (r == gateway::ReplyStatus::kError) return Err(StatusCode::kCorruption, "RESP: {}", err);
      const auto& it = c.items;
      if (idx == 0) {
        if (it[0].type == ':') {
          st.Ack(it[0].integer);
        } else {
          st.Fail(fmt::format("PUBLISH got a '{}' reply: {}", it[0].type, it[0].text));
        }
      } else if (it[0].type == '*' && it.size() == 4 && it[1].text == "message") {
        st.Delivery(idx - 1, false, {}, it[2].text, it[3].text);
      } else if (it[0].type == '*' && it.size() == 5 && it[1].text == "pmessage") {
        st.Delivery(idx - 1, true, it[2].text, it[3].text, it[4].text);
      } else {
        st.Fail(fmt::format("listener {} got an unexpected '{}' reply", idx - 1, it[0].type));
      }
    }
  }

  std::string path_;
  UniqueFd epoll_;
  std::vector<RespConn> conns_;  // [0] publishes
  std::string out_;
};

// ---------------------------------------------------------------- SBE over rings

class RingEngine final : public Engine, private Connection::PubsubHandler {
 public:
  RingEngine(std::string target, uint32_t ring_bytes)
      : target_(std::move(target)), ring_bytes_(ring_bytes) {}

  VoidResult Connect(size_t listeners) override {
    epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_) return ErrnoErr("epoll_create1", errno);
    client::ConnectOptions o;
    o.name = "pubsub_benchmark";
    o.ring_bytes = ring_bytes_;
    o.zero_copy = false;
    for (size_t i = 0; i <= listeners; ++i) {
      GOBLIN_ASSIGN_OR_RETURN(auto c, Connection::Open(target_, o));
      for (int fd : {c->wake_fd(), c->liveness_fd()}) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = i;
        if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
          return ErrnoErr("epoll_ctl", errno);
      }
      conns_.push_back(std::move(c));
    }
    return {};
  }

  VoidResult Subscribe(size_t l, bool pattern, const std::vector<std::string>& names) override {
    Connection& c = *conns_[l + 1];
    for (size_t at = 0; at < names.size(); at += 32) {
      std::span<const std::string> batch(names.data() + at,
                                         std::min<size_t>(32, names.size() - at));
      GOBLIN_ASSIGN_OR_RETURN(auto confirms, c.Subscribe(pattern ? Connection::SubKind::kPattern
                                                                 : Connection::SubKind::kChannel,
                                                         batch));
      if (confirms.size() != batch.size() || confirms.back().count != at + batch.size())
        return Err(StatusCode::kCorruption, "unexpected subscription confirmations");
    }
    return {};
  }

  std::string Unsupported(const Expect& e) const override {
    // The PUBLISH and the Delivery (a one-session group) must each fit one ring record.
    const size_t max = conns_.front()->max_message();
    const size_t len = sbe::DataLengthSize(sbe::SectionKind::kData32);
    const size_t publish = sbe::MessageHeader::kSize + wire::PublishEncoder::kBlockLength +
                           2 * len + e.channel.size() + e.payload.size();
    const size_t delivery = sbe::MessageHeader::kSize + wire::DeliveryEncoder::kBlockLength +
                            sbe::kGroupHeaderSize + sizeof(uint64_t) + 3 * len + e.pattern.size() +
                            e.channel.size() + e.payload.size();
    if (std::max(publish, delivery) > max) {
      return fmt::format("a {}-byte payload plus SBE and ring framing exceeds the {}-byte ring",
                         e.payload.size(), ring_bytes_);
    }
    return {};
  }

  VoidResult Cycle(const Expect& e, CycleState& st, uint64_t spin_ticks) override {
    st_ = &st;
    const uint64_t t0 = ReadTsc();
    st.send_tsc = st.ack_tsc = st.last_tsc = t0;
    GOBLIN_ASSIGN_OR_RETURN(corr_, conns_[0]->PublishAsync(e.channel, e.payload));
    const uint64_t deadline = MonotonicNanos() + kCycleTimeoutNs;
    while (!st.done() && st.error.empty()) {
      size_t got = 0;
      for (size_t i = 0; i < conns_.size(); ++i) {
        listener_ = i - 1;  // SIZE_MAX for the publisher
        GOBLIN_ASSIGN_OR_RETURN(size_t n, conns_[i]->PollPubsub(*this));
        got += n;
      }
      if (got > 0 || ReadTsc() - t0 < spin_ticks || st.done()) continue;
      // Sleep on the doorbells (the core rings them only after PrepareSleep).
      bool sleep = true;
      size_t prepared = 0;
      for (; prepared < conns_.size() && sleep; ++prepared)
        sleep = conns_[prepared]->PrepareSleep();
      if (sleep) {
        epoll_event evs[64];
        int n = epoll_wait(epoll_.get(), evs, 64, 100);
        if (n < 0 && errno != EINTR) return ErrnoErr("epoll_wait", errno);
        if (n == 0 && MonotonicNanos() > deadline)
          return Err(StatusCode::kTimeout, "no reply or delivery within 10 s");
        for (int i = 0; i < n; ++i) GOBLIN_RETURN_IF_ERROR(conns_[evs[i].data.u64]->CheckAlive());
      }
      for (size_t i = 0; i < prepared; ++i) conns_[i]->FinishSleep();
    }
    return {};
  }

 private:
  void OnPublishAck(uint64_t corr, uint64_t receivers) override {
    if (corr != corr_) return st_->Fail("an acknowledgement for another publication");
    st_->Ack(static_cast<int64_t>(receivers));
  }
  void OnMessage(const Connection::MessageView& m) override {
    if (m.sessions != 1) return st_->Fail("a delivery for several sessions");
    st_->Delivery(listener_, m.kind == Connection::SubKind::kPattern, m.pattern, m.channel,
                  m.payload);
  }
  void OnError(uint64_t, const Status& s) override { st_->Fail(s.ToString()); }

  std::string target_;
  uint32_t ring_bytes_;
  UniqueFd epoll_;
  std::vector<std::unique_ptr<Connection>> conns_;  // [0] publishes
  CycleState* st_ = nullptr;
  size_t listener_ = 0;
  uint64_t corr_ = 0;
};

// ---------------------------------------------------------------- measurement and output

// VmRSS + HugetlbPages of the process, KiB (0 if it is gone).
uint64_t RssKib(int pid) {
  std::ifstream f(fmt::format("/proc/{}/status", pid));
  std::string line;
  uint64_t kib = 0;
  while (std::getline(f, line)) {
    if (line.starts_with("VmRSS:") || line.starts_with("HugetlbPages:")) {
      std::istringstream in(line.substr(line.find(':') + 1));
      uint64_t v = 0;
      in >> v;
      kib += v;
    }
  }
  return kib;
}

uint64_t ServerRssKib(const std::vector<int>& pids) {
  uint64_t sum = 0;
  for (int p : pids) sum += RssKib(p);
  return sum;
}

constexpr const char* kCsvHeader =
    "date,engine,group,scenario,payload_bytes,listeners,subscriptions,deliveries_per_publish,"
    "warmup,samples,metric,status,min_us,p50_us,p90_us,p99_us,p999_us,max_us,mean_us,"
    "publications_per_s,baseline_rss_kib,subscribed_rss_kib,rss_delta_kib,server_cpus,"
    "harness_cpu,note";

struct Config {
  std::string engine = "resp";
  std::string label;
  std::string socket;
  std::string scenario;
  uint32_t ring_bytes = 4096;
  std::vector<int> server_pids;
  std::string server_cpus;
  int cpu = -1;
  double spin_us = 100;
  bool quick = false;
  bool list = false;
  std::string csv;
  std::string report;
  std::string baseline_engine = "redis";
  int64_t samples = -1, warmup = -1;
};

std::string CsvField(std::string s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

int Run(const Config& cfg) {
  std::vector<Scenario> all = Scenarios(cfg.quick);
  auto sit = std::find_if(all.begin(), all.end(),
                          [&](const Scenario& s) { return s.name == cfg.scenario; });
  if (sit == all.end()) {
    std::fprintf(stderr, "pubsub_benchmark: unknown scenario '%s' (see --list)\n",
                 cfg.scenario.c_str());
    return 2;
  }
  Scenario sc = *sit;
  if (cfg.samples >= 0) sc.samples = static_cast<size_t>(cfg.samples);
  if (cfg.warmup >= 0) sc.warmup = static_cast<size_t>(cfg.warmup);
  if (cfg.cpu >= 0) {
    std::vector<int> cpus{cfg.cpu};
    if (auto r = PinCurrentThread(cpus); !r)
      std::fprintf(stderr, "pubsub_benchmark: cannot pin to CPU %d: %s\n", cfg.cpu,
                   r.error().ToString().c_str());
  }
  auto tsc = TscClock::Calibrate(std::chrono::milliseconds(100), true);
  if (!tsc) {
    std::fprintf(stderr, "pubsub_benchmark: %s\n", tsc.error().ToString().c_str());
    return 1;
  }
  const uint64_t spin_ticks = static_cast<uint64_t>(cfg.spin_us * 1000 * tsc->ticks_per_ns());

  std::unique_ptr<Engine> engine;
  if (cfg.engine == "ring") {
    engine = std::make_unique<RingEngine>("unix:" + cfg.socket, cfg.ring_bytes);
  } else {
    engine = std::make_unique<RespEngine>(cfg.socket);
  }
  // The payload: the sample number in hex, then filler, exactly sc.payload bytes.
  std::string payload(sc.payload, 'x');
  Expect e;
  e.channel = sc.channel;
  e.pattern = sc.match;
  e.is_pattern = sc.pattern;
  e.receivers = sc.receivers;
  e.deliveries = sc.deliveries;
  e.payload = payload;

  std::string status = "ok", note;
  uint64_t base_rss = 0, sub_rss = 0;
  std::vector<double> ack_us, deliver_us;
  double rate = 0;
  auto fail = [&](const std::string& why) {
    status = "error";
    note = why;
  };
  if (auto r = engine->Connect(sc.listeners); !r) {
    fail(r.error().ToString());
  } else if (std::string why = engine->Unsupported(e); !why.empty()) {
    status = "n/a";
    note = why;
  } else {
    base_rss = ServerRssKib(cfg.server_pids);
    for (size_t l = 0; l < sc.listeners && status == "ok"; ++l) {
      if (auto s = engine->Subscribe(l, sc.pattern, sc.names(l)); !s) fail(s.error().ToString());
    }
    sub_rss = ServerRssKib(cfg.server_pids);
    CycleState st;
    ack_us.reserve(sc.samples);
    deliver_us.reserve(sc.samples);
    uint64_t start_ns = 0;
    for (size_t i = 0; i < sc.warmup + sc.samples && status == "ok"; ++i) {
      if (i == sc.warmup) start_ns = MonotonicNanos();
      char digits[17];
      std::snprintf(digits, sizeof digits, "%016zx", i);
      std::memcpy(payload.data(), digits, std::min<size_t>(16, payload.size()));
      st.Reset(e, sc.listeners);
      if (auto r = engine->Cycle(e, st, spin_ticks); !r) {
        fail(fmt::format("publication {}: {}", i, r.error().ToString()));
      } else if (!st.error.empty()) {
        fail(fmt::format("publication {}: {}", i, st.error));
      } else if (i >= sc.warmup) {
        ack_us.push_back(tsc->ToNanos(st.ack_tsc - st.send_tsc) / 1000.0);
        deliver_us.push_back(sc.deliveries == 0 ? 0.0
                                                : tsc->ToNanos(st.last_tsc - st.send_tsc) / 1000.0);
      }
    }
    if (status == "ok" && sc.samples > 0) {
      rate = static_cast<double>(sc.samples) * 1e9 /
             static_cast<double>(std::max<uint64_t>(1, MonotonicNanos() - start_ns));
    }
  }

  const std::string label = cfg.label.empty() ? cfg.engine : cfg.label;
  char date[32];
  time_t now = time(nullptr);
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  std::string rows;
  for (const char* metric : {"ack", "delivery"}) {
    bench::Summary s;
    std::string row_status = status, row_note = note;
    if (status == "ok") {
      if (std::string_view(metric) == "delivery" && sc.deliveries == 0) {
        row_status = "n/a";
        row_note = "no subscriber matches: nothing is delivered";
      } else {
        s = bench::Summarize(std::string_view(metric) == "ack" ? ack_us : deliver_us);
      }
    }
    auto num = [&](double v) { return row_status == "ok" ? fmt::format("{:.3f}", v) : ""; };
    rows += fmt::format(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", date,
        CsvField(label), sc.group, sc.name, sc.payload, sc.listeners, sc.subscriptions(),
        sc.deliveries, sc.warmup, sc.samples, metric, row_status, num(s.min), num(s.p50),
        num(s.p90), num(s.p99), num(s.p999), num(s.max), num(s.mean),
        row_status == "ok" ? fmt::format("{:.0f}", rate) : "", base_rss, sub_rss,
        static_cast<int64_t>(sub_rss) - static_cast<int64_t>(base_rss), CsvField(cfg.server_cpus),
        cfg.cpu, CsvField(row_note));
    if (row_status == "ok") {
      std::printf(
          "%-20s %-16s %-8s p50 %9.3f  p99 %9.3f  p99.9 %9.3f us  %9.0f pub/s  "
          "RSS %.1f MiB (+%.2f)\n",
          label.c_str(), sc.name.c_str(), metric, s.p50, s.p99, s.p999, rate,
          static_cast<double>(sub_rss) / 1024.0,
          (static_cast<double>(sub_rss) - static_cast<double>(base_rss)) / 1024.0);
    } else {
      std::printf("%-20s %-16s %-8s %s: %s\n", label.c_str(), sc.name.c_str(), metric,
                  row_status.c_str(), row_note.c_str());
    }
  }
  if (!cfg.csv.empty()) {
    bool fresh = !std::ifstream(cfg.csv).good();
    std::ofstream out(cfg.csv, std::ios::app);
    if (fresh) out << kCsvHeader << "\n";
    out << rows;
  }
  return status == "error" ? 1 : 0;
}

// ---------------------------------------------------------------- --report

std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

int Report(const Config& cfg) {
  std::ifstream f(cfg.report);
  if (!f) {
    std::fprintf(stderr, "pubsub_benchmark: cannot read %s\n", cfg.report.c_str());
    return 1;
  }
  std::string line;
  std::getline(f, line);
  std::vector<std::string> cols = SplitCsv(line);
  auto col = [&](std::string_view name) {
    return static_cast<size_t>(std::find(cols.begin(), cols.end(), name) - cols.begin());
  };
  using Row = std::vector<std::string>;
  std::vector<Row> rows;
  std::vector<std::string> engines, scenarios;
  while (std::getline(f, line)) {
    if (line.empty() || line.starts_with("date,")) continue;
    Row r = SplitCsv(line);
    if (r.size() != cols.size()) continue;
    if (std::find(engines.begin(), engines.end(), r[col("engine")]) == engines.end())
      engines.push_back(r[col("engine")]);
    if (std::find(scenarios.begin(), scenarios.end(), r[col("scenario")]) == scenarios.end())
      scenarios.push_back(r[col("scenario")]);
    rows.push_back(std::move(r));
  }
  auto find = [&](const std::string& engine, const std::string& scenario,
                  const std::string& metric) -> const Row* {
    for (const Row& r : rows) {
      if (r[col("engine")] == engine && r[col("scenario")] == scenario &&
          r[col("metric")] == metric)
        return &r;
    }
    return nullptr;
  };
  // The baseline: the engine whose label starts with --baseline-engine.
  std::string base;
  for (const auto& en : engines) {
    if (en.starts_with(cfg.baseline_engine)) base = en;
  }
  auto value = [&](const Row* r, const char* c) -> double {
    if (r == nullptr || (*r)[col("status")] != "ok") return -1;
    return std::stod((*r)[col(c)]);
  };
  auto cell = [&](const Row* r, const char* c) -> std::string {
    if (r == nullptr) return "-";
    if ((*r)[col("status")] != "ok") return (*r)[col("status")];
    return (*r)[col(c)];
  };
  const std::vector<std::pair<std::string, std::string>> groups = {
      {"one-to-one", "One publisher, one subscriber (delivery latency)"},
      {"fanout", "Literal fan-out (delivery to the last listener)"},
      {"literal", "Literal routing scale (delivery latency)"},
      {"pattern-hit", "Pattern routing, matching publication (delivery latency)"},
      {"pattern-miss", "Pattern routing, unmatched publication (acknowledgement latency)"},
      {"many", "32 subscribers x (32 private + 1 shared) (delivery to the last subscriber)"}};
  for (const auto& [group, title] : groups) {
    const std::string metric = group == "pattern-miss" ? "ack" : "delivery";
    std::printf("### %s\n\n", title.c_str());
    std::printf(
        "| scenario | engine | min | p50 | p90 | p99 | p99.9 | mean | ack p50 | pub/s |"
        " p50 vs %s |\n",
        base.empty() ? "baseline" : base.c_str());
    std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const auto& scn : scenarios) {
      bool in_group = false;
      for (const Row& r : rows) in_group |= r[col("scenario")] == scn && r[col("group")] == group;
      if (!in_group) continue;
      for (const auto& en : engines) {
        const Row* r = find(en, scn, metric);
        const Row* a = find(en, scn, "ack");
        if (r == nullptr) continue;
        double mine = value(r, "p50_us"), theirs = value(find(base, scn, metric), "p50_us");
        std::string ratio = "-";
        if (en != base && mine > 0 && theirs > 0) {
          ratio = theirs >= mine ? fmt::format("{:.2f}x faster", theirs / mine)
                                 : fmt::format("{:.2f}x slower", mine / theirs);
        }
        std::printf(
            "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", scn.c_str(), en.c_str(),
            cell(r, "min_us").c_str(), cell(r, "p50_us").c_str(), cell(r, "p90_us").c_str(),
            cell(r, "p99_us").c_str(), cell(r, "p999_us").c_str(), cell(r, "mean_us").c_str(),
            cell(a, "p50_us").c_str(), cell(r, "publications_per_s").c_str(), ratio.c_str());
      }
    }
    std::printf("\n");
  }
  std::printf("### Server memory: total RSS / delta over the fresh server (MiB)\n\n");
  std::printf("| scenario |");
  for (const auto& en : engines) std::printf(" %s |", en.c_str());
  std::printf("\n|---|");
  for (size_t i = 0; i < engines.size(); ++i) std::printf("---:|");
  std::printf("\n");
  for (const char* scn : {"literal-16384", "pattern-hit-8192", "many-literal", "many-pattern"}) {
    std::printf("| %s |", scn);
    for (const auto& en : engines) {
      const Row* r = find(en, scn, "ack");
      if (r == nullptr || (*r)[col("status")] != "ok") {
        std::printf(" - |");
        continue;
      }
      std::printf(" %.1f / %.2f |", std::stod((*r)[col("subscribed_rss_kib")]) / 1024.0,
                  std::stod((*r)[col("rss_delta_kib")]) / 1024.0);
    }
    std::printf("\n");
  }
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app("pubsub_benchmark: closed-loop pub/sub latency (seed 002)", "pubsub_benchmark");
  app.add_option("--engine", cfg.engine, "resp (RESP2 on a unix socket) or ring (SBE rings)")
      ->check(CLI::IsMember({"resp", "ring"}))
      ->capture_default_str();
  app.add_option("--label", cfg.label, "Engine name in the results (default: --engine)");
  app.add_option("--socket", cfg.socket, "The server's unix socket");
  app.add_option("--scenario", cfg.scenario, "Scenario to run (see --list)");
  app.add_option("--ring-bytes", cfg.ring_bytes, "Ring size per direction (ring engine)")
      ->capture_default_str();
  app.add_option("--server-pid", cfg.server_pids, "Server process(es) whose RSS is reported");
  app.add_option("--server-cpus", cfg.server_cpus, "Where the server runs (recorded only)");
  app.add_option("--cpu", cfg.cpu, "Pin the harness to this CPU");
  app.add_option("--spin-us", cfg.spin_us, "Poll this long after a send before sleeping")
      ->capture_default_str();
  app.add_flag("--quick", cfg.quick, "A twentieth of the seed's sample counts");
  app.add_option("--samples", cfg.samples, "Override the scenario's sample count");
  app.add_option("--warmup", cfg.warmup, "Override the scenario's warm-up count");
  app.add_flag("--list", cfg.list, "Print the scenario names and exit");
  app.add_option("--csv", cfg.csv, "Append the results to this CSV file");
  app.add_option("--report", cfg.report, "Print Markdown tables of a results CSV and exit");
  app.add_option("--baseline-engine", cfg.baseline_engine,
                 "Engine label prefix the report's ratios compare against")
      ->capture_default_str();
  if (int rc = ParseCommandLine(app, argc, argv); rc >= 0) return rc;
  if (cfg.list) {
    for (const auto& s : Scenarios(cfg.quick)) std::printf("%s\n", s.name.c_str());
    return 0;
  }
  if (!cfg.report.empty()) return Report(cfg);
  if (cfg.socket.empty() || cfg.scenario.empty()) {
    std::fprintf(stderr, "pubsub_benchmark: --socket and --scenario are required\n");
    return 2;
  }
  return Run(cfg);
}
