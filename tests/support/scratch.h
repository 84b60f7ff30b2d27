// Test helper: a fresh, empty scratch directory for the running test, under
// $GOBLIN_TEST_TMPDIR (set by scripts/test.sh; /var/tmp otherwise: a real disk, since
// O_DIRECT tests need one), named after the prefix, the process and the test case.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace goblin::test {

inline std::filesystem::path ScratchDir(const std::string& prefix, bool create = true) {
  const char* base = std::getenv("GOBLIN_TEST_TMPDIR");
  std::string name = testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(name.begin(), name.end(), '/', '-');  // "Case/Param" in parameterized tests
  std::filesystem::path dir = std::filesystem::path(base ? base : "/var/tmp") /
                              (prefix + "-" + std::to_string(getpid()) + "-" + name);
  std::filesystem::remove_all(dir);
  if (create) std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace goblin::test
