// kTLS for real (label rdma: it needs the kernel's tls module, which this project's build
// machine lacks and the Soft-RoCE guest's Debian kernel has; tests/rdma/run_rdma_tests.sh
// runs it there). goblin-core preloads files (--source, so no origin is needed) and
// goblin-gateway serves them over HTTPS; after each handshake OpenSSL gives the keys to the
// kernel, and the gateway's writes (writev, and sendfile from the core's pool in --net sync)
// are encrypted by it. Checked: every body byte-exact over TLS 1.2 and 1.3, several
// responses on one connection, a range, and the gateway's own count of connections sending
// through kTLS (all of them; its exit line, printed, also says how many bytes went by
// sendfile); the same over HTTP/2 (ALPN h2, many streams on each connection). Skips where
// the kernel has no TLS (setsockopt TCP_ULP "tls" fails);
// KTLS_TEST_ANYWAY=1 runs it regardless (its kTLS checks then fail: for work on the test).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "tests/system/process.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string Bin(const char* env, const char* built) {
  const char* e = std::getenv(env);
  return e != nullptr ? e : built;
}

// Whether this kernel can put TLS on a TCP socket (the tls module).
bool KernelHasTls() {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bool ok = false;
  if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && listen(l, 1) == 0 &&
      getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      ok = setsockopt(c, IPPROTO_TCP, TCP_ULP, "tls", sizeof "tls") == 0;
    }
    close(c);
  }
  close(l);
  return ok;
}

// A self-signed P-256 certificate for `cn`, written as PEM files.
bool MakeCertificate(const std::string& cn, const std::string& cert, const std::string& key) {
  EVP_PKEY* k = EVP_EC_gen("P-256");
  X509* x = X509_new();
  bool ok = k != nullptr && x != nullptr;
  if (ok) {
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -60);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_set_pubkey(x, k);
    X509_NAME* n = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
    X509_set_issuer_name(x, n);
    ok = X509_sign(x, k, EVP_sha256()) > 0;
  }
  if (ok) {
    BIO* c = BIO_new_file(cert.c_str(), "w");
    BIO* p = BIO_new_file(key.c_str(), "w");
    ok = c != nullptr && p != nullptr && PEM_write_bio_X509(c, x) == 1 &&
         PEM_write_bio_PrivateKey(p, k, nullptr, nullptr, 0, nullptr, nullptr) == 1;
    BIO_free(c);
    BIO_free(p);
  }
  X509_free(x);
  EVP_PKEY_free(k);
  return ok;
}

// One TLS connection (blocking), several requests on it, each answer read by its length.
class TlsClient {
 public:
  // `alpn`: the protocols offered, in ALPN's wire form ("\x02h2"); none when empty.
  TlsClient(int port, int max_version, std::string_view alpn = {}) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{20, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return;
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_max_proto_version(ctx_, max_version);
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    SSL_set_tlsext_host_name(ssl_, "ktls.test");
    if (!alpn.empty()) {
      SSL_set_alpn_protos(ssl_, reinterpret_cast<const unsigned char*>(alpn.data()),
                          static_cast<unsigned>(alpn.size()));
    }
    ok_ = SSL_connect(ssl_) == 1;
  }
  std::string Alpn() const {
    const unsigned char* p = nullptr;
    unsigned n = 0;
    SSL_get0_alpn_selected(ssl_, &p, &n);
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  SSL* ssl() { return ssl_; }
  ~TlsClient() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (ctx_ != nullptr) SSL_CTX_free(ctx_);
    close(fd_);
  }
  bool ok() const { return ok_; }
  std::string version() const { return SSL_get_version(ssl_); }
  // GET `path` (with `extra` headers): the status and the body.
  std::pair<int, std::string> Get(const std::string& path, const std::string& extra = {}) {
    std::string req = fmt::format("GET {} HTTP/1.1\r\nHost: ktls.test\r\n{}\r\n", path, extra);
    if (SSL_write(ssl_, req.data(), static_cast<int>(req.size())) <= 0) return {0, {}};
    size_t end;
    while ((end = in_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return {0, {}};
    }
    std::string head = in_.substr(0, end + 4);
    in_.erase(0, end + 4);
    std::smatch m;
    size_t length = 0;
    if (std::regex_search(head, m, std::regex("Content-Length: ([0-9]+)\r\n")))
      length = std::stoull(m[1]);
    while (in_.size() < length) {
      if (!Fill()) return {0, {}};
    }
    std::string body = in_.substr(0, length);
    in_.erase(0, length);
    return {std::atoi(head.c_str() + 9), body};
  }

 private:
  bool Fill() {
    char buf[65536];
    int n = SSL_read(ssl_, buf, sizeof buf);
    if (n <= 0) return false;
    in_.append(buf, static_cast<size_t>(n));
    return true;
  }
  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  bool ok_ = false;
  std::string in_;
};

// HTTP/2 over a TLS connection (ALPN h2): the requests at once, each its own stream, until
// every stream has closed. Each answer: status and body, by stream, in request order.
struct H2Answer {
  int status = 0;
  std::string body;
  uint32_t error = 0;  // RST_STREAM's code, 0 when the stream ended normally
  bool closed = false;
};
std::vector<H2Answer> H2Exchange(TlsClient& c,
                                 const std::vector<std::pair<std::string, std::string>>& requests) {
  struct State {
    SSL* ssl;
    std::map<int32_t, H2Answer> streams;
    bool failed = false;
  } st{c.ssl(), {}, false};
  nghttp2_session_callbacks* cb = nullptr;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_send_callback(
      cb, [](nghttp2_session*, const uint8_t* d, size_t len, int, void* user) -> ssize_t {
        auto& s = *static_cast<State*>(user);
        int n = SSL_write(s.ssl, d, static_cast<int>(len));
        if (n <= 0) {
          s.failed = true;
          return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        return n;
      });
  nghttp2_session_callbacks_set_on_header_callback(
      cb,
      [](nghttp2_session*, const nghttp2_frame* f, const uint8_t* name, size_t nlen,
         const uint8_t* value, size_t vlen, uint8_t, void* user) -> int {
        auto& s = *static_cast<State*>(user);
        if (std::string_view(reinterpret_cast<const char*>(name), nlen) == ":status")
          s.streams[f->hd.stream_id].status =
              std::atoi(std::string(reinterpret_cast<const char*>(value), vlen).c_str());
        return 0;
      });
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
      cb,
      [](nghttp2_session*, uint8_t, int32_t id, const uint8_t* d, size_t len, void* user) -> int {
        static_cast<State*>(user)->streams[id].body.append(reinterpret_cast<const char*>(d), len);
        return 0;
      });
  nghttp2_session_callbacks_set_on_stream_close_callback(
      cb, [](nghttp2_session*, int32_t id, uint32_t code, void* user) -> int {
        auto& a = static_cast<State*>(user)->streams[id];
        a.closed = true;
        a.error = code;
        return 0;
      });
  nghttp2_session* session = nullptr;
  nghttp2_session_client_new(&session, cb, &st);
  nghttp2_session_callbacks_del(cb);
  // Windows large enough for a whole object in flight (the connection's and each stream's).
  const nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 30}};
  nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, settings, 1);
  nghttp2_session_set_local_window_size(session, NGHTTP2_FLAG_NONE, 0, 1 << 30);
  std::vector<int32_t> ids;
  for (const auto& [path, range] : requests) {
    std::vector<nghttp2_nv> nv;
    const auto add = [&](std::string_view n, std::string_view v) {
      nv.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(n.data())),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(v.data())), n.size(), v.size(),
                    NGHTTP2_NV_FLAG_NONE});
    };
    add(":method", "GET");
    add(":scheme", "https");
    add(":authority", "ktls.test");
    add(":path", path);
    if (!range.empty()) add("range", range);
    ids.push_back(nghttp2_submit_request(session, nullptr, nv.data(), nv.size(), nullptr, nullptr));
  }
  const auto all_closed = [&] {
    for (int32_t id : ids) {
      if (!st.streams[id].closed) return false;
    }
    return true;
  };
  char buf[65536];
  while (!st.failed && !all_closed()) {
    if (nghttp2_session_send(session) != 0) break;
    int n = SSL_read(st.ssl, buf, sizeof buf);  // (SO_RCVTIMEO bounds it: 20 s)
    if (n <= 0) break;
    if (nghttp2_session_mem_recv(session, reinterpret_cast<const uint8_t*>(buf),
                                 static_cast<size_t>(n)) < 0)
      break;
  }
  nghttp2_session_del(session);
  std::vector<H2Answer> out;
  for (int32_t id : ids) out.push_back(st.streams[id]);
  return out;
}

class Ktls : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!KernelHasTls() && std::getenv("KTLS_TEST_ANYWAY") == nullptr) {
      GTEST_SKIP() << "this kernel has no TLS (tls module); tests/rdma/run_rdma_tests.sh runs "
                      "this test in a guest whose kernel has it";
    }
    dir_ = fmt::format("{}/ktls-{}-{}", test::TmpDir(), getpid(), GetParam());
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/src");
    ASSERT_TRUE(MakeCertificate("ktls.test", dir_ + "/c.pem", dir_ + "/k.pem"));
    std::mt19937_64 rng(42);
    for (auto [name, size] :
         {std::pair<const char*, size_t>{"small", 1000}, {"mid", 300 << 10}, {"big", 24 << 20}}) {
      std::string bytes(size, '\0');
      for (char& c : bytes) c = static_cast<char>(rng());
      std::ofstream(dir_ + "/src/" + name, std::ios::binary) << bytes;
      files_[name] = std::move(bytes);
    }
    const std::string core = Bin("GOBLIN_CORE_BIN", GOBLIN_CORE_BIN);
    ASSERT_EQ(test::RunCommand({core, "--prepare", dir_ + "/tier"}, dir_ + "/prep.log").first, 0);
    sock_ = test::SocketPath("ktls");
    fs::remove(sock_);
    core_ = std::make_unique<test::Process>(std::vector<std::string>{core,
                                                                     "--listen-unix",
                                                                     sock_,
                                                                     "--ssd-dir",
                                                                     dir_ + "/tier",
                                                                     "--memory",
                                                                     "64M",
                                                                     "--block",
                                                                     "64K",
                                                                     "--ram-head",
                                                                     "64K",
                                                                     "--extent-size",
                                                                     "1M",
                                                                     "--tier-file-size",
                                                                     "128M",
                                                                     "--cores",
                                                                     "1",
                                                                     "--source",
                                                                     dir_ + "/src",
                                                                     "--source-prefix",
                                                                     "ktls.test"},
                                            dir_ + "/core.log");
    ASSERT_TRUE(test::WaitForPath(sock_, 20s)) << core_->Output();
    gateway_ = std::make_unique<test::Process>(
        std::vector<std::string>{Bin("GOBLIN_GATEWAY_BIN", GOBLIN_GATEWAY_BIN), "--core",
                                 "unix:" + sock_, "--mirror", "http://127.0.0.1:1", "--http-port",
                                 "0", "--https-port=-1", "--tls-cert", dir_ + "/c.pem", "--tls-key",
                                 dir_ + "/k.pem", "--threads", "1", "--net", GetParam()},
        dir_ + "/gateway.log");
    for (int i = 0; i < 1000 && port_ == 0; ++i) {
      std::smatch m;
      std::string log = gateway_->Output();
      if (std::regex_search(log, m, std::regex("HTTPS on 127.0.0.1:([0-9]+)"))) {
        port_ = std::stoi(m[1]);
      } else {
        std::this_thread::sleep_for(20ms);
      }
    }
    ASSERT_NE(port_, 0) << gateway_->Output();
  }
  void TearDown() override {
    gateway_.reset();
    core_.reset();
    fs::remove_all(dir_);
  }
  std::string dir_, sock_;
  int port_ = 0;
  std::map<std::string, std::string> files_;
  std::unique_ptr<test::Process> core_, gateway_;
  // The preload is done when the last file answers (a miss would be a 502: no origin).
  // One TLS connection (its handshake counted by the gateway) per try.
  void WaitForPreload() {
    bool loaded = false;
    for (int i = 0; i < 600 && !loaded; ++i) {
      TlsClient c(port_, TLS1_3_VERSION);
      ASSERT_TRUE(c.ok());
      loaded = c.Get("/big").first == 200;
      if (!loaded) std::this_thread::sleep_for(50ms);
    }
    ASSERT_TRUE(loaded) << core_->Output();
  }
  // Stops the gateway and reads its exit line: at least `connections` handshakes, none
  // failed, every one sending through kTLS (and the line printed).
  void ExpectEveryConnectionSentThroughKtls(int connections) {
    gateway_->Signal(SIGTERM);
    ASSERT_EQ(gateway_->Wait(20s), 0) << gateway_->Output();
    std::string log = gateway_->Output();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(log, m,
                                  std::regex("TLS: ([0-9]+) handshakes \\(([0-9]+) resumed, "
                                             "([0-9]+) failed\\), ([0-9]+) with kTLS send")))
        << log;
    const int handshakes = std::stoi(m[1]);
    EXPECT_GE(handshakes, connections);
    EXPECT_EQ(std::stoi(m[3]), 0);
    EXPECT_EQ(std::stoi(m[4]), handshakes) << "every connection should send through kTLS\n" << log;
    EXPECT_EQ(log.find("kTLS is not available"), std::string::npos) << log;
    std::cout << log.substr(log.find("HTTP: ")) << std::endl;
  }
};

TEST_P(Ktls, HitsGoOutThroughTheKernelsTlsByteExact) {
  ASSERT_NO_FATAL_FAILURE(WaitForPreload());
  int connections = 0;
  for (int version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    for (int round = 0; round < 2; ++round) {
      TlsClient c(port_, version);
      ASSERT_TRUE(c.ok());
      ++connections;
      for (const char* name : {"small", "mid", "big", "small"}) {
        auto [status, body] = c.Get(std::string("/") + name);
        EXPECT_EQ(status, 200) << name << " " << c.version();
        EXPECT_TRUE(body == files_[name]) << name << " " << c.version() << ": " << body.size();
      }
      auto [status, part] = c.Get("/big", "Range: bytes=1000000-1999999\r\n");
      EXPECT_EQ(status, 206);
      EXPECT_TRUE(part == files_["big"].substr(1000000, 1000000)) << part.size();
    }
  }
  ASSERT_NO_FATAL_FAILURE(ExpectEveryConnectionSentThroughKtls(connections + 1));
}

// HTTP/2 by ALPN over the same kTLS connections: many streams on one connection, hits of
// every size and a range, byte-exact, and each connection counted as sending through kTLS.
TEST_P(Ktls, H2StreamsGoOutThroughTheKernelsTlsByteExact) {
  std::signal(SIGPIPE, SIG_IGN);  // (a connection the gateway closes: an error, not a death)
  ASSERT_NO_FATAL_FAILURE(WaitForPreload());
  int connections = 1;
  for (int version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    TlsClient c(port_, version, std::string_view("\x02h2\x08http/1.1", 12));
    ASSERT_TRUE(c.ok());
    ++connections;
    ASSERT_EQ(c.Alpn(), "h2");
    // (one session per connection: each stream of it, two rounds of five, at once)
    const char* names[] = {"small", "big", "mid", "big", "small"};
    std::vector<std::pair<std::string, std::string>> requests;
    for (int round = 0; round < 2; ++round) {
      for (size_t i = 0; i < std::size(names); ++i) {
        requests.emplace_back(std::string("/") + names[i], i == 3 ? "bytes=1000000-1999999" : "");
      }
    }
    auto answers = H2Exchange(c, requests);
    ASSERT_EQ(answers.size(), requests.size());
    if (!answers[0].closed) ADD_FAILURE() << gateway_->Output();
    for (size_t i = 0; i < answers.size(); ++i) {
      const size_t k = i % std::size(names);
      SCOPED_TRACE(fmt::format("{} #{} over {}", names[k], i, c.version()));
      EXPECT_TRUE(answers[i].closed);
      EXPECT_EQ(answers[i].error, 0u);
      if (k == 3) {
        EXPECT_EQ(answers[i].status, 206);
        EXPECT_TRUE(answers[i].body == files_["big"].substr(1000000, 1000000))
            << answers[i].body.size();
      } else {
        EXPECT_EQ(answers[i].status, 200);
        EXPECT_TRUE(answers[i].body == files_[names[k]]) << answers[i].body.size();
      }
    }
  }
  ASSERT_NO_FATAL_FAILURE(ExpectEveryConnectionSentThroughKtls(connections));
}

INSTANTIATE_TEST_SUITE_P(Net, Ktls, testing::Values("sync", "async"));

}  // namespace
}  // namespace goblin
