// Test helper: a one-member etcd (Debian's etcd-server) of the test's own, on loopback ports
// chosen free at start, with its data in a scratch directory; killed with the test. Stop and
// Start again keep the data and the ports (an etcd outage and recovery).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "goblin/cluster/etcd_client.h"
#include "tests/system/process.h"

namespace goblin::test {

inline constexpr char kEtcdBin[] = "/usr/bin/etcd";
inline constexpr char kEtcdctlBin[] = "/usr/bin/etcdctl";

// A CA and two certificates it signs, for etcd over TLS (P-256, made with the openssl
// command): DIR/ca.pem; DIR/server.{pem,key} for 127.0.0.1 and localhost; DIR/client.{pem,key}
// with CN `client_cn` (etcd takes it as the user name under --client-cert-auth). An error
// message, empty when all were made.
inline std::string MakeEtcdCertificates(const std::string& dir, const std::string& client_cn) {
  const std::vector<std::string> ec{"-newkey", "ec",    "-pkeyopt", "ec_paramgen_curve:prime256v1",
                                    "-nodes",  "-days", "2"};
  auto run = [&](std::vector<std::string> args) -> std::string {
    std::vector<std::string> argv{"/usr/bin/openssl", "req", "-x509"};
    argv.insert(argv.end(), ec.begin(), ec.end());
    argv.insert(argv.end(), args.begin(), args.end());
    auto [rc, out] = RunCommand(std::move(argv), dir + "/openssl.log");
    return rc == 0 ? std::string() : out;
  };
  std::string err =
      run({"-subj", "/CN=goblin-test-ca", "-keyout", dir + "/ca.key", "-out", dir + "/ca.pem"});
  if (err.empty()) {
    err = run({"-CA", dir + "/ca.pem", "-CAkey", dir + "/ca.key", "-subj", "/CN=etcd", "-addext",
               "subjectAltName=IP:127.0.0.1,DNS:localhost", "-addext",
               "basicConstraints=critical,CA:FALSE", "-addext",
               "extendedKeyUsage=serverAuth,clientAuth", "-keyout", dir + "/server.key", "-out",
               dir + "/server.pem"});
  }
  if (err.empty()) {
    err = run({"-CA", dir + "/ca.pem", "-CAkey", dir + "/ca.key", "-subj", "/CN=" + client_cn,
               "-addext", "basicConstraints=critical,CA:FALSE", "-addext",
               "extendedKeyUsage=clientAuth", "-keyout", dir + "/client.key", "-out",
               dir + "/client.pem"});
  }
  return err;
}

// `n` consecutive loopback TCP ports nobody listens on, below the kernel's ephemeral range
// (32768 and up by default), so no outgoing connection takes one before the test binds it
// (a core's --rdma-listen HOST:PORT puts shard i on PORT + i). 0 if none found.
inline uint16_t FreeLoopbackPortRange(int n) {
  static uint32_t seed = static_cast<uint32_t>(getpid()) * 2654435761u;
  for (int attempt = 0; attempt < 200; ++attempt) {
    seed = seed * 1664525u + 1013904223u;
    const uint16_t base = static_cast<uint16_t>(20000 + (seed >> 8) % 12000);
    bool all = true;
    for (int i = 0; i < n && all; ++i) {
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(base + i));
      all = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      close(fd);
    }
    if (all) return base;
  }
  return 0;
}

class EtcdServer {
 public:
  explicit EtcdServer(std::string dir)
      : dir_(std::move(dir)),
        client_port_(FreeLoopbackPortRange(2)),
        peer_port_(static_cast<uint16_t>(client_port_ + 1)) {
    std::filesystem::create_directories(dir_);
  }
  ~EtcdServer() { Kill(); }

  static bool Installed() { return std::filesystem::exists(kEtcdBin); }
  std::string endpoint() const {
    return fmt::format("{}://127.0.0.1:{}", tls_.empty() ? "http" : "https", client_port_);
  }
  // The options of a client of this etcd (its TLS and auth as set below).
  cluster::EtcdOptions options() const {
    cluster::EtcdOptions o;
    o.endpoints = {fmt::format("127.0.0.1:{}", client_port_)};
    o.timeout = std::chrono::milliseconds(2000);
    o.security = security_;
    return o;
  }
  // Before Start: serve clients over TLS with this server certificate, trusting `ca` for
  // client certificates (etcd --client-cert-auth when `client_cert_auth`); more etcd flags.
  void UseTls(const std::string& ca, const std::string& cert, const std::string& key,
              bool client_cert_auth) {
    tls_ = {"--cert-file", cert, "--key-file", key, "--trusted-ca-file", ca};
    if (client_cert_auth) tls_.push_back("--client-cert-auth");
  }
  void AddArgs(std::vector<std::string> args) {
    extra_.insert(extra_.end(), args.begin(), args.end());
  }
  // How options() (and Start's readiness probe) reach it: once auth is enabled, with a user.
  void set_client_security(cluster::EtcdSecurity s) { security_ = std::move(s); }

  // Turns etcd's auth on with etcdctl, over options()' TLS: users root and `user` (password
  // `password`), `user` allowed to read and write under `prefix` only; options() then
  // authenticates as `user`. An error message, empty on success.
  std::string EnableAuth(const std::string& user, const std::string& password,
                         const std::string& prefix) {
    std::vector<std::string> base{kEtcdctlBin, "--endpoints=" + endpoint(), "--dial-timeout=5s",
                                  "--command-timeout=5s"};
    if (!security_.ca_file.empty()) base.push_back("--cacert=" + security_.ca_file);
    if (!security_.cert_file.empty()) {
      base.push_back("--cert=" + security_.cert_file);
      base.push_back("--key=" + security_.key_file);
    }
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"user", "add", "root", "--new-user-password=root-" + password},
             {"user", "add", user, "--new-user-password=" + password},
             {"role", "add", "members"},
             {"role", "grant-permission", "members", "--prefix=true", "readwrite", prefix},
             {"user", "grant-role", user, "members"},
             {"auth", "enable"}}) {
      std::vector<std::string> argv = base;
      argv.insert(argv.end(), args.begin(), args.end());
      auto [rc, out] = RunCommand(argv, dir_ + "/etcdctl.log", std::chrono::seconds(20));
      if (rc != 0) return fmt::format("etcdctl {}: {}", fmt::join(args, " "), out);
    }
    security_.user = user;
    security_.password = password;
    return {};
  }

  // Starts etcd and waits (bounded) until it answers a read; false with its log otherwise.
  bool Start(std::string* log = nullptr) {
    std::string peer = fmt::format("http://127.0.0.1:{}", peer_port_);
    std::vector<std::string> argv{kEtcdBin,
                                  "--name",
                                  "t",
                                  "--data-dir",
                                  dir_ + "/data",
                                  "--listen-client-urls",
                                  also_listen_.empty() ? endpoint()
                                                       : fmt::format("{},http://{}:{}", endpoint(),
                                                                     also_listen_, client_port_),
                                  "--advertise-client-urls",
                                  endpoint(),
                                  "--listen-peer-urls",
                                  peer,
                                  "--initial-advertise-peer-urls",
                                  peer,
                                  "--initial-cluster",
                                  "t=" + peer,
                                  "--log-level",
                                  "warn"};
    argv.insert(argv.end(), tls_.begin(), tls_.end());
    argv.insert(argv.end(), extra_.begin(), extra_.end());
    proc_ =
        std::make_unique<Process>(std::move(argv), dir_ + fmt::format("/etcd-{}.log", starts_++));
    auto client = cluster::EtcdClient::Open(options());
    if (!client) return false;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      // (with auth on, a user may not read /probe: etcd saying so is etcd answering)
      auto r = (*client)->Get("/probe");
      if (r || r.error().code() == StatusCode::kPermissionDenied) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (log != nullptr) *log = proc_->Output();
    return false;
  }
  void Kill() {
    if (proc_) {
      proc_->Signal(SIGKILL);
      proc_->Wait(std::chrono::seconds(10));
      proc_.reset();
    }
  }
  std::string Output() const { return proc_ ? proc_->Output() : std::string(); }
  // Also serve clients on this address (before Start): hosts in other network namespaces.
  void AlsoListenOn(std::string ip) { also_listen_ = std::move(ip); }
  uint16_t client_port() const { return client_port_; }

 private:
  std::string dir_;
  uint16_t client_port_, peer_port_;
  int starts_ = 0;
  std::string also_listen_;
  std::vector<std::string> tls_, extra_;
  cluster::EtcdSecurity security_;
  std::unique_ptr<Process> proc_;
};

}  // namespace goblin::test
