// goblinctl: command-line client of goblin-core's gRPC admin API (goblin.admin.v1).
//   goblinctl [--target unix:PATH|HOST:PORT] [--token-file F] [--json] COMMAND
//     pool | numa | audit | tiers | pubsub | clients | config | health
//     objects ls [PREFIX] [--limit N] [--page-token KEY] [--all]
//     objects show KEY | objects evict KEY | objects purge PREFIX
//     stats [--watch] [--interval 1s] [--count N]
//     top [--interval 1s] [--count N]
// Tables for people, --json (the protobuf JSON mapping) for scripts. TCP targets need the
// token (--token-file, or GOBLIN_ADMIN_TOKEN). Exit status: 0 ok; 1 an audit check failed or
// health is not SERVING; 2 the service is unreachable or refused the call (message says which).
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include "goblin/admin/v1/admin.grpc.pb.h"
#include "goblin/common/cli.h"
#include "goblin/common/config.h"
#include "goblin/common/file.h"
#include "goblin/common/units.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace {

using namespace goblin;
namespace v1 = goblin::admin::v1;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

constexpr int kExitCheckFailed = 1;
constexpr int kExitUnreachable = 2;

struct Options {
  std::string target = "unix:/run/goblin/core.sock.admin";
  std::string token_file;
  std::string token;  // from token_file or $GOBLIN_ADMIN_TOKEN
  bool json = false;
  std::chrono::nanoseconds timeout = std::chrono::seconds(5);
};

// A table printed with columns padded to their widest cell; numbers right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print() const {
    std::vector<size_t> w;
    for (const auto& r : rows_) {
      for (size_t i = 0; i < r.size(); ++i) {
        if (w.size() <= i) w.push_back(0);
        w[i] = std::max(w[i], r[i].size());
      }
    }
    for (const auto& r : rows_) {
      std::string line;
      for (size_t i = 0; i < r.size(); ++i) {
        bool last = i + 1 == r.size();
        bool numeric =
            !r[i].empty() && r[i].find_first_not_of("0123456789.,%-") == std::string::npos;
        std::string cell = r[i];
        if (!last || numeric) {
          std::string pad(w[i] - cell.size(), ' ');
          cell = numeric ? pad + cell : cell + pad;
        }
        line += cell + (last ? "" : "  ");
      }
      std::printf("%s\n", line.c_str());
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

void KeyValues(const std::vector<std::pair<std::string, std::string>>& kv) {
  size_t w = 0;
  for (const auto& [k, v] : kv) w = std::max(w, k.size());
  for (const auto& [k, v] : kv)
    std::printf("%-*s  %s\n", static_cast<int>(w), k.c_str(), v.c_str());
}

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

std::string Size(uint64_t b) { return HumanSize(b); }

class Ctl {
 public:
  explicit Ctl(const Options& o) : o_(o) {
    std::string target = o.target;
    if (target.starts_with("unix:") && target.size() > 5 && target[5] != '/') {
      target = "unix:" + std::string(std::filesystem::absolute(target.substr(5)));
    }
    channel_ = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
    admin_ = v1::Admin::NewStub(channel_);
    health_ = grpc::health::v1::Health::NewStub(channel_);
    token_ = o.token;
  }

  std::unique_ptr<grpc::ClientContext> Context() const {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::duration_cast<std::chrono::system_clock::duration>(o_.timeout));
    if (!token_.empty()) c->AddMetadata("authorization", "Bearer " + token_);
    return c;
  }

  // Runs one RPC; on failure prints why and returns false (exit status 2).
  template <typename Req, typename Resp, typename Fn>
  bool Call(const char* what, Fn fn, const Req& req, Resp* resp) const {
    auto ctx = Context();
    grpc::Status s = fn(ctx.get(), req, resp);
    if (s.ok()) return true;
    const char* hint = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                               s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                           ? "cannot reach goblin-core's admin API at"
                           : "refused by goblin-core's admin API at";
    std::fprintf(stderr, "goblinctl: %s: %s %s: %s (%s)\n", what, hint, o_.target.c_str(),
                 s.error_message().c_str(), StatusName(s.error_code()));
    return false;
  }
  static const char* StatusName(grpc::StatusCode c) {
    switch (c) {
      case grpc::StatusCode::UNAVAILABLE:
        return "UNAVAILABLE";
      case grpc::StatusCode::UNAUTHENTICATED:
        return "UNAUTHENTICATED";
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        return "DEADLINE_EXCEEDED";
      case grpc::StatusCode::NOT_FOUND:
        return "NOT_FOUND";
      case grpc::StatusCode::INVALID_ARGUMENT:
        return "INVALID_ARGUMENT";
      case grpc::StatusCode::FAILED_PRECONDITION:
        return "FAILED_PRECONDITION";
      case grpc::StatusCode::PERMISSION_DENIED:
        return "PERMISSION_DENIED";
      default:
        return "ERROR";
    }
  }
#define GOBLIN_RPC(method)                                      \
  [this](grpc::ClientContext* c, const auto& req, auto* resp) { \
    return admin_->method(c, req, resp);                        \
  }

  int Pool() const {
    v1::PoolInfo p;
    if (!Call("pool", GOBLIN_RPC(GetPool), v1::GetPoolRequest(), &p)) return kExitUnreachable;
    if (o_.json) return Print(p);
    std::string nodes;
    for (const auto& n : p.page_nodes()) {
      nodes += fmt::format("{}node {}: {} pages", nodes.empty() ? "" : ", ", n.node(), n.pages());
    }
    KeyValues(
        {{"size", Size(p.size_bytes())},
         {"block", Size(p.block_bytes())},
         {"head size", Size(p.head_bytes())},
         {"used",
          fmt::format("{} ({} requested)", Size(p.used_bytes()), Size(p.requested_bytes()))},
         {"free", Size(p.free_bytes())},
         {"heads", std::to_string(p.heads())},
         {"holding", fmt::format("{} small objects whole ({}), {} heads of larger ones "
                                 "({}), {} RAM tails ({})",
                                 p.whole_objects(), Size(p.whole_object_bytes()), p.large_heads(),
                                 Size(p.large_head_bytes()), p.tails(), Size(p.tail_bytes()))},
         {"blocks", fmt::format("{} of {} free", p.blocks_free(), p.blocks_total())},
         {"fragmentation", fmt::format("{:.1f}%", 100 * p.fragmentation())},
         {"backing", p.backing()},
         {"locked", p.locked() ? "yes" : "no"},
         {"numa node", p.numa_node() < 0 ? "any (not bound)" : std::to_string(p.numa_node())},
         {"pages on", nodes.empty() ? "(unknown)" : nodes},
         {"allocation failures", std::to_string(p.allocation_failures())},
         {"head descriptors",
          fmt::format("{} of {} in use", p.head_table_in_use(), p.head_table_entries())}});
    return 0;
  }

  int Numa() const {
    v1::NumaInfo n;
    if (!Call("numa", GOBLIN_RPC(GetNuma), v1::GetNumaRequest(), &n)) return kExitUnreachable;
    if (o_.json) return Print(n);
    std::printf("NUMA %s; goblin-core may run on CPUs %s\n\n",
                n.numa_available() ? "available" : "not available (one node)",
                n.allowed_cpus().c_str());
    Table t({"NODE", "CPUS", "MEMORY", "FREE", "HUGEPAGES 2M", "FREE 2M"});
    for (const auto& x : n.nodes()) {
      t.Add({std::to_string(x.id()), x.cpus(), Size(x.mem_total_bytes()), Size(x.mem_free_bytes()),
             std::to_string(x.hugepages_2m_total()), std::to_string(x.hugepages_2m_free())});
    }
    t.Print();
    std::printf("\n");
    Table d({"DEVICE", "KIND", "NODE", "PCI", "DETAIL"});
    for (const auto& x : n.devices()) {
      d.Add({x.name(), x.kind(), x.numa_node() < 0 ? "?" : std::to_string(x.numa_node()),
             x.pci_address().empty() ? "-" : x.pci_address(), x.detail()});
    }
    d.Print();
    return 0;
  }

  int Audit() const {
    v1::AuditReport r;
    if (!Call("audit", GOBLIN_RPC(Audit), v1::AuditRequest(), &r)) return kExitUnreachable;
    if (o_.json) {
      Print(r);
    } else {
      std::printf("placement audit against %s\n\n",
                  r.node() < 0 ? "no node (--numa not given)"
                               : fmt::format("NUMA node {}", r.node()).c_str());
      Table t({"CHECK", "RESULT", "EVIDENCE"});
      for (const auto& c : r.checks()) {
        const char* res = c.result() == v1::AuditCheck::PASS   ? "PASS"
                          : c.result() == v1::AuditCheck::FAIL ? "FAIL"
                                                               : "SKIP";
        t.Add({c.name(), res, c.evidence()});
      }
      t.Print();
      std::printf("\n%s\n", r.passed() ? "audit passed" : "audit FAILED");
    }
    return r.passed() ? 0 : kExitCheckFailed;
  }

  int Tiers() const {
    v1::TiersInfo r;
    if (!Call("tiers", GOBLIN_RPC(GetTiers), v1::GetTiersRequest(), &r)) return kExitUnreachable;
    if (o_.json) return Print(r);
    Table t({"TIER", "DIR", "CAPACITY", "USED", "OBJECTS", "READ", "WRITTEN", "READS", "WRITES",
             "ERRORS"});
    bool striped = false;
    for (const auto& x : r.tiers()) {
      t.Add({std::to_string(x.index()), x.dir(), Size(x.capacity_bytes()), Size(x.used_bytes()),
             std::to_string(x.objects()), Size(x.read_bytes()), Size(x.write_bytes()),
             std::to_string(x.reads()), std::to_string(x.writes()), std::to_string(x.errors())});
      striped |= x.drives_size() > 1 || std::any_of(x.drives().begin(), x.drives().end(),
                                                    [](const auto& d) { return !d.present(); });
    }
    t.Print();
    if (!striped) return 0;
    // A tier of several drives (or one that lost a drive): each drive on a line.
    std::printf("\n");
    Table d({"TIER", "DRIVE", "DIR", "STATE", "CAPACITY", "USED", "READ", "WRITTEN", "ERRORS"});
    for (const auto& x : r.tiers()) {
      for (const auto& y : x.drives()) {
        d.Add({std::to_string(x.index()), std::to_string(y.number()), y.dir(),
               y.present() ? "ok"
                           : fmt::format("gone: {} objects dropped ({})", y.objects_dropped(),
                                         y.error().empty() ? "not listed" : y.error()),
               Size(y.capacity_bytes()), Size(y.used_bytes()), Size(y.read_bytes()),
               Size(y.write_bytes()), std::to_string(y.errors())});
      }
    }
    d.Print();
    return 0;
  }

  int ObjectsList(const std::string& prefix, uint32_t limit, std::string token, bool all) const {
    v1::ListObjectsResponse merged;
    for (;;) {
      v1::ListObjectsRequest req;
      req.set_prefix(prefix);
      req.set_page_size(limit);
      req.set_page_token(token);
      v1::ListObjectsResponse r;
      if (!Call("objects ls", GOBLIN_RPC(ListObjects), req, &r)) return kExitUnreachable;
      merged.mutable_objects()->MergeFrom(r.objects());
      merged.set_next_page_token(r.next_page_token());
      token = r.next_page_token();
      if (!all || token.empty()) break;
    }
    if (o_.json) return Print(merged);
    Table t({"KEY", "SIZE", "GENERATION", "HEAD IN RAM", "EXPIRES"});
    for (const auto& x : merged.objects()) {
      t.Add({Printable(x.key()), std::to_string(x.size()), std::to_string(x.generation()),
             x.head_in_ram() ? "yes" : "no",
             x.expires_unix_ns() == 0 ? "never" : FormatUnixNs(x.expires_unix_ns())});
    }
    t.Print();
    if (!merged.next_page_token().empty()) {
      std::printf("(more: --page-token '%s', or --all)\n", merged.next_page_token().c_str());
    }
    return 0;
  }

  int ObjectShow(const std::string& key) const {
    v1::GetObjectRequest req;
    req.set_key(key);
    v1::ObjectDetail d;
    if (!Call("objects show", GOBLIN_RPC(GetObject), req, &d)) return kExitUnreachable;
    if (o_.json) return Print(d);
    const auto& s = d.summary();
    KeyValues({{"key", Printable(s.key())},
               {"size", fmt::format("{} ({})", s.size(), Size(s.size()))},
               {"generation", std::to_string(s.generation())},
               {"created", FormatUnixNs(s.created_unix_ns())},
               {"expires", s.expires_unix_ns() == 0 ? "never" : FormatUnixNs(s.expires_unix_ns())},
               {"head in RAM", fmt::format("{} bytes", d.head_bytes_in_ram())},
               {"metadata", d.metadata()}});
    std::printf("\n");
    Table t({"EXTENT", "TIER", "DRIVE", "FILE", "OFFSET", "LENGTH", "XXH3"});
    int i = 0;
    for (const auto& e : d.extents()) {
      t.Add({std::to_string(i++), std::to_string(e.tier()), std::to_string(e.drive()),
             std::to_string(e.file()), std::to_string(e.offset()), std::to_string(e.length()),
             fmt::format("{:016x}", e.checksum())});
    }
    t.Print();
    return 0;
  }

  int Evict(bool prefix, const std::string& what) const {
    v1::EvictObjectsRequest req;
    if (prefix) {
      req.set_prefix(what);
    } else {
      req.set_key(what);
    }
    v1::EvictObjectsResponse r;
    if (!Call(prefix ? "objects purge" : "objects evict", GOBLIN_RPC(EvictObjects), req, &r)) {
      return kExitUnreachable;
    }
    if (o_.json) return Print(r);
    std::printf("evicted %llu object(s)\n", static_cast<unsigned long long>(r.evicted()));
    return 0;
  }

  int Pubsub() const {
    v1::PubsubInfo r;
    if (!Call("pubsub", GOBLIN_RPC(GetPubsub), v1::GetPubsubRequest(), &r)) return kExitUnreachable;
    if (o_.json) return Print(r);
    KeyValues({{"subscribers", std::to_string(r.subscribers())},
               {"patterns", std::to_string(r.patterns())},
               {"publishes", std::to_string(r.publishes())},
               {"deliveries", std::to_string(r.deliveries())},
               {"dropped for output limits", std::to_string(r.dropped_for_limits())}});
    std::printf("\n");
    Table t({"CHANNEL", "KIND", "SUBSCRIBERS"});
    for (const auto& c : r.channels())
      t.Add({c.name(), "channel", std::to_string(c.subscribers())});
    for (const auto& c : r.shard_channels()) {
      t.Add({c.name(), "shard", std::to_string(c.subscribers())});
    }
    t.Print();
    std::printf("\n");
    Table s({"CLIENT", "NAME", "SUBSCRIBERS", "OUTPUT QUEUED"});
    for (const auto& x : r.sessions()) {
      s.Add({std::to_string(x.client_id()), x.client_name(), std::to_string(x.subscribers()),
             std::to_string(x.output_bytes())});
    }
    s.Print();
    return 0;
  }

  int Clients() const {
    v1::ClientsInfo r;
    if (!Call("clients", GOBLIN_RPC(ListClients), v1::ListClientsRequest(), &r)) {
      return kExitUnreachable;
    }
    if (o_.json) return Print(r);
    Table t({"ID", "NAME", "PID", "SHARD", "PLANE", "KIND", "OUTPUT QUEUED", "LOANS", "GETS",
             "SUBSCRIBERS"});
    for (const auto& c : r.clients()) {
      t.Add({std::to_string(c.id()), c.name(), std::to_string(c.pid()), std::to_string(c.shard()),
             c.plane(), c.kind(), std::to_string(c.output_bytes()), std::to_string(c.loans_out()),
             std::to_string(c.downloads()), std::to_string(c.subscribers())});
    }
    t.Print();
    return 0;
  }

  int Stats(bool watch, std::chrono::nanoseconds interval, int count) const {
    v1::Stats prev;
    for (int i = 0; !watch || count <= 0 || i < count; ++i) {
      if (i > 0) std::this_thread::sleep_for(interval);
      v1::Stats s;
      if (!Call("stats", GOBLIN_RPC(GetStats), v1::GetStatsRequest(), &s)) return kExitUnreachable;
      if (o_.json) {
        std::string j = Json(s);
        std::printf("%s\n", j.c_str());
      } else {
        if (watch) {
          std::printf("%s-- uptime %.1f s\n", i == 0 ? "" : "\n",
                      static_cast<double>(s.uptime_ns()) / 1e9);
        }
        std::map<std::string, uint64_t> sorted(s.counters().begin(), s.counters().end());
        double secs = static_cast<double>(s.uptime_ns() - prev.uptime_ns()) / 1e9;
        Table t(watch && i > 0 ? std::vector<std::string>{"COUNTER", "VALUE", "PER SECOND"}
                               : std::vector<std::string>{"COUNTER", "VALUE"});
        for (const auto& [k, v] : sorted) {
          if (watch && i > 0) {
            auto p = prev.counters().find(k);
            uint64_t before = p == prev.counters().end() ? 0 : p->second;
            t.Add({k, std::to_string(v),
                   fmt::format("{:.1f}", secs > 0 ? static_cast<double>(v - before) / secs : 0)});
          } else {
            t.Add({k, std::to_string(v)});
          }
        }
        t.Print();
        if (!watch || i == 0) PrintHistograms(s);
      }
      std::fflush(stdout);
      prev = s;
      if (!watch) break;
    }
    return 0;
  }

  // varnishstat for goblin-core: every --interval a screen (redrawn in place on a terminal)
  // with uptime, objects, the hit ratio of the last interval and since start, the service
  // times' p50/p99, then every non-zero counter with its value, its rate over the last
  // interval and its average rate since start, the busiest first.
  int Top(std::chrono::nanoseconds interval, int count) const {
    const bool tty = isatty(STDOUT_FILENO) != 0;
    v1::Stats prev;
    for (int i = 0; count <= 0 || i < count; ++i) {
      if (i > 0) std::this_thread::sleep_for(interval);
      v1::Stats s;
      if (!Call("top", GOBLIN_RPC(GetStats), v1::GetStatsRequest(), &s)) return kExitUnreachable;
      const auto& c = s.counters();
      auto at = [](const auto& m, const std::string& k) -> uint64_t {
        auto it = m.find(k);
        return it == m.end() ? 0 : it->second;
      };
      const double up = static_cast<double>(s.uptime_ns()) / 1e9;
      const double secs = i == 0 ? up : static_cast<double>(s.uptime_ns() - prev.uptime_ns()) / 1e9;
      auto ratio = [](uint64_t hits, uint64_t misses) {
        return hits + misses == 0 ? std::string("-")
                                  : fmt::format("{:.1f}%", 100.0 * static_cast<double>(hits) /
                                                               static_cast<double>(hits + misses));
      };
      const uint64_t hits = at(c, "hits"), misses = at(c, "misses");
      const uint64_t dh = hits - at(prev.counters(), "hits"),
                     dm = misses - at(prev.counters(), "misses");
      std::string screen = tty ? "\x1b[H\x1b[2J" : (i > 0 ? "\n" : "");
      const uint64_t u = static_cast<uint64_t>(up);
      screen += fmt::format("goblin-core up {}h {:02}m {:02}s ({} shard{}; every {})\n", u / 3600,
                            u / 60 % 60, u % 60, at(c, "shards"), at(c, "shards") == 1 ? "" : "s",
                            FormatDuration(interval));
      screen += fmt::format(
          "objects {}  heads in RAM {}  hit ratio {} (last {:.1f} s), {} (since start)\n",
          at(c, "objects"), at(c, "heads_in_ram"), ratio(dh, dm), secs, ratio(hits, misses));
      for (const auto& h : s.histograms()) {
        if (h.count() == 0) continue;
        auto quantile = [&](double q) {
          uint64_t seen = 0;
          for (int b = 0; b < h.counts_size(); ++b) {
            seen += h.counts(b);
            if (static_cast<double>(seen) >= q * static_cast<double>(h.count()))
              return b < h.upper_bounds_size() ? fmt::format("<= {} us", h.upper_bounds(b))
                                               : std::string("> 10 s");
          }
          return std::string("-");
        };
        screen += fmt::format("{}: {} samples, p50 {}, p99 {}\n", h.name(), h.count(),
                              quantile(0.5), quantile(0.99));
      }
      struct Row {
        std::string name;
        uint64_t value;
        double rate, avg;
      };
      std::vector<Row> rows;
      for (const auto& [k, v] : c) {
        if (v == 0) continue;
        const uint64_t before = i == 0 ? 0 : at(prev.counters(), k);
        const double rate = secs > 0 && v >= before ? static_cast<double>(v - before) / secs : 0;
        rows.push_back({k, v, rate, up > 0 ? static_cast<double>(v) / up : 0});
      }
      std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
        return a.rate != b.rate ? a.rate > b.rate : a.name < b.name;
      });
      std::printf("%s\n", screen.c_str());
      Table t({"NAME", "CURRENT", "CHANGE/s", "AVG/s"});
      for (const Row& r : rows) {
        t.Add({r.name, std::to_string(r.value), fmt::format("{:.1f}", r.rate),
               fmt::format("{:.1f}", r.avg)});
      }
      t.Print();
      std::fflush(stdout);
      prev = s;
    }
    return 0;
  }

  int Config() const {
    v1::Config c;
    if (!Call("config", GOBLIN_RPC(GetConfig), v1::GetConfigRequest(), &c)) return kExitUnreachable;
    if (o_.json) return Print(c);
    std::vector<std::pair<std::string, std::string>> kv{{"version", c.version()}};
    std::map<std::string, std::string> sorted(c.settings().begin(), c.settings().end());
    for (const auto& [k, v] : sorted) kv.emplace_back(k, v);
    KeyValues(kv);
    return 0;
  }

  int Health(const std::string& service) const {
    HealthCheckRequest req;
    req.set_service(service);
    HealthCheckResponse r;
    auto ctx = Context();
    grpc::Status s = health_->Check(ctx.get(), req, &r);
    if (!s.ok()) {
      std::fprintf(stderr,
                   "goblinctl: health: cannot reach goblin-core's admin API at %s: %s (%s)\n",
                   o_.target.c_str(), s.error_message().c_str(), StatusName(s.error_code()));
      return kExitUnreachable;
    }
    const char* name = HealthCheckResponse::ServingStatus_Name(r.status()).c_str();
    if (o_.json) {
      Print(r);
    } else {
      std::printf("%s\n", name);
    }
    return r.status() == HealthCheckResponse::SERVING ? 0 : kExitCheckFailed;
  }

 private:
  int Print(const google::protobuf::Message& m) const {
    std::printf("%s\n", Json(m).c_str());
    return 0;
  }
  // A key as a terminal shows it: control bytes escaped (\0 is the NUL before an HTTP
  // object's variant headers, \xHH the others), a backslash doubled.
  static std::string Printable(std::string_view key) {
    std::string out;
    out.reserve(key.size());
    for (char ch : key) {
      const auto b = static_cast<unsigned char>(ch);
      if (b == 0) {
        out += "\\0";
      } else if (b < 0x20 || b == 0x7f) {
        out += fmt::format("\\x{:02x}", b);
      } else {
        if (ch == '\\') out.push_back('\\');
        out.push_back(ch);
      }
    }
    return out;
  }
  static std::string FormatUnixNs(uint64_t ns) {
    time_t t = static_cast<time_t>(ns / 1'000'000'000);
    struct tm tm {};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
  }
  static void PrintHistograms(const v1::Stats& s) {
    for (const auto& h : s.histograms()) {
      std::printf("\n%s (%s): %llu samples", h.name().c_str(), h.unit().c_str(),
                  static_cast<unsigned long long>(h.count()));
      if (h.count() == 0) {
        std::printf("\n");
        continue;
      }
      std::printf(", mean %.1f\n", static_cast<double>(h.sum()) / static_cast<double>(h.count()));
      Table t({"<=", "COUNT"});
      for (int i = 0; i < h.counts_size(); ++i) {
        if (h.counts(i) == 0) continue;
        t.Add({i < h.upper_bounds_size() ? std::to_string(h.upper_bounds(i)) : "more",
               std::to_string(h.counts(i))});
      }
      t.Print();
    }
  }

  Options o_;
  std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Admin::Stub> admin_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("goblinctl: inspect and manage goblin-core through its gRPC admin API", "goblinctl");
  app.set_version_flag("--version", GOBLIN_VERSION);
  app.require_subcommand(1);
  Options o;
  app.add_option("--target", o.target, "unix:PATH (the core's --admin-socket) or HOST:PORT")
      ->capture_default_str();
  app.add_option("--token-file", o.token_file,
                 "File holding the token for a TCP target (default: $GOBLIN_ADMIN_TOKEN)");
  app.add_flag("--json", o.json, "Print the answer as JSON (the protobuf JSON mapping)");
  AddDurationOption(app, "--timeout", &o.timeout, "Deadline of each call");

  auto* pool = app.add_subcommand("pool", "Head pool: size, use, backing, pages by NUMA node");
  auto* numa = app.add_subcommand("numa", "NUMA nodes and the devices on each");
  auto* audit = app.add_subcommand("audit", "Placement audit (exit 1 when a check fails)");
  auto* tiers = app.add_subcommand("tiers", "Disk tiers: capacity, use, objects, I/O");
  auto* objects = app.add_subcommand("objects", "List, show, evict or purge objects");
  objects->require_subcommand(1);
  std::string prefix, key, page_token;
  uint32_t limit = 100;
  bool all = false;
  auto* ls = objects->add_subcommand("ls", "List objects (sorted by key)");
  ls->add_option("prefix", prefix, "Only keys starting with this");
  ls->add_option("--limit", limit, "Objects per page (at most 10000)")->capture_default_str();
  ls->add_option("--page-token", page_token, "Continue after this key (from a previous page)");
  ls->add_flag("--all", all, "Every page");
  auto* show = objects->add_subcommand("show", "One object: record, extents, head in RAM");
  show->add_option("key", key)->required();
  auto* evict = objects->add_subcommand("evict", "Remove one object");
  evict->add_option("key", key)->required();
  auto* purge = objects->add_subcommand("purge", "Remove every object under a prefix");
  purge->add_option("prefix", prefix)->required();
  auto* pubsub = app.add_subcommand("pubsub", "Channels, patterns, subscribers, output buffers");
  auto* clients = app.add_subcommand("clients", "Sessions on the ring and UCX planes");
  auto* stats = app.add_subcommand("stats", "Counters and latency histograms");
  bool watch = false;
  int count = 0;
  std::chrono::nanoseconds interval = std::chrono::seconds(1);
  stats->add_flag("--watch", watch, "Print again every --interval, with rates");
  AddDurationOption(*stats, "--interval", &interval, "Time between --watch samples");
  stats->add_option("--count", count, "Stop after this many samples (0: until interrupted)");
  auto* top = app.add_subcommand(
      "top", "Live view (varnishstat-like): hit ratio, service times, counters by rate");
  std::chrono::nanoseconds top_interval = std::chrono::seconds(1);
  int top_count = 0;
  AddDurationOption(*top, "--interval", &top_interval, "Time between screens");
  top->add_option("--count", top_count, "Stop after this many screens (0: until interrupted)");
  auto* config = app.add_subcommand("config", "Every option goblin-core runs with");
  auto* health = app.add_subcommand("health", "grpc.health.v1 status (exit 1 unless SERVING)");
  std::string service;
  health->add_option("--service", service, "Service name (empty: the server as a whole)");
  if (int rc = ParseCommandLine(app, argc, argv); rc >= 0) return rc;

  if (!o.token_file.empty()) {
    auto t = ReadSecretFile(o.token_file, "--token-file");
    if (!t) {
      std::fprintf(stderr, "goblinctl: %s\n", t.error().message().c_str());
      return kExitUnreachable;
    }
    o.token = std::move(*t);
  } else if (const char* t = std::getenv("GOBLIN_ADMIN_TOKEN")) {
    o.token = t;
  }
  Ctl ctl(o);
  if (pool->parsed()) return ctl.Pool();
  if (numa->parsed()) return ctl.Numa();
  if (audit->parsed()) return ctl.Audit();
  if (tiers->parsed()) return ctl.Tiers();
  if (ls->parsed()) return ctl.ObjectsList(prefix, limit, page_token, all);
  if (show->parsed()) return ctl.ObjectShow(key);
  if (evict->parsed()) return ctl.Evict(false, key);
  if (purge->parsed()) return ctl.Evict(true, prefix);
  if (pubsub->parsed()) return ctl.Pubsub();
  if (clients->parsed()) return ctl.Clients();
  if (stats->parsed()) return ctl.Stats(watch, interval, count);
  if (top->parsed()) return ctl.Top(top_interval, top_count);
  if (config->parsed()) return ctl.Config();
  if (health->parsed()) return ctl.Health(service);
  return 2;
}
