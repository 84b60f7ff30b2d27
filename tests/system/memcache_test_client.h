// A memcache client over TCP for the system tests (tests/system/memcache_front_test.cpp,
// cluster_test.cpp): sends, and reads until an expected ending, EOF or 10 s.
// Threading: one test thread.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <string_view>

namespace goblin::test {

class McClient {
 public:
  explicit McClient(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~McClient() { Close(); }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  bool ok() const { return ok_; }
  void Send(std::string_view s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  // Reads until the output ends with `end` (or EOF, or 10 s).
  std::string ReadUntil(std::string_view end) {
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    char buf[65536];
    while (!out.ends_with(end) && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      ssize_t n = read(fd_, buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  std::string Ask(std::string_view request, std::string_view end = "\r\n") {
    Send(request);
    return ReadUntil(end);
  }
  // A get's answer: up to END, or a SERVER_ERROR line.
  std::string AskGet(std::string_view request) {
    Send(request);
    std::string out = ReadUntil("\r\n");
    if (out.starts_with("SERVER_ERROR") || out.ends_with("END\r\n")) return out;
    return out + ReadUntil("END\r\n");
  }
  // True once the server has closed the connection (within 5 s).
  bool Closed() {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    char buf[4096];
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      ssize_t n = read(fd_, buf, sizeof buf);
      if (n <= 0) return true;
    }
    return false;
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

}  // namespace goblin::test
