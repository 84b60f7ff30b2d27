// goblin-gateway's memcache front against goblin-core: libmemcached's protocol suite
// (memccapable, ASCII), and bad input and faults with what the next request sees: a data
// block cut off by a disconnect, a huge announced length, binary junk, a client that stops
// reading a big value while others are served, a client killed mid-set of a key another
// client then writes, and goblin-core going away and coming back.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <random>
#include <regex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "tests/system/core_process.h"
#include "tests/system/memcache_test_client.h"
#include "tests/system/process.h"

namespace goblin {
namespace {

using test::McClient;

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class MemcacheFront : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fmt::format("{}/mcfront-{}", test::TmpDir(), getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/ssd");
    auto prep =
        test::RunCommand({GOBLIN_CORE_BIN, "--prepare", dir_ + "/ssd"}, dir_ + "/prepare.log", 30s);
    ASSERT_EQ(prep.first, 0) << prep.second;
    core_sock_ = test::SocketPath("mfc");
    ASSERT_NO_FATAL_FAILURE(StartCore());
    gateway_ = std::make_unique<test::Process>(
        std::vector<std::string>{GOBLIN_GATEWAY_BIN, "--core", "unix:" + core_sock_,
                                 "--memcache-port=-1", "--memcache-chunk", "256K"},
        dir_ + "/gateway.log");
    ASSERT_NO_FATAL_FAILURE(port_ = MemcachePort(*gateway_));
  }
  static int MemcachePort(test::Process& gateway) {  // (once it listens)
    const std::regex listening("memcache on 127\\.0\\.0\\.1:([0-9]+)");
    std::smatch m;
    std::string log;
    for (int i = 0; i < 500; ++i) {
      log = gateway.Output();
      if (std::regex_search(log, m, listening)) return std::stoi(m[1]);
      std::this_thread::sleep_for(10ms);
    }
    ADD_FAILURE() << "the gateway does not listen: " << log;
    return 0;
  }
  void StartCore() {
    std::vector<std::string> args{
        GOBLIN_CORE_BIN, "--listen-unix", core_sock_,  "--memory",    "64M",     "--block", "64K",
        "--ram-head",    "64K",           "--ssd-dir", dir_ + "/ssd", "--cores", "2"};
    args.insert(args.end(), core_args_.begin(), core_args_.end());
    core_ = std::make_unique<test::Process>(args, dir_ + "/core.log");
    ASSERT_TRUE(test::WaitForPath(core_sock_, 10s)) << core_->Output();
  }
  void TearDown() override {
    gateway_.reset();
    core_.reset();
    fs::remove(core_sock_);
    fs::remove_all(dir_);
  }
  static std::string Bytes(size_t n, uint32_t seed) {
    std::string s(n, 0);
    std::mt19937 rng(seed);
    for (auto& c : s) c = static_cast<char>(rng());
    return s;
  }
  std::string Get(const std::string& key) {
    McClient c(port_);
    return c.Ask("get " + key + "\r\n", "END\r\n");
  }
  static std::string Value(const std::string& key, const std::string& v, int flags = 0) {
    return fmt::format("VALUE {} {} {}\r\n", key, flags, v.size()) + v + "\r\nEND\r\n";
  }
  std::map<std::string, uint64_t> CoreStats() {  // goblinctl stats: name -> count
    return test::CoreCounters(GOBLIN_CTL_BIN, core_sock_, dir_ + "/stats");
  }
  std::vector<std::string> core_args_;  // (more goblin-core options, set before SetUp)
  std::string dir_, core_sock_;
  int port_ = 0;
  std::unique_ptr<test::Process> core_, gateway_;
};

TEST_F(MemcacheFront, LibmemcachedProtocolSuitePasses) {
  if (!fs::exists("/usr/bin/memccapable")) GTEST_SKIP() << "libmemcached-tools is not installed";
  auto [rc, out] = test::RunCommand(
      {"/usr/bin/memccapable", "-h", "127.0.0.1", "-p", std::to_string(port_), "-a"},
      dir_ + "/memccapable.log", 120s);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("All tests passed"), std::string::npos) << out;
}

// libmemcached-tools' load generators: memcslap's set, get and mget runs, and memcaslap
// (memaslap) with every get's value verified against what it set.
TEST_F(MemcacheFront, MemslapAndMemaslapRunCleanAndVerifyEveryValue) {
  if (!fs::exists("/usr/bin/memcslap") || !fs::exists("/usr/bin/memcaslap"))
    GTEST_SKIP() << "libmemcached-tools is not installed";
  const std::string server = "127.0.0.1:" + std::to_string(port_);
  for (const char* test : {"set", "get", "mget"}) {
    auto [rc, out] =
        test::RunCommand({"/usr/bin/memcslap", "-s", server, "-c", "2", "-e", "300", "-t", test},
                         dir_ + "/memcslap.log", 120s);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find(std::string("Time to ") + test), std::string::npos) << out;
    EXPECT_EQ(out.find("rror"), std::string::npos) << out;
  }
  auto [rc, out] = test::RunCommand({"/usr/bin/memcaslap", "-s", server, "-T", "2", "-c", "8", "-x",
                                     "3000", "-v", "1.0", "-X", "1000"},
                                    dir_ + "/memcaslap.log", 120s);
  EXPECT_EQ(rc, 0) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("cmd_get: ([0-9]+)"))) << out;
  EXPECT_GT(std::stoi(m[1]), 1000) << out;
  EXPECT_NE(out.find("verify_failed: 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("verify_misses: 0\n"), std::string::npos) << out;
}

TEST_F(MemcacheFront, ADataBlockCutOffByADisconnectStoresNothing) {
  const std::string old = Bytes(5000, 1);
  {
    McClient c(port_);
    ASSERT_EQ(c.Ask(fmt::format("set k 0 0 {}\r\n", old.size()) + old + "\r\n"), "STORED\r\n");
  }
  for (size_t size : {size_t{3000}, size_t{3} << 20}) {  // within one piece, and streamed
    McClient c(port_);
    std::string v = Bytes(size, 2);
    c.Send(fmt::format("set k 0 0 {}\r\n", size) + v.substr(0, size / 2));
    std::this_thread::sleep_for(100ms);
    c.Close();  // the rest never comes
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(Get("k"), Value("k", old)) << size;
  }
  // The key is free for the next write at once.
  const std::string next = Bytes(70000, 3);
  McClient c(port_);
  EXPECT_EQ(c.Ask(fmt::format("set k 9 0 {}\r\n", next.size()) + next + "\r\n"), "STORED\r\n");
  EXPECT_EQ(Get("k"), Value("k", next, 9));
}

TEST_F(MemcacheFront, AHugeAnnouncedLengthIsReadOrRefusedAndTheConnectionGoesOn) {
  McClient c(port_);
  // Longer than memcached's int32 limit: refused at once, the line only.
  EXPECT_EQ(c.Ask("set h 0 0 2147483647\r\n"), "CLIENT_ERROR bad command line format\r\n");
  EXPECT_EQ(c.Ask("set h 0 0 99999999999999999999\r\n"),
            "CLIENT_ERROR bad command line format\r\n");
  // A length the store cannot take: the block is read and dropped, then the answer.
  McClient d(port_);
  d.Send("set huge 0 0 2000000000\r\n");
  std::this_thread::sleep_for(100ms);
  d.Close();  // (it never sends the 2 GB)
  EXPECT_EQ(Get("huge"), "END\r\n");
  EXPECT_EQ(c.Ask("set h 0 0 1\r\nx\r\n"), "STORED\r\n");
  EXPECT_EQ(c.Ask("get h\r\n", "END\r\n"), Value("h", "x"));
}

TEST_F(MemcacheFront, BinaryJunkGetsErrorsAndStoresNothing) {
  McClient c(port_);
  std::string junk = Bytes(1500, 4);
  for (auto& ch : junk) {
    if (ch == '\n') ch = ' ';
  }
  junk += "\r\n";
  std::string out = c.Ask(junk + "mn\r\n", "MN\r\n");
  EXPECT_TRUE(out.ends_with("MN\r\n")) << out;
  EXPECT_NE(out.find("ERROR"), std::string::npos);
  // A line this long without a newline (not a get) closes the connection, as memcached does.
  McClient d(port_);
  d.Send(std::string(5000, 'x'));
  EXPECT_TRUE(d.Closed());
  EXPECT_EQ(c.Ask("mn\r\n"), "MN\r\n");
  // The memcached binary protocol is not spoken: its magic byte is an unknown command.
  McClient b(port_);
  std::string bin("\x80\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", 16);
  out = b.Ask(bin + "\r\nmn\r\n", "MN\r\n");
  EXPECT_TRUE(out.starts_with("ERROR\r\n")) << out;
}

TEST_F(MemcacheFront, AClientThatStopsReadingABigValueDoesNotStallOthers) {
  const std::string big = Bytes(64 << 20, 5);
  {
    McClient c(port_);
    ASSERT_EQ(c.Ask(fmt::format("set big 0 0 {}\r\n", big.size()) + big + "\r\n"), "STORED\r\n");
  }
  const uint64_t rss_before = test::RssKib(gateway_->pid());
  McClient slow(port_);
  slow.Send("get big\r\n");  // ... and reads nothing for a while
  std::this_thread::sleep_for(500ms);
  for (int i = 0; i < 20; ++i) {
    McClient c(port_);
    std::string v = fmt::format("v{}", i);
    ASSERT_EQ(c.Ask(fmt::format("set s{} 0 0 {}\r\n{}\r\n", i, v.size(), v)), "STORED\r\n");
    ASSERT_EQ(c.Ask(fmt::format("get s{}\r\n", i), "END\r\n"), Value(fmt::format("s{}", i), v));
  }
  // The gateway holds about its output limit and a piece for it, not the value.
  const uint64_t rss_during = test::RssKib(gateway_->pid());
  EXPECT_LT(rss_during, rss_before + 24 * 1024) << rss_before << " KiB before";
  // And when it does read, it gets every byte.
  std::string got = slow.ReadUntil("END\r\n");
  EXPECT_TRUE(got == fmt::format("VALUE big 0 {}\r\n", big.size()) + big + "\r\nEND\r\n")
      << got.size() << " bytes";
  // Written from the core's pools, not copied through the ring.
  std::string stats = slow.Ask("stats\r\n", "END\r\n");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(stats, m, std::regex("STAT goblin_bytes_lent ([0-9]+)"))) << stats;
  EXPECT_GT(std::stoull(m[1]), big.size() / 2) << stats;
}

// The tails read from disk (RAM tails off, extents of 1 MiB, the front's 256 KiB pieces): a
// piece ending inside an extent leaves it parked for the next piece, so every extent is read
// once per get, not once per piece; several clients at once, every byte exact.
class MemcacheFromDisk : public MemcacheFront {
 protected:
  void SetUp() override {
    core_args_ = {"--ram-tails", "false", "--extent-size", "1M"};
    MemcacheFront::SetUp();
  }
};

TEST_F(MemcacheFromDisk, PiecesOfAValueReadEachExtentOnceAndArriveExactly) {
  const std::vector<std::string> values = {Bytes((3 << 20) + 5, 31), Bytes((5 << 20) + 4097, 32)};
  {
    McClient c(port_);
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(c.Ask(fmt::format("set d{} 0 0 {}\r\n", i, values[i].size()) + values[i] + "\r\n"),
                "STORED\r\n");
    }
  }
  auto before = CoreStats();
  constexpr int kClients = 3, kRounds = 4;
  std::vector<std::thread> readers;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kClients; ++t) {
    readers.emplace_back([&, t] {
      McClient c(port_);
      for (int r = 0; r < kRounds; ++r) {
        const size_t i = static_cast<size_t>(t + r) % values.size();
        const std::string key = fmt::format("d{}", i);
        if (c.Ask("get " + key + "\r\n", "END\r\n") != Value(key, values[i])) ++wrong;
      }
    });
  }
  for (auto& th : readers) th.join();
  EXPECT_EQ(wrong.load(), 0);
  auto after = CoreStats();
  uint64_t tail_bytes = 0;  // what the gets needed from disk: every byte past the 64 KiB head
  for (int t = 0; t < kClients; ++t) {
    for (int r = 0; r < kRounds; ++r)
      tail_bytes += values[(t + r) % values.size()].size() - (64 << 10);
  }
  const uint64_t read = after["tier0_read_bytes"] - before["tier0_read_bytes"];
  EXPECT_GE(read, tail_bytes);
  // (each extent once, padded to 4 KiB: a 256 KiB piece per read would be ~4x)
  EXPECT_LE(read, tail_bytes + kClients * kRounds * 3 * 4096) << read << " for " << tail_bytes;
  EXPECT_GT(after["chunks_unparked"], before["chunks_unparked"]);
}

// Values larger than the input a client may have waiting (4 MiB), from several clients at
// once: reading pauses and must resume as the value goes to the core (it once did not: every
// writer stalled until the core gave up on its fill).
TEST_F(MemcacheFront, ConcurrentWritersOfValuesLargerThanTheInputLimit) {
  constexpr int kWriters = 8;
  std::vector<std::string> values;
  for (int i = 0; i < kWriters; ++i) values.push_back(Bytes((6 << 20) + i * 4099, 10 + i));
  std::vector<std::string> replies(kWriters);
  std::vector<std::thread> ts;
  for (int i = 0; i < kWriters; ++i) {
    ts.emplace_back([&, i] {
      McClient c(port_);
      for (int round = 0; round < 2; ++round) {
        replies[i] +=
            c.Ask(fmt::format("set w{} 0 0 {}\r\n", i, values[i].size()) + values[i] + "\r\n");
      }
    });
  }
  for (auto& t : ts) t.join();
  for (int i = 0; i < kWriters; ++i) {
    EXPECT_EQ(replies[i], "STORED\r\nSTORED\r\n") << i;
    EXPECT_TRUE(Get(fmt::format("w{}", i)) == Value(fmt::format("w{}", i), values[i])) << i;
  }
  // The case that stalled: a writer whose grant comes late (the key is being written by
  // another) has its input paused, and the grant must resume it.
  McClient a(port_);
  const std::string first = values[0], second = values[1];
  a.Send(fmt::format("set late 0 0 {}\r\n", first.size()) + first.substr(0, 1 << 20));
  std::this_thread::sleep_for(200ms);  // (a's fill is granted and holds the key)
  std::string b_reply;
  std::thread b([&] {
    McClient bc(port_);
    b_reply = bc.Ask(fmt::format("set late 0 0 {}\r\n", second.size()) + second + "\r\n");
  });
  std::this_thread::sleep_for(500ms);  // (b waits for the key with 4 MiB read)
  a.Send(first.substr(1 << 20) + "\r\n");
  EXPECT_EQ(a.ReadUntil("\r\n"), "STORED\r\n");
  b.join();
  EXPECT_EQ(b_reply, "STORED\r\n");
  EXPECT_TRUE(Get("late") == Value("late", second));
}

TEST_F(MemcacheFront, AWriterKilledMidSetLeavesTheKeyToTheNext) {
  const std::string v = Bytes(1 << 20, 6);
  const std::string partial = fmt::format("set contested 0 0 {}\r\n", v.size()) + v.substr(0, 1000);
  pid_t child = fork();
  if (child == 0) {  // (nothing that allocates after fork)
    McClient c(port_);
    c.Send(partial);
    pause();
    _exit(0);
  }
  std::this_thread::sleep_for(200ms);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  McClient c(port_);
  EXPECT_EQ(c.Ask(fmt::format("set contested 0 0 {}\r\n", v.size()) + v + "\r\n"), "STORED\r\n");
  EXPECT_EQ(Get("contested"), Value("contested", v));
}

TEST_F(MemcacheFront, TheCoreGoingAwayIsAServerErrorUntilItIsBack) {
  McClient c(port_);
  ASSERT_EQ(c.Ask("set kept 0 0 4\r\nkept\r\n"), "STORED\r\n");
  core_.reset();  // SIGKILL
  fs::remove(core_sock_);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(c.Ask("get kept\r\n"), "SERVER_ERROR goblin-core is unavailable\r\n");
  EXPECT_EQ(c.Ask("set x 0 0 1\r\ny\r\n"), "SERVER_ERROR goblin-core is unavailable\r\n");
  EXPECT_EQ(c.Ask("delete kept\r\n"), "SERVER_ERROR goblin-core is unavailable\r\n");
  EXPECT_EQ(c.Ask("version\r\n"), "VERSION 1.6.18\r\n");  // (the front itself is up)
  ASSERT_NO_FATAL_FAILURE(StartCore());
  // Back within the reconnection back-off, with what it stored.
  std::string got;
  for (int i = 0; i < 100; ++i) {
    got = c.Ask("get kept\r\n", "\r\n");
    if (got.starts_with("VALUE")) break;
    std::this_thread::sleep_for(100ms);
  }
  got += c.ReadUntil("END\r\n");
  EXPECT_EQ(got, Value("kept", "kept"));
  EXPECT_EQ(c.Ask("set x 0 0 1\r\ny\r\n"), "STORED\r\n");
}

// memcache meta leases against a dog-pile: many clients ask for a missing key with N at once
// (on both shards' keys); exactly one wins (W) and the rest see the empty stub with Z until
// the winner's set replaces it.
TEST_F(MemcacheFront, OneClientWinsTheRecacheOfAMissingKey) {
  constexpr int kClients = 12;
  for (const std::string key : {"dog-a", "dog-b", "dog-c"}) {
    std::vector<std::unique_ptr<McClient>> clients;
    for (int i = 0; i < kClients; ++i) clients.push_back(std::make_unique<McClient>(port_));
    for (auto& c : clients) c->Send("mg " + key + " N30 v t\r\n");  // all before any answer
    int won = 0, others = 0;
    for (auto& c : clients) {
      const std::string r = c->ReadUntil("\r\n\r\n");  // "VA 0 t30 W" + an empty value
      if (r == "VA 0 t30 W\r\n\r\n") ++won;
      if (r == "VA 0 t30 Z\r\n\r\n" || r == "VA 0 t29 Z\r\n\r\n") ++others;
    }
    EXPECT_EQ(won, 1) << key;
    EXPECT_EQ(others, kClients - 1) << key;
    // The winner recaches it: an ordinary value again, no marks.
    McClient w(port_);
    EXPECT_EQ(w.Ask("ms " + key + " 5 T60\r\nfresh\r\n"), "HD\r\n");
    EXPECT_EQ(w.Ask("mg " + key + " v\r\n", "fresh\r\n"), "VA 5\r\nfresh\r\n");
    EXPECT_EQ(w.Ask("mg " + key + " R30 v\r\n", "fresh\r\n"), "VA 5\r\nfresh\r\n");
    EXPECT_EQ(w.Ask("mg " + key + " R120 v\r\n", "fresh\r\n"), "VA 5 W\r\nfresh\r\n");
    EXPECT_EQ(w.Ask("mg " + key + " R120 v\r\n", "fresh\r\n"), "VA 5 Z\r\nfresh\r\n");
  }
}

// md I serves the old bytes as stale while one client recaches; the stale mark is kept by the
// core across a restart (the won mark is not: the first reader after it wins again), an older
// CAS with I stores a stale value, and a plain set ends it.
TEST_F(MemcacheFront, StaleItemsAreServedWhileOneClientRecachesThemAndSurviveARestart) {
  McClient c(port_);
  const std::string big = Bytes(300'000, 9);  // (past the head: its tail is on disk)
  ASSERT_EQ(c.Ask(fmt::format("set st 7 0 {}\r\n", big.size()) + big + "\r\n"), "STORED\r\n");
  std::smatch m;
  const std::string gets = c.Ask("gets st\r\n", "END\r\n");
  ASSERT_TRUE(std::regex_search(gets, m, std::regex("^VALUE st 7 300000 ([0-9]+)\r\n")))
      << gets.substr(0, 40);
  const std::string cas1 = m[1];
  EXPECT_EQ(c.Ask("md st I T60 q\r\nmn\r\n"), "MN\r\n");
  EXPECT_EQ(c.Ask("md nothing I\r\n"), "NF\r\n");
  EXPECT_EQ(c.Ask("md st I C" + cas1 + "\r\n"), "EX\r\n");  // (it has a new CAS)
  const std::string first = c.Ask("mg st s f t c\r\n");
  ASSERT_TRUE(std::regex_match(first, m, std::regex("HD s300000 f7 t(59|60) c([0-9]+) X W\r\n")))
      << first;
  EXPECT_NE(m[2], cas1);
  EXPECT_EQ(c.Ask("mg st s\r\n"), "HD s300000 Z X\r\n");
  EXPECT_EQ(Get("st"), Value("st", big, 7));    // the old bytes, all of them
  EXPECT_EQ(c.Ask("mg st\r\n"), "HD Z X\r\n");  // (a classic get wins nothing)
  // An older CAS with I: stored, stale, keeping the expiry and the win.
  EXPECT_EQ(c.Ask("ms st 3 I C" + cas1 + "\r\nold\r\n"), "HD\r\n");
  EXPECT_EQ(c.Ask("ms st 3 I C99999999\r\nnew\r\n"), "EX\r\n");  // (newer: refused)
  EXPECT_EQ(c.Ask("mg st v\r\n", "old\r\n"), "VA 3 Z X\r\nold\r\n");
  // The core restarts: the item is still stale, and its first reader wins again.
  core_.reset();  // SIGKILL
  fs::remove(core_sock_);
  ASSERT_NO_FATAL_FAILURE(StartCore());
  std::string got;
  for (int i = 0; i < 100; ++i) {
    got = c.Ask("mg st v\r\n");
    if (got.starts_with("VA")) break;
    std::this_thread::sleep_for(100ms);
  }
  got += c.ReadUntil("\r\n");
  EXPECT_EQ(got, "VA 3 X W\r\nold\r\n");
  EXPECT_EQ(c.Ask("mg st\r\n"), "HD Z X\r\n");
  // The recache: a plain set, and the item is an ordinary one again.
  EXPECT_EQ(c.Ask("ms st 5\r\nfresh\r\n"), "HD\r\n");
  EXPECT_EQ(c.Ask("mg st v t\r\n", "fresh\r\n"), "VA 5 t-1\r\nfresh\r\n");
}

// mg h (read before?) and l (seconds since the last access), each as before the command; u
// reads without counting as a read; me shows both.
TEST_F(MemcacheFront, HitBeforeAndLastAccessAreReportedAsBeforeTheCommand) {
  McClient c(port_);
  // (l counts whole seconds: a command just after another reads 0, or 1 across a second's
  // boundary)
  const std::regex just_now("HD (h0 )?l[01]\r\n");
  ASSERT_EQ(c.Ask("set hl 0 0 1\r\nx\r\n"), "STORED\r\n");
  std::string first = c.Ask("mg hl h l u\r\n");
  EXPECT_TRUE(std::regex_match(first, just_now) && first.starts_with("HD h0 ")) << first;
  EXPECT_EQ(c.Ask("mg hl h\r\n"), "HD h0\r\n");
  EXPECT_EQ(c.Ask("mg hl h\r\n"), "HD h1\r\n");
  std::this_thread::sleep_for(2100ms);
  std::smatch m;
  const std::string idle = c.Ask("mg hl l u\r\n");
  ASSERT_TRUE(std::regex_match(idle, m, std::regex("HD l([0-9]+)\r\n"))) << idle;
  EXPECT_GE(std::stoi(m[1]), 2);
  // (u did not count as an access: still idle that long, or a second more)
  const std::string still = c.Ask("mg hl l\r\n");
  std::smatch m2;
  ASSERT_TRUE(std::regex_match(still, m2, std::regex("HD l([0-9]+)\r\n"))) << still;
  EXPECT_GE(std::stoi(m2[1]), std::stoi(m[1]));
  EXPECT_LE(std::stoi(m2[1]), std::stoi(m[1]) + 1);
  std::string again = c.Ask("mg hl l\r\n");
  EXPECT_TRUE(std::regex_match(again, just_now)) << again;
  const std::string me = c.Ask("me hl\r\n");
  EXPECT_TRUE(std::regex_match(
      me, std::regex("ME hl exp=-1 la=[01] cas=[0-9]+ fetch=yes cls=1 size=1\r\n")))
      << me;
  // incr and append are no reads; a touch is.
  ASSERT_EQ(c.Ask("set n 0 0 1\r\n5\r\n"), "STORED\r\n");
  EXPECT_EQ(c.Ask("incr n 1\r\n"), "6\r\n");
  EXPECT_EQ(c.Ask("mg n h\r\n"), "HD h0\r\n");
  ASSERT_EQ(c.Ask("set t 0 0 1\r\n5\r\n"), "STORED\r\n");
  EXPECT_EQ(c.Ask("touch t 100\r\n"), "TOUCHED\r\n");
  EXPECT_EQ(c.Ask("mg t h\r\n"), "HD h1\r\n");
}

// memcached's `stats` is the whole server's: with two loops, the counters and connections of
// clients on either are in both loops' answers, and `stats reset` on one resets them all.
TEST_F(MemcacheFront, StatsCountEveryLoopAndAResetResetsThemAll) {
  test::Process gateway({GOBLIN_GATEWAY_BIN, "--core", "unix:" + core_sock_, "--memcache-port=-1",
                         "--memcache-threads", "2"},
                        dir_ + "/gateway2.log");
  int port = 0;
  ASSERT_NO_FATAL_FAILURE(port = MemcachePort(gateway));
  auto stat = [](const std::string& reply, const std::string& name) -> int64_t {
    std::smatch m;
    if (!std::regex_search(reply, m, std::regex("STAT " + name + " ([0-9]+)\r\n"))) return -1;
    return std::stoll(m[1]);
  };
  // Connections until each loop holds one (a loop names itself: goblin_worker).
  std::vector<std::unique_ptr<McClient>> clients;
  McClient* on[2] = {nullptr, nullptr};
  for (int i = 0; i < 64 && (on[0] == nullptr || on[1] == nullptr); ++i) {
    auto c = std::make_unique<McClient>(port);
    const int64_t worker = stat(c->Ask("stats\r\n", "END\r\n"), "goblin_worker");
    ASSERT_TRUE(worker == 0 || worker == 1) << worker;
    if (on[worker] == nullptr) on[worker] = c.get();
    clients.push_back(std::move(c));
  }
  ASSERT_TRUE(on[0] != nullptr && on[1] != nullptr) << "64 connections all went to one loop";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(on[0]->Ask("get nope0\r\n"), "END\r\n");
  for (int i = 0; i < 2; ++i) EXPECT_EQ(on[1]->Ask("get nope1\r\n"), "END\r\n");
  EXPECT_EQ(on[1]->Ask("set s1 0 0 1\r\nx\r\n"), "STORED\r\n");
  // (a loop hands its copy over when it goes idle: asked until it is there, bounded)
  auto totals = [&](McClient* c, int64_t misses, int64_t sets) {
    std::string reply;
    for (int i = 0; i < 200; ++i) {
      reply = c->Ask("stats\r\n", "END\r\n");
      if (stat(reply, "get_misses") == misses && stat(reply, "cmd_set") == sets) break;
      std::this_thread::sleep_for(10ms);
    }
    return reply;
  };
  for (McClient* c : on) {
    const std::string reply = totals(c, 5, 1);
    EXPECT_EQ(stat(reply, "get_misses"), 5) << reply;
    EXPECT_EQ(stat(reply, "cmd_get"), 5) << reply;
    EXPECT_EQ(stat(reply, "cmd_set"), 1) << reply;
    EXPECT_EQ(stat(reply, "curr_connections"), static_cast<int64_t>(clients.size())) << reply;
    EXPECT_EQ(stat(reply, "total_connections"), static_cast<int64_t>(clients.size())) << reply;
  }
  EXPECT_EQ(on[0]->Ask("stats reset\r\n"), "RESET\r\n");
  const std::string after = on[1]->Ask("stats\r\n", "END\r\n");  // (the other loop)
  EXPECT_EQ(stat(after, "get_misses"), 0) << after;
  EXPECT_EQ(stat(after, "cmd_set"), 0) << after;
  EXPECT_EQ(stat(after, "curr_connections"), static_cast<int64_t>(clients.size())) << after;
  EXPECT_EQ(on[1]->Ask("get nope1\r\n"), "END\r\n");
  const std::string counted = totals(on[0], 1, 0);
  EXPECT_EQ(stat(counted, "get_misses"), 1) << counted;
  // A connection gone is gone from both loops' answers (one more, then closed).
  auto extra = std::make_unique<McClient>(port);
  EXPECT_TRUE(extra->Ask("version\r\n").starts_with("VERSION "));
  extra.reset();
  bool seen = false;
  for (int i = 0; i < 200 && !seen; ++i) {
    seen = stat(on[0]->Ask("stats\r\n", "END\r\n"), "curr_connections") ==
           static_cast<int64_t>(clients.size());
    if (!seen) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(seen);
}

}  // namespace
}  // namespace goblin
