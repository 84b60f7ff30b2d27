// goblin-store with the seed's command line (scaled to this machine): it prepares an empty
// tier, starts goblin-core and goblin-gateway, serves MISS then HIT, stops both on SIGTERM,
// and when a child dies it says which one, stops the other and exits non-zero.
#include <gtest/gtest.h>
#include <signal.h>

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
    fs::remove_all(dir_);
  }
  void Start(std::vector<std::string> extra = {}) {
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
    argv.insert(argv.end(), extra.begin(), extra.end());
    store_ = std::make_unique<test::Process>(argv, dir_ + "/store.log");
    for (int i = 0; i < 300; ++i) {
      if (store_->Output().find("HTTP mirror of") != std::string::npos) return;
      std::this_thread::sleep_for(20ms);
    }
    FAIL() << store_->Output();
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

}  // namespace
}  // namespace goblin
