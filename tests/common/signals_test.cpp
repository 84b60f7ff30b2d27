#include "goblin/common/signals.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace goblin {
namespace {

// Runs in a child so the process-wide handlers do not leak into other tests.
TEST(ShutdownSignal, SigtermRequestsShutdownAndWakesWaiters) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto s = ShutdownSignal::Install();
    if (!s) _exit(10);
    if ((*s)->requested()) _exit(11);
    if ((*s)->Wait(std::chrono::milliseconds(1))) _exit(12);
    kill(getpid(), SIGTERM);
    if (!(*s)->Wait(std::chrono::milliseconds(5000))) _exit(13);
    if ((*s)->signal_number() != SIGTERM) _exit(14);
    // SIGPIPE is ignored: writing to a closed pipe is an EPIPE error, not death.
    int p[2];
    if (pipe(p) != 0) _exit(15);
    close(p[0]);
    if (write(p[1], "x", 1) != -1 || errno != EPIPE) _exit(16);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(ShutdownSignal, SecondSignalExitsAtOnce) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!ShutdownSignal::Install()) _exit(10);
    kill(getpid(), SIGINT);
    kill(getpid(), SIGINT);
    _exit(0);  // not reached: the second signal exits with 130
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
}

TEST(ShutdownSignal, RequestFromInside) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto s = ShutdownSignal::Install();
    if (!s) _exit(10);
    (*s)->Request();
    if (!(*s)->Wait(std::chrono::milliseconds(0)) || (*s)->signal_number() != 0) _exit(11);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace goblin
