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

#include <fmt/format.h>

#include "goblin/cluster/etcd_client.h"
#include "tests/system/process.h"

namespace goblin::test {

inline constexpr char kEtcdBin[] = "/usr/bin/etcd";

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
  std::string endpoint() const { return fmt::format("http://127.0.0.1:{}", client_port_); }
  cluster::EtcdOptions options() const {
    cluster::EtcdOptions o;
    o.endpoints = {fmt::format("127.0.0.1:{}", client_port_)};
    o.timeout = std::chrono::milliseconds(2000);
    return o;
  }

  // Starts etcd and waits (bounded) until it answers a read; false with its log otherwise.
  bool Start(std::string* log = nullptr) {
    std::string peer = fmt::format("http://127.0.0.1:{}", peer_port_);
    proc_ = std::make_unique<Process>(
        std::vector<std::string>{
            kEtcdBin, "--name", "t", "--data-dir", dir_ + "/data", "--listen-client-urls",
            also_listen_.empty()
                ? endpoint()
                : fmt::format("{},http://{}:{}", endpoint(), also_listen_, client_port_),
            "--advertise-client-urls", endpoint(), "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer, "--initial-cluster", "t=" + peer, "--log-level",
            "warn"},
        dir_ + fmt::format("/etcd-{}.log", starts_++));
    auto client = cluster::EtcdClient::Open(options());
    if (!client) return false;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      if ((*client)->Get("/probe")) return true;
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
  std::unique_ptr<Process> proc_;
};

}  // namespace goblin::test
