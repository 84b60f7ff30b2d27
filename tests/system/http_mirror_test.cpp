// The HTTP mirror end to end: goblin-core (with a disk tier) + goblin-gateway --mirror in
// front of the project's test origin (tests/support/test_origin.py, which logs every
// request), driven by curl and raw sockets. Byte-exact bodies, MISS then HIT, ranges at and
// across the RAM-head boundary, multipart ranges, 416, 304, HEAD, coalescing (one origin
// request for parallel clients), a range on a miss answered at once, uncacheable answers,
// origin faults (500, reset, hang, down), PURGE allowed and refused, request limits,
// pipelining, and a client leaving mid-body.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tests/system/mirror_harness.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class HttpMirror : public testing::TestWithParam<std::string>, public test::MirrorHarness {
 protected:
  void SetUp() override {
    if (!fs::exists("/usr/bin/curl") || !fs::exists("/usr/bin/python3")) {
      GTEST_SKIP() << "curl and python3 are needed";
    }
    std::string name = testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '-');
    ASSERT_TRUE(StartCoreAndOrigin(name, CoreExtra())) << (core_ ? core_->Output() : std::string());
  }
  // goblin-core flags beyond the harness's defaults.
  virtual std::vector<std::string> CoreExtra() const { return {}; }
  void StartGateway(std::vector<std::string> extra = {}) {
    MirrorHarness::StartGateway(GetParam(), std::move(extra));
    ASSERT_FALSE(port_.empty()) << gateway_->Output();
  }
  void TearDown() override { StopAll(); }
  // A log outside the scratch directory (StopAll removes that), one per test process and
  // parameter: ctest runs the sync and async instances side by side.
  std::string RefusedLog(const std::string& tag) const {
    return fmt::format("{}/{}-refused-{}-{}.log", test::TmpDir(), tag, GetParam(), getpid());
  }
};

TEST_P(HttpMirror, MissThenHitByteExactWithCacheHeaders) {
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  std::string want = Origin("/gen/3M/a");
  ASSERT_EQ(want.size(), 3u << 20);
  auto miss = Curl("/gen/3M/a");
  EXPECT_EQ(miss.code, 200);
  EXPECT_TRUE(HasHeader(miss.headers, "X-Cache: MISS")) << miss.headers;
  EXPECT_EQ(miss.body, want);
  auto hit = Curl("/gen/3M/a");
  EXPECT_EQ(hit.code, 200);
  EXPECT_TRUE(HasHeader(hit.headers, "X-Cache: HIT")) << hit.headers;
  EXPECT_TRUE(HasHeader(hit.headers, "Via: 1.1 goblin"));
  EXPECT_TRUE(HasHeader(hit.headers, "Accept-Ranges: bytes"));
  EXPECT_TRUE(HasHeader(hit.headers, "Content-Length: 3145728"));
  EXPECT_NE(hit.headers.find("ETag: \""), std::string::npos);
  EXPECT_NE(hit.headers.find("\r\nAge: "), std::string::npos);
  EXPECT_EQ(hit.body, want);
  EXPECT_EQ(OriginHits("/gen/3M/a"), 2);  // ours above, and the gateway's one fetch
}

// A fixed send buffer (--send-buffer) on every client connection: misses and hits of an
// object many times the buffer arrive whole, also for several clients at once. One too
// small to hold a few of loopback's 64 KiB segments is refused (each window would wait for
// the client's delayed ACK: 20 MiB took 12 s with 32 KiB).
TEST_P(HttpMirror, AFixedSendBufferDeliversBigObjectsWhole) {
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--send-buffer", "256K"}));
  std::string want = Origin("/gen/20M/sb");
  auto miss = Curl("/gen/20M/sb");
  EXPECT_EQ(miss.code, 200);
  EXPECT_EQ(miss.body, want);
  std::vector<Background> readers;
  for (int i = 0; i < 3; ++i) {
    readers.push_back(CurlInBackground("/gen/20M/sb", fmt::format("r{}", i)));
  }
  for (Background& b : readers) {
    Reply hit = Finish(b);
    EXPECT_EQ(hit.code, 200);
    EXPECT_TRUE(hit.body == want) << b.tag << ": " << hit.body.size() << " bytes";
  }
  EXPECT_EQ(OriginHits("/gen/20M/sb"), 2);  // ours, and the gateway's one fetch
  StopAll();
  auto [rc, out] = test::RunCommand({GOBLIN_GATEWAY_BIN, "--send-buffer", "64K", "--mirror",
                                     "http://127.0.0.1:1", "--http-port=-1"},
                                    RefusedLog("sb"));
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--send-buffer"), std::string::npos) << out;
}

// Without --send-buffer, a client on this host gets --same-host-send-buffer (512K by
// default) at accept, counted; 0 turns it off, and a fixed --send-buffer takes its place.
// Objects many times the buffer arrive whole either way.
TEST_P(HttpMirror, ClientsOnThisHostGetTheSameHostSendBuffer) {
  std::string want = Origin("/gen/6M/sh");
  int run = 0;
  for (auto [args, given] :
       {std::pair{std::vector<std::string>{}, true},
        std::pair{std::vector<std::string>{"--same-host-send-buffer", "0"}, false},
        std::pair{std::vector<std::string>{"--send-buffer", "256K"}, false}}) {
    SCOPED_TRACE(fmt::format("{}", fmt::join(args, " ")));
    ASSERT_NO_FATAL_FAILURE(
        MirrorHarness::StartGateway(GetParam(), args, fmt::format("gateway-sh{}.log", run++)));
    for (int i = 0; i < 3; ++i) {
      auto r = Curl("/gen/6M/sh");
      EXPECT_EQ(r.code, 200);
      EXPECT_TRUE(r.body == want) << r.body.size() << " bytes";
    }
    gateway_->Signal(SIGTERM);
    ASSERT_EQ(gateway_->Wait(10s), 0);
    std::string log = gateway_->Output();
    std::smatch m;
    static const std::regex re(
        R"((\d+) connections, \d+ taken from a neighbour worker's listener, (\d+) given the same-host send buffer)");
    ASSERT_TRUE(std::regex_search(log, m, re)) << log;
    EXPECT_EQ(std::stol(m[1]), 3) << log;
    EXPECT_EQ(std::stol(m[2]), given ? 3 : 0) << log;
    gateway_.reset();
  }
  auto [rc, out] = test::RunCommand({GOBLIN_GATEWAY_BIN, "--same-host-send-buffer", "100K",
                                     "--mirror", "http://127.0.0.1:1", "--http-port=-1"},
                                    RefusedLog("shsb"));
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--same-host-send-buffer: at least 256K"), std::string::npos) << out;
}

TEST_P(HttpMirror, RangesConditionalsAndHead) {
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  std::string want = Origin("/gen/2M/r");
  ASSERT_EQ(Curl("/gen/2M/r").code, 200);
  // (the fill's commit may still be on its way to the journal when the miss's response has
  // ended; a range request before it is visible is answered by a ranged origin request, by
  // design: wait for it, since this test counts origin requests)
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // Across the 64 KiB RAM head into the disk tail, at the start, the suffix.
  for (auto [first, last] : {std::pair<uint64_t, uint64_t>{65530, 65545},
                             {0, 0},
                             {65536, 1048600},
                             {2097150, 2097151}}) {
    auto r = Curl("/gen/2M/r", {"-r", fmt::format("{}-{}", first, last)});
    EXPECT_EQ(r.code, 206) << first;
    EXPECT_TRUE(
        HasHeader(r.headers, fmt::format("Content-Range: bytes {}-{}/2097152", first, last)));
    EXPECT_EQ(r.body, want.substr(first, last - first + 1)) << first;
  }
  auto suffix = Curl("/gen/2M/r", {"-H", "Range: bytes=-100"});
  EXPECT_EQ(suffix.body, want.substr(want.size() - 100));
  auto multi = Curl("/gen/2M/r", {"-H", "Range: bytes=0-9,100000-100009"});
  EXPECT_EQ(multi.code, 206);
  EXPECT_NE(multi.headers.find("Content-Type: multipart/byteranges; boundary="), std::string::npos);
  EXPECT_NE(multi.body.find("Content-Range: bytes 0-9/2097152\r\n\r\n" + want.substr(0, 10)),
            std::string::npos);
  EXPECT_NE(multi.body.find("Content-Range: bytes 100000-100009/2097152\r\n\r\n" +
                            want.substr(100000, 10)),
            std::string::npos);
  EXPECT_EQ(Curl("/gen/2M/r", {"-H", "Range: bytes=3000000-"}).code, 416);
  // 304s.
  auto full = Curl("/gen/2M/r");
  size_t at = full.headers.find("ETag: ");
  std::string etag = full.headers.substr(at + 6, full.headers.find("\r\n", at) - at - 6);
  auto inm = Curl("/gen/2M/r", {"-H", "If-None-Match: " + etag});
  EXPECT_EQ(inm.code, 304);
  EXPECT_TRUE(inm.body.empty());
  EXPECT_EQ(Curl("/gen/2M/r", {"-H", "If-None-Match: \"other\""}).code, 200);
  EXPECT_EQ(Curl("/gen/2M/r", {"-H", "If-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT"}).code,
            304);
  EXPECT_EQ(Curl("/gen/2M/r", {"-H", "If-Modified-Since: Thu, 01 Jan 1970 00:00:00 GMT"}).code,
            200);
  auto head = Curl("/gen/2M/r", {"-I"});
  EXPECT_EQ(head.code, 200);
  EXPECT_TRUE(HasHeader(head.headers, "Content-Length: 2097152"));
  EXPECT_EQ(OriginHits("/gen/2M/r"), 2);  // everything above came from the cache
}

// Six clients, 30 ms apart, for one slow object: one origin request, everyone the whole body.
void ParallelMisses(test::MirrorHarness& h, const std::string& path) {
  std::vector<std::unique_ptr<test::Process>> clients;
  for (int i = 0; i < 6; ++i) {
    clients.push_back(std::make_unique<test::Process>(
        std::vector<std::string>{"/usr/bin/curl", "-s", "--max-time", "30", "-o",
                                 h.dir_ + "/par" + std::to_string(i), h.base_ + path},
        h.dir_ + "/par.log"));
    std::this_thread::sleep_for(30ms);
  }
  for (auto& c : clients) EXPECT_EQ(c->Wait(40s), 0);
  std::string want = h.Origin(path.substr(0, path.find('?')));
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(test::ReadFileBytes(h.dir_ + "/par" + std::to_string(i)), want) << i;
  EXPECT_EQ(h.OriginHits(path), 1);  // the rule: the origin log must not grow
  EXPECT_TRUE(test::MirrorHarness::HasHeader(h.Curl(path).headers, "X-Cache: HIT"));
}

TEST_P(HttpMirror, ParallelMissesMakeOneOriginRequest) {
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "1"}));
  // A slow origin answer (64 KiB every 50 ms): the clients arrive while it is filling.
  ParallelMisses(*this, "/gen/1M/slow?fault=slow");
}

TEST_P(HttpMirror, ParallelMissesOnSeveralWorkersMakeOneOriginRequest) {
  // Three workers on one port: the kernel spreads the connections, the core's reservation
  // of the key decides who asks the origin; the others follow that fill.
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "3"}));
  EXPECT_NE(gateway_->Output().find("3 workers"), std::string::npos) << gateway_->Output();
  ParallelMisses(*this, "/gen/1M/slow3?fault=slow");
  for (int i = 0; i < 50 && core_->Output().find("'goblin-gateway-http-2'") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_NE(core_->Output().find("'goblin-gateway-http-2'"), std::string::npos)
      << "every worker has its own core connection\n"
      << core_->Output();
}

// Workers also accept from their neighbour's listener (EPOLLEXCLUSIVE: whichever is awake
// or first takes the connection): every connection is answered once, by one worker, and the
// exit log counts each connection once, however many were taken by the neighbour.
TEST_P(HttpMirror, WorkersTakingTheirNeighboursConnectionsAnswerEachOnce) {
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "3"}));
  const std::string path = "/gen/64K/neighbours";
  const std::string want = Origin(path);
  constexpr int kConnections = 150;
  std::vector<std::thread> clients;
  std::atomic<int> good{0};
  for (int t = 0; t < 3; ++t) {
    clients.emplace_back([&] {
      for (int i = 0; i < kConnections / 3; ++i) {
        std::string got = test::RawExchange(
            port_,
            fmt::format("GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path));
        size_t at = got.find("\r\n\r\n");
        if (got.rfind("HTTP/1.1 200", 0) == 0 && at != std::string::npos &&
            got.substr(at + 4) == want)
          ++good;
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(good.load(), kConnections);
  gateway_->Signal(SIGTERM);
  ASSERT_EQ(gateway_->Wait(10s), 0);
  std::string log = gateway_->Output();
  std::smatch m;
  static const std::regex re(R"((\d+) connections, (\d+) taken from a neighbour)");
  ASSERT_TRUE(std::regex_search(log, m, re)) << log;
  EXPECT_EQ(std::stol(m[1]), kConnections) << log;
  EXPECT_LE(std::stol(m[2]), kConnections) << log;
  std::printf("[ neighbours ] %s of %s connections taken from a neighbour's listener\n",
              m[2].str().c_str(), m[1].str().c_str());
}

// The listener defers accept until a request's first bytes are in (TCP_DEFER_ACCEPT, 1 s):
// a client that connects and says nothing past that, then asks, is still answered, and so
// is one that sends its request in two parts; the next connection is served as usual.
TEST_P(HttpMirror, AClientThatSpeaksLateOrInPartsIsAnswered) {
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const std::string path = "/gen/4K/late-speaker";
  const std::string want = Origin(path);
  const std::string req =
      fmt::format("GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
  auto read_all = [](int fd) {
    std::string out;
    char buf[65536];
    for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;)
      out.append(buf, static_cast<size_t>(n));
    close(fd);
    return out;
  };
  auto body_of = [](const std::string& r) {
    size_t at = r.find("\r\n\r\n");
    return at == std::string::npos ? std::string() : r.substr(at + 4);
  };
  int fd = test::ConnectLoopback(port_);
  ASSERT_GE(fd, 0);
  std::this_thread::sleep_for(1500ms);  // (past the deferral)
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  std::string late = read_all(fd);
  EXPECT_EQ(late.rfind("HTTP/1.1 200", 0), 0u) << late.substr(0, 200);
  EXPECT_TRUE(body_of(late) == want) << "the late speaker's bytes differ";
  fd = test::ConnectLoopback(port_);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(send(fd, req.data(), 10, MSG_NOSIGNAL), 10);
  std::this_thread::sleep_for(100ms);
  ASSERT_EQ(send(fd, req.data() + 10, req.size() - 10, MSG_NOSIGNAL),
            static_cast<ssize_t>(req.size() - 10));
  std::string parts = read_all(fd);
  EXPECT_TRUE(body_of(parts) == want) << parts.substr(0, 200);
  std::string next = test::RawExchange(port_, req);
  EXPECT_TRUE(body_of(next) == want) << next.substr(0, 200);
}

TEST_P(HttpMirror, ARangeOnAMissIsAnsweredAtOnceWhileTheObjectFills) {
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  std::string want = Origin("/gen/2M/late");
  auto r = Curl("/gen/2M/late", {"-r", "1500000-1500099"});
  EXPECT_EQ(r.code, 206);
  EXPECT_EQ(r.body, want.substr(1500000, 100));
  // The whole object filled behind it: the next request is a hit.
  for (int i = 0; i < 100; ++i) {
    if (HasHeader(Curl("/gen/2M/late", {"-I"}).headers, "X-Cache: HIT")) break;
    std::this_thread::sleep_for(20ms);
  }
  auto hit = Curl("/gen/2M/late");
  EXPECT_TRUE(HasHeader(hit.headers, "X-Cache: HIT"));
  EXPECT_EQ(hit.body, want);
}

TEST_P(HttpMirror, UncacheableAnswersAndOriginFaultsAreNeverStored) {
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  for (const char* path : {"/gen/10K/ns?cc=no-store", "/gen/10K/pv?cc=private",
                           "/gen/10K/ck?fault=cookie", "/gen/10K/e?fault=500"}) {
    auto a = Curl(path), b = Curl(path);
    EXPECT_EQ(a.code, b.code) << path;
    EXPECT_FALSE(HasHeader(b.headers, "X-Cache: HIT")) << path;
    EXPECT_EQ(OriginHits(path), 2) << path;  // both went to the origin
  }
  EXPECT_EQ(Curl("/gen/10K/e?fault=500").code, 500);  // the origin's status passes through
  // A body cut by the origin: the client sees a short body, nothing is stored.
  auto cut = Curl("/gen/1M/cut?fault=reset");
  EXPECT_LT(cut.body.size(), 1u << 20);
  EXPECT_FALSE(HasHeader(Curl("/gen/1M/cut?fault=reset").headers, "X-Cache: HIT"));
  // A hanging origin: 504 after --origin-timeout (2 s here).
  EXPECT_EQ(Curl("/gen/1K/h?fault=hang").code, 504);
  // Chunked origin answers are cached whole and served with their length.
  auto ch = Curl("/gen/300K/c?chunked=1");
  EXPECT_EQ(ch.body, Origin("/gen/300K/c?chunked=1"));
  auto chit = Curl("/gen/300K/c?chunked=1");
  EXPECT_TRUE(HasHeader(chit.headers, "X-Cache: HIT"));
  EXPECT_TRUE(HasHeader(chit.headers, "Content-Length: 307200"));
  // The gateway is still healthy.
  EXPECT_EQ(Curl("/gen/1K/ok").code, 200);
}

TEST_P(HttpMirror, OriginConnectionsAreKeptAlive) {
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  for (int i = 0; i < 8; ++i) ASSERT_EQ(Curl("/gen/20K/ka" + std::to_string(i)).code, 200);
  // The access log's last field is the gateway's source port: few connections, many fetches.
  std::ifstream f(dir_ + "/access.log");
  std::set<std::string> ports;
  int fetches = 0;
  for (std::string line; std::getline(f, line);) {
    if (line.find("/gen/20K/ka") == std::string::npos) continue;
    ++fetches;
    ports.insert(line.substr(line.rfind(' ') + 1));
  }
  EXPECT_EQ(fetches, 8);
  EXPECT_LE(ports.size(), 2u);
}

TEST_P(HttpMirror, AnOriginThatIsDownGives502) {
  origin_port_ = "1";  // nothing listens there
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  EXPECT_EQ(Curl("/gen/1K/x").code, 502);
}

TEST_P(HttpMirror, PurgeIsAllowedFromConfiguredAddressesOrWithTheToken) {
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--purge-allow", "10.9.8.7", "--purge-token", "t0k"}));
  ASSERT_EQ(Curl("/gen/1K/p").code, 200);
  EXPECT_EQ(Curl("/gen/1K/p", {"-X", "PURGE"}).code, 403);
  EXPECT_TRUE(HasHeader(Curl("/gen/1K/p").headers, "X-Cache: HIT"));
  EXPECT_EQ(Curl("/gen/1K/p", {"-X", "PURGE", "-H", "X-Purge-Token: t0k"}).code, 200);
  EXPECT_EQ(Curl("/gen/1K/p", {"-X", "PURGE", "-H", "X-Purge-Token: t0k"}).code, 404);
  EXPECT_TRUE(HasHeader(Curl("/gen/1K/p").headers, "X-Cache: MISS"));
  // A prefix purge takes every key under Host + path; "all" empties the cache.
  for (const char* p : {"/gen/1K/v/a", "/gen/1K/v/b", "/gen/1K/w"}) ASSERT_EQ(Curl(p).code, 200);
  auto prefix =
      Curl("/gen/1K/v/", {"-X", "PURGE", "-H", "X-Purge-Token: t0k", "-H", "X-Purge: prefix"});
  EXPECT_EQ(prefix.code, 200);
  EXPECT_EQ(prefix.body, "200 Purged 2 objects\n");
  EXPECT_TRUE(HasHeader(Curl("/gen/1K/v/a").headers, "X-Cache: MISS"));
  EXPECT_TRUE(HasHeader(Curl("/gen/1K/w").headers, "X-Cache: HIT"));
  auto all = Curl("/", {"-X", "PURGE", "-H", "X-Purge-Token: t0k", "-H", "X-Purge: all"});
  EXPECT_EQ(all.code, 200);
  EXPECT_TRUE(HasHeader(Curl("/gen/1K/w").headers, "X-Cache: MISS"));
}

TEST_P(HttpMirror, OtherMethodsAreProxiedUncachedWithBodyLimits) {
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--max-body", "4K"}));
  auto post = Curl("/echo", {"-X", "POST", "--data-binary", "hello origin"});
  EXPECT_EQ(post.code, 200);
  EXPECT_EQ(post.body, "hello origin");  // the test origin echoes POST bodies
  EXPECT_FALSE(HasHeader(post.headers, "X-Cache: HIT"));
  EXPECT_EQ(Curl("/echo", {"-X", "POST", "--data-binary", "hello origin"}).body, "hello origin");
  EXPECT_EQ(OriginHits("/echo"), 2);  // never cached
  EXPECT_EQ(Curl("/echo", {"-X", "POST", "--data-binary", std::string(5000, 'x')}).code, 413);
  EXPECT_EQ(
      Curl("/echo", {"-X", "POST", "-H", "Transfer-Encoding: chunked", "--data-binary", "x"}).code,
      411);
  EXPECT_EQ(Curl("/gen/1K/after").code, 200);  // the gateway is fine
}

TEST_P(HttpMirror, AClientThatStopsReadingIsClosedAfterTheSendTimeout) {
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--send-timeout", "1s"}));
  ASSERT_EQ(Curl("/gen/32M/big").code, 200);  // in the cache
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int small = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(port_)));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  std::string req = "GET /gen/32M/big HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  bool closed = false;
  for (int i = 0; i < 100 && !closed; ++i) {
    std::this_thread::sleep_for(50ms);
    closed = gateway_->Output().find("read nothing for 1 s") != std::string::npos;
  }
  EXPECT_TRUE(closed) << gateway_->Output();
  close(fd);
  EXPECT_EQ(Curl("/gen/1K/still").code, 200);
}

TEST_P(HttpMirror, WrkSoakHasNoErrors) {
  if (!fs::exists("/usr/bin/wrk")) GTEST_SKIP() << "wrk is not installed";
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  ASSERT_EQ(Curl("/gen/256K/soak").code, 200);
  auto rss = [&] { return test::RssKib(gateway_->pid()); };
  [[maybe_unused]] uint64_t rss_before = rss();
  auto [rc, out] = test::RunCommand(
      {"/usr/bin/wrk", "-t1", "-c8", "-d2s", base_ + "/gen/256K/soak"}, dir_ + "/wrk.log", 30s);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("Non-2xx"), std::string::npos) << out;
  EXPECT_EQ(out.find("Socket errors"), std::string::npos) << out;
  size_t at = out.find(" requests in ");
  ASSERT_NE(at, std::string::npos) << out;
  size_t start = out.rfind('\n', at) + 1;
  EXPECT_GT(std::stoul(out.substr(start, at - start)), 200u) << out;
  EXPECT_EQ(OriginHits("/gen/256K/soak"), 1);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_LT(rss(), rss_before + 32 * 1024) << "the gateway's memory grew under the soak";
#endif
}

// Several GiB through the mirror (release only: label slow): MISS and HIT byte-exact.
TEST_P(HttpMirror, TwoGibObjectMissThenHit) {
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  std::string file = dir_ + "/files/big.bin";
  fs::create_directories(dir_ + "/files");
  {  // 2 GiB of pseudo-random bytes (offsets past 2^31 must come back right)
    std::ofstream out(file, std::ios::binary);
    std::mt19937_64 rng(2);
    std::vector<uint64_t> block(1 << 17);
    for (uint64_t left = 2ull << 30; left > 0; left -= block.size() * 8) {
      for (auto& w : block) w = rng();
      out.write(reinterpret_cast<const char*>(block.data()),
                static_cast<std::streamsize>(block.size() * 8));
    }
    ASSERT_TRUE(out.good());
  }
  origin_.reset();  // restart the origin with --files
  fs::remove(dir_ + "/origin.port");
  origin_ = std::make_unique<test::Process>(
      std::vector<std::string>{"/usr/bin/python3",
                               std::string(GOBLIN_SOURCE_DIR) + "/tests/support/test_origin.py",
                               "--port", origin_port_, "--port-file", dir_ + "/origin.port",
                               "--log", dir_ + "/access.log", "--files", dir_ + "/files"},
      dir_ + "/origin.log");
  ASSERT_TRUE(test::WaitForPath(dir_ + "/origin.port", 10s));
  // The body compared with the file as it streams (cmp names the first differing byte, or
  // "EOF on -" for a short body); X-Cache from the response head.
  auto fetch = [&](const std::string& tag) {
    return test::RunCommand(
               {"/bin/sh", "-c",
                "/usr/bin/curl -s -D '" + dir_ + "/head" + tag + "' --max-time 300 '" + base_ +
                    "/files/big.bin' | /usr/bin/cmp - '" + file +
                    "' && echo SAME; grep -i '^x-cache' '" + dir_ + "/head" + tag + "'"},
               dir_ + "/fetch" + tag + ".log", 400s)
        .second;
  };
  std::string miss = fetch("1");
  EXPECT_NE(miss.find("SAME"), std::string::npos) << miss;
  EXPECT_NE(miss.find("MISS"), std::string::npos) << miss;
  std::string hit = fetch("2");
  EXPECT_NE(hit.find("SAME"), std::string::npos) << hit;
  EXPECT_NE(hit.find("HIT"), std::string::npos) << hit << "\n--- gateway\n"
                                                << gateway_->Output() << "\n--- core\n"
                                                << core_->Output();
  EXPECT_EQ(OriginHits("/files/big.bin"), 1);
}

// Raw-socket requests for limits and pipelining.
std::string Exchange(const std::string& port, const std::string& request) {
  return test::RawExchange(port, request);
}

TEST_P(HttpMirror, LimitsMalformedRequestsAndPipelining) {
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  EXPECT_TRUE(Exchange(port_, "GET /" + std::string(10000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n")
                  .starts_with("HTTP/1.1 414 "));
  EXPECT_TRUE(
      Exchange(port_, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(70000, 'b') + "\r\n\r\n")
          .starts_with("HTTP/1.1 431 "));
  std::string bad = Exchange(port_, "GET / HTTP/1.1\r\nHost : x\r\n\r\nGET / HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(bad.starts_with("HTTP/1.1 400 ")) << bad;
  EXPECT_EQ(bad.find("HTTP/1.1", 5), std::string::npos);  // closed after the 400
  EXPECT_TRUE(Exchange(port_, "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 400 "));  // no Host
  // Two pipelined GETs of the same object: two answers, in order. The first is the miss;
  // the second follows the fill while its commit is on the way (MISS) or finds it committed
  // (HIT): either way the whole body.
  std::string two = Exchange(port_,
                             "GET /gen/5K/pl HTTP/1.1\r\nHost: x\r\n\r\nGET /gen/5K/pl "
                             "HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  size_t first = two.find("X-Cache: MISS");
  size_t second = two.find("HTTP/1.1 200 OK", 5);
  ASSERT_NE(first, std::string::npos) << two.substr(0, 500);
  ASSERT_NE(second, std::string::npos) << two.substr(0, 500);
  EXPECT_LT(first, second);
  EXPECT_TRUE(two.find("X-Cache: MISS", second) != std::string::npos ||
              two.find("X-Cache: HIT", second) != std::string::npos);
  std::string want = Origin("/gen/5K/pl");
  EXPECT_EQ(two.substr(two.find("\r\n\r\n", second) + 4), want);
  std::string third =
      Exchange(port_, "GET /gen/5K/pl HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(third.find("X-Cache: HIT"), std::string::npos) << third.substr(0, 300);
}

// A keep-alive connection's next request starts from nothing its last one set (the
// gateway reuses the connection's exchange): after a range, a matching conditional, a HEAD
// and an origin error, a plain GET of the same object is the whole object, 200, a HIT.
TEST_P(HttpMirror, EachRequestOnAKeepAliveConnectionStartsFresh) {
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  const std::string path = "/gen/20K/ka";
  const std::string want = Origin(path);
  test::KeepAliveClient c(port_);
  ASSERT_TRUE(c.ok());
  test::KeepAliveClient::Answer a;
  auto get = [&](const std::string& extra, bool has_body = true, const std::string& p = "") {
    return c.Ask(
        fmt::format("{} {} HTTP/1.1\r\nHost: x\r\n{}\r\n", extra == "HEAD" ? "HEAD" : "GET",
                    p.empty() ? path : p, extra == "HEAD" ? "" : extra),
        &a, has_body);
  };
  ASSERT_TRUE(get(""));  // the miss
  ASSERT_EQ(a.status, 200);
  ASSERT_EQ(a.body, want);
  size_t at = a.headers.find("ETag: ");
  ASSERT_NE(at, std::string::npos) << a.headers;
  const std::string etag = a.headers.substr(at + 6, a.headers.find("\r\n", at) - at - 6);
  // (until its commit lands a range would be passed to the origin: wait for the HIT)
  for (int i = 0; i < 100 && !HasHeader(a.headers, "X-Cache: HIT"); ++i) {
    std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(get(""));
  }
  ASSERT_TRUE(HasHeader(a.headers, "X-Cache: HIT")) << a.headers;
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(get("Range: bytes=100-199\r\n"));
    EXPECT_EQ(a.status, 206) << a.headers;
    EXPECT_EQ(a.body, want.substr(100, 100));
    ASSERT_TRUE(get("If-None-Match: " + etag + "\r\n", /*has_body=*/false));
    EXPECT_EQ(a.status, 304) << a.headers;
    ASSERT_TRUE(get("HEAD", /*has_body=*/false));
    EXPECT_EQ(a.status, 200) << a.headers;
    EXPECT_NE(a.headers.find(fmt::format("Content-Length: {}\r\n", want.size())),
              std::string::npos);
    ASSERT_TRUE(get("", true, "/gen/1K/ka-err?fault=500"));  // passed through, not stored
    EXPECT_EQ(a.status, 500) << a.headers;
    ASSERT_TRUE(get(""));
    EXPECT_EQ(a.status, 200) << a.headers;
    EXPECT_TRUE(HasHeader(a.headers, "X-Cache: HIT")) << a.headers;
    EXPECT_EQ(a.headers.find("Content-Range"), std::string::npos) << a.headers;
    EXPECT_EQ(a.body, want);
  }
  // An origin that fails before its head, after all those answers: a 502 (not the silent
  // close of a request whose head had gone out), then the connection is closed.
  ASSERT_TRUE(get("", true, "/gen/1K/ka-bad?fault=badhead"));
  EXPECT_EQ(a.status, 502) << a.headers;
  // The test's own fetch and the one fill.
  EXPECT_EQ(OriginHits(path), 2) << test::ReadFileBytes(dir_ + "/access.log");
}

TEST_P(HttpMirror, AClientLeavingMidBodyDoesNotStopTheFill) {
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  // Hang up 0.3 s into a slowly served 1 MiB object (~0.8 s at the origin's pace).
  test::RunCommand({"/usr/bin/curl", "-s", "--max-time", "0.3", "-o", "/dev/null",
                    base_ + "/gen/1M/gone?fault=slow"},
                   dir_ + "/curl.log", 10s);
  // The fill carries on without the client and lands in the cache.
  Reply r;
  for (int i = 0; i < 100; ++i) {
    r = Curl("/gen/1M/gone?fault=slow");
    if (HasHeader(r.headers, "X-Cache: HIT")) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(HasHeader(r.headers, "X-Cache: HIT"));
  EXPECT_EQ(r.body, Origin("/gen/1M/gone"));
  EXPECT_EQ(OriginHits("/gen/1M/gone?fault=slow"), 1);
}

// The benchmark client runs the seed's sequence against the mirror: every request answered
// with the manifest's length, the trace complete, no origin request after the prewarm.
TEST_P(HttpMirror, TheBenchmarkClientRunsTheSeedSequence) {
#ifndef GOBLIN_MIRROR_BENCH_BIN
  GTEST_SKIP() << "bench/ is not built in this build";
#else
  ASSERT_NO_FATAL_FAILURE(StartGateway());
  std::ofstream(dir_ + "/manifest")
      << "/gen/1M/m1 1048576\n/gen/300K/m2 307200\n/gen/2M/m3 2097152\n";
  for (const char* p : {"/gen/1M/m1", "/gen/300K/m2", "/gen/2M/m3"}) ASSERT_EQ(Curl(p).code, 200);
  auto [rc, out] = test::RunCommand(
      {GOBLIN_MIRROR_BENCH_BIN, "--target", base_, "--manifest", dir_ + "/manifest", "--passes",
       "3", "--head", "/gen/1M/m1", "--trace", dir_ + "/trace.csv", "--label", "goblin"},
      dir_ + "/bench.log", 60s);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("goblin: 9 requests (3 passes x 3 objects), 0 errors"), std::string::npos)
      << out;
  std::ifstream t(dir_ + "/trace.csv");
  int rows = 0;
  for (std::string line; std::getline(t, line);) rows += line.starts_with("goblin,");
  EXPECT_EQ(rows, 9);
  for (const char* p : {"/gen/1M/m1", "/gen/300K/m2", "/gen/2M/m3"})
    EXPECT_EQ(OriginHits(p), 1) << p;
#endif
}

// goblin-core with three shards behind two gateway workers: every key goes to its shard
// (misses, hits, ranges, the fill a miss reserves), parallel misses still make one origin
// request, and a prefix or "all" PURGE reaches every shard and adds up their answers.
class HttpMirrorShards : public HttpMirror {
 protected:
  std::vector<std::string> CoreExtra() const override { return {"--cores", "3"}; }
};

TEST_P(HttpMirrorShards, EveryKeyOnItsShardAndPurgesReachEveryShard) {
  ASSERT_NO_FATAL_FAILURE(StartGateway({"--threads", "2", "--purge-allow", "127.0.0.1"}));
  std::vector<std::string> paths, want;
  for (int i = 0; i < 24; ++i) {
    paths.push_back(fmt::format("/gen/{}K/s/{}", 1 + i * 37, i));
    want.push_back(Origin(paths.back()));
  }
  for (size_t i = 0; i < paths.size(); ++i) {
    auto miss = Curl(paths[i]);
    ASSERT_EQ(miss.code, 200) << paths[i];
    EXPECT_EQ(miss.body, want[i]) << paths[i];
  }
  for (size_t i = 0; i < paths.size(); ++i) {
    auto hit = Curl(paths[i]);
    EXPECT_TRUE(HasHeader(hit.headers, "X-Cache: HIT")) << paths[i];
    EXPECT_EQ(hit.body, want[i]) << paths[i];
    EXPECT_EQ(OriginHits(paths[i]), 2) << paths[i];  // ours, and the gateway's one fetch
  }
  auto part = Curl(paths[23], {"-r", "1000-1999"});
  EXPECT_EQ(part.code, 206);
  EXPECT_EQ(part.body, want[23].substr(1000, 1000));
  ParallelMisses(*this, "/gen/1M/sharded-slow?fault=slow");
  auto prefix = Curl("/gen/", {"-X", "PURGE", "-H", "X-Purge: prefix"});
  EXPECT_EQ(prefix.code, 200);
  EXPECT_EQ(prefix.body, "200 Purged 25 objects\n") << "every shard purged its part";
  for (const auto& p : {paths[0], paths[11], paths[23]}) {
    EXPECT_TRUE(HasHeader(Curl(p).headers, "X-Cache: MISS")) << p;
  }
  auto all = Curl("/", {"-X", "PURGE", "-H", "X-Purge: all"});
  EXPECT_EQ(all.code, 200);
  EXPECT_EQ(all.body, "200 Purged 3 objects\n");
  EXPECT_EQ(Curl(paths[5], {"-X", "PURGE"}).code, 404);  // one key: its own shard answers
}

INSTANTIATE_TEST_SUITE_P(Net, HttpMirrorShards, testing::Values("sync", "async"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

// Every case with both network engines: epoll readiness (sync) and io_uring (async).
INSTANTIATE_TEST_SUITE_P(Net, HttpMirror, testing::Values("sync", "async"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace goblin
