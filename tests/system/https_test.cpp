// HTTPS on the gateway's HTTP front, end to end: goblin-core + goblin-gateway --mirror with
// --https-port and two certificates, in front of the test origin, with --net sync and
// async. curl (--http1.1 over TLS, verifying the certificate it should get) and an OpenSSL
// client of the test's own (SNI, ALPN, TLS 1.2 / 1.3, session resumption, handshakes cut
// short). Byte-exact misses and hits up to 64 MiB, ranges, conditionals, HEAD, one origin
// request for parallel misses across workers, bad certificate settings refused at start,
// and what the next client sees after garbage, abandoned handshakes, malformed requests
// and a client leaving mid-body. kTLS itself needs the kernel's tls module: this machine's
// kernel has none, so here every connection encrypts in user space (the gateway says so);
// the qemu guest's kernel has it (tests/rdma).
#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "tests/system/mirror_harness.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// One TLS connection of the test's own (blocking, 5 s timeouts).
struct TlsResult {
  bool connected = false, handshake = false, reused = false;
  std::string subject_cn, alpn, version, response, error;
  SSL_SESSION* session = nullptr;  // (owned by the caller: SSL_SESSION_free)
};
struct TlsAsk {
  std::string sni;   // empty: no SNI
  std::string alpn;  // wire format (length-prefixed names); empty: none offered
  int max_version = 0;
  SSL_SESSION* resume = nullptr;
  std::string request;  // sent after the handshake; the answer is read until the close
};

TlsResult TlsExchange(const std::string& port, const TlsAsk& ask) {
  TlsResult r;
  int fd = test::ConnectLoopback(port);
  if (fd < 0) return r;
  r.connected = true;
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ask.max_version != 0) SSL_CTX_set_max_proto_version(ctx, ask.max_version);
  // (no client cache: freeing the context would flush its sessions, unresumable after)
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  if (!ask.sni.empty()) SSL_set_tlsext_host_name(ssl, ask.sni.c_str());
  if (!ask.alpn.empty())
    SSL_set_alpn_protos(ssl, reinterpret_cast<const unsigned char*>(ask.alpn.data()),
                        static_cast<unsigned>(ask.alpn.size()));
  if (ask.resume != nullptr) SSL_set_session(ssl, ask.resume);
  if (SSL_connect(ssl) == 1) {
    r.handshake = true;
    r.reused = SSL_session_reused(ssl) == 1;
    r.version = SSL_get_version(ssl);
    const unsigned char* a = nullptr;
    unsigned int alen = 0;
    SSL_get0_alpn_selected(ssl, &a, &alen);
    if (a != nullptr) r.alpn.assign(reinterpret_cast<const char*>(a), alen);
    if (X509* cert = SSL_get1_peer_certificate(ssl)) {
      char cn[256] = {};
      X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
      r.subject_cn = cn;
      X509_free(cert);
    }
    if (!ask.request.empty()) {
      SSL_write(ssl, ask.request.data(), static_cast<int>(ask.request.size()));
      char buf[65536];
      for (int n; (n = SSL_read(ssl, buf, sizeof buf)) > 0;) r.response.append(buf, n);
    }
    r.session = SSL_get1_session(ssl);
  } else {
    char e[256] = {};
    ERR_error_string_n(ERR_get_error(), e, sizeof e);
    r.error = e;
  }
  // A session stays resumable only if its connection was shut down properly (quietly: the
  // server may have closed its end already, and a failed close_notify would spoil it).
  if (r.handshake) {
    SSL_set_quiet_shutdown(ssl, 1);
    SSL_shutdown(ssl);
  }
  ERR_clear_error();
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  close(fd);
  return r;
}

std::string Alpn(std::initializer_list<std::string_view> names) {
  std::string w;
  for (auto n : names) {
    w.push_back(static_cast<char>(n.size()));
    w += n;
  }
  return w;
}

class Https : public testing::TestWithParam<std::string>, public test::MirrorHarness {
 protected:
  void SetUp() override {
    if (!fs::exists("/usr/bin/curl") || !fs::exists("/usr/bin/python3") ||
        !fs::exists("/usr/bin/openssl")) {
      GTEST_SKIP() << "curl, python3 and openssl are needed";
    }
    std::string name = testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '-');
    ASSERT_TRUE(StartCoreAndOrigin("tls-" + name)) << (core_ ? core_->Output() : std::string());
    // Two self-signed certificates: a.test (and *.a.test), b.test (and *.b.test).
    for (const char* n : {"a", "b"}) {
      auto [rc, out] =
          test::MakeCertificate(fmt::format("{}.test", n), fmt::format("{}/{}.pem", dir_, n),
                                fmt::format("{}/{}.key", dir_, n));
      ASSERT_EQ(rc, 0) << out;
    }
  }
  void TearDown() override { StopAll(); }
  std::string Pem(const char* n) const { return fmt::format("{}/{}.pem", dir_, n); }
  std::string Key(const char* n) const { return fmt::format("{}/{}.key", dir_, n); }
  // The gateway with both certificates on an HTTPS port of its own (any free one).
  void StartTls(std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"--https-port=-1", "--tls-cert", Pem("a"),
                                  "--tls-key",       Key("a"),     "--tls-cert",
                                  Pem("b"),          "--tls-key",  Key("b")};
    args.insert(args.end(), extra.begin(), extra.end());
    StartGateway(GetParam(), args);
    tls_port_ = PortFromLog("HTTPS on 127.0.0.1:");
    ASSERT_FALSE(tls_port_.empty()) << gateway_->Output();
  }
  // curl over HTTPS to `host` (resolved to 127.0.0.1), verifying the certificate with `ca`.
  Reply CurlTls(const std::string& path, std::vector<std::string> args = {},
                const std::string& host = "a.test", const char* ca = "a",
                const std::string& tag = "t") {
    std::vector<std::string> a{"--http1.1", "--cacert", Pem(ca), "--resolve",
                               fmt::format("{}:{}:127.0.0.1", host, tls_port_)};
    a.insert(a.end(), args.begin(), args.end());
    return CurlUrl(fmt::format("https://{}:{}{}", host, tls_port_, path), a, tag);
  }
  std::string tls_port_;
};

TEST_P(Https, MissesHitsRangesAndConditionalsAreByteExact) {
  ASSERT_NO_FATAL_FAILURE(StartTls());
  const std::string want = Origin("/gen/3M/t");
  ASSERT_EQ(want.size(), 3u << 20);
  auto miss = CurlTls("/gen/3M/t");
  EXPECT_EQ(miss.curl_exit, 0);
  EXPECT_EQ(miss.code, 200);
  EXPECT_TRUE(HasHeader(miss.headers, "X-Cache: MISS")) << miss.headers;
  EXPECT_EQ(miss.body, want);
  for (int i = 0; i < 3; ++i) {  // (the later ones are local hits: heads from the pools)
    auto hit = CurlTls("/gen/3M/t");
    EXPECT_EQ(hit.code, 200);
    EXPECT_TRUE(HasHeader(hit.headers, "X-Cache: HIT")) << hit.headers;
    EXPECT_EQ(hit.body, want);
  }
  EXPECT_EQ(OriginHits("/gen/3M/t"), 2);  // ours, and the gateway's one fetch
  auto range = CurlTls("/gen/3M/t", {"-H", "Range: bytes=65000-66000"});
  EXPECT_EQ(range.code, 206);
  EXPECT_EQ(range.body, want.substr(65000, 1001));
  auto multi = CurlTls("/gen/3M/t", {"-H", "Range: bytes=0-9,3000000-3000009"});
  EXPECT_EQ(multi.code, 206);
  EXPECT_NE(multi.headers.find("multipart/byteranges"), std::string::npos);
  EXPECT_NE(multi.body.find(want.substr(3000000, 10)), std::string::npos);
  size_t etag_at = miss.headers.find("ETag: ");
  ASSERT_NE(etag_at, std::string::npos);
  std::string etag =
      miss.headers.substr(etag_at + 6, miss.headers.find("\r\n", etag_at) - etag_at - 6);
  auto not_modified = CurlTls("/gen/3M/t", {"-H", "If-None-Match: " + etag});
  EXPECT_EQ(not_modified.code, 304);
  EXPECT_TRUE(not_modified.body.empty());
  auto head = CurlTls("/gen/3M/t", {"-I"});
  EXPECT_EQ(head.code, 200);
  EXPECT_TRUE(HasHeader(head.headers, "Content-Length: 3145728"));
  // Small objects (heads only) and a big one, through the same certificate by another name.
  for (const char* size : {"1", "1000", "70K"}) {
    const std::string path = fmt::format("/gen/{}/s", size);
    const std::string small = Origin(path);
    for (int i = 0; i < 2; ++i) EXPECT_EQ(CurlTls(path, {}, "www.a.test").body, small) << size;
  }
  const std::string big = Origin("/gen/64M/big");
  ASSERT_EQ(big.size(), 64u << 20);
  EXPECT_EQ(CurlTls("/gen/64M/big").body, big);
  auto big_hit = CurlTls("/gen/64M/big");
  EXPECT_TRUE(HasHeader(big_hit.headers, "X-Cache: HIT")) << big_hit.headers;
  EXPECT_TRUE(big_hit.body == big) << "64 MiB hit differs (" << big_hit.body.size() << " bytes)";
  // A body the origin sends chunked (no length): streamed chunked on the miss, then a hit.
  const std::string chunked = Origin("/gen/300K/ch?chunked=1");
  for (int i = 0; i < 2; ++i) EXPECT_EQ(CurlTls("/gen/300K/ch?chunked=1").body, chunked);
  // The plain port serves the same objects.
  EXPECT_EQ(Curl("/gen/3M/t").body, want);
  gateway_->Signal(SIGTERM);
  EXPECT_EQ(gateway_->Wait(10s), 0);
  std::string log = gateway_->Output();
  EXPECT_NE(log.find("0 failed)"), std::string::npos) << log;
  // This kernel has no tls module: the fallback is said once.
  if (log.find("0 with kTLS send") != std::string::npos) {
    EXPECT_NE(log.find("kTLS is not available"), std::string::npos) << log;
  }
}

TEST_P(Https, SniPicksTheCertificateAlpnAndResumption) {
  ASSERT_NO_FATAL_FAILURE(StartTls());
  // curl verifies each name against the CA it is given: only the right certificate passes.
  EXPECT_EQ(CurlTls("/gen/10/sni", {}, "b.test", "b").code, 200);
  EXPECT_EQ(CurlTls("/gen/10/sni", {}, "www.b.test", "b").code, 200);
  EXPECT_EQ(CurlTls("/gen/10/sni", {}, "b.test", "a").curl_exit, 60);  // a.test's CA: refused
  EXPECT_EQ(CurlTls("/gen/10/sni", {}, "a.test", "a").code, 200);
  struct Case {
    std::string sni, cn;
  } cases[] = {{"b.test", "b.test"},
               {"x.b.test", "b.test"},
               {"a.test", "a.test"},
               {"", "a.test"},
               {"c.test", "a.test"}};  // none or unknown: the first
  for (const auto& c : cases) {
    TlsAsk ask;
    ask.sni = c.sni;
    TlsResult r = TlsExchange(tls_port_, ask);
    EXPECT_TRUE(r.handshake) << c.sni << ": " << r.error;
    EXPECT_EQ(r.subject_cn, c.cn) << c.sni;
    SSL_SESSION_free(r.session);
  }
  // ALPN: h2 is preferred, then HTTP/1.1, in either order the client offers them; a client
  // offering only other protocols gets no ALPN answer, and may still speak HTTP/1.1.
  {
    TlsAsk ask;
    ask.sni = "a.test";
    for (auto offer : {Alpn({"http/1.1", "h2"}), Alpn({"h2"}), Alpn({"http/1.1"})}) {
      ask.alpn = offer;
      TlsResult r = TlsExchange(tls_port_, ask);
      EXPECT_EQ(r.alpn, offer.find("h2") != std::string::npos ? "h2" : "http/1.1");
      SSL_SESSION_free(r.session);
    }
    ask.alpn = Alpn({"spdy/3"});
    ask.request = "GET /gen/10/alpn HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n";
    TlsResult r = TlsExchange(tls_port_, ask);
    EXPECT_TRUE(r.handshake) << r.error;
    EXPECT_EQ(r.alpn, "");
    EXPECT_TRUE(r.response.starts_with("HTTP/1.1 200 ")) << r.response.substr(0, 200);
    SSL_SESSION_free(r.session);
  }
  // Session resumption, TLS 1.2 (session id or ticket) and 1.3 (ticket): a second
  // connection with the first one's session resumes it, with SNI switching the context.
  for (int version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    for (const char* sni : {"a.test", "b.test"}) {
      TlsAsk ask;
      ask.sni = sni;
      ask.max_version = version;
      ask.request =
          fmt::format("GET /gen/10/r HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", sni);
      TlsResult first = TlsExchange(tls_port_, ask);
      ASSERT_TRUE(first.handshake) << first.error;
      EXPECT_EQ(first.version, version == TLS1_2_VERSION ? "TLSv1.2" : "TLSv1.3");
      EXPECT_TRUE(first.response.starts_with("HTTP/1.1 200 ")) << first.response.substr(0, 200);
      ask.resume = first.session;
      TlsResult second = TlsExchange(tls_port_, ask);
      EXPECT_TRUE(second.handshake) << second.error;
      EXPECT_TRUE(second.reused) << first.version << " " << sni << " resumable "
                                 << SSL_SESSION_is_resumable(first.session);
      EXPECT_TRUE(second.response.starts_with("HTTP/1.1 200 ")) << second.response.substr(0, 200);
      SSL_SESSION_free(first.session);
      SSL_SESSION_free(second.session);
    }
  }
  // TLS 1.1 and older are refused.
  auto old = test::RunCommand({"/usr/bin/curl", "-s", "-k", "--tls-max", "1.1",
                               "https://127.0.0.1:" + tls_port_ + "/gen/10/x"},
                              dir_ + "/old.log");
  EXPECT_NE(old.first, 0);
}

// Faults on the TLS port, each followed by requests that must be served as before.
TEST_P(Https, BadClientsLeaveTheNextRequestsServed) {
  ASSERT_NO_FATAL_FAILURE(StartTls());
  const std::string path = "/gen/200K/f";
  const std::string want = Origin(path);
  ASSERT_EQ(CurlTls(path).body, want);
  // Plain HTTP to the HTTPS port: no answer, the connection closes.
  std::string plain = test::RawExchange(tls_port_, "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n");
  EXPECT_EQ(plain.find("HTTP/1.1 200"), std::string::npos);
  EXPECT_EQ(CurlTls(path).body, want);
  // Handshakes abandoned: half a ClientHello then silence, a client that connects and says
  // nothing, one that closes mid-handshake. None holds up the others.
  int silent = test::ConnectLoopback(tls_port_);
  int half = test::ConnectLoopback(tls_port_);
  ASSERT_GE(silent, 0);
  ASSERT_GE(half, 0);
  const char hello_start[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
  ASSERT_EQ(send(half, hello_start, sizeof hello_start - 1, MSG_NOSIGNAL),
            static_cast<ssize_t>(sizeof hello_start - 1));
  int gone = test::ConnectLoopback(tls_port_);
  (void)!send(gone, hello_start, sizeof hello_start - 1, MSG_NOSIGNAL);
  close(gone);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(CurlTls(path).body, want);
  // A malformed request over TLS: 400, closed; the next connection is served.
  TlsAsk ask;
  ask.sni = "a.test";
  ask.request = "GET / HTTP/1.1\r\nHost : x\r\n\r\nGET / HTTP/1.1\r\n\r\n";
  TlsResult bad = TlsExchange(tls_port_, ask);
  EXPECT_TRUE(bad.response.starts_with("HTTP/1.1 400 ")) << bad.response.substr(0, 200);
  EXPECT_EQ(bad.response.find("HTTP/1.1", 5), std::string::npos);
  SSL_SESSION_free(bad.session);
  // Pipelined requests in one TLS write: answered in order.
  ask.request = fmt::format(
      "GET {0} HTTP/1.1\r\nHost: a.test\r\n\r\nGET {0} HTTP/1.1\r\nHost: a.test\r\nConnection: "
      "close\r\n\r\n",
      path);
  TlsResult two = TlsExchange(tls_port_, ask);
  size_t second = two.response.find("HTTP/1.1 200 OK", 5);
  ASSERT_NE(second, std::string::npos) << two.response.substr(0, 300);
  EXPECT_EQ(two.response.substr(two.response.find("\r\n\r\n", second) + 4), want);
  SSL_SESSION_free(two.session);
  // A client that leaves mid-body (a slow reader cut off by its own timeout), on a miss and
  // on a hit: the next ones get every byte.
  const std::string big = Origin("/gen/32M/cut");
  for (int i = 0; i < 2; ++i) {
    auto cut = CurlTls("/gen/32M/cut", {"--limit-rate", "2M", "--max-time", "1"});
    EXPECT_EQ(cut.curl_exit, 28);
    auto whole = CurlTls("/gen/32M/cut");
    EXPECT_EQ(whole.curl_exit, 0);
    EXPECT_TRUE(whole.body == big) << "got " << whole.body.size() << " bytes";
  }
  close(silent);
  close(half);
  EXPECT_EQ(OriginHits("/gen/32M/cut"), 2);  // ours and one fill
  EXPECT_EQ(CurlTls(path).body, want);
}

// HTTPS alone (no plain port), several workers: parallel misses of one key are one origin
// request, every client gets the whole object.
TEST_P(Https, TlsOnlyWorkersCoalesceMisses) {
  ASSERT_NO_FATAL_FAILURE(StartTls({"--http-port", "0", "--threads", "2"}));
  EXPECT_NE(gateway_->Output().find("(no plain HTTP port)"), std::string::npos);
  const std::string want = Origin("/gen/8M/co?pace=2");
  std::vector<Background> clients;
  for (int i = 0; i < 6; ++i) {
    clients.push_back(CurlUrlInBackground(
        fmt::format("https://a.test:{}/gen/8M/co?pace=2", tls_port_), fmt::format("p{}", i),
        {"--http1.1", "--cacert", Pem("a"), "--resolve",
         fmt::format("a.test:{}:127.0.0.1", tls_port_)}));
  }
  for (auto& b : clients) {
    Reply r = Finish(b);
    EXPECT_EQ(r.code, 200);
    EXPECT_TRUE(r.body == want) << r.body.size();
  }
  EXPECT_EQ(OriginHits("/gen/8M/co?pace=2"), 2);  // ours and one fill
}

INSTANTIATE_TEST_SUITE_P(Net, Https, testing::Values("sync", "async"));

// Certificate settings that cannot work stop the gateway at start with one clear error.
TEST(HttpsSettings, BadCertificatesAreOneClearErrorAtStart) {
  const std::string dir = fmt::format("{}/tls-settings-{}", test::TmpDir(), getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* n : {"a", "b"}) {
    ASSERT_EQ(test::MakeCertificate(fmt::format("{}.test", n), fmt::format("{}/{}.pem", dir, n),
                                    fmt::format("{}/{}.key", dir, n))
                  .first,
              0);
  }
  struct Case {
    std::vector<std::string> args;
    std::string error;
  } cases[] = {
      {{"--https-port=-1", "--tls-cert", dir + "/none.pem", "--tls-key", dir + "/a.key"},
       "TLS certificate '" + dir + "/none.pem': No such file or directory"},
      {{"--https-port=-1", "--tls-cert", dir + "/a.pem", "--tls-key", dir + "/none.key"},
       "TLS key '" + dir + "/none.key': No such file or directory"},
      {{"--https-port=-1", "--tls-cert", dir + "/a.key", "--tls-key", dir + "/a.key"},
       "TLS certificate '" + dir + "/a.key': "},
      {{"--https-port=-1", "--tls-cert", dir + "/a.pem", "--tls-key", dir + "/b.key"},
       "does not match certificate"},
      {{"--https-port=-1", "--tls-cert", dir + "/a.pem"}, "1 --tls-cert but 0 --tls-key"},
      {{"--https-port=-1"}, "TLS needs a certificate: give --tls-cert and --tls-key"},
      {{"--tls-cert", dir + "/a.pem", "--tls-key", dir + "/a.key"}, "give --https-port"},
      {{"--http-port", "0"}, "HTTP needs a port"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv{GOBLIN_GATEWAY_BIN, "--core", "unix:" + dir + "/no.sock",
                                  "--mirror", "http://127.0.0.1:1"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    auto [rc, out] = test::RunCommand(argv, dir + "/gw.log", 20s);
    EXPECT_EQ(rc, 1) << out;
    EXPECT_NE(out.find(c.error), std::string::npos) << "want: " << c.error << "\ngot: " << out;
  }
  // HTTPS without the mirror (a memcache-only gateway): an error, not a port never opened.
  auto [rc, out] = test::RunCommand({GOBLIN_GATEWAY_BIN, "--core", "unix:" + dir + "/no.sock",
                                     "--memcache-port=-1", "--https-port=-1"},
                                    dir + "/gw.log", 20s);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("--https-port serves the HTTP mirror: give --mirror"), std::string::npos)
      << out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace goblin
