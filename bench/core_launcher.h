// A goblin-core started by a benchmark: spawned with its stderr appended to a log file,
// waited for until its ring socket exists, stopped with SIGTERM (and reaped) on Stop() or
// destruction. Shared by the store benchmarks.
// Threading: one owner thread.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace goblin::bench {

class CoreLauncher {
 public:
  CoreLauncher() = default;
  CoreLauncher(const CoreLauncher&) = delete;
  CoreLauncher& operator=(const CoreLauncher&) = delete;
  ~CoreLauncher() { Stop(); }

  // Runs `args` (args[0]: the binary) to completion; returns its exit status (-1: not run).
  static int RunToEnd(const std::vector<std::string>& args) {
    std::vector<std::string> copy = args;
    std::vector<char*> argv;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // Starts the core and waits (up to 10 s) for `socket` to appear.
  bool Start(const std::vector<std::string>& args, const std::string& socket,
             const std::string& log) {
    Stop();
    std::vector<std::string> copy = args;
    std::vector<char*> argv;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    std::filesystem::remove(socket);
    int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      pid_ = -1;
      return false;
    }
    for (int i = 0; i < 2000 && !std::filesystem::exists(socket); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return std::filesystem::exists(socket);
  }

  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

}  // namespace goblin::bench
