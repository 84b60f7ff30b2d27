// The native plane over real verbs (label rdma): the device inventory sees the RDMA device,
// and goblin-core's UCX listener serves libgoblin over rc_verbs, connected through rdmacm
// (UCX_TLS=rc_verbs,self: no UD, no tcp). Runs where ibv_devices lists a device with an
// active port and an IPv4 address for rdmacm (RDMA_IP): on an InfiniBand or RoCE host, or
// in the Soft-RoCE guest tests/rdma/rxe_vm.sh boots (tests/rdma/run_rdma_tests.sh). Skips
// with a message anywhere else.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <regex>
#include <thread>

#include "goblin/client/connection.h"
#include "goblin/verbs/devices.h"
#include "goblin/verbs/ucx_client.h"
#include "goblin/wire/goblin_wire.h"
#include "tests/system/core_process.h"
#include "tests/system/process.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;
using client::Connection;

// The device to test on, or a reason to skip.
std::optional<std::string> Skip() {
  auto devs = verbs::ListVerbsDevices();
  if (!devs || devs->empty()) {
    return "no RDMA device (ibv_devices lists none); tests/rdma/run_rdma_tests.sh runs these "
           "tests in a Soft-RoCE guest";
  }
  if (verbs::UcxNetDevicesFor(*devs, -1).empty()) return "no RDMA port is ACTIVE";
  if (std::getenv("RDMA_IP") == nullptr) {
    return "set RDMA_IP to an IPv4 address of the RDMA device's interface (for rdmacm)";
  }
  return std::nullopt;
}

std::string CoreBin() {
  const char* e = std::getenv("GOBLIN_CORE_BIN");
  return e != nullptr ? e : GOBLIN_CORE_BIN;
}

// goblin-core (one shard, a small disk tier) with its UCX listener on RDMA_IP over rc_verbs
// (UCX_TLS=rc_verbs,self, set here for the test process too), and the ucx:// target it
// listens on (read back from its log). `block`: its --block and --ram-head.
struct RdmaCore {
  RdmaCore(const std::string& tag, const std::string& block)
      : tier(fmt::format("{}/{}-tier-{}", test::TmpDir(), tag, getpid())) {
    setenv("UCX_TLS", "rc_verbs,self", 1);
    const char* dev = std::getenv("RDMA_DEV");
    if (dev != nullptr) setenv("UCX_NET_DEVICES", (std::string(dev) + ":1").c_str(), 1);
    std::string ip = std::getenv("RDMA_IP");
    std::filesystem::remove_all(tier);
    auto [rc, out] = test::RunCommand({CoreBin(), "--prepare", tier}, tier + ".log");
    EXPECT_EQ(rc, 0) << out;
    if (rc != 0) return;
    std::string log = fmt::format("{}/{}-core-{}.log", test::TmpDir(), tag, getpid());
    core.emplace(std::vector<std::string>{CoreBin(),
                                          "--listen-unix",
                                          test::SocketPath(tag),
                                          "--memory",
                                          "16M",
                                          "--block",
                                          block,
                                          "--ram-head",
                                          block,
                                          "--ssd-dir",
                                          tier,
                                          "--extent-size",
                                          "1M",
                                          "--tier-file-size",
                                          "64M",
                                          "--io-buffers",
                                          "16",
                                          "--rdma-listen",
                                          ip + ":0",
                                          "--cores",
                                          "1"},
                 log);
    std::regex re(R"(UCX plane listening on \S+ \(port (\d+)\))");
    for (int i = 0; i < 3000 && target.empty(); ++i) {
      std::smatch m;
      std::string text = core->Output();
      if (std::regex_search(text, m, re)) target = "ucx://" + ip + ":" + m[1].str();
      if (target.empty()) std::this_thread::sleep_for(10ms);
    }
    EXPECT_FALSE(target.empty()) << core->Output();
  }
  // A clean stop: SIGTERM, exit status 0.
  void Stop() {
    core->Signal(SIGTERM);
    EXPECT_EQ(core->Wait(30s), 0) << core->Output();
  }
  ~RdmaCore() {
    core.reset();
    std::filesystem::remove_all(tier);
  }
  std::string tier, target;
  std::optional<test::Process> core;
};

TEST(RdmaDevices, InventoryListsTheDeviceAndItsActivePort) {
  if (auto why = Skip()) GTEST_SKIP() << *why;
  auto devs = verbs::ListVerbsDevices();
  ASSERT_TRUE(devs);
  const char* want = std::getenv("RDMA_DEV");
  bool found = false;
  for (const auto& d : *devs) {
    if (want != nullptr && d.name != want) continue;
    found = true;
    ASSERT_FALSE(d.ports.empty()) << d.name;
    EXPECT_EQ(d.ports[0].number, 1u);
    EXPECT_FALSE(d.ports[0].gids.empty()) << d.name << " has no GID";
    EXPECT_GT(d.ports[0].active_mtu, 0u);
    EXPECT_NE(verbs::UcxNetDevicesFor(*devs, -1).find(d.name + ":1"), std::string::npos);
  }
  EXPECT_TRUE(found) << "RDMA_DEV=" << (want ? want : "") << ": " << verbs::DescribeDevices(*devs);
}

TEST(RdmaPlane, ObjectsAndPubSubOverRcVerbsThroughRdmacm) {
  if (auto why = Skip()) GTEST_SKIP() << *why;
  RdmaCore rc("rdma", "64K");
  ASSERT_FALSE(rc.target.empty());
  const std::string& target = rc.target;
  test::Process& core = *rc.core;
  auto c = Connection::Open(target, {.timeout = 30s});
  ASSERT_TRUE(c) << c.error().ToString() << "\n" << core.Output();
  ASSERT_TRUE((*c)->Ping());
  std::vector<uint8_t> data(3 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + (i >> 16));
  ASSERT_TRUE((*c)->Put("rdma/obj", data));
  std::vector<uint8_t> back;
  auto meta = (*c)->Get("rdma/obj", [&](uint64_t, std::span<const uint8_t> b) {
    back.insert(back.end(), b.begin(), b.end());
    return VoidResult();
  });
  ASSERT_TRUE(meta) << meta.error().ToString();
  EXPECT_TRUE(back == data);
  // A real RDMA READ of the core's head pool with the rkey MapPools hands out.
  {
    auto raw = verbs::UcxClient::Connect(target.substr(6), {.timeout = 30s});
    ASSERT_TRUE(raw) << raw.error().ToString();
    ASSERT_TRUE((*raw)->MapRemotePools(30s));
    std::vector<uint8_t> pool(16 << 20);
    auto r = (*raw)->ReadRemote(static_cast<uint8_t>(wire::PoolKind::kHead), 0, pool, 30s);
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_NE(std::search(pool.begin(), pool.end(), data.begin(), data.begin() + 4096), pool.end())
        << "the object's head is not in the bytes read one-sided";
  }
  // The head through a descriptor: RDMA READs of the head table entry, the head, the entry;
  // stale once the object is replaced.
  {
    auto d = (*c)->Describe("rdma/obj");
    ASSERT_TRUE(d && d->has_value()) << (d ? "miss" : d.error().ToString());
    std::vector<uint8_t> head((*d)->length);
    auto r = (*c)->ReadHead(**d, head);
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_TRUE(*r);
    EXPECT_TRUE(std::equal(head.begin(), head.end(), data.begin()));
    ASSERT_TRUE((*c)->Put("rdma/obj", std::span<const uint8_t>(data).first(100'000)));
    EXPECT_FALSE((*c)->ReadHead(**d, head).value());
  }
  auto sub = Connection::Open(target, {.timeout = 30s});
  ASSERT_TRUE(sub);
  ASSERT_TRUE((*sub)->Subscribe(Connection::SubKind::kChannel, std::vector<std::string>{"ch"}));
  EXPECT_EQ((*c)->Publish("ch", "over verbs").value(), 1u);
  auto m = (*sub)->NextMessage(30s);
  ASSERT_TRUE(m && *m);
  EXPECT_EQ((*m)->payload, "over verbs");
  c->reset();
  sub->reset();
  rc.Stop();
  // The puts went by reference: the core took every piece by rendezvous (an RDMA READ of
  // the client's buffer), 3 MiB in pieces of at most 256 KiB, most of them straight into
  // the fill's disk write buffer.
  std::smatch r;
  const std::string out = core.Output();
  ASSERT_TRUE(std::regex_search(
      out, r, std::regex(R"((\d+) payloads received by rendezvous \((\d+) into their fill)")))
      << out;
  EXPECT_GE(std::stoull(r[1].str()), 12u) << out;
  EXPECT_GE(std::stoull(r[2].str()) * 2, std::stoull(r[1].str())) << out;
  std::cout << "[ info ] " << r[0].str() << "\n";
}

// Neither side sleeps through a completion: the client sleeps at once (no spin), so every
// wait arms the worker, and nothing wakes either side but UCX's own events (there is no
// periodic wake-up to hide a lost one). On Soft-RoCE, before UcxWorker::Arm progressed once
// after arming, about 1 request in 100 stalled until some later event; here a lost
// completion stalls a request until its 10 s timeout and fails the test.
TEST(RdmaPlane, EveryRequestWakesItsWaiterWithoutASafetyNet) {
  if (auto why = Skip()) GTEST_SKIP() << *why;
  RdmaCore rc("rdma-wake", "256K");
  ASSERT_FALSE(rc.target.empty());
  const std::string& target = rc.target;
  test::Process& core = *rc.core;
  auto c = Connection::Open(target, {.timeout = 10s, .spin = 0ns});
  ASSERT_TRUE(c) << c.error().ToString() << "\n" << core.Output();
  // A small object (one message with its first bytes) and a 256 KiB one (a rendezvous: the
  // client's RDMA READ completes on its send queue, the core's on the client's answer).
  std::vector<uint8_t> small(1000), big(256 << 10);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 13 + (i >> 12));
  std::copy_n(big.begin(), small.size(), small.begin());
  ASSERT_TRUE((*c)->Put("wake/small", small));
  ASSERT_TRUE((*c)->Put("wake/big", big));
  for (int i = 0; i < 300; ++i) {
    const bool is_big = i % 3 == 0;
    const std::vector<uint8_t>& want = is_big ? big : small;
    std::vector<uint8_t> got;
    auto meta =
        (*c)->Get(is_big ? "wake/big" : "wake/small", [&](uint64_t, std::span<const uint8_t> b) {
          got.insert(got.end(), b.begin(), b.end());
          return VoidResult();
        });
    ASSERT_TRUE(meta) << "request " << i << ": " << meta.error().ToString();
    ASSERT_TRUE(got == want) << "request " << i;
    if (i % 10 == 5) {
      ASSERT_TRUE((*c)->Ping()) << "ping after request " << i;
    }
  }
  c->reset();
  rc.Stop();
}

}  // namespace
}  // namespace goblin
