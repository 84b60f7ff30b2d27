#include "goblin/common/file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace goblin {
namespace {

std::string TempFile(const std::string& text) {
  std::string path = "/tmp/goblin-file-test-" + std::to_string(getpid()) + "-" +
                     std::to_string(std::hash<std::string>{}(text));
  std::ofstream(path) << text;
  return path;
}

TEST(File, ReadsWholeFilesAndFirstLines) {
  std::string p = TempFile("line one\nline two\n");
  EXPECT_EQ(ReadFile(p).value(), "line one\nline two\n");
  EXPECT_EQ(ReadFirstLine(p), "line one");
  std::remove(p.c_str());
  EXPECT_EQ(ReadFile(p).error().code(), StatusCode::kNotFound);
  EXPECT_EQ(ReadFirstLine(p), "");  // a missing sysfs attribute reads as empty
}

TEST(File, SecretsAreTheTrimmedFirstLineAndNeverEmpty) {
  std::string p = TempFile("  s3cret-token \r\nsecond line\n");
  EXPECT_EQ(ReadSecretFile(p, "--token-file").value(), "s3cret-token");
  std::remove(p.c_str());
  auto missing = ReadSecretFile(p, "--token-file");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("--token-file"), std::string::npos);
  std::string blank = TempFile(" \n");
  auto empty = ReadSecretFile(blank, "--requirepass-file");
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.error().message().find("no secret"), std::string::npos);
  std::remove(blank.c_str());
}

}  // namespace
}  // namespace goblin
