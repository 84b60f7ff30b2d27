// Test helper: runs the project's executables as child processes with captured output,
// bounded waits, and a kill on destruction so nothing outlives a failing test.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace goblin::test {

inline std::string TmpDir() {
  const char* d = std::getenv("GOBLIN_TEST_TMPDIR");
  std::string dir = d ? d : "/tmp";
  return dir;
}

// A short unix socket path for a test: sun_path holds 107 bytes, and scratch directories
// under a deep checkout can be longer than that. The server removes it when it stops.
inline std::string SocketPath(const std::string& tag) {
  static int counter = 0;
  return "/tmp/gbt-" + tag.substr(0, 24) + "-" + std::to_string(getpid()) + "-" +
         std::to_string(counter++) + ".sock";
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Process {
 public:
  // Starts argv[0] with stdout+stderr to `log_path`, stdin from /dev/null, no other fds,
  // this process's environment plus `env` ("NAME=value" each). The child gets SIGKILL if
  // the test process dies first (a crashed or aborted test leaves no servers behind).
  Process(std::vector<std::string> argv, std::string log_path, std::vector<std::string> env = {})
      : log_(std::move(log_path)) {
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    std::vector<char*> envp;
    for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    int out = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {  // only async-signal-safe calls from here to exec
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
      if (out < 0 || in < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) _exit(127);
      // Nothing else of the test's (a FIFO's write end would keep a reader from seeing EOF).
      close_range(3, ~0u, 0);
      execve(args[0], args.data(), envp.data());
      _exit(127);
    }
    if (out >= 0) close(out);
    if (in >= 0) close(in);
  }
  Process(const Process&) = delete;
  ~Process() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  void Signal(int sig) const { kill(pid_, sig); }
  // Waits up to `timeout` for exit; returns the exit code, 128+signal, or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return -1;
  }
  std::string Output() const { return ReadAll(log_); }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string log_;
};

// Runs a command to completion (bounded) and returns {exit code, output}.
inline std::pair<int, std::string> RunCommand(
    std::vector<std::string> argv, const std::string& log,
    std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  Process p(std::move(argv), log);
  int rc = p.Wait(timeout);
  return {rc, p.Output()};
}

// A self-signed P-256 certificate for `cn` (subjectAltName: DNS:`cn` and DNS:*.`cn`) and
// its key, as PEM files, made with the openssl command; {exit code, its output}.
inline std::pair<int, std::string> MakeCertificate(const std::string& cn, const std::string& cert,
                                                   const std::string& key) {
  return RunCommand(
      {"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
       "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj", "/CN=" + cn, "-addext",
       "subjectAltName=DNS:" + cn + ",DNS:*." + cn, "-keyout", key, "-out", cert},
      cert + ".log");
}

inline bool WaitForPath(const std::string& path, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  struct stat st {};
  while (std::chrono::steady_clock::now() < deadline) {
    if (stat(path.c_str(), &st) == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// Resident memory of a process in KiB (VmRSS), 0 if unknown.
inline uint64_t RssKib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}

}  // namespace goblin::test
