// The admin plane end to end: a goblin-core of two shards (every answer merges both: sums,
// listings in key order across shards, the key's own shard) with a disk tier, a UCX
// listener and the admin
// API on its unix socket and on TCP (token required); the test stores objects, subscribes
// and connects clients through libgoblin, then runs goblinctl for every command and checks
// the values it set up (JSON answers parsed back into the protobuf messages; tables for
// people checked for the same values), the token check, exit codes, and health going
// SERVING -> NOT_SERVING -> unreachable across a SIGTERM with --shutdown-grace.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include "goblin/admin/v1/admin.pb.h"
#include "goblin/client/connection.h"
#include "goblin/common/topology.h"
#include "grpc/health/v1/health.pb.h"
#include "tests/system/core_process.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;
namespace v1 = admin::v1;
using client::Connection;

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + seed);
  return v;
}

class AdminTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 1);
    setenv("UCX_NET_DEVICES", "lo", 1);
    setenv("UCX_TLS", "tcp", 1);
    dir_ = fmt::format("{}/admin-{}", test::TmpDir(), getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    auto [rc, out] =
        test::RunCommand({GOBLIN_CORE_BIN, "--prepare", dir_ + "/tier"}, dir_ + "/p.log");
    ASSERT_EQ(rc, 0) << out;
    std::ofstream(dir_ + "/token") << "s3cret-token-0123456789\n";
    core_ = new test::CoreProcess(
        "admin",
        {"--ssd-dir", dir_ + "/tier", "--extent-size", "1M", "--tier-file-size", "64M", "--cores",
         "2", "--numa", "0", "--rdma-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
         "--admin-token-file", dir_ + "/token", "--shutdown-grace", "1500ms"});
    admin_ = "unix:" + core_->sock + ".admin";
    std::regex port_re(R"(token required\) *\(port (\d+)|port (\d+), token required)");
    std::regex ucx_re(R"(UCX plane listening on \S+ \(port (\d+)\))");
    for (int i = 0; i < 1000 && (tcp_port_.empty() || ucx_.empty()); ++i) {
      std::string log = core_->proc.Output();
      std::smatch m;
      if (std::regex_search(log, m, port_re)) tcp_port_ = m[1].matched ? m[1].str() : m[2].str();
      if (std::regex_search(log, m, ucx_re)) ucx_ = "ucx://127.0.0.1:" + m[1].str();
      std::this_thread::sleep_for(10ms);
    }
    ASSERT_FALSE(tcp_port_.empty()) << core_->proc.Output();
    ASSERT_FALSE(ucx_.empty()) << core_->proc.Output();
    ASSERT_TRUE(test::WaitForPath(core_->sock + ".admin", 10s));
  }
  static void TearDownTestSuite() {
    delete core_;
    core_ = nullptr;
    std::filesystem::remove_all(dir_);
  }

  // goblinctl's exit code, stdout (and stderr separately).
  struct Run {
    int rc = -1;
    std::string out, err;
  };
  static Run Ctl(std::vector<std::string> args, const std::string& target = admin_) {
    std::string cmd = fmt::format("exec {} --target {}", GOBLIN_CTL_BIN, target);
    for (const auto& a : args) cmd += " '" + a + "'";
    cmd += " 2>" + dir_ + "/ctl.err";
    test::Process p({"/bin/sh", "-c", cmd}, dir_ + "/ctl.out");
    Run r;
    r.rc = p.Wait(30s);
    r.out = p.Output();
    r.err = test::ReadAll(dir_ + "/ctl.err");
    return r;
  }
  template <typename M>
  static M Json(std::vector<std::string> args) {
    args.insert(args.begin(), "--json");
    Run r = Ctl(args);
    EXPECT_EQ(r.rc, 0) << r.out << r.err;
    M m;
    auto st = google::protobuf::util::JsonStringToMessage(r.out, &m);
    EXPECT_TRUE(st.ok()) << st.ToString() << "\n" << r.out;
    return m;
  }
  static std::unique_ptr<Connection> Connect(const std::string& target, const std::string& name) {
    auto c = Connection::Open(target, {.name = name, .timeout = 5s});
    EXPECT_TRUE(c) << c.error().ToString();
    return c ? std::move(*c) : nullptr;
  }

  static inline std::string dir_, admin_, tcp_port_, ucx_;
  static inline test::CoreProcess* core_ = nullptr;
};

TEST_F(AdminTest, PoolNumaAndAuditReportThisCore) {
  auto pool = Json<v1::PoolInfo>({"pool"});
  EXPECT_EQ(pool.size_bytes(), 16u << 20);  // CoreProcess: --memory 16M --block 64K
  EXPECT_EQ(pool.block_bytes(), 64u << 10);
  EXPECT_EQ(pool.head_bytes(), 64u << 10);
  EXPECT_EQ(pool.numa_node(), 0);
  EXPECT_EQ(pool.blocks_total(), 256u);
  ASSERT_GE(pool.page_nodes_size(), 1);
  EXPECT_EQ(pool.page_nodes(0).node(), 0);
  EXPECT_FALSE(pool.backing().empty());
  auto table = Ctl({"pool"});
  EXPECT_EQ(table.rc, 0);
  EXPECT_NE(table.out.find("16 MiB"), std::string::npos) << table.out;

  // What the pool holds, by kind: a small object whole, and a larger one's head and tail.
  auto c = Connect("unix:" + core_->sock, "admin-pool");
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->Put("kind/small", Bytes(1000, 7)));
  ASSERT_TRUE(c->Put("kind/large", Bytes((64 << 10) + 100'000, 8)));
  auto held = Json<v1::PoolInfo>({"pool"});
  EXPECT_GE(held.whole_objects(), 1u);
  EXPECT_GE(held.whole_object_bytes(), 1000u);
  EXPECT_GE(held.large_heads(), 1u);
  EXPECT_GE(held.large_head_bytes(), 64u << 10);
  EXPECT_GE(held.tails(), 1u);
  EXPECT_GE(held.tail_bytes(), 100'000u);
  ASSERT_TRUE(c->Delete("kind/small"));
  ASSERT_TRUE(c->Delete("kind/large"));
  auto after = Json<v1::PoolInfo>({"pool"});
  EXPECT_EQ(after.whole_objects(), held.whole_objects() - 1);
  EXPECT_EQ(after.tail_bytes(), held.tail_bytes() - 100'000);
  EXPECT_NE(Ctl({"pool"}).out.find("RAM tails"), std::string::npos);

  auto topo = ProbeTopology();
  ASSERT_TRUE(topo);
  auto numa = Json<v1::NumaInfo>({"numa"});
  ASSERT_EQ(numa.nodes_size(), static_cast<int>(topo->nodes.size()));
  EXPECT_EQ(numa.nodes(0).cpus(), FormatCpuList(topo->nodes[0].cpus));
  EXPECT_GT(numa.nodes(0).mem_total_bytes(), 0u);

  // --numa 0: the threads, the pool's pages and io_uring are checked against node 0.
  auto audit = Ctl({"--json", "audit"});
  v1::AuditReport report;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(audit.out, &report).ok()) << audit.out;
  EXPECT_EQ(report.node(), 0);
  std::map<std::string, v1::AuditCheck> by_name;
  for (const auto& c : report.checks()) by_name[c.name()] = c;
  for (const char* must_pass : {"threads.allowed_cpus", "threads.last_cpu", "pool.pages_on_node",
                                "io_uring.placement", "memory.policy"}) {
    ASSERT_TRUE(by_name.count(must_pass)) << must_pass;
    EXPECT_EQ(by_name[must_pass].result(), v1::AuditCheck::PASS)
        << must_pass << ": " << by_name[must_pass].evidence();
  }
  bool hugetlb = pool.backing().find("HugeTLB") != std::string::npos;
  EXPECT_EQ(by_name["pool.hugetlb"].result(),
            hugetlb ? v1::AuditCheck::PASS : v1::AuditCheck::FAIL);
  EXPECT_NE(by_name["io_uring.placement"].evidence().find("instance"), std::string::npos);
  // Every shared mapping of the core is bound to the node, not only the head pool.
  for (const char* m : {"goblin-head-pool: prefer:0", "goblin-io-buffers: prefer:0",
                        "goblin-head-table: prefer:0"}) {
    EXPECT_NE(by_name["memory.policy"].evidence().find(m), std::string::npos)
        << m << " in " << by_name["memory.policy"].evidence();
  }
  // The exit status says whether every check passed.
  EXPECT_EQ(audit.rc, report.passed() ? 0 : 1);
  auto audit_table = Ctl({"audit"});
  EXPECT_NE(audit_table.out.find("threads.allowed_cpus  PASS"), std::string::npos)
      << audit_table.out;
}

TEST_F(AdminTest, TiersAndObjectsListShowEvictPurge) {
  auto c = Connect("unix:" + core_->sock, "admin-objects");
  ASSERT_TRUE(c);
  uint64_t total = 0;
  for (int i = 0; i < 5; ++i) {
    auto data = Bytes(100'000 + i, static_cast<uint8_t>(i));
    ASSERT_TRUE(c->Put(fmt::format("p/{}", i), data, 0, "etag: p"));
    total += data.size();
  }
  ASSERT_TRUE(c->Put("q/0", Bytes(10, 1)));
  ASSERT_TRUE(c->Put("q/1", Bytes(3 << 20, 2)));  // four extents: the head's, then 1M each
  // An HTTP variant's key (a NUL before its headers) and a control byte: shown escaped.
  ASSERT_TRUE(c->Put(std::string("q/v\0#x-device=a\\\x01", 17), Bytes(10, 3)));

  auto tiers = Json<v1::TiersInfo>({"tiers"});
  ASSERT_EQ(tiers.tiers_size(), 1);
  EXPECT_EQ(tiers.tiers(0).dir(), dir_ + "/tier");
  EXPECT_GE(tiers.tiers(0).objects(), 7u);
  EXPECT_GE(tiers.tiers(0).write_bytes(), total);
  EXPECT_GE(tiers.tiers(0).writes(), 7u);
  EXPECT_EQ(tiers.tiers(0).errors(), 0u);

  auto page = Json<v1::ListObjectsResponse>({"objects", "ls", "p/", "--limit", "2"});
  ASSERT_EQ(page.objects_size(), 2);
  EXPECT_EQ(page.objects(0).key(), "p/0");
  EXPECT_EQ(page.objects(1).key(), "p/1");
  EXPECT_EQ(page.next_page_token(), "p/1");
  auto next = Json<v1::ListObjectsResponse>(
      {"objects", "ls", "p/", "--limit", "2", "--page-token", page.next_page_token()});
  ASSERT_EQ(next.objects_size(), 2);
  EXPECT_EQ(next.objects(0).key(), "p/2");
  auto all = Json<v1::ListObjectsResponse>({"objects", "ls", "p/", "--limit", "2", "--all"});
  ASSERT_EQ(all.objects_size(), 5);
  EXPECT_EQ(all.objects(4).key(), "p/4");
  EXPECT_EQ(all.objects(4).size(), 100'004u);
  EXPECT_TRUE(all.next_page_token().empty());
  auto ls = Ctl({"objects", "ls", "q/"});
  EXPECT_NE(ls.out.find("q/1"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find(std::to_string(3 << 20)), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("q/v\\0#x-device=a\\\\\\x01 "), std::string::npos) << ls.out;

  auto show = Json<v1::ObjectDetail>({"objects", "show", "q/1"});
  EXPECT_EQ(show.summary().size(), 3u << 20);
  EXPECT_EQ(show.extents_size(), 4);
  EXPECT_EQ(show.head_bytes_in_ram(), 64u << 10);
  auto missing = Ctl({"objects", "show", "no/such"});
  EXPECT_EQ(missing.rc, 2);
  EXPECT_NE(missing.err.find("NOT_FOUND"), std::string::npos) << missing.err;

  auto evicted = Json<v1::EvictObjectsResponse>({"objects", "evict", "p/0"});
  EXPECT_EQ(evicted.evicted(), 1u);
  EXPECT_FALSE(c->Head("p/0").value().found);
  auto purged = Json<v1::EvictObjectsResponse>({"objects", "purge", "q/"});
  EXPECT_EQ(purged.evicted(), 3u);
  EXPECT_EQ(Json<v1::ListObjectsResponse>({"objects", "ls", "q/"}).objects_size(), 0);
  EXPECT_TRUE(c->Head("p/1").value().found);  // the rest untouched
}

TEST_F(AdminTest, PubsubAndClientsShowSubscriptionsAndPlanes) {
  auto sub = Connect("unix:" + core_->sock, "admin-subscriber");
  ASSERT_TRUE(sub);
  ASSERT_TRUE(sub->Subscribe(Connection::SubKind::kChannel,
                             std::vector<std::string>{"news", "sports"}, false, 1));
  ASSERT_TRUE(
      sub->Subscribe(Connection::SubKind::kChannel, std::vector<std::string>{"news"}, false, 2));
  ASSERT_TRUE(
      sub->Subscribe(Connection::SubKind::kPattern, std::vector<std::string>{"n*"}, false, 1));
  auto remote = Connect(ucx_, "admin-ucx-client");
  ASSERT_TRUE(remote);
  EXPECT_EQ(remote->Publish("news", "hello").value(), 3u);  // 2 channel + 1 pattern

  auto ps = Json<v1::PubsubInfo>({"pubsub"});
  std::map<std::string, uint64_t> channels;
  for (const auto& ch : ps.channels()) channels[ch.name()] = ch.subscribers();
  EXPECT_EQ(channels["news"], 2u);
  EXPECT_EQ(channels["sports"], 1u);
  EXPECT_EQ(ps.patterns(), 1u);
  EXPECT_EQ(ps.subscribers(), 2u);
  ASSERT_EQ(ps.sessions_size(), 1);
  EXPECT_EQ(ps.sessions(0).client_name(), "admin-subscriber");
  EXPECT_EQ(ps.sessions(0).subscribers(), 2u);
  EXPECT_GE(ps.publishes(), 1u);
  EXPECT_GE(ps.deliveries(), 1u);
  auto table = Ctl({"pubsub"});
  EXPECT_NE(table.out.find("sports"), std::string::npos) << table.out;

  auto clients = Json<v1::ClientsInfo>({"clients"});
  std::map<std::string, v1::Client> by_name;
  std::set<uint32_t> sub_shards;
  for (const auto& cl : clients.clients()) {
    if (cl.name() == "admin-subscriber") sub_shards.insert(cl.shard());
    if (cl.shard() == 0) by_name[cl.name()] = cl;  // (pub/sub: shard 0's sessions)
  }
  EXPECT_EQ(sub_shards, (std::set<uint32_t>{0, 1})) << "one session per shard";
  ASSERT_TRUE(by_name.count("admin-subscriber"));
  ASSERT_TRUE(by_name.count("admin-ucx-client"));
  EXPECT_EQ(by_name["admin-subscriber"].plane(), "ring");
  EXPECT_EQ(by_name["admin-subscriber"].pid(), static_cast<uint32_t>(getpid()));
  EXPECT_EQ(by_name["admin-subscriber"].subscribers(), 2u);
  EXPECT_EQ(by_name["admin-ucx-client"].plane(), "ucx");
  EXPECT_EQ(by_name["admin-ucx-client"].kind(), "client");
  remote.reset();
  sub.reset();
  for (int i = 0; i < 200; ++i) {  // the core notices both going away
    if (Json<v1::ClientsInfo>({"clients"}).clients_size() == 0) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(Json<v1::ClientsInfo>({"clients"}).clients_size(), 0);
}

TEST_F(AdminTest, StatsConfigAndWatch) {
  auto c = Connect("unix:" + core_->sock, "admin-stats");
  ASSERT_TRUE(c);
  auto before = Json<v1::Stats>({"stats"});
  ASSERT_TRUE(c->Put("s/1", Bytes(5000, 3)));
  std::vector<uint8_t> buf(5000);
  ASSERT_TRUE(c->GetInto("s/1", buf));
  auto after = Json<v1::Stats>({"stats"});
  EXPECT_EQ(after.counters().at("puts"), before.counters().at("puts") + 1);
  EXPECT_EQ(after.counters().at("gets"), before.counters().at("gets") + 1);
  EXPECT_GT(after.uptime_ns(), before.uptime_ns());
  std::map<std::string, uint64_t> samples;
  for (const auto& h : after.histograms()) {
    samples[h.name()] = h.count();
    EXPECT_EQ(h.counts_size(), h.upper_bounds_size() + 1);
  }
  EXPECT_GE(samples["put_commit"], 1u);
  EXPECT_GE(samples["get_first_piece"], 1u);

  auto watch = Ctl({"stats", "--watch", "--interval", "100ms", "--count", "3"});
  EXPECT_EQ(watch.rc, 0) << watch.err;
  size_t n = 0;
  for (size_t at = 0; (at = watch.out.find("-- uptime", at)) != std::string::npos; ++at) ++n;
  EXPECT_EQ(n, 3u) << watch.out;
  EXPECT_NE(watch.out.find("PER SECOND"), std::string::npos);
  // top: a screen per interval (no terminal: printed one after the other, no escapes).
  auto top = Ctl({"top", "--interval", "100ms", "--count", "2"});
  EXPECT_EQ(top.rc, 0) << top.err;
  n = 0;
  for (size_t at = 0; (at = top.out.find("goblin-core up ", at)) != std::string::npos; ++at) ++n;
  EXPECT_EQ(n, 2u) << top.out;
  EXPECT_NE(top.out.find("hit ratio"), std::string::npos) << top.out;
  EXPECT_NE(top.out.find("CHANGE/s"), std::string::npos) << top.out;
  EXPECT_NE(top.out.find("\nputs "), std::string::npos) << top.out;
  EXPECT_NE(top.out.find("put_commit: "), std::string::npos) << top.out;
  EXPECT_EQ(top.out.find('\x1b'), std::string::npos);

  auto config = Json<v1::Config>({"config"});
  EXPECT_EQ(config.settings().at("memory"), "16M");
  EXPECT_EQ(config.settings().at("ssd-dir"), dir_ + "/tier");
  EXPECT_EQ(config.settings().at("numa"), "0");
  EXPECT_EQ(config.settings().at("admin-socket"), core_->sock + ".admin");
  EXPECT_FALSE(config.version().empty());
}

TEST_F(AdminTest, TcpNeedsTheTokenAndUnreachableIsAClearError) {
  const std::string tcp = "127.0.0.1:" + tcp_port_;
  auto none = Ctl({"pool"}, tcp);
  EXPECT_EQ(none.rc, 2);
  EXPECT_NE(none.err.find("UNAUTHENTICATED"), std::string::npos) << none.err;
  auto health = Ctl({"health"}, tcp);
  EXPECT_EQ(health.rc, 2) << "health over TCP without the token must be refused too";
  std::ofstream(dir_ + "/wrong") << "not-the-token-0123456789\n";
  auto wrong = Ctl({"--token-file", dir_ + "/wrong", "pool"}, tcp);
  EXPECT_EQ(wrong.rc, 2);
  EXPECT_NE(wrong.err.find("wrong token"), std::string::npos) << wrong.err;
  auto right = Ctl({"--token-file", dir_ + "/token", "--json", "pool"}, tcp);
  EXPECT_EQ(right.rc, 0) << right.err;
  EXPECT_NE(right.out.find("\"size_bytes\": \"16777216\""), std::string::npos) << right.out;

  auto unreadable = Ctl({"--token-file", dir_ + "/no-such-token", "pool"}, tcp);
  EXPECT_EQ(unreadable.rc, 2);
  EXPECT_NE(unreadable.err.find("unreadable"), std::string::npos) << unreadable.err;

  auto gone = Ctl({"pool"}, "unix:" + dir_ + "/nobody.sock");
  EXPECT_EQ(gone.rc, 2);
  EXPECT_NE(gone.err.find("cannot reach"), std::string::npos) << gone.err;
}

// Bad admin settings are refused at start with the option named.
TEST(AdminFlags, BadSettingsAreClearErrors) {
  std::string log = fmt::format("{}/adminflags-{}.log", test::TmpDir(), getpid());
  auto [rc1, out1] = test::RunCommand(
      {GOBLIN_CORE_BIN, "--listen-unix", test::SocketPath("af"), "--admin-socket-mode", "0999"},
      log);
  EXPECT_NE(rc1, 0);
  EXPECT_NE(out1.find("'0999' is not an octal file mode"), std::string::npos) << out1;
  auto [rc2, out2] = test::RunCommand(
      {GOBLIN_CORE_BIN, "--listen-unix", test::SocketPath("af"), "--admin-listen", "127.0.0.1:0"},
      log);
  EXPECT_NE(rc2, 0);
  EXPECT_NE(out2.find("--admin-listen needs --admin-token-file"), std::string::npos) << out2;
  std::string short_token = fmt::format("{}/short-token-{}", test::TmpDir(), getpid());
  std::ofstream(short_token) << "abc\n";
  auto [rc3, out3] =
      test::RunCommand({GOBLIN_CORE_BIN, "--listen-unix", test::SocketPath("af"), "--admin-listen",
                        "127.0.0.1:0", "--admin-token-file", short_token},
                       log);
  EXPECT_NE(rc3, 0);
  EXPECT_NE(out3.find("at least 16 characters"), std::string::npos) << out3;
  std::filesystem::remove(short_token);
  // An admin socket that cannot be bound (its directory is missing): an error, not a crash.
  auto [rc4, out4] = test::RunCommand({GOBLIN_CORE_BIN, "--listen-unix", test::SocketPath("af"),
                                       "--admin-socket", "/nonexistent-goblin-dir/core.admin"},
                                      log);
  EXPECT_EQ(rc4, 1) << out4;
  EXPECT_NE(out4.find("cannot listen for admin calls on unix:/nonexistent-goblin-dir/core.admin"),
            std::string::npos)
      << out4;
  std::filesystem::remove(log);
}

// Last (gtest runs a suite's tests in order): the core goes away.
TEST_F(AdminTest, ZzHealthIsServingThenNotServingDuringShutdown) {
  auto ok = Ctl({"health"});
  EXPECT_EQ(ok.rc, 0);
  EXPECT_EQ(ok.out, "SERVING\n");
  auto json = Json<grpc::health::v1::HealthCheckResponse>({"health"});
  EXPECT_EQ(json.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  core_->proc.Signal(SIGTERM);
  Run during;
  for (int i = 0; i < 100; ++i) {  // within --shutdown-grace (1.5 s)
    during = Ctl({"health"});
    if (during.rc != 0) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(during.rc, 1) << during.out << during.err;
  EXPECT_EQ(during.out, "NOT_SERVING\n");
  EXPECT_EQ(core_->proc.Wait(10s), 0) << core_->proc.Output();
  auto after = Ctl({"health"});
  EXPECT_EQ(after.rc, 2);
  EXPECT_NE(after.err.find("cannot reach"), std::string::npos) << after.err;
}

}  // namespace
}  // namespace goblin
