// goblin-store with the seed's command line (scaled to this machine): it prepares an empty
// tier, starts goblin-core and goblin-gateway, serves MISS then HIT, stops both on SIGTERM,
// and when a child dies it says which one, stops the other and exits non-zero.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "tests/system/process.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class GoblinStore : public testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists("/usr/bin/curl") || !fs::exists("/usr/bin/python3")) GTEST_SKIP();
    dir_ = fmt::format("{}/gstore-{}", test::TmpDir(), getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/sock");
    origin_ = std::make_unique<test::Process>(
        std::vector<std::string>{
            "/usr/bin/python3", std::string(GOBLIN_SOURCE_DIR) + "/tests/support/test_origin.py",
            "--port-file", dir_ + "/origin.port", "--log", dir_ + "/access.log"},
        dir_ + "/origin.log");
    ASSERT_TRUE(test::WaitForPath(dir_ + "/origin.port", 10s));
    std::ifstream f(dir_ + "/origin.port");
    f >> origin_port_;
    // A port for HTTP derived from the pid (goblin-store takes a fixed --http-port), below
    // the kernel's ephemeral range (32768 up), where outgoing connections take theirs.
    port_ = std::to_string(20000 + getpid() % 12000);
  }
  void TearDown() override {
    store_.reset();
    origin_.reset();
    // The launcher's children die with it (PDEATHSIG), a moment later: one may still be
    // writing into the tier (a checkpoint's temporary file) while it is removed.
    std::error_code ec;
    for (int i = 0; i < 100; ++i) {
      fs::remove_all(dir_, ec);
      if (!ec) break;
      std::this_thread::sleep_for(20ms);
    }
  }
  void Start(std::vector<std::string> extra = {}) {
    store_ = std::make_unique<test::Process>(Argv(std::move(extra)), dir_ + "/store.log");
    for (int i = 0; i < 300; ++i) {
      if (store_->Output().find("HTTP mirror of") != std::string::npos) return;
      std::this_thread::sleep_for(20ms);
    }
    FAIL() << store_->Output();
  }
  // goblin-store's command line: the test's defaults, then `extra`.
  std::vector<std::string> Argv(std::vector<std::string> extra) {
    std::vector<std::string> argv{GOBLIN_STORE_BIN,
                                  "--mirror",
                                  "http://127.0.0.1:" + origin_port_,
                                  "--listen-address",
                                  "127.0.0.1",
                                  "--http-port",
                                  port_,
                                  "--no-memcache",
                                  "--net",
                                  "async",
                                  "--numa",
                                  "0",
                                  "--memory",
                                  "32M",
                                  "--block",
                                  "1M",
                                  "--ram-head",
                                  "1M",
                                  "--no-numa-promotion",
                                  "--ssd-dir",
                                  dir_ + "/tier",
                                  "--socket-dir",
                                  dir_ + "/sock"};
    if (std::find(extra.begin(), extra.end(), "--memcache-port") != extra.end())
      std::erase(argv, std::string("--no-memcache"));
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
  std::string Get(const std::string& path) {
    auto [rc, out] = test::RunCommand({"/usr/bin/curl", "-s", "-D", "-", "-o", "/dev/null",
                                       "--max-time", "20", "http://127.0.0.1:" + port_ + path},
                                      dir_ + "/curl.log", 30s);
    return out;
  }
  // The response head and body of GET `path`.
  std::pair<std::string, std::string> Fetch(const std::string& path) {
    fs::remove(dir_ + "/body");
    auto [rc, head] = test::RunCommand({"/usr/bin/curl", "-s", "-D", "-", "-o", dir_ + "/body",
                                        "--max-time", "20", "http://127.0.0.1:" + port_ + path},
                                       dir_ + "/curl.log", 30s);
    return {head, test::ReadAll(dir_ + "/body")};
  }
  int OriginRequests(const std::string& path) {
    std::ifstream f(dir_ + "/access.log");
    int n = 0;
    for (std::string line; std::getline(f, line);) n += line.find(path) != std::string::npos;
    return n;
  }
  std::string dir_, origin_port_, port_;
  std::unique_ptr<test::Process> origin_, store_;
};

TEST_F(GoblinStore, SeedCommandLineServesMissThenHitAndStopsCleanly) {
  ASSERT_NO_FATAL_FAILURE(Start());
  std::string miss = Get("/gen/4M/one");
  EXPECT_NE(miss.find("X-Cache: MISS"), std::string::npos) << miss;
  // The client may have every byte before the core has the fill's commit (the gateway
  // streams to it as the origin sends): a request then follows the fill, a MISS without
  // an origin request, and the next one is a HIT. (Seen under ASan: 1 run in 40.)
  std::string hit;
  for (int i = 0; i < 50 && hit.find("X-Cache: HIT") == std::string::npos; ++i) {
    if (i > 0) std::this_thread::sleep_for(20ms);
    hit = Get("/gen/4M/one");
  }
  EXPECT_NE(hit.find("X-Cache: HIT"), std::string::npos) << hit << store_->Output();
  EXPECT_EQ(OriginRequests("/gen/4M/one"), 1) << "the origin was asked more than once";
  EXPECT_TRUE(fs::exists(dir_ + "/tier/GOBLIN-TIER"));  // prepared on first use
  store_->Signal(SIGTERM);
  EXPECT_EQ(store_->Wait(20s), 0) << store_->Output();
  EXPECT_NE(store_->Output().find("stopping: goblin-gateway first"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ + "/sock/core.sock"));
  // Restarted on the same tier: the object is still there.
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_NE(Get("/gen/4M/one").find("X-Cache: HIT"), std::string::npos);
}

// HTTPS flags go through to the gateway; a certificate that cannot be read stops the store
// with the gateway's error.
TEST_F(GoblinStore, PassesHttpsThroughToTheGateway) {
  if (!fs::exists("/usr/bin/openssl")) GTEST_SKIP();
  ASSERT_EQ(test::MakeCertificate("store.test", dir_ + "/c.pem", dir_ + "/k.pem").first, 0);
  const std::string https = std::to_string(std::stoi(port_) + 1);
  ASSERT_NO_FATAL_FAILURE(
      Start({"--https-port", https, "--tls-cert", dir_ + "/c.pem", "--tls-key", dir_ + "/k.pem"}));
  EXPECT_NE(store_->Output().find("and https://127.0.0.1:" + https + "/"), std::string::npos);
  auto [rc, head] = test::RunCommand(
      {"/usr/bin/curl", "-s", "-D", "-", "-o", "/dev/null", "--max-time", "20", "--cacert",
       dir_ + "/c.pem", "--resolve", "store.test:" + https + ":127.0.0.1",
       "https://store.test:" + https + "/gen/10K/tls"},
      dir_ + "/curl.log", 30s);
  EXPECT_EQ(rc, 0);
  EXPECT_TRUE(head.starts_with("HTTP/2 200 ")) << head;  // (curl's ALPN: h2, then http/1.1)
  store_->Signal(SIGTERM);
  EXPECT_EQ(store_->Wait(20s), 0) << store_->Output();
  // A key file that does not exist: the store stops, saying why.
  test::Process bad(
      Argv({"--https-port", https, "--tls-cert", dir_ + "/c.pem", "--tls-key", dir_ + "/none.pem"}),
      dir_ + "/bad.log");
  EXPECT_NE(bad.Wait(30s), 0);
  EXPECT_NE(bad.Output().find("TLS key '" + dir_ + "/none.pem': No such file"), std::string::npos)
      << bad.Output();
}

TEST_F(GoblinStore, AChildThatDiesStopsTheWholeStore) {
  ASSERT_NO_FATAL_FAILURE(Start());
  std::smatch m;
  std::string log = store_->Output();
  ASSERT_TRUE(std::regex_search(log, m, std::regex("goblin-core pid ([0-9]+)")));
  kill(std::stoi(m[1]), SIGKILL);
  EXPECT_EQ(store_->Wait(20s), 1);
  EXPECT_NE(store_->Output().find("goblin-core was killed by signal 9; stopping goblin-store"),
            std::string::npos)
      << store_->Output();
  EXPECT_NE(Get("/gen/1K/x").find("HTTP/1.1"), 0u);  // nothing serves any more
}

// Gone means: no such process, or a zombie waiting for whoever adopted it.
bool Gone(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return true;
  size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

TEST_F(GoblinStore, AKilledLauncherTakesItsChildrenWithIt) {
  ASSERT_NO_FATAL_FAILURE(Start());
  std::smatch m;
  std::string log = store_->Output();
  ASSERT_TRUE(std::regex_search(
      log, m, std::regex("goblin-core pid ([0-9]+), goblin-gateway pid ([0-9]+)")));
  pid_t core = std::stoi(m[1]), gateway = std::stoi(m[2]);
  store_->Signal(SIGKILL);  // no chance to stop them itself
  EXPECT_EQ(store_->Wait(10s), 128 + SIGKILL);
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    gone = Gone(core) && Gone(gateway);
    if (!gone) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(gone) << "goblin-core " << core << " or goblin-gateway " << gateway
                    << " outlived goblin-store";
}

TEST_F(GoblinStore, AForeignTierIsRefused) {
  fs::create_directories(dir_ + "/tier");
  std::ofstream(dir_ + "/tier/precious.txt") << "not Goblin's";
  auto [rc, out] = test::RunCommand(
      {GOBLIN_STORE_BIN, "--mirror", "http://127.0.0.1:" + origin_port_, "--http-port", port_,
       "--ssd-dir", dir_ + "/tier", "--socket-dir", dir_ + "/sock"},
      dir_ + "/foreign.log", 30s);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("goblin-core exited"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(dir_ + "/tier/precious.txt"));  // never wiped
}

// --source DIR: goblin-core stores the tree at start as the mirror stores
// http://HOST/path, so each file is a HIT from the first request and the origin is never
// asked; goblinctl stats shows the progress; a restart stores only what changed.
TEST_F(GoblinStore, SourcePreloadsATreeTheMirrorServesAsHits) {
  const std::string src = dir_ + "/src";
  fs::create_directories(src + "/img/deep");
  auto write = [&](const std::string& rel, size_t n, char seed) {
    std::string data(n, 0);
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<char>(seed + i * 131 + (i >> 9));
    std::ofstream(src + "/" + rel, std::ios::binary) << data;
    return data;
  };
  std::map<std::string, std::string> files = {
      {"/index.html", write("index.html", 3000, 'a')},
      {"/style.css", write("style.css", 100, 'c')},
      {"/img/logo.png", write("img/logo.png", 200000, 'p')},
      {"/img/deep/big%20file.bin", write("img/deep/big file.bin", 5 << 20, 'b')}};
  // A symlink to a file outside the tree is stored under its own path in the tree.
  std::ofstream(dir_ + "/outside.txt") << "linked";
  fs::create_symlink(dir_ + "/outside.txt", src + "/link.txt");
  files["/link.txt"] = "linked";
  ASSERT_NO_FATAL_FAILURE(Start({"--source", src}));
  auto wait_for = [&](const std::string& line) {
    for (int i = 0; i < 1500 && store_->Output().find(line) == std::string::npos; ++i) {
      std::this_thread::sleep_for(20ms);
    }
    return store_->Output().find(line) != std::string::npos;
  };
  ASSERT_TRUE(wait_for("preload done: 5 of 5 files stored")) << store_->Output();
  auto [rc, stats] = test::RunCommand(
      {GOBLIN_CTL_BIN, "--target", "unix:" + dir_ + "/sock/core.sock.admin", "stats"},
      dir_ + "/ctl.log", 30s);
  ASSERT_EQ(rc, 0) << stats;
  EXPECT_TRUE(std::regex_search(stats, std::regex("preload_files_stored +5\\b"))) << stats;
  EXPECT_TRUE(std::regex_search(stats, std::regex("preload_finished +1\\b"))) << stats;
  for (const auto& [path, data] : files) {
    auto [head, body] = Fetch(path);
    EXPECT_NE(head.find("X-Cache: HIT"), std::string::npos) << path << "\n" << head;
    EXPECT_NE(head.find("ETag: \""), std::string::npos) << head;
    EXPECT_NE(head.find("Last-Modified: "), std::string::npos) << head;
    EXPECT_TRUE(body == data) << path << ": " << body.size() << " bytes";
  }
  EXPECT_NE(Fetch("/index.html").first.find("Content-Type: text/html"), std::string::npos);
  EXPECT_NE(Fetch("/img/logo.png").first.find("Content-Type: image/png"), std::string::npos);
  EXPECT_EQ(OriginRequests("/"), 0) << "the origin was asked";
  store_->Signal(SIGTERM);
  ASSERT_EQ(store_->Wait(20s), 0) << store_->Output();

  // One file changed (content and mtime): only it is stored again.
  files["/index.html"] = write("index.html", 4000, 'z');
  fs::last_write_time(src + "/index.html",
                      fs::last_write_time(src + "/index.html") + std::chrono::seconds(10));
  ASSERT_NO_FATAL_FAILURE(Start({"--source", src}));
  ASSERT_TRUE(wait_for("preload done: 1 of 5 files stored, 4 already stored")) << store_->Output();
  auto [head, body] = Fetch("/index.html");
  EXPECT_NE(head.find("X-Cache: HIT"), std::string::npos) << head;
  EXPECT_TRUE(body == files["/index.html"]);
  EXPECT_EQ(OriginRequests("/"), 0);
}

// One store, two protocols: what the mirror stored is a memcache value under its key (Host +
// path), a value set over memcache is an HTTP hit, and real memcache clients work against it
// (libmemcached-tools' memccp/memccat, pymemcache).
TEST_F(GoblinStore, ServesMemcacheOnTheSameObjects) {
  const std::string mport = std::to_string(8000 + getpid() % 12000);
  ASSERT_NO_FATAL_FAILURE(Start({"--memcache-port", mport}));
  for (int i = 0; i < 300 && store_->Output().find("memcache on") == std::string::npos; ++i) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_NE(store_->Output().find("memcache on 127.0.0.1:" + mport), std::string::npos)
      << store_->Output();
  auto [head, body] = Fetch("/gen/64K/both");
  ASSERT_EQ(body.size(), 65536u) << head;
  const std::string host = "127.0.0.1:" + port_;
  // A small client of our own for the exact bytes.
  auto mc = [&](const std::string& request) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(std::stoi(mport)));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string out;
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      (void)!write(fd, request.data(), request.size());
      auto deadline = std::chrono::steady_clock::now() + 10s;
      char buf[65536];
      while (!out.ends_with("END\r\n") && !out.ends_with("STORED\r\n") &&
             std::chrono::steady_clock::now() < deadline) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0) break;
        out.append(buf, static_cast<size_t>(n));
      }
    }
    close(fd);
    return out;
  };
  // (the client may have every byte before the core has the fill's commit: ask again)
  std::string got;
  for (int i = 0; i < 250 && !got.starts_with("VALUE"); ++i) {
    if (i > 0) std::this_thread::sleep_for(20ms);
    got = mc("get " + host + "/gen/64K/both\r\n");
  }
  EXPECT_EQ(got, "VALUE " + host + "/gen/64K/both 0 65536\r\n" + body + "\r\nEND\r\n");
  EXPECT_EQ(mc("set " + host + "/mc/note 3 0 11\r\nhello world\r\n"), "STORED\r\n");
  auto [nhead, nbody] = Fetch("/mc/note");
  EXPECT_NE(nhead.find("X-Cache: HIT"), std::string::npos) << nhead;
  EXPECT_NE(nhead.find("X-Memcache-Flags: 3"), std::string::npos) << nhead;
  EXPECT_EQ(nbody, "hello world");
  EXPECT_EQ(OriginRequests("/mc/note"), 0);
  // libmemcached-tools: memccp stores a file under its name, memccat prints it back.
  if (fs::exists("/usr/bin/memccp")) {
    std::string file = dir_ + "/payload.bin";
    std::string data(300000, 0);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + (i >> 10));
    std::ofstream(file, std::ios::binary) << data;
    const std::string servers = "--servers=127.0.0.1:" + mport;
    auto [rc, out] =
        test::RunCommand({"/usr/bin/memccp", servers, file}, dir_ + "/memccp.log", 30s);
    EXPECT_EQ(rc, 0) << out;
    auto [rc2, cat] =
        test::RunCommand({"/usr/bin/memccat", servers, "payload.bin"}, dir_ + "/memccat.log", 30s);
    EXPECT_EQ(rc2, 0);
    EXPECT_TRUE(cat == data + "\n") << cat.size() << " bytes back";  // (memccat adds a newline)
  }
  // pymemcache (Debian's python3-pymemcache): set/get, cas, incr, delete.
  if (fs::exists("/usr/lib/python3/dist-packages/pymemcache")) {
    const std::string script = R"(
import sys
from pymemcache.client.base import Client
c = Client(('127.0.0.1', int(sys.argv[1])))
assert c.set('py:a', b'one', expire=3600)
assert c.get('py:a') == b'one'
v, cas = c.gets('py:a')
assert v == b'one'
assert c.cas('py:a', b'two', cas)
assert not c.cas('py:a', b'three', cas)
assert c.get('py:a') == b'two'
assert c.add('py:n', b'41')
assert c.incr('py:n', 1) == 42
big = bytes(range(256)) * 20000
assert c.set('py:big', big)
assert c.get('py:big') == big
assert c.delete('py:a')
assert c.get('py:a') is None
print('pymemcache ok')
)";
    std::ofstream(dir_ + "/py.py") << script;
    auto [rc, out] =
        test::RunCommand({"/usr/bin/python3", dir_ + "/py.py", mport}, dir_ + "/py.log", 60s);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("pymemcache ok"), std::string::npos) << out;
  }
  store_->Signal(SIGTERM);
  EXPECT_EQ(store_->Wait(20s), 0) << store_->Output();
}

}  // namespace
}  // namespace goblin
