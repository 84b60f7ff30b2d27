// Prometheus text (PromText) and the metrics endpoint (MetricsServer) in process: families,
// escaped labels, cumulative histogram buckets, and what the endpoint answers.
#include "goblin/common/metrics.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace goblin {
namespace {

TEST(PromText, FamiliesLabelsAndHistograms) {
  PromText t;
  t.Family("x_total", "counter", "Things");
  t.Sample("x_total", PromText::Label("kind", "a\"b\\c\nd"), 7);
  t.Sample("x_total", "", 3);
  LatencyHistogram h;
  h.Record(2'500);           // 2 us (whole microseconds): the 2 us bucket
  h.Record(3'000'000);       // 3 ms: the 5 ms bucket
  h.Record(20'000'000'000);  // 20 s: above every bound
  t.Family("lat_seconds", "histogram", "Latency");
  t.Histogram("lat_seconds", "", h);
  const std::string& s = t.text();
  EXPECT_NE(s.find("# HELP x_total Things\n# TYPE x_total counter\n"), std::string::npos);
  EXPECT_NE(s.find("x_total{kind=\"a\\\"b\\\\c\\nd\"} 7\n"), std::string::npos) << s;
  EXPECT_NE(s.find("\nx_total 3\n"), std::string::npos);
  EXPECT_NE(s.find("lat_seconds_bucket{le=\"1e-06\"} 0\n"), std::string::npos) << s;
  EXPECT_NE(s.find("lat_seconds_bucket{le=\"2e-06\"} 1\n"), std::string::npos) << s;
  EXPECT_NE(s.find("lat_seconds_bucket{le=\"0.005\"} 2\n"), std::string::npos) << s;
  EXPECT_NE(s.find("lat_seconds_bucket{le=\"10\"} 2\n"), std::string::npos) << s;
  EXPECT_NE(s.find("lat_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos) << s;
  EXPECT_NE(s.find("lat_seconds_count 3\n"), std::string::npos) << s;
}

// One request to 127.0.0.1:port; the whole answer.
std::string Ask(int port, const std::string& request) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    char buf[4096];
    for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, n);
  }
  close(fd);
  return out;
}

TEST(MetricsServer, ServesGetMetricsOnly) {
  int renders = 0;
  auto s = MetricsServer::Start("127.0.0.1:0", [&] {
    ++renders;
    return std::string("up 1\n");
  });
  ASSERT_TRUE(s.has_value()) << s.error().ToString();
  const int port = (*s)->port();
  ASSERT_GT(port, 0);
  EXPECT_EQ((*s)->address(), "127.0.0.1:" + std::to_string(port));
  std::string r = Ask(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 200 OK\r\n")) << r;
  EXPECT_NE(r.find("text/plain; version=0.0.4"), std::string::npos);
  EXPECT_TRUE(r.ends_with("\r\n\r\nup 1\n")) << r;
  EXPECT_TRUE(Ask(port, "HEAD /metrics HTTP/1.1\r\n\r\n").ends_with("\r\n\r\n"));
  EXPECT_TRUE(Ask(port, "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
  EXPECT_TRUE(Ask(port, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
  EXPECT_TRUE(Ask(port, "garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
  EXPECT_EQ(renders, 2);
  for (const char* bad : {"127.0.0.1", "127.0.0.1:99999", "nohost:1", "1.2.3.4.5:80"}) {
    EXPECT_FALSE(MetricsServer::Start(bad, [] { return std::string(); }).has_value()) << bad;
  }
}

}  // namespace
}  // namespace goblin
