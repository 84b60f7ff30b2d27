// The HTTP front's access log (--access-log), end to end: goblin-core + goblin-gateway
// --mirror in front of the test origin, --net sync and async, HTTP/1.1 and h2c (curl
// --http2-prior-knowledge). One line per exchange, NCSA combined + cache status, TTFB,
// duration and bytes: misses, hits, ranges, HEAD, passes, origin errors, purges, a
// malformed request and a client leaving mid-body, each line checked field by field; the
// file read by awk and goaccess (which must count every line as valid); rotation with
// SIGUSR1; several workers writing one file (h2load).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "tests/system/mirror_harness.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

using test::NetMode;

struct Line {
  std::string host, time, request, referer, agent, cache;
  int status = 0;
  uint64_t body = 0, bytes = 0;
  double ttfb = -1, duration = -1;
};

std::vector<Line> ParseLog(const std::string& text, std::vector<std::string>* bad) {
  static const std::regex re(
      R"re(^(\S+) - - \[([^\]]+)\] "([^"]*)" (\d{3}) (\d+) "([^"]*)" "([^"]*)" (HIT|MISS|PASS|PURGE|SYNTH) (\d+\.\d{6}) (\d+\.\d{6}) (\d+)$)re");
  std::vector<Line> lines;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    std::string l = text.substr(at, nl - at);
    at = nl + 1;
    std::smatch m;
    if (!std::regex_match(l, m, re)) {
      bad->push_back(l);
      continue;
    }
    Line x;
    x.host = m[1];
    x.time = m[2];
    x.request = m[3];
    x.status = std::stoi(m[4]);
    x.body = std::stoull(m[5]);
    x.referer = m[6];
    x.agent = m[7];
    x.cache = m[8];
    x.ttfb = std::stod(m[9]);
    x.duration = std::stod(m[10]);
    x.bytes = std::stoull(m[11]);
    lines.push_back(x);
  }
  return lines;
}

class AccessLog : public testing::TestWithParam<NetMode>, public test::MirrorHarness {
 protected:
  void SetUp() override {
    if (!test::HaveCurlAndPython()) GTEST_SKIP() << "curl and python3 are needed";
    ASSERT_TRUE(StartCoreAndOrigin("al-" + test::CurrentTestName()))
        << (core_ ? core_->Output() : std::string());
    log_ = dir_ + "/gateway-access.log";
  }
  void TearDown() override { StopAll(); }
  std::vector<std::string> Proto(std::vector<std::string> args = {}) const {
    args.push_back(GetParam().curl_protocol());
    return args;
  }
  std::string Protocol() const { return GetParam().h2 ? "HTTP/2.0" : "HTTP/1.1"; }
  // The log once it has `n` lines (the writer drains every 100 ms; 10 s at most).
  std::string WaitForLines(const std::string& path, size_t n) {
    std::string text;
    for (int i = 0; i < 200; ++i) {
      text = test::ReadFileBytes(path);
      if (static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) >= n) break;
      std::this_thread::sleep_for(50ms);
    }
    return text;
  }
  std::string StopGateway() {
    gateway_->Signal(SIGTERM);
    EXPECT_EQ(gateway_->Wait(20s), 0);
    return gateway_->Output();
  }
  std::string log_;
};

TEST_P(AccessLog, OneLinePerExchangeReadByAwkAndGoaccess) {
  StartGateway(GetParam().net, {"--access-log", log_});
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  struct Want {
    std::string request, cache;
    int status;
    uint64_t body;  // UINT64_MAX: not checked
  };
  std::vector<Want> want;
  const std::string p = "/gen/100K/a";
  auto get = [&](std::vector<std::string> args, const std::string& path) {
    return Curl(path, Proto(std::move(args)));
  };
  EXPECT_EQ(get({"-A", "an \"agent\"\\x", "-e", "http://ref/"}, p).code, 200);
  want.push_back({"GET " + p, "MISS", 200, 102400});
  EXPECT_EQ(get({}, p).code, 200);
  want.push_back({"GET " + p, "HIT", 200, 102400});
  EXPECT_EQ(get({"-r", "0-99"}, p).code, 206);
  want.push_back({"GET " + p, "HIT", 206, 100});
  EXPECT_EQ(get({"-I"}, p).code, 200);
  want.push_back({"HEAD " + p, "HIT", 200, 0});
  EXPECT_EQ(get({"-d", "hello"}, "/gen/1K/post").code, 200);
  want.push_back({"POST /gen/1K/post", "PASS", 200, UINT64_MAX});
  EXPECT_EQ(get({}, "/gen/10K/e?fault=500").code, 500);
  want.push_back({"GET /gen/10K/e?fault=500", "PASS", 500, UINT64_MAX});
  EXPECT_EQ(get({"-X", "PURGE"}, p).code, 200);
  want.push_back({"PURGE " + p, "PURGE", 200, 11});
  // A malformed request (HTTP/1.1 on the same port in either mode).
  int fd = test::ConnectLoopback(port_);
  ASSERT_GE(fd, 0);
  const std::string junk = "GARBAGE\r\n\r\n";
  ASSERT_EQ(send(fd, junk.data(), junk.size(), MSG_NOSIGNAL), static_cast<ssize_t>(junk.size()));
  char buf[65536];
  while (recv(fd, buf, sizeof buf, 0) > 0) {
  }
  close(fd);
  // A client that leaves a 64 MiB miss after its first MiB (a small receive buffer).
  fd = test::ConnectLoopback(port_, 64 << 10);
  ASSERT_GE(fd, 0);
  const std::string big = "GET /gen/64M/big?pace=1 HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(send(fd, big.data(), big.size(), MSG_NOSIGNAL), static_cast<ssize_t>(big.size()));
  size_t got = 0;
  for (ssize_t n; got < (1u << 20) && (n = recv(fd, buf, sizeof buf, 0)) > 0;) got += n;
  close(fd);
  // ... and the next request is logged as ever.
  EXPECT_EQ(get({}, "/gen/2K/next").code, 200);
  const size_t total = want.size() + 3;
  std::vector<std::string> bad;
  std::vector<Line> lines = ParseLog(WaitForLines(log_, total), &bad);
  EXPECT_TRUE(bad.empty()) << fmt::format("{}", fmt::join(bad, "\n"));
  ASSERT_EQ(lines.size(), total) << test::ReadFileBytes(log_);
  for (size_t i = 0; i < want.size(); ++i) {
    const Line& l = lines[i];
    SCOPED_TRACE(want[i].request);
    EXPECT_EQ(l.host, "127.0.0.1");
    EXPECT_TRUE(std::regex_match(l.time, std::regex(R"(\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d \+0000)")))
        << l.time;
    EXPECT_EQ(l.request, want[i].request + " " + Protocol());
    EXPECT_EQ(l.status, want[i].status);
    if (want[i].body != UINT64_MAX) {
      EXPECT_EQ(l.body, want[i].body);
    }
    EXPECT_EQ(l.cache, want[i].cache);
    EXPECT_GT(l.bytes, l.body);  // (the head too)
    EXPECT_LE(l.ttfb, l.duration);
    EXPECT_LT(l.duration, 10.0);
  }
  EXPECT_EQ(lines[0].agent, "an \\x22agent\\x22\\x5Cx");  // (quotes and backslashes escaped)
  EXPECT_EQ(lines[0].referer, "http://ref/");
  EXPECT_EQ(lines[1].referer, "-");
  const Line& malformed = lines[want.size()];
  EXPECT_EQ(malformed.request, "-");
  EXPECT_EQ(malformed.status, 400);
  EXPECT_EQ(malformed.cache, "SYNTH");
  // The exchange left behind is logged when the gateway sees its connection gone, which may
  // come after the next request's line (async h2c, once in CI): the last two in either order.
  const bool swapped = lines.back().request.starts_with("GET /gen/64M/");
  const Line& left = swapped ? lines.back() : lines[want.size() + 1];
  const Line& next = swapped ? lines[want.size() + 1] : lines.back();
  EXPECT_EQ(left.request, "GET /gen/64M/big?pace=1 HTTP/1.1");
  EXPECT_EQ(left.status, 200);
  EXPECT_EQ(left.cache, "MISS");
  EXPECT_GE(left.body, got);
  EXPECT_LT(left.body, 64u << 20);
  EXPECT_EQ(next.request, "GET /gen/2K/next " + Protocol());
  EXPECT_EQ(next.body, 2048u);
  // awk, splitting at the quotes (the request line may have no spaces: "-"): the third
  // field holds the status and the body bytes.
  uint64_t sum = 0;
  for (const Line& l : lines) sum += l.body;
  auto [arc, awk] = test::RunCommand(
      {"/usr/bin/awk", "-F", "\"",
       "{ n++; split($3, f, \" \"); b += f[2]; if (f[1] >= 500) e++ } END { printf \"%d %d %d\", "
       "n, b, e }",
       log_},
      dir_ + "/awk.log", 20s);
  EXPECT_EQ(arc, 0);
  EXPECT_EQ(awk, fmt::format("{} {} 1", total, sum));
  // goaccess: every line valid, the bandwidth the sum of the body bytes.
  if (fs::exists("/usr/bin/goaccess")) {
    auto [grc, ga] =
        test::RunCommand({"/usr/bin/goaccess", log_, "--log-format",
                          R"(%h %^[%d:%t %^] "%r" %s %b "%R" "%u" %C %^ %T %^)", "--date-format",
                          "%d/%b/%Y", "--time-format", "%T", "-o", dir_ + "/report.json"},
                         dir_ + "/goaccess.log", 60s);
    EXPECT_EQ(grc, 0) << ga;
    const std::string report = test::ReadFileBytes(dir_ + "/report.json");
    EXPECT_NE(report.find(fmt::format("\"total_requests\": {},", total)), std::string::npos)
        << report.substr(0, 600);
    EXPECT_NE(report.find("\"failed_requests\": 0,"), std::string::npos) << report.substr(0, 600);
    EXPECT_NE(report.find(fmt::format("\"bandwidth\": {},", sum)), std::string::npos)
        << report.substr(0, 600);
  } else {
    ADD_FAILURE() << "goaccess is missing (scripts/install-deps.sh installs it)";
  }
  // Rotation: the file moved away, SIGUSR1, the next line in a new file.
  fs::rename(log_, log_ + ".1");
  gateway_->Signal(SIGUSR1);
  for (int i = 0; i < 200 && gateway_->Output().find("reopened") == std::string::npos; ++i)
    std::this_thread::sleep_for(50ms);
  EXPECT_EQ(get({}, "/gen/2K/next").code, 200);
  std::vector<Line> after = ParseLog(WaitForLines(log_, 1), &bad);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].cache, "HIT");
  EXPECT_EQ(ParseLog(test::ReadFileBytes(log_ + ".1"), &bad).size(), total);
  std::string out = StopGateway();
  EXPECT_NE(out.find(fmt::format("{} lines, 0 dropped", total + 1)), std::string::npos) << out;
}

// Several workers, one file: every request of h2load's is one line, none torn or lost.
TEST_P(AccessLog, WorkersWriteOneFile) {
  if (!fs::exists("/usr/bin/h2load")) GTEST_SKIP() << "h2load (nghttp2-client) is needed";
  StartGateway(GetParam().net, {"--access-log", log_, "--threads", "2"});
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  std::vector<std::string> argv{"/usr/bin/h2load", "-n", "600", "-c", "6", "-m", "4"};
  if (!GetParam().h2) argv.push_back("--h1");
  argv.push_back(base_ + "/gen/3K/w1");
  argv.push_back(base_ + "/gen/40K/w2");
  auto [rc, out] = test::RunCommand(argv, dir_ + "/h2load.log", 120s);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("600 succeeded, 0 failed"), std::string::npos) << out;
  std::vector<std::string> bad;
  std::vector<Line> lines = ParseLog(WaitForLines(log_, 600), &bad);
  EXPECT_TRUE(bad.empty()) << bad.size()
                           << " bad lines, the first: " << (bad.empty() ? "" : bad[0]);
  EXPECT_EQ(lines.size(), 600u);
  size_t ok = 0;
  for (const Line& l : lines) ok += l.status == 200 && (l.body == 3072 || l.body == 40960);
  EXPECT_EQ(ok, 600u);
  std::string log = StopGateway();
  EXPECT_NE(log.find("600 lines, 0 dropped"), std::string::npos) << log;
}

INSTANTIATE_TEST_SUITE_P(Modes, AccessLog, test::AllNetModes(), test::NetModeName);

}  // namespace
}  // namespace goblin
