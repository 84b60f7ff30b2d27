// Real Redis clients against goblin-gateway + goblin-core: redis-cli (subscribe in one
// process, publish from another, over TCP and the unix socket), redis-py (Debian's
// python3-redis, tests/system/resp_clients_test.py), AUTH with --requirepass, and a
// subscriber that stops reading being dropped at the gateway's output limit while the
// publisher and the other subscribers carry on.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "tests/system/process.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class RespClients : public testing::Test {
 protected:
  void Start(std::vector<std::string> gateway_flags = {}) {
    dir_ = fmt::format("{}/respcli-{}", test::TmpDir(), getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    core_sock_ = test::SocketPath("cc");
    sock_ = test::SocketPath("cg");
    core_ = std::make_unique<test::Process>(
        std::vector<std::string>{GOBLIN_CORE_BIN, "--listen-unix", core_sock_, "--memory", "16M",
                                 "--block", "64K", "--ram-head", "64K", "--cores", "1"},
        dir_ + "/core.log");
    ASSERT_TRUE(test::WaitForPath(core_sock_, 10s)) << core_->Output();
    std::vector<std::string> argv{GOBLIN_GATEWAY_BIN, "--core",      "unix:" + core_sock_,
                                  "--resp-port=-1",   "--resp-unix", sock_};
    argv.insert(argv.end(), gateway_flags.begin(), gateway_flags.end());
    gateway_ = std::make_unique<test::Process>(argv, dir_ + "/gateway.log");
    ASSERT_TRUE(test::WaitForPath(sock_, 10s)) << gateway_->Output();
    // (the socket appears before the log line that names the TCP port)
    std::smatch m;
    std::string log;
    for (int i = 0; i < 500; ++i) {
      log = gateway_->Output();
      if (std::regex_search(log, m, std::regex("RESP on 127\\.0\\.0\\.1:([0-9]+)"))) break;
      std::this_thread::sleep_for(10ms);
    }
    ASSERT_TRUE(std::regex_search(log, m, std::regex("RESP on 127\\.0\\.0\\.1:([0-9]+)"))) << log;
    port_ = m[1];
  }
  void TearDown() override {
    gateway_.reset();
    core_.reset();
    fs::remove(sock_);
    fs::remove(core_sock_);
    fs::remove_all(dir_);
  }
  std::pair<int, std::string> Cli(std::vector<std::string> args) {
    std::vector<std::string> argv{"/usr/bin/redis-cli"};
    argv.insert(argv.end(), args.begin(), args.end());
    return test::RunCommand(argv, dir_ + "/cli.log", 30s);
  }
  static bool WaitFor(test::Process& p, const std::string& text) {
    for (int i = 0; i < 500; ++i) {
      if (p.Output().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }
  std::string dir_, core_sock_, sock_, port_;
  std::unique_ptr<test::Process> core_, gateway_;
};

TEST_F(RespClients, RedisCliSubscribesAndPublishesOverTcpAndUnix) {
  if (!fs::exists("/usr/bin/redis-cli")) GTEST_SKIP() << "redis-cli is not installed";
  ASSERT_NO_FATAL_FAILURE(Start());
  test::Process sub({"/usr/bin/redis-cli", "-s", sock_, "subscribe", "news"}, dir_ + "/sub.log");
  ASSERT_TRUE(WaitFor(sub, "subscribe")) << sub.Output();
  test::Process psub({"/usr/bin/redis-cli", "-h", "127.0.0.1", "-p", port_, "psubscribe", "n*"},
                     dir_ + "/psub.log");
  ASSERT_TRUE(WaitFor(psub, "psubscribe")) << psub.Output();
  auto [rc, out] = Cli({"-h", "127.0.0.1", "-p", port_, "publish", "news", "hello-from-cli"});
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "2\n");
  EXPECT_TRUE(WaitFor(sub, "hello-from-cli")) << sub.Output();
  EXPECT_TRUE(WaitFor(psub, "hello-from-cli")) << psub.Output();
  EXPECT_NE(psub.Output().find("pmessage"), std::string::npos);
  auto [rc2, out2] = Cli({"-s", sock_, "pubsub", "numsub", "news"});
  EXPECT_EQ(out2, "news\n1\n");
  auto [rc3, out3] = Cli({"-s", sock_, "nosuchcommand"});
  EXPECT_NE(out3.find("ERR unknown command 'nosuchcommand'"), std::string::npos) << out3;
}

TEST_F(RespClients, PythonRedisWorksAgainstTheGateway) {
  if (!fs::exists("/usr/bin/python3") ||
      test::RunCommand({"/usr/bin/python3", "-c", "import redis"}, "/dev/null").first != 0) {
    GTEST_SKIP() << "python3-redis is not installed";
  }
  ASSERT_NO_FATAL_FAILURE(Start());
  auto [rc, out] = test::RunCommand(
      {"/usr/bin/python3", std::string(GOBLIN_SOURCE_DIR) + "/tests/system/resp_clients_test.py",
       sock_},
      dir_ + "/py.log", 60s);
  EXPECT_EQ(rc, 0) << out << gateway_->Output();
  EXPECT_NE(out.find("ok"), std::string::npos) << out;
}

TEST_F(RespClients, RequirePassGuardsEverythingButAuthHelloAndQuit) {
  ASSERT_NO_FATAL_FAILURE(Start({"--requirepass", "s3cret"}));
  auto [rc1, out1] = Cli({"-s", sock_, "publish", "a", "b"});
  EXPECT_NE(out1.find("NOAUTH Authentication required."), std::string::npos) << out1;
  auto [rc2, out2] = Cli({"-s", sock_, "--no-auth-warning", "-a", "wrong", "ping"});
  EXPECT_NE(out2.find("WRONGPASS"), std::string::npos) << out2;
  auto [rc3, out3] = Cli({"-s", sock_, "--no-auth-warning", "-a", "s3cret", "publish", "a", "b"});
  EXPECT_EQ(out3, "0\n");
  auto [rc4, out4] =
      Cli({"-s", sock_, "--no-auth-warning", "--user", "default", "--pass", "s3cret", "ping"});
  EXPECT_EQ(out4, "PONG\n");
}

// The password from a file (what the Ansible role uses: nothing secret on the command line).
TEST_F(RespClients, RequirePassFileReadsThePasswordFromAFile) {
  std::ofstream(dir_ + "/pass") << "fr0m-a-file\n";
  ASSERT_NO_FATAL_FAILURE(Start({"--requirepass-file", dir_ + "/pass"}));
  auto [rc1, out1] = Cli({"-s", sock_, "ping"});
  EXPECT_NE(out1.find("NOAUTH"), std::string::npos) << out1;
  auto [rc2, out2] = Cli({"-s", sock_, "--no-auth-warning", "-a", "fr0m-a-file", "ping"});
  EXPECT_EQ(out2, "PONG\n");
}

// Raw socket helpers for the slow-reader case.
int Connect(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  // Small kernel buffers so the gateway's own output buffer is what fills.
  int small = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  return fd;
}

TEST_F(RespClients, ASubscriberThatStopsReadingIsDroppedAtTheOutputLimit) {
  ASSERT_NO_FATAL_FAILURE(
      Start({"--pubsub-output-limit", "1M", "--pubsub-output-soft-limit", "0"}));
  int slow = Connect(sock_);
  ASSERT_GE(slow, 0);
  std::string sub = "*2\r\n$9\r\nSUBSCRIBE\r\n$4\r\nfeed\r\n";
  ASSERT_EQ(send(slow, sub.data(), sub.size(), 0), static_cast<ssize_t>(sub.size()));
  // The fast subscriber is read by this thread after every publish: it never has more than
  // one message waiting, whatever the machine's scheduling, so only the slow one hits the limit.
  int fast = Connect(sock_);
  ASSERT_GE(fast, 0);
  ASSERT_EQ(send(fast, sub.data(), sub.size(), 0), static_cast<ssize_t>(sub.size()));
  auto read_exactly = [](int fd, size_t n) {
    std::string got;
    char tmp[65536];
    while (got.size() < n) {
      ssize_t r = recv(fd, tmp, std::min(sizeof tmp, n - got.size()), 0);
      if (r <= 0) break;
      got.append(tmp, static_cast<size_t>(r));
    }
    return got;
  };
  const std::string confirm = "*3\r\n$9\r\nsubscribe\r\n$4\r\nfeed\r\n:1\r\n";
  ASSERT_EQ(read_exactly(fast, confirm.size()), confirm);
  int pub = Connect(sock_);
  ASSERT_GE(pub, 0);
  timeval tv{10, 0};
  setsockopt(fast, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(pub, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  [[maybe_unused]] uint64_t rss_before = test::RssKib(gateway_->pid());
  std::string payload(8000, 'z');
  std::string cmd =
      fmt::format("*3\r\n$7\r\nPUBLISH\r\n$4\r\nfeed\r\n${}\r\n{}\r\n", payload.size(), payload);
  const std::string message =
      fmt::format("*3\r\n$7\r\nmessage\r\n$4\r\nfeed\r\n${}\r\n{}\r\n", payload.size(), payload);
  std::string replies;
  for (int i = 0; i < 8000; ++i) {
    ASSERT_EQ(send(pub, cmd.data(), cmd.size(), MSG_NOSIGNAL), static_cast<ssize_t>(cmd.size()));
    std::string reply = read_exactly(pub, 4);  // ":2\r\n" while both listen, then ":1\r\n"
    ASSERT_EQ(reply.size(), 4u) << i;
    replies += reply;
    ASSERT_EQ(read_exactly(fast, message.size()), message) << i;  // nothing lost
  }
  EXPECT_NE(replies.find(":2\r\n"), std::string::npos);
  EXPECT_EQ(replies.substr(replies.size() - 4), ":1\r\n");  // the slow one is gone
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // 64 MB were published at the stalled reader; the gateway kept at most its 1 MiB limit.
  // (Sanitizer builds keep freed memory in quarantine, so RSS says nothing there.)
  EXPECT_LT(test::RssKib(gateway_->pid()), rss_before + 32 * 1024);
#endif
  EXPECT_TRUE(WaitFor(*gateway_, "over the output hard limit")) << gateway_->Output();
  close(slow);
  close(fast);
  close(pub);
}

// The gateway outlives its core: subscribers are closed (their subscriptions died with the
// core), commands that need the core answer -ERR while it is away, local ones still work,
// and once the core is back everything does again, without restarting the gateway.
TEST_F(RespClients, TheGatewaySurvivesTheCoreRestarting) {
  if (!fs::exists("/usr/bin/redis-cli")) GTEST_SKIP() << "redis-cli is not installed";
  ASSERT_NO_FATAL_FAILURE(Start());
  test::Process sub({"/usr/bin/redis-cli", "-s", sock_, "subscribe", "news"}, dir_ + "/sub.log");
  ASSERT_TRUE(WaitFor(sub, "subscribe")) << sub.Output();
  core_->Signal(SIGKILL);
  ASSERT_EQ(core_->Wait(5s), 128 + SIGKILL);
  // The subscriber's connection is closed: redis-cli says so and exits.
  EXPECT_NE(sub.Wait(10s), -1) << "the subscriber was left connected to nothing";
  auto [rc, out] = Cli({"-s", sock_, "publish", "news", "x"});
  EXPECT_NE(out.find("ERR goblin-core is unavailable"), std::string::npos) << out;
  auto [rc2, out2] = Cli({"-s", sock_, "ping"});
  EXPECT_EQ(out2, "PONG\n");
  // The core comes back on the same socket.
  fs::remove(core_sock_);
  core_ = std::make_unique<test::Process>(
      std::vector<std::string>{GOBLIN_CORE_BIN, "--listen-unix", core_sock_, "--memory", "16M",
                               "--block", "64K", "--ram-head", "64K", "--cores", "1"},
      dir_ + "/core2.log");
  ASSERT_TRUE(test::WaitForPath(core_sock_, 10s)) << core_->Output();
  std::string published;
  for (int i = 0; i < 100; ++i) {  // reconnection back-off: at most 2 s
    published = Cli({"-s", sock_, "publish", "news", "x"}).second;
    if (published == "0\n") break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(published, "0\n") << gateway_->Output();
  test::Process sub2({"/usr/bin/redis-cli", "-s", sock_, "subscribe", "news"}, dir_ + "/sub2.log");
  ASSERT_TRUE(WaitFor(sub2, "subscribe")) << sub2.Output();
  EXPECT_EQ(Cli({"-s", sock_, "publish", "news", "after-restart"}).second, "1\n");
  EXPECT_TRUE(WaitFor(sub2, "after-restart")) << sub2.Output();
  EXPECT_EQ(gateway_->Wait(0ms), -1) << gateway_->Output();
  EXPECT_NE(gateway_->Output().find("goblin-core is back"), std::string::npos);
}

// A publisher pipelining PUBLISH at a core that does not read (stopped): the gateway queues
// at most --core-queue-limit for it and then stops reading the publisher (its socket fills,
// its sends would block); nothing is lost once the core reads again.
TEST_F(RespClients, APublishFloodAgainstAStoppedCoreIsBounded) {
  ASSERT_NO_FATAL_FAILURE(Start({"--core-queue-limit", "1M", "--core-ring-bytes", "64K"}));
  int pub = Connect(sock_);
  ASSERT_GE(pub, 0);
  core_->Signal(SIGSTOP);
  [[maybe_unused]] uint64_t rss_before = test::RssKib(gateway_->pid());
  std::string payload(1000, 'p');
  std::string cmd =
      fmt::format("*3\r\n$7\r\nPUBLISH\r\n$4\r\nfeed\r\n${}\r\n{}\r\n", payload.size(), payload);
  std::string burst;
  for (int i = 0; i < 64; ++i) burst += cmd;
  // Send without blocking until the gateway stops taking bytes (or 256 MiB went: unbounded).
  // Never block here: a stopped core must make the gateway stop reading mid-command, and a
  // blocking send would then wait for as long as the core stays stopped.
  uint64_t sent = 0;
  size_t off = 0;  // into the burst: commands are finished after the core resumes
  int idle = 0;
  while (sent < (256ull << 20) && idle < 50) {
    ssize_t n = send(pub, burst.data() + off, burst.size() - off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<uint64_t>(n);
      off = (off + static_cast<size_t>(n)) % burst.size();
      idle = 0;
      continue;
    }
    ++idle;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_LT(sent, 256ull << 20) << "the gateway kept reading a publisher its core could not serve";
  EXPECT_LT(sent, 64ull << 20) << sent;
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_LT(test::RssKib(gateway_->pid()), rss_before + 48 * 1024);
#endif
  RecordProperty("bytes_taken_while_the_core_was_stopped", std::to_string(sent));
  core_->Signal(SIGCONT);
  // Finish the burst that was cut (the gateway reads again once its core drains).
  timeval tv{20, 0};
  setsockopt(pub, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(pub, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  while (off != 0) {
    ssize_t m = send(pub, burst.data() + off, burst.size() - off, MSG_NOSIGNAL);
    ASSERT_GT(m, 0) << "the gateway did not read again after its core resumed";
    sent += static_cast<uint64_t>(m);
    off = (off + static_cast<size_t>(m)) % burst.size();
  }
  // Every command gets its reply (":0" each: nobody listens), in order.
  ASSERT_EQ(sent % cmd.size(), 0u);
  const uint64_t commands = sent / cmd.size();
  std::string replies;
  char buf[65536];
  while (replies.size() < commands * 4) {
    ssize_t r = recv(pub, buf, sizeof buf, 0);
    if (r <= 0) break;
    replies.append(buf, static_cast<size_t>(r));
  }
  EXPECT_EQ(replies.size(), commands * 4);
  EXPECT_EQ(replies.find_first_not_of(":0\r\n"), std::string::npos);
  close(pub);
}

}  // namespace
}  // namespace goblin
