// kTLS for real (label rdma: it needs the kernel's tls module, which this project's build
// machine lacks and the Soft-RoCE guest's Debian kernel has; tests/rdma/run_rdma_tests.sh
// runs it there). goblin-core preloads files (--source, so no origin is needed) and
// goblin-gateway serves them over HTTPS; after each handshake OpenSSL gives the keys to the
// kernel, and the gateway's writes (writev, and sendfile from the core's pool in --net sync)
// are encrypted by it. Checked: every body byte-exact over TLS 1.2 and 1.3, several
// responses on one connection, a range, and the gateway's own count of connections sending
// through kTLS (all of them; its exit line, printed, also says how many bytes went by
// sendfile). Skips where the kernel has no TLS (setsockopt TCP_ULP "tls" fails);
// KTLS_TEST_ANYWAY=1 runs it regardless (its kTLS checks then fail: for work on the test).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <unistd.h>

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
  TlsClient(int port, int max_version) {
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
    ok_ = SSL_connect(ssl_) == 1;
  }
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
};

TEST_P(Ktls, HitsGoOutThroughTheKernelsTlsByteExact) {
  // The preload is done when the last file answers (a miss would be a 502: no origin).
  bool loaded = false;
  for (int i = 0; i < 600 && !loaded; ++i) {
    TlsClient c(port_, TLS1_3_VERSION);
    ASSERT_TRUE(c.ok());
    loaded = c.Get("/big").first == 200;
    if (!loaded) std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(loaded) << core_->Output();
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
  gateway_->Signal(SIGTERM);
  ASSERT_EQ(gateway_->Wait(20s), 0) << gateway_->Output();
  std::string log = gateway_->Output();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m,
                                std::regex("TLS: ([0-9]+) handshakes \\(([0-9]+) resumed, "
                                           "([0-9]+) failed\\), ([0-9]+) with kTLS send")))
      << log;
  const int handshakes = std::stoi(m[1]);
  EXPECT_GE(handshakes, connections + 1);
  EXPECT_EQ(std::stoi(m[3]), 0);
  EXPECT_EQ(std::stoi(m[4]), handshakes) << "every connection should send through kTLS\n" << log;
  EXPECT_EQ(log.find("kTLS is not available"), std::string::npos) << log;
  std::cout << log.substr(log.find("HTTP: ")) << std::endl;
}

INSTANTIATE_TEST_SUITE_P(Net, Ktls, testing::Values("sync", "async"));

}  // namespace
}  // namespace goblin
