#include "goblin/common/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace goblin {
namespace {

// Captures what the logger writes to stderr (fd 2) during `fn`.
template <typename F>
std::string CaptureStderr(F fn) {
  fflush(stderr);
  int saved = dup(STDERR_FILENO);
  FILE* tmp = tmpfile();
  dup2(fileno(tmp), STDERR_FILENO);
  fn();
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::string out;
  rewind(tmp);
  char buf[512];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, tmp)) > 0) out.append(buf, n);
  fclose(tmp);
  return out;
}

TEST(Log, FiltersByLevelAndFormatsOneLine) {
  LogLevel old = GetLogLevel();
  SetLogLevel(LogLevel::kWarn);
  std::string out = CaptureStderr([] {
    GOBLIN_LOG_INFO("test", "hidden {}", 1);
    GOBLIN_LOG_WARN("test", "shown {}", 2);
  });
  SetLogLevel(old);
  EXPECT_EQ(out.find("hidden"), std::string::npos);
  ASSERT_NE(out.find(" W test: shown 2\n"), std::string::npos) << out;
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(out.find('\n'), out.size() - 1);  // exactly one line
  EXPECT_EQ(out[4], '-');                     // ISO-8601 timestamp first
  EXPECT_NE(out.find("Z W"), std::string::npos);
}

TEST(Log, ParsesLevels) {
  EXPECT_EQ(ParseLogLevel("debug").value(), LogLevel::kDebug);
  EXPECT_EQ(ParseLogLevel("off").value(), LogLevel::kOff);
  EXPECT_FALSE(ParseLogLevel("loud"));
}

}  // namespace
}  // namespace goblin
