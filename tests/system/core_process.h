// A goblin-core process for system tests: a small head pool (no disk tier unless `extra`
// gives one) on a short private socket, killed and cleaned up at the end of the test.
// The test target defines GOBLIN_CORE_BIN. Threading: the test's thread.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>
#include <algorithm>

#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tests/system/process.h"

namespace goblin::test {

struct CoreProcess {
  explicit CoreProcess(const std::string& tag, std::vector<std::string> extra = {})
      : sock(SocketPath(tag)),
        log(fmt::format("{}/core-{}-{}.log", TmpDir(), tag, getpid())),
        proc(
            [&] {
              std::vector<std::string> argv{GOBLIN_CORE_BIN, "--listen-unix", sock};
              // Small defaults, each unless `extra` gives that option itself (one shard: the
              // machine's CPU count does not change what a test runs).
              for (auto [opt, value] :
                   {std::pair{"--memory", "16M"}, std::pair{"--block", "64K"},
                    std::pair{"--ram-head", "64K"}, std::pair{"--cores", "1"}}) {
                if (std::find(extra.begin(), extra.end(), opt) == extra.end()) {
                  argv.insert(argv.end(), {opt, value});
                }
              }
              argv.insert(argv.end(), extra.begin(), extra.end());
              return argv;
            }(),
            log) {
    EXPECT_TRUE(WaitForPath(sock, std::chrono::seconds(10))) << proc.Output();
  }
  ~CoreProcess() {
    proc.Signal(SIGKILL);  // ~Process reaps it
    std::filesystem::remove(sock);
    std::filesystem::remove(sock + ".admin");  // the admin API's socket (SIGKILL leaves it)
    std::filesystem::remove(log);
  }
  std::string sock, log;
  Process proc;
};

// The core's admin counters by name: `ctl_bin --target unix:SOCK.admin stats` (the admin
// API's socket beside the core's, as CoreProcess and goblin-store place it); its output is
// kept in `log` meanwhile, and the whole text returned in *text.
inline std::map<std::string, uint64_t> CoreCounters(const std::string& ctl_bin,
                                                    const std::string& core_sock,
                                                    const std::string& log,
                                                    std::string* text = nullptr) {
  auto [rc, out] = RunCommand({ctl_bin, "--target", "unix:" + core_sock + ".admin", "stats"}, log);
  EXPECT_EQ(rc, 0) << out;
  std::filesystem::remove(log);
  std::map<std::string, uint64_t> counters;
  static const std::regex line(R"((\w+)\s+(\d+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator();
       ++it) {
    counters[(*it)[1].str()] = std::stoull((*it)[2].str());
  }
  if (text != nullptr) *text = out;
  return counters;
}

}  // namespace goblin::test
