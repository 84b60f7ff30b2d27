// Local hits end to end (issue #20, docs/hot-path.md): goblin-gateway serves hits whose head
// is in goblin-core's RAM from the pools it maps, without asking the core, and never serves
// a version that is no longer the cache's: replaced, purged, expired, evicted and demoted
// objects are each read again through the core, byte-exact, and a head that changes while it
// is being sent never reaches the client as a complete response. Both --net modes. The
// gateway's counters (its exit log) say which hits were local.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "tests/system/mirror_harness.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;

class LocalHits : public testing::TestWithParam<std::string>, public test::MirrorHarness {
 protected:
  void Start(std::vector<std::string> core_extra = {},
             std::vector<std::string> gateway_extra = {}) {
    std::string name = testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '-');
    // Heads of 256 KiB: whole objects up to 64 KiB are copied, bigger ones sent from the pool.
    std::vector<std::string> extra{"--ram-head", "256K", "--block", "256K"};
    extra.insert(extra.end(), core_extra.begin(), core_extra.end());
    ASSERT_TRUE(StartCoreAndOrigin(name, extra)) << (core_ ? core_->Output() : std::string());
    StartGateway(GetParam(), std::move(gateway_extra));
    ASSERT_FALSE(port_.empty()) << gateway_->Output();
  }
  void TearDown() override { StopAll(); }

  // Hits counted by the gateway, from its exit log (the gateway is stopped).
  struct Counts {
    long hits = -1, local = -1, stale = -1, cut = -1;
  };
  Counts StopGatewayAndCount() {
    gateway_->Signal(SIGTERM);
    EXPECT_EQ(gateway_->Wait(10s), 0);
    std::string log = gateway_->Output();
    std::smatch m;
    Counts c;
    static const std::regex re(
        R"((\d+) hits \((\d+) local, (\d+) stale descriptors, (\d+) cut off)");
    if (std::regex_search(log, m, re)) {
      c.hits = std::stol(m[1]);
      c.local = std::stol(m[2]);
      c.stale = std::stol(m[3]);
      c.cut = std::stol(m[4]);
    }
    return c;
  }
  // The gateway's local hits so far, from its metrics endpoint (started with
  // --metrics-listen; the workers publish every 200 ms and before they sleep); -1 if unread.
  long LocalHitsNow() {
    if (metrics_port_.empty()) {
      std::string p = PortFromLog("Prometheus metrics on http://127.0.0.1:");
      metrics_port_ = p.substr(0, p.find('/'));
    }
    test::KeepAliveClient m(metrics_port_);
    test::KeepAliveClient::Answer a;
    if (!m.ok() || !m.Get("/metrics", &a) || a.status != 200) return -1;
    static const std::string kName = "\ngoblin_gateway_http_local_hits_total ";
    size_t at = a.body.find(kName);
    return at == std::string::npos ? -1 : std::atol(a.body.c_str() + at + kName.size());
  }
  // GETs `path` on `client` until the gateway serves one of them locally (a hit while the
  // fill's commit is still on its way to the journal is served by the core without a
  // descriptor; under load that can take a while): at most ~20 s.
  void WarmUntilLocal(test::KeepAliveClient& client, const std::string& path,
                      const std::string& want) {
    const long before = LocalHitsNow();
    ASSERT_GE(before, 0) << gateway_->Output();
    for (int i = 0; i < 100; ++i) {
      ASSERT_NO_FATAL_FAILURE(ExpectBody(client, path, want, path + ": warming"));
      for (int k = 0; k < 4; ++k) {  // (a publish comes within 200 ms)
        if (LocalHitsNow() > before) return;
        std::this_thread::sleep_for(50ms);
      }
    }
    FAIL() << path << " was never served locally";
  }
  std::string metrics_port_;
  // GET on `client`: the status and the body must be `want`.
  void ExpectBody(test::KeepAliveClient& client, const std::string& path, const std::string& want,
                  const std::string& why) {
    test::KeepAliveClient::Answer a;
    ASSERT_TRUE(client.Get(path, &a)) << why;
    ASSERT_EQ(a.status, 200) << why << "\n" << a.headers;
    ASSERT_EQ(a.body.size(), want.size()) << why;
    ASSERT_TRUE(a.body == want) << why << ": the bytes differ";
  }
  // Stores `bytes` under `path`'s key with the native CLI (a new version behind the
  // gateway's back, as another gateway or client would).
  void PutNative(const std::string& path, const std::string& bytes) {
    std::string file = dir_ + "/put.bin";
    std::ofstream(file, std::ios::binary) << bytes;
    auto [rc, out] =
        test::RunCommand({GOBLIN_CLI_BIN, "--target", "unix:" + core_sock_, "put",
                          "127.0.0.1" + path, file, "--meta", "Content-Type: text/x-replaced\r\n"},
                         dir_ + "/put.log", 30s);
    ASSERT_EQ(rc, 0) << out;
  }
};

// Every way a hit is served locally (copied, sent from the pool with its last byte held
// back, a head from the pool with the tail from the core) gives the origin's bytes; HEAD and
// conditionals are answered locally too; ranges still go to the core.
TEST_P(LocalHits, EverySizeIsByteExact) {
  ASSERT_NO_FATAL_FAILURE(Start());
  test::KeepAliveClient client(port_);
  ASSERT_TRUE(client.ok());
  const std::vector<std::string> paths{"/gen/1/a",    "/gen/4K/b", "/gen/64K/c",
                                       "/gen/200K/d", "/gen/1M/e", "/gen/3M/f"};
  std::map<std::string, std::string> want;
  for (const auto& p : paths) {
    want[p] = Origin(p);
    ASSERT_NO_FATAL_FAILURE(ExpectBody(client, p, want[p], p + ": the miss"));
  }
  // (a hit while a fill's commit is still on its way to the journal is served by the core
  // without a descriptor: give them time to settle)
  std::this_thread::sleep_for(300ms);
  for (const auto& p : paths) {
    // The hit through the core that learns where the head is, then local hits.
    for (int i = 0; i < 5; ++i) ASSERT_NO_FATAL_FAILURE(ExpectBody(client, p, want[p], p));
  }
  test::KeepAliveClient::Answer a;
  ASSERT_TRUE(client.Ask("HEAD /gen/200K/d HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", &a, false));
  EXPECT_EQ(a.status, 200);
  EXPECT_TRUE(HasHeader(a.headers, "Content-Length: 204800")) << a.headers;
  EXPECT_TRUE(HasHeader(a.headers, "X-Cache: HIT")) << a.headers;
  size_t etag_at = a.headers.find("ETag: ");
  ASSERT_NE(etag_at, std::string::npos) << a.headers;
  std::string etag = a.headers.substr(etag_at + 6, a.headers.find("\r\n", etag_at) - etag_at - 6);
  ASSERT_TRUE(client.Ask(fmt::format("GET /gen/200K/d HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                     "If-None-Match: {}\r\n\r\n",
                                     etag),
                         &a, false));
  EXPECT_EQ(a.status, 304) << a.headers;
  ASSERT_TRUE(
      client.Ask("GET /gen/1M/e HTTP/1.1\r\nHost: 127.0.0.1\r\nRange: bytes=10-19\r\n\r\n", &a));
  EXPECT_EQ(a.status, 206);
  EXPECT_EQ(a.body, want["/gen/1M/e"].substr(10, 10));
  // The connection still serves whole objects after all that.
  ASSERT_NO_FATAL_FAILURE(ExpectBody(client, "/gen/3M/f", want["/gen/3M/f"], "after"));
  for (const auto& p : paths) EXPECT_EQ(OriginHits(p), 1 + 1) << p;  // the fill and Origin()
  Counts c = StopGatewayAndCount();
  EXPECT_GE(c.local, 6 * 4 + 2 + 1) << gateway_->Output();  // (4 per object, HEAD, 304, last)
  EXPECT_EQ(c.stale, 0);
  EXPECT_EQ(c.cut, 0);
}

// A version that is no longer the cache's is never served from a descriptor: each case
// reads the object again through the core and gets the cache's current bytes.
TEST_P(LocalHits, ReplacedPurgedExpiredEvictedAndDemotedAreNeverServedStale) {
  // RAM for 16 heads of 256 KiB; at most 24 objects.
  ASSERT_NO_FATAL_FAILURE(Start({"--memory", "4M", "--max-objects", "24"}));
  test::KeepAliveClient client(port_);
  ASSERT_TRUE(client.ok());
  // Fetched, then (once its fill's commit has settled: a hit before that has no descriptor)
  // read until this worker serves it locally.
  auto warm = [&](const std::string& p, const std::string& want) {
    ASSERT_NO_FATAL_FAILURE(ExpectBody(client, p, want, p));
    std::this_thread::sleep_for(100ms);
    for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(ExpectBody(client, p, want, p));
  };
  // Replaced behind the gateway's back: the new bytes at once.
  const std::string r = "/gen/4K/replaced", rbig = "/gen/200K/replaced";
  ASSERT_NO_FATAL_FAILURE(warm(r, Origin(r)));
  ASSERT_NO_FATAL_FAILURE(warm(rbig, Origin(rbig)));
  std::string v2(4096, 'x'), v2big(200 << 10, 'y');
  ASSERT_NO_FATAL_FAILURE(PutNative(r, v2));
  ASSERT_NO_FATAL_FAILURE(PutNative(rbig, v2big));
  ASSERT_NO_FATAL_FAILURE(warm(r, v2));
  ASSERT_NO_FATAL_FAILURE(warm(rbig, v2big));
  // Purged: a miss (the origin asked again), then local hits of the new fill.
  const std::string p = "/gen/4K/purged";
  ASSERT_NO_FATAL_FAILURE(warm(p, Origin(p)));
  test::KeepAliveClient::Answer a;
  ASSERT_TRUE(client.Ask(fmt::format("PURGE {} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", p), &a));
  ASSERT_EQ(a.status, 200) << a.headers << a.body;
  ASSERT_NO_FATAL_FAILURE(warm(p, Origin(p)));
  EXPECT_EQ(OriginHits(p), 2 + 2);  // two fills, two Origin() calls
  // Expired: one second of freshness, then the origin again.
  const std::string e = "/gen/4K/expires?cc=max-age=1";
  ASSERT_NO_FATAL_FAILURE(warm(e, Origin(e)));
  std::this_thread::sleep_for(1200ms);
  ASSERT_NO_FATAL_FAILURE(warm(e, Origin(e)));
  EXPECT_EQ(OriginHits(e), 2 + 2);
  // Demoted (16 heads of RAM, 30 more objects) and evicted (24 objects at most): whatever
  // became of each, its bytes are right, from RAM, disk or the origin.
  const std::string d = "/gen/200K/demoted";
  ASSERT_NO_FATAL_FAILURE(warm(d, Origin(d)));
  for (int i = 0; i < 30; ++i) {
    std::string q = fmt::format("/gen/256K/filler{}", i);
    ASSERT_NO_FATAL_FAILURE(ExpectBody(client, q, Origin(q), q));
  }
  ASSERT_NO_FATAL_FAILURE(warm(d, Origin(d)));
  const std::string ev = "/gen/4K/evicted";
  ASSERT_NO_FATAL_FAILURE(warm(ev, Origin(ev)));
  // Objects read again once their fill has committed (a read of a committing fill is not
  // counted by the eviction policy): S3-FIFO's main queue, where `ev` is, turns over.
  for (int i = 0; i < 120; i += 2) {
    std::string q[2] = {fmt::format("/gen/1K/more{}", i), fmt::format("/gen/1K/more{}", i + 1)};
    std::string want[2] = {Origin(q[0]), Origin(q[1])};
    for (int k = 0; k < 2; ++k) ASSERT_NO_FATAL_FAILURE(ExpectBody(client, q[k], want[k], q[k]));
    std::this_thread::sleep_for(20ms);
    for (int k = 0; k < 2; ++k) ASSERT_NO_FATAL_FAILURE(ExpectBody(client, q[k], want[k], q[k]));
  }
  ASSERT_NO_FATAL_FAILURE(warm(ev, Origin(ev)));
  EXPECT_EQ(OriginHits(ev), 2 + 2) << "not evicted: the test did not test eviction";
  Counts c = StopGatewayAndCount();
  EXPECT_GT(c.local, 12) << gateway_->Output();
  // Replaced x2, expired, demoted, evicted: each found its descriptor stale (a PURGE
  // through this worker drops the key's descriptor itself).
  EXPECT_GE(c.stale, 5) << gateway_->Output();
  EXPECT_EQ(c.cut, 0);
}

// A worker whose descriptors all went stale at once (everything purged) serves every object
// through the core, then locally again.
TEST_P(LocalHits, AWorkerWhoseDescriptorsAreAllStaleServesThroughTheCore) {
  ASSERT_NO_FATAL_FAILURE(Start());
  test::KeepAliveClient client(port_);
  ASSERT_TRUE(client.ok());
  std::vector<std::string> paths, wants;
  for (int i = 0; i < 12; ++i) {
    paths.push_back(fmt::format("/gen/{}K/all{}", i % 2 ? 4 : 300, i));
    wants.push_back(Origin(paths.back()));
    ASSERT_NO_FATAL_FAILURE(ExpectBody(client, paths[i], wants[i], "the miss"));
  }
  // (a hit while a fill's commit is still on its way to the journal is served by the core
  // without a descriptor: the next one learns it)
  std::this_thread::sleep_for(300ms);
  for (int i = 0; i < 12; ++i) {
    for (int k = 0; k < 3; ++k) ASSERT_NO_FATAL_FAILURE(ExpectBody(client, paths[i], wants[i], ""));
  }
  test::KeepAliveClient::Answer a;
  ASSERT_TRUE(client.Ask("PURGE / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Purge: all\r\n\r\n", &a));
  ASSERT_EQ(a.status, 200) << a.body;
  for (int round = 0; round < 5; ++round) {
    for (size_t i = 0; i < paths.size(); ++i)
      ASSERT_NO_FATAL_FAILURE(ExpectBody(client, paths[i], wants[i], paths[i]));
  }
  Counts c = StopGatewayAndCount();
  EXPECT_EQ(c.stale, 12) << gateway_->Output();
  EXPECT_GE(c.local, 12 * 2 + 12) << gateway_->Output();
}

// A client that stops reading in the middle of an 8 MiB head sent from the pool while the
// object is replaced (and its slot reused): it never receives a complete response with
// wrong bytes: either the old object whole, or a connection closed short of its length.
TEST_P(LocalHits, AHeadReplacedWhileItIsSentIsCutOffNeverCompletedWrong) {
  // (more than a socket's send buffer can take: tcp_wmem's maximum is 4 MiB)
  ASSERT_NO_FATAL_FAILURE(Start({"--ram-head", "8M", "--block", "8M", "--memory", "64M"},
                                {"--metrics-listen", "127.0.0.1:0"}));
  const std::string path = "/gen/8M/midsend";
  const std::string want = Origin(path);
  {
    // The miss, then hits until one is local (so the next one is sent from the pool, the
    // case this test is about; through the core, the core's loan would keep the old
    // version whole).
    test::KeepAliveClient warmup(port_);
    ASSERT_NO_FATAL_FAILURE(ExpectBody(warmup, path, want, "the miss"));
    ASSERT_NO_FATAL_FAILURE(WarmUntilLocal(warmup, path, want));
  }
  // A small receive buffer, and no reading until the object has changed.
  int fd = test::ConnectLoopback(port_, /*rcvbuf=*/4096);
  ASSERT_GE(fd, 0);
  std::string req = fmt::format("GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  std::this_thread::sleep_for(200ms);  // the gateway has written what the socket takes
  ASSERT_NO_FATAL_FAILURE(PutNative(path, std::string(8 << 20, 'z')));
  for (int i = 0; i < 3; ++i)  // (another object into the freed slot)
    ASSERT_NO_FATAL_FAILURE(
        PutNative(fmt::format("/gen/8M/other{}", i), std::string(8 << 20, 'o')));
  std::string got;
  char buf[65536];
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) {
    got.append(buf, static_cast<size_t>(n));
    if (got.size() >= want.size() + 1000) break;
  }
  close(fd);
  size_t body_at = got.find("\r\n\r\n");
  ASSERT_NE(body_at, std::string::npos) << got.substr(0, 200);
  std::string body = got.substr(body_at + 4);
  if (body.size() >= want.size()) {
    EXPECT_TRUE(body.substr(0, want.size()) == want) << "a complete response with wrong bytes";
  }
  // The next request for the key: the new version, whole.
  {
    test::KeepAliveClient next(port_);
    ASSERT_NO_FATAL_FAILURE(ExpectBody(next, path, std::string(8 << 20, 'z'), "after the cut"));
  }
  Counts c = StopGatewayAndCount();
  // The socket could not take the whole head before the change, so this one is cut off.
  EXPECT_LT(body.size(), want.size());
  EXPECT_EQ(c.cut, 1) << gateway_->Output();
}

// A tail the core lends from RAM goes to the socket by reference (--net sync: sendfile from
// the pool's memfd; the loan is released as soon as the call returns). The socket then holds
// the pool's pages while the client has not read them: here the object is replaced and its
// blocks reused by other objects before the client reads a byte, and it must still get
// every original byte, because a freed stable block is punched out of the pool and its next
// owner writes to new pages. (--net async copies: the same bytes, the other way.)
TEST_P(LocalHits, ATailSentByReferenceKeepsItsBytesWhenItsBlocksAreReused) {
  // 64 blocks of 256 KiB: the replacement and the others below need the old blocks. 4 KiB
  // pages: blocks are stable only where they are whole pages (with HugeTLB pages reserved on
  // the machine, `auto` would take them and nothing would be sent by reference).
  ASSERT_NO_FATAL_FAILURE(
      Start({"--memory", "16M", "--stable-blocks", "true", "--hugepages", "off"}));
  // (smaller than what the client's socket takes without reading, below)
  const std::string path = "/gen/3M/byref";
  const std::string want = Origin(path);
  {
    test::KeepAliveClient warmup(port_);
    ASSERT_NO_FATAL_FAILURE(ExpectBody(warmup, path, want, "the miss"));
    std::this_thread::sleep_for(200ms);
    for (int i = 0; i < 2; ++i) ASSERT_NO_FATAL_FAILURE(ExpectBody(warmup, path, want, "warm"));
  }
  // A receive buffer the whole response fits in (the kernel doubles it), not read yet.
  int fd = test::ConnectLoopback(port_, /*rcvbuf=*/4 << 20);
  ASSERT_GE(fd, 0);
  std::string req = fmt::format("GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  std::this_thread::sleep_for(300ms);  // the whole response is in the socket, the loans back
  ASSERT_NO_FATAL_FAILURE(PutNative(path, std::string(3 << 20, 'z')));
  for (int i = 0; i < 4; ++i)  // (into the freed blocks)
    ASSERT_NO_FATAL_FAILURE(
        PutNative(fmt::format("/gen/3M/other{}", i), std::string(3 << 20, 'o')));
  std::string got;
  char buf[65536];
  size_t body_at = std::string::npos;
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) {
    got.append(buf, static_cast<size_t>(n));
    if (body_at == std::string::npos) body_at = got.find("\r\n\r\n");
    if (body_at != std::string::npos && got.size() >= body_at + 4 + want.size()) break;
  }
  close(fd);
  ASSERT_NE(body_at, std::string::npos) << got.substr(0, 200);
  std::string body = got.substr(body_at + 4);
  ASSERT_EQ(body.size(), want.size());
  EXPECT_TRUE(body == want) << "wrong bytes from offset "
                            << std::mismatch(body.begin(), body.end(), want.begin()).first -
                                   body.begin();
  {
    test::KeepAliveClient next(port_);
    ASSERT_NO_FATAL_FAILURE(ExpectBody(next, path, std::string(3 << 20, 'z'), "the new version"));
  }
  gateway_->Signal(SIGTERM);
  ASSERT_EQ(gateway_->Wait(10s), 0);
  std::smatch m;
  std::string log = gateway_->Output();
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"(, ([0-9.]+ \w+) of it sent by reference)")))
      << log;
  if (GetParam() == "sync") {
    EXPECT_NE(m[1].str(), "0 B") << "the tail was not sent by reference";
  } else {
    EXPECT_EQ(m[1].str(), "0 B");
  }
}

// Clients that leave in the middle of a big hit (the head sent from here, the tail streaming
// from the core): the core is told to stop each stream instead of reading and lending the
// rest for nobody, and the next reader gets the whole object.
TEST_P(LocalHits, ClientsLeavingMidBodyStopTheCoresStream) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string path = "/gen/32M/leave";
  const std::string want = Origin(path);
  {
    test::KeepAliveClient warmup(port_);
    ASSERT_NO_FATAL_FAILURE(ExpectBody(warmup, path, want, "the miss"));
    std::this_thread::sleep_for(100ms);
    for (int i = 0; i < 2; ++i) ASSERT_NO_FATAL_FAILURE(ExpectBody(warmup, path, want, "warm"));
  }
  constexpr int kLeavers = 10;
  for (int i = 0; i < kLeavers; ++i) {
    int fd = test::ConnectLoopback(port_);
    ASSERT_GE(fd, 0);
    std::string req = fmt::format("GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
    ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    size_t got = 0;
    char buf[65536];
    for (ssize_t n; got < (300u << 10) && (n = recv(fd, buf, sizeof buf, 0)) > 0;)
      got += static_cast<size_t>(n);
    EXPECT_GE(got, 300u << 10);
    close(fd);  // (with unread bytes: a reset)
  }
  test::KeepAliveClient after(port_);
  ASSERT_NO_FATAL_FAILURE(ExpectBody(after, path, want, "after the leavers"));
  Counts c = StopGatewayAndCount();
  EXPECT_EQ(c.cut, 0);
  core_->Signal(SIGTERM);
  ASSERT_EQ(core_->Wait(10s), 0);
  std::smatch m;
  std::string log = core_->Output();
  static const std::regex re(R"((\d+) gets \((\d+) cancelled by their reader\))");
  ASSERT_TRUE(std::regex_search(log, m, re)) << log;
  EXPECT_GE(std::stol(m[2]), kLeavers - 2) << log;  // (one may have ended before its cancel)
}

// One worker, big responses written in small turns (--write-chunk 64K; --net async writes
// one gather at a time anyway): a client that does not read holds its connection's output
// (its socket full: the worker waits for it to drain, it does not retry the write every
// round), while other clients on the same worker get whole objects, local heads, tails from
// the core and small hits alike; then the stalled client reads every byte of its own.
TEST_P(LocalHits, ConnectionsTakeTurnsAndAStalledOneWaitsWithoutHoldingOthers) {
  ASSERT_NO_FATAL_FAILURE(Start({}, {"--write-chunk", "64K"}));
  const std::vector<std::string> paths{"/gen/3M/turns-a", "/gen/8M/turns-b", "/gen/4K/turns-c"};
  std::map<std::string, std::string> want;
  {
    test::KeepAliveClient warmup(port_);
    for (const auto& p : paths) {
      want[p] = Origin(p);
      ASSERT_NO_FATAL_FAILURE(ExpectBody(warmup, p, want[p], p + ": the miss"));
    }
    std::this_thread::sleep_for(300ms);
    for (const auto& p : paths) ASSERT_NO_FATAL_FAILURE(ExpectBody(warmup, p, want[p], p));
  }
  // The stalled client: asks for the 8 MiB object and reads nothing for now.
  int fd = test::ConnectLoopback(port_, /*rcvbuf=*/4096);
  ASSERT_GE(fd, 0);
  std::string req = fmt::format("GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", paths[1]);
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  std::this_thread::sleep_for(200ms);
  // Two clients at once, each reading everything, several rounds.
  for (int round = 0; round < 3; ++round) {
    std::thread other([&] {
      test::KeepAliveClient c(port_);
      for (const auto& p : paths) ExpectBody(c, p, want[p], "the other client: " + p);
    });
    test::KeepAliveClient c(port_);
    for (auto it = paths.rbegin(); it != paths.rend(); ++it)
      ASSERT_NO_FATAL_FAILURE(ExpectBody(c, *it, want[*it], "round " + std::to_string(round)));
    other.join();
  }
  // The stalled client now reads its whole response.
  std::string got;
  char buf[65536];
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) {
    got.append(buf, static_cast<size_t>(n));
    size_t at = got.find("\r\n\r\n");
    if (at != std::string::npos && got.size() >= at + 4 + want[paths[1]].size()) break;
  }
  close(fd);
  size_t body_at = got.find("\r\n\r\n");
  ASSERT_NE(body_at, std::string::npos) << got.substr(0, 200);
  EXPECT_EQ(got.size() - body_at - 4, want[paths[1]].size());
  EXPECT_TRUE(got.substr(body_at + 4) == want[paths[1]]) << "the stalled client's bytes differ";
  Counts c = StopGatewayAndCount();
  EXPECT_EQ(c.cut, 0);
  EXPECT_GT(c.local, 0);
}

INSTANTIATE_TEST_SUITE_P(Net, LocalHits, testing::Values("sync", "async"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace goblin
