#include "goblin/common/cli.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <vector>

#include "goblin/common/log.h"

namespace goblin {
namespace {

struct Parsed {
  int rc;
  std::string err;
};

Parsed ParseArgs(CLI::App& app, std::vector<std::string> args) {
  std::vector<char*> argv{const_cast<char*>("prog")};
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  int rc = ParseCommandLine(app, static_cast<int>(argv.size()), argv.data());
  testing::internal::GetCapturedStdout();
  return {rc, testing::internal::GetCapturedStderr()};
}

TEST(Cli, ParsesSizesAndDurations) {
  CLI::App app("test", "prog");
  uint64_t memory = 64ull << 20, block = 0;
  std::chrono::nanoseconds timeout = std::chrono::seconds(30);
  AddSizeOption(app, "--memory", &memory, "pool");
  AddSizeOption(app, "--block", &block, "block", /*allow_zero=*/true);
  AddDurationOption(app, "--timeout", &timeout, "t");
  auto p = ParseArgs(app, {"--memory", "64G", "--block=32M", "--timeout", "1m30s"});
  EXPECT_EQ(p.rc, -1) << p.err;
  EXPECT_EQ(memory, 64ull << 30);
  EXPECT_EQ(block, 32u << 20);
  EXPECT_EQ(timeout, std::chrono::seconds(90));
}

TEST(Cli, BadSizeIsOneClearMessage) {
  CLI::App app("test", "prog");
  uint64_t memory = 0;
  AddSizeOption(app, "--memory", &memory, "pool");
  auto p = ParseArgs(app, {"--memory", "12Q"});
  EXPECT_EQ(p.rc, 2);
  EXPECT_NE(p.err.find("prog: error:"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("unknown unit"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("--help"), std::string::npos);
  EXPECT_EQ(ParseArgs(app, {"--memory", "0"}).rc, 2);
}

TEST(Cli, UnknownFlagIsAnError) {
  CLI::App app("test", "prog");
  auto p = ParseArgs(app, {"--no-such-flag"});
  EXPECT_EQ(p.rc, 2);
  EXPECT_NE(p.err.find("--no-such-flag"), std::string::npos) << p.err;
}

TEST(Cli, HelpExitsZero) {
  CLI::App app("test", "prog");
  EXPECT_EQ(ParseArgs(app, {"--help"}).rc, 0);
}

TEST(Cli, LogLevelFlag) {
  CLI::App app("test", "prog");
  AddLogLevelOption(app);
  LogLevel old = GetLogLevel();
  EXPECT_EQ(ParseArgs(app, {"--log-level", "error"}).rc, -1);
  EXPECT_EQ(GetLogLevel(), LogLevel::kError);
  SetLogLevel(old);
  CLI::App app2("test", "prog");
  AddLogLevelOption(app2);
  EXPECT_EQ(ParseArgs(app2, {"--log-level", "loud"}).rc, 2);
}

}  // namespace
}  // namespace goblin
