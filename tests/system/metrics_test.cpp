// Prometheus metrics (--metrics-listen) of goblin-core and goblin-gateway, end to end: the
// mirror in front of the test origin (--net sync and async, two HTTP workers), requests
// with a known outcome (a miss, hits, an origin fault), then both endpoints scraped by
// curl (values checked, promtool's lint clean, 404/405 for anything but GET /metrics) and
// by a real Prometheus (Debian's package) whose query API must see the same values and
// both targets up; and the memcache and RESP fronts' counters on the gateway's endpoint.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "tests/system/mirror_harness.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// A free TCP port on 127.0.0.1 (bound, then released: for a program that takes a port).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return -1;
  }
  close(fd);
  return ntohs(a.sin_port);
}

// The value of the sample `line_start` (e.g. `goblin_gateway_http_hits_total ` or one with
// labels) in Prometheus text; -1 if absent.
double Value(const std::string& text, const std::string& line_start) {
  for (size_t at = text.find(line_start); at != std::string::npos;
       at = text.find(line_start, at + 1)) {
    if (at != 0 && text[at - 1] != '\n') continue;
    return std::stod(text.substr(at + line_start.size()));
  }
  return -1;
}

class Metrics : public testing::TestWithParam<std::string>, public test::MirrorHarness {
 protected:
  void SetUp() override {
    if (!test::HaveCurlAndPython()) GTEST_SKIP() << "curl and python3 are needed";
    ASSERT_TRUE(StartCoreAndOrigin("metrics-" + GetParam(), {"--metrics-listen", "127.0.0.1:0"}))
        << (core_ ? core_->Output() : std::string());
  }
  void TearDown() override {
    prometheus_.reset();
    StopAll();
  }
  std::string Scrape(const std::string& port, const std::string& tag) {
    Reply r = CurlUrl(fmt::format("http://127.0.0.1:{}/metrics", port), {}, tag);
    EXPECT_EQ(r.code, 200) << tag;
    EXPECT_NE(r.headers.find("text/plain; version=0.0.4"), std::string::npos) << r.headers;
    return r.body;
  }
  std::unique_ptr<test::Process> prometheus_;
};

TEST_P(Metrics, CoreAndGatewayScrapedByPrometheus) {
  StartGateway(GetParam(), {"--metrics-listen", "127.0.0.1:0", "--threads", "2"});
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  const std::string gw_port = PortFromLog("Prometheus metrics on http://127.0.0.1:");
  std::smatch m;
  const std::string core_log = core_->Output();
  ASSERT_TRUE(std::regex_search(core_log, m, std::regex("metrics on http://127.0.0.1:(\\d+)/")))
      << core_log;
  const std::string core_port = m[1];
  ASSERT_FALSE(gw_port.empty()) << gateway_->Output();
  const std::string gw = gw_port.substr(0, gw_port.find('/'));
  // One miss, two hits, one origin fault (a malformed answer: 502).
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Curl("/gen/20K/m").code, 200);
  EXPECT_EQ(Curl("/gen/1K/bad?fault=badhead").code, 502);
  // The workers publish their counters every 200 ms and before they sleep (a scrape may
  // come between a request's parse and its answer: wait for the answers).
  std::string text;
  for (int i = 0; i < 100; ++i) {
    text = Scrape(gw, "g");
    if (Value(text, "goblin_gateway_http_ttfb_seconds_count ") >= 4 &&
        Value(text, "goblin_gateway_http_origin_errors_total{kind=\"malformed\"} ") >= 1)
      break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(Value(text, "goblin_gateway_http_requests_total "), 4) << text;
  EXPECT_EQ(Value(text, "goblin_gateway_http_hits_total "), 2);
  EXPECT_EQ(Value(text, "goblin_gateway_http_misses_total "), 2);
  EXPECT_EQ(Value(text, "goblin_gateway_http_origin_errors_total{kind=\"malformed\"} "), 1);
  EXPECT_EQ(Value(text, "goblin_gateway_http_origin_errors_total{kind=\"timeout\"} "), 0);
  EXPECT_EQ(Value(text, "goblin_gateway_http_ttfb_seconds_count "), 4);
  EXPECT_EQ(Value(text, "goblin_gateway_http_ttfb_seconds_bucket{le=\"+Inf\"} "), 4);
  EXPECT_EQ(Value(text, "goblin_gateway_http_workers "), 2);
  const std::string core = Scrape(core_port, "c");
  EXPECT_EQ(Value(core, "goblin_core_objects "), 1) << core;
  EXPECT_EQ(Value(core, "goblin_core_fills_committed_total "), 1);
  EXPECT_GE(Value(core, "goblin_core_tier_read_bytes_total{tier=\"0\"} "), 0);
  EXPECT_GE(Value(core, "goblin_core_uptime_seconds "), 0);
  // Bytes served by source: the first hit's 20 KiB came from the object's RAM head, or from
  // its fill when it met the fill still committing (a loaded machine: seen under ctest -j3);
  // the second may have been a local hit (the gateway read the head itself).
  EXPECT_GE(Value(core, "goblin_core_served_bytes_total{source=\"ram_head\"} ") +
                Value(core, "goblin_core_served_bytes_total{source=\"fill\"} "),
            20 * 1024)
      << core;
  for (const char* source : {"ram_tail", "disk", "fill"}) {
    EXPECT_GE(Value(core, fmt::format("goblin_core_served_bytes_total{{source=\"{}\"}} ", source)),
              0)
        << source;
  }
  // promtool's lint: nothing to say about either.
  if (fs::exists("/usr/bin/promtool")) {
    for (const auto& [name, body] : {std::pair{"gateway", text}, std::pair{"core", core}}) {
      std::ofstream(dir_ + "/" + name + ".prom") << body;
      auto [rc, out] = test::RunCommand(
          {"/bin/sh", "-c",
           fmt::format("/usr/bin/promtool check metrics < {}/{}.prom", dir_, name)},
          dir_ + "/promtool.log", 30s);
      EXPECT_EQ(rc, 0) << name << ": " << out;
      EXPECT_EQ(out, "") << name;
    }
  } else {
    ADD_FAILURE() << "promtool is missing (scripts/install-deps.sh installs prometheus)";
  }
  // Anything but GET/HEAD /metrics.
  EXPECT_EQ(CurlUrl(fmt::format("http://127.0.0.1:{}/other", gw)).code, 404);
  EXPECT_EQ(CurlUrl(fmt::format("http://127.0.0.1:{}/metrics", gw), {"-X", "POST"}).code, 405);
  EXPECT_EQ(CurlUrl(fmt::format("http://127.0.0.1:{}/metrics", core_port), {"-I"}).code, 200);
  // A real Prometheus scraping both every second.
  if (!fs::exists("/usr/bin/prometheus")) {
    ADD_FAILURE() << "prometheus is missing (scripts/install-deps.sh installs it)";
    return;
  }
  const int prom_port = FreePort();
  ASSERT_GT(prom_port, 0);
  std::ofstream(dir_ + "/prometheus.yml") << fmt::format(
      "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"
      "  - job_name: goblin-core\n    static_configs:\n      - targets: ['127.0.0.1:{}']\n"
      "  - job_name: goblin-gateway\n    static_configs:\n      - targets: ['127.0.0.1:{}']\n",
      core_port, gw);
  prometheus_ = std::make_unique<test::Process>(
      std::vector<std::string>{"/usr/bin/prometheus", "--config.file=" + dir_ + "/prometheus.yml",
                               "--storage.tsdb.path=" + dir_ + "/tsdb",
                               fmt::format("--web.listen-address=127.0.0.1:{}", prom_port)},
      dir_ + "/prometheus.log");
  auto query = [&](const std::string& q, const std::string& tag) {
    return CurlUrl(fmt::format("http://127.0.0.1:{}/api/v1/query", prom_port),
                   {"-G", "--data-urlencode", "query=" + q}, tag)
        .body;
  };
  // {"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[T,"2"]}]}}
  auto scalar = [&](const std::string& q) {
    std::smatch v;
    const std::string body = query(q, "q");
    return std::regex_search(body, v, std::regex(R"re("value":\[[0-9.]+,"([^"]+)"\])re"))
               ? v[1].str()
               : std::string();
  };
  std::string up, requests;
  for (int i = 0; i < 120 && (up != "2" || requests != "4"); ++i) {
    std::this_thread::sleep_for(250ms);
    up = scalar("sum(up)");
    requests = scalar("sum(goblin_gateway_http_requests_total)");
  }
  EXPECT_EQ(up, "2") << prometheus_->Output();
  EXPECT_EQ(requests, "4") << prometheus_->Output();
  EXPECT_EQ(scalar("goblin_core_objects"), "1");
  EXPECT_EQ(scalar("sum(goblin_gateway_http_origin_errors_total{kind=\"malformed\"})"), "1");
  EXPECT_EQ(scalar("sum(goblin_gateway_http_ttfb_seconds_count)"), "4");
}

// A raw exchange on a unix socket: sends `request`, reads until the reply ends with `end`
// (at most 5 s).
std::string Exchange(int fd, const std::string& request, std::string_view end) {
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size()))
    return "(send failed)";
  std::string out;
  for (int i = 0; i < 50 && !out.ends_with(end); ++i) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

int ConnectUnix(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  for (int i = 0; i < 500; ++i) {  // (the socket appears once its front listens)
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    std::this_thread::sleep_for(10ms);
  }
  close(fd);
  return -1;
}

// The memcache and RESP fronts' counters on the same endpoint: commands with a known
// outcome on each, then the values, the client levels and promtool's lint.
TEST_P(Metrics, MemcacheAndRespFrontsAreCounted) {
  const std::string mc_sock = test::SocketPath("mmc"), resp_sock = test::SocketPath("mrs");
  StartGateway(GetParam(), {"--metrics-listen", "127.0.0.1:0", "--memcache-unix", mc_sock,
                            "--memcache-threads", "1", "--resp-unix", resp_sock});
  const std::string gw_port = PortFromLog("Prometheus metrics on http://127.0.0.1:");
  ASSERT_FALSE(gw_port.empty()) << gateway_->Output();
  const std::string gw = gw_port.substr(0, gw_port.find('/'));
  const int mc = ConnectUnix(mc_sock), r1 = ConnectUnix(resp_sock), r2 = ConnectUnix(resp_sock);
  ASSERT_GE(mc, 0) << gateway_->Output();
  ASSERT_GE(r1, 0);
  ASSERT_GE(r2, 0);
  EXPECT_EQ(Exchange(mc, "set a 0 0 1\r\nx\r\n", "\r\n"), "STORED\r\n");
  EXPECT_EQ(Exchange(mc, "get a\r\n", "END\r\n"), "VALUE a 0 1\r\nx\r\nEND\r\n");
  EXPECT_EQ(Exchange(mc, "get b\r\n", "END\r\n"), "END\r\n");
  EXPECT_EQ(Exchange(mc, "delete b\r\n", "\r\n"), "NOT_FOUND\r\n");
  EXPECT_EQ(Exchange(mc, "bogus\r\n", "\r\n"), "ERROR\r\n");
  EXPECT_EQ(Exchange(r1, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n", "\r\n"), "+OK\r\n");
  EXPECT_EQ(Exchange(r1, "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", "v\r\n"), "$1\r\nv\r\n");
  EXPECT_EQ(Exchange(r1, "*2\r\n$3\r\nGET\r\n$4\r\nnope\r\n", "\r\n"), "$-1\r\n");
  EXPECT_NE(Exchange(r2, "*2\r\n$9\r\nSUBSCRIBE\r\n$2\r\nch\r\n", ":1\r\n"), "");
  EXPECT_EQ(Exchange(r1, "*3\r\n$7\r\nPUBLISH\r\n$2\r\nch\r\n$2\r\nhi\r\n", "\r\n"), ":1\r\n");
  EXPECT_NE(Exchange(r2, "", "hi\r\n"), "");
  std::string text;
  for (int i = 0; i < 100; ++i) {
    text = Scrape(gw, "g");
    if (Value(text, "goblin_gateway_resp_pubsub_messages_out_total ") >= 1 &&
        Value(text, "goblin_gateway_memcache_protocol_errors_total ") >= 1)
      break;
    std::this_thread::sleep_for(50ms);
  }
  auto cmd = [&](const char* command, const char* status) {
    return Value(
        text, fmt::format("goblin_gateway_memcache_commands_total{{command=\"{}\",status=\"{}\"}} ",
                          command, status));
  };
  EXPECT_EQ(cmd("get", "hit"), 1) << text;
  EXPECT_EQ(cmd("get", "miss"), 1);
  EXPECT_EQ(cmd("set", "all"), 1);
  EXPECT_EQ(cmd("delete", "miss"), 1);
  EXPECT_EQ(cmd("delete", "hit"), 0);
  EXPECT_EQ(Value(text, "goblin_gateway_memcache_protocol_errors_total "), 1);
  EXPECT_EQ(Value(text, "goblin_gateway_memcache_connections_total "), 1);
  EXPECT_EQ(Value(text, "goblin_gateway_memcache_current_connections "), 1);
  EXPECT_GT(Value(text, "goblin_gateway_memcache_read_bytes_total "), 30);
  EXPECT_EQ(Value(text, "goblin_gateway_resp_connections_total "), 2);
  EXPECT_EQ(Value(text, "goblin_gateway_resp_connected_clients "), 2);
  EXPECT_EQ(Value(text, "goblin_gateway_resp_pubsub_clients "), 1);
  EXPECT_EQ(Value(text, "goblin_gateway_resp_keyspace_hits_total "), 1);
  EXPECT_EQ(Value(text, "goblin_gateway_resp_keyspace_misses_total "), 1);
  EXPECT_EQ(Value(text, "goblin_gateway_resp_pubsub_messages_out_total "), 1);
  EXPECT_GE(Value(text, "goblin_gateway_resp_commands_processed_total "), 5);
  EXPECT_GT(Value(text, "goblin_gateway_resp_net_output_bytes_total "), 20);
  EXPECT_EQ(Value(text, "goblin_gateway_http_requests_total "), 0);  // (the HTTP front too)
  // A client that leaves is no longer counted.
  close(mc);
  close(r2);
  for (int i = 0; i < 100; ++i) {
    text = Scrape(gw, "g");
    if (Value(text, "goblin_gateway_resp_pubsub_clients ") == 0 &&
        Value(text, "goblin_gateway_memcache_current_connections ") == 0)
      break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(Value(text, "goblin_gateway_resp_pubsub_clients "), 0) << text;
  EXPECT_EQ(Value(text, "goblin_gateway_resp_connected_clients "), 1);
  EXPECT_EQ(Value(text, "goblin_gateway_memcache_current_connections "), 0);
  close(r1);
  if (fs::exists("/usr/bin/promtool")) {
    std::ofstream(dir_ + "/fronts.prom") << text;
    auto [rc, out] = test::RunCommand(
        {"/bin/sh", "-c", fmt::format("/usr/bin/promtool check metrics < {}/fronts.prom", dir_)},
        dir_ + "/promtool.log", 30s);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_EQ(out, "");
  }
}

INSTANTIATE_TEST_SUITE_P(Net, Metrics, testing::Values("sync", "async"));

}  // namespace
}  // namespace goblin
