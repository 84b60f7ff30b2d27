// Test helper for the HTTP mirror end to end: a goblin-core with a disk tier, the project's
// test origin (tests/support/test_origin.py, which logs every request) and goblin-gateway
// --mirror in front of it, each a child process of the test with its own log; curl and raw
// sockets as clients. Used by http_mirror_test and http_fault_test.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "tests/system/process.h"

namespace goblin::test {

inline std::string ReadFileBytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

class MirrorHarness {
 public:
  struct Reply {
    int code = 0;       // 0: no status line arrived
    int curl_exit = 0;  // curl's exit status (18: body shorter than declared, 52, 56, ...)
    std::string headers, body;
  };

  // Prepares a tier and starts goblin-core (`core_extra`: "--flag", "value" pairs that
  // replace or add to the defaults) and the test origin. `name` names the scratch directory.
  bool StartCoreAndOrigin(const std::string& name, std::vector<std::string> core_extra = {}) {
    dir_ = fmt::format("{}/httpmirror-{}-{}", TmpDir(), getpid(), name);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    tier_ = dir_ + "/tier";
    core_sock_ = SocketPath("hcore");
    if (RunCommand({GOBLIN_CORE_BIN, "--prepare", tier_}, dir_ + "/prep.log").first != 0)
      return false;
    // Defaults, each replaced by the same flag in `core_extra` ("--flag", "value" pairs).
    std::vector<std::pair<std::string, std::string>> flags{
        {"--listen-unix", core_sock_}, {"--ssd-dir", tier_},
        {"--memory", "64M"},           {"--block", "64K"},
        {"--ram-head", "64K"},         {"--extent-size", "1M"},
        {"--tier-file-size", "256M"},  {"--cores", "1"}};
    for (size_t i = 0; i + 1 < core_extra.size(); i += 2) {
      auto it = std::find_if(flags.begin(), flags.end(),
                             [&](const auto& f) { return f.first == core_extra[i]; });
      if (it != flags.end()) {
        it->second = core_extra[i + 1];
      } else {
        flags.emplace_back(core_extra[i], core_extra[i + 1]);
      }
    }
    core_args_ = {GOBLIN_CORE_BIN};
    for (const auto& [flag, value] : flags) {
      core_args_.push_back(flag);
      core_args_.push_back(value);
    }
    if (!StartCore()) return false;
    origin_ = std::make_unique<Process>(
        std::vector<std::string>{
            "/usr/bin/python3", std::string(GOBLIN_SOURCE_DIR) + "/tests/support/test_origin.py",
            "--port-file", dir_ + "/origin.port", "--log", dir_ + "/access.log"},
        dir_ + "/origin.log");
    if (!WaitForPath(dir_ + "/origin.port", std::chrono::seconds(10))) return false;
    origin_port_ = ReadFileBytes(dir_ + "/origin.port");
    return true;
  }
  // (Re)starts goblin-core with the same arguments (its log is appended to core.log).
  bool StartCore() {
    std::filesystem::remove(core_sock_);
    core_ = std::make_unique<Process>(core_args_, dir_ + "/core.log." + std::to_string(cores_++),
                                      core_env_);
    return WaitForPath(core_sock_, std::chrono::seconds(10));
  }
  void StartGateway(const std::string& net, std::vector<std::string> extra = {},
                    const std::string& log = "gateway.log") {
    std::vector<std::string> argv{GOBLIN_GATEWAY_BIN,
                                  "--core",
                                  core_target_.empty() ? "unix:" + core_sock_ : core_target_,
                                  "--mirror",
                                  "http://127.0.0.1:" + origin_port_,
                                  "--origin-timeout",
                                  "2s",
                                  "--net",
                                  net};
    // One HTTP worker unless the test asks for more (not one per CPU of this machine); a
    // plain HTTP port (any free one) unless it says which.
    if (std::find(extra.begin(), extra.end(), "--threads") == extra.end()) {
      argv.insert(argv.end(), {"--threads", "1"});
    }
    if (std::find(extra.begin(), extra.end(), "--http-port") == extra.end()) {
      argv.push_back("--http-port=-1");
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    gateway_ = std::make_unique<Process>(argv, dir_ + "/" + log, gateway_env_);
    port_ = PortFromLog("on 127.0.0.1:");
    base_ = "http://127.0.0.1:" + port_;
  }
  // The port the gateway's log names right after `marker` (waits up to 5 s; "" if none).
  std::string PortFromLog(const std::string& marker) {
    for (int i = 0; i < 500; ++i) {
      std::string log = gateway_->Output();
      size_t at = log.find(marker);
      if (at != std::string::npos) {
        size_t end = log.find(' ', at + marker.size());
        return log.substr(at + marker.size(), end - at - marker.size());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return "";
  }
  void StopAll() {
    gateway_.reset();
    origin_.reset();
    core_.reset();
    std::filesystem::remove(core_sock_);
    std::filesystem::remove_all(dir_);
  }

  // curl through the gateway (20 s bound); `tag` separates concurrent clients' files.
  Reply Curl(const std::string& path, std::vector<std::string> args = {},
             const std::string& tag = "c") {
    return CurlUrl(base_ + path, std::move(args), tag);
  }
  Reply CurlUrl(const std::string& url, std::vector<std::string> args = {},
                const std::string& tag = "c") {
    std::vector<std::string> argv{"/usr/bin/curl",   "-s",         "-D", dir_ + "/h" + tag, "-o",
                                  dir_ + "/b" + tag, "--max-time", "20"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back(url);
    Reply r;
    r.curl_exit = RunCommand(argv, dir_ + "/curl" + tag + ".log", std::chrono::seconds(30)).first;
    return Collect(tag, r);
  }
  // A curl started in the background; Finish() waits for it and reads what it got.
  struct Background {
    std::unique_ptr<Process> process;
    std::string tag;
  };
  Background CurlInBackground(const std::string& path, const std::string& tag,
                              std::vector<std::string> args = {}) {
    return CurlUrlInBackground(base_ + path, tag, std::move(args));
  }
  Background CurlUrlInBackground(const std::string& url, const std::string& tag,
                                 std::vector<std::string> args = {}) {
    std::filesystem::remove(dir_ + "/h" + tag);
    std::filesystem::remove(dir_ + "/b" + tag);
    Background b;
    b.tag = tag;
    std::vector<std::string> argv{"/usr/bin/curl",   "-s",         "-D", dir_ + "/h" + tag, "-o",
                                  dir_ + "/b" + tag, "--max-time", "20"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back(url);
    b.process = std::make_unique<Process>(argv, dir_ + "/curl" + tag + ".log");
    return b;
  }
  Reply Finish(Background& b) {
    Reply r;
    r.curl_exit = b.process->Wait(std::chrono::seconds(30));
    return Collect(b.tag, r);
  }

  // The object straight from the origin.
  std::string Origin(const std::string& path) {
    std::vector<std::string> argv{"/usr/bin/curl", "-s", "-o", dir_ + "/ob",
                                  "http://127.0.0.1:" + origin_port_ + path};
    RunCommand(argv, dir_ + "/curl.log", std::chrono::seconds(30));
    std::string b = ReadFileBytes(dir_ + "/ob");
    std::filesystem::remove(dir_ + "/ob");
    return b;
  }
  // Origin requests whose path (with query) is exactly `path` so far.
  int OriginHits(const std::string& path) {
    std::ifstream f(dir_ + "/access.log");
    int n = 0;
    for (std::string line; std::getline(f, line);) {
      if (line.find(" " + path + " ") != std::string::npos) ++n;
    }
    return n;
  }
  static bool HasHeader(const std::string& headers, const std::string& line) {
    return headers.find(line + "\r\n") != std::string::npos;
  }

  std::string dir_, tier_, core_sock_, origin_port_, port_, base_;
  std::string core_target_;  // the gateway's --core when not the ring socket (ucx://...)
  std::vector<std::string> core_args_;
  // More environment for goblin-core and goblin-gateway ("NAME=value" each).
  std::vector<std::string> core_env_, gateway_env_;
  int cores_ = 0;
  std::unique_ptr<Process> core_, origin_, gateway_;

 private:
  Reply Collect(const std::string& tag, Reply r) {
    r.headers = ReadFileBytes(dir_ + "/h" + tag);
    r.body = ReadFileBytes(dir_ + "/b" + tag);
    // With redirects or 1xx there could be several heads: the last one counts ("HTTP/1.1
    // 200 OK", or "HTTP/2 200" over HTTP/2).
    size_t at = r.headers.rfind("\nHTTP/");
    at = at != std::string::npos ? at + 1 : (r.headers.starts_with("HTTP/") ? 0 : at);
    size_t sp = at == std::string::npos ? at : r.headers.find(' ', at);
    if (sp != std::string::npos && r.headers.size() >= sp + 4)
      r.code = std::atoi(r.headers.substr(sp + 1, 3).c_str());
    std::filesystem::remove(dir_ + "/h" + tag);
    std::filesystem::remove(dir_ + "/b" + tag);
    return r;
  }
};

// The four ways a mirror test runs: --net sync or async, over HTTP/1.1 or h2c (prior
// knowledge). INSTANTIATE_TEST_SUITE_P(Modes, Fixture, AllNetModes(), NetModeName).
struct NetMode {
  std::string net;
  bool h2;
  // curl's protocol flag for it
  const char* curl_protocol() const { return h2 ? "--http2-prior-knowledge" : "--http1.1"; }
};
inline auto AllNetModes() {
  return testing::Values(NetMode{"sync", false}, NetMode{"async", false}, NetMode{"sync", true},
                         NetMode{"async", true});
}
inline std::string NetModeName(const testing::TestParamInfo<NetMode>& i) {
  return i.param.net + (i.param.h2 ? "_h2c" : "_h1");
}

// curl and python3 (the test origin) are there: the mirror's system tests need both.
inline bool HaveCurlAndPython() {
  return std::filesystem::exists("/usr/bin/curl") && std::filesystem::exists("/usr/bin/python3");
}

// The running test's name, usable in a path (a parameterized test's '/' made '-').
inline std::string CurrentTestName() {
  std::string name = testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(name.begin(), name.end(), '/', '-');
  return name;
}

// A TCP connection to 127.0.0.1:`port` with a 5 s receive timeout; -1 when it fails.
// `rcvbuf` > 0: that receive buffer, set before connecting (a client that reads slowly, or
// one that lets a whole response wait in its socket; past net.core.rmem_max as root).
inline int ConnectLoopback(const std::string& port, int rcvbuf = 0) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (rcvbuf > 0 && setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) != 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(port)));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// A raw request on a fresh connection: everything until the close.
inline std::string RawExchange(const std::string& port, const std::string& request) {
  int fd = ConnectLoopback(port);
  if (fd < 0) return "connect failed";
  (void)!send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  shutdown(fd, SHUT_WR);
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

// One keep-alive HTTP/1.1 connection: requests sent as given, answers read one at a time
// (the body by Content-Length; none for HEAD and 304).
class KeepAliveClient {
 public:
  explicit KeepAliveClient(const std::string& port) : fd_(ConnectLoopback(port)) {}
  ~KeepAliveClient() {
    if (fd_ >= 0) close(fd_);
  }
  KeepAliveClient(const KeepAliveClient&) = delete;
  bool ok() const { return fd_ >= 0; }
  struct Answer {
    int status = 0;
    std::string headers, body;
  };
  // Sends `request`; reads its answer (false: the connection failed or closed first).
  bool Ask(const std::string& request, Answer* out, bool has_body = true) {
    if (send(fd_, request.data(), request.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(request.size()))
      return false;
    size_t end;
    while ((end = in_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return false;
    }
    out->headers = in_.substr(0, end + 4);
    out->status = std::atoi(out->headers.c_str() + 9);
    size_t len = 0;
    if (has_body) {
      size_t cl = out->headers.find("Content-Length: ");
      if (cl == std::string::npos) return false;
      len = std::strtoull(out->headers.c_str() + cl + 16, nullptr, 10);
    }
    while (in_.size() < end + 4 + len) {
      if (!Fill()) return false;
    }
    out->body = in_.substr(end + 4, len);
    in_.erase(0, end + 4 + len);
    return true;
  }
  bool Get(const std::string& path, Answer* out) {
    return Ask(fmt::format("GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path), out);
  }

 private:
  bool Fill() {
    char buf[65536];
    ssize_t n = recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    in_.append(buf, static_cast<size_t>(n));
    return true;
  }
  int fd_ = -1;
  std::string in_;
};

}  // namespace goblin::test
