// goblin-gateway reaching goblin-core over the UCX plane (`--core ucx://HOST:PORT`; issue #26)
// instead of the ring socket: no pools mapped, hits arrive as ObjectData messages, local hits
// are off. Over UCX tcp on loopback, in every HTTP mode (--net sync/async, HTTP/1.1 and h2c):
// miss then hit byte-exact, ranges, several clients on two workers coalesced to one origin
// request, PURGE; the core killed (503 while it is gone) and started again on the same port
// (served again, by the same gateway); RESP objects, pub/sub and memcache over the same link.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <fmt/format.h>

#include "tests/system/etcd_server.h"  // FreeLoopbackPortRange
#include "tests/system/mirror_harness.h"
#include "tests/system/resp_test_client.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;
using test::NetMode;

const std::vector<std::string> kUcxEnv{"UCX_TLS=tcp", "UCX_NET_DEVICES=lo",
                                       "UCX_WARN_UNUSED_ENV_VARS=n"};

class GatewayOverUcx : public testing::TestWithParam<NetMode>, public test::MirrorHarness {
 protected:
  void SetUp() override {
    ASSERT_TRUE(test::HaveCurlAndPython());
    // A fixed port (shard i listens on port + i), so a restarted core is found again.
    ucx_port_ = test::FreeLoopbackPortRange(2);
    ASSERT_NE(ucx_port_, 0);
    core_env_ = gateway_env_ = kUcxEnv;
    core_target_ = fmt::format("ucx://127.0.0.1:{}", ucx_port_);
    ASSERT_TRUE(StartCoreAndOrigin(
        "ucx-" + test::CurrentTestName(),
        {"--cores", "2", "--rdma-listen", fmt::format("127.0.0.1:{}", ucx_port_)}));
  }
  void TearDown() override { StopAll(); }
  std::vector<std::string> Proto() const { return {GetParam().curl_protocol()}; }

  uint16_t ucx_port_ = 0;
};

TEST_P(GatewayOverUcx, MissHitRangePurgeAndOneOriginRequestPerKey) {
  StartGateway(GetParam().net, {"--threads", "2"});
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  const std::string path = "/gen/3000000/ucx-a";
  const std::string want = Origin(path);
  ASSERT_EQ(want.size(), 3000000u);
  auto miss = Curl(path, Proto());
  ASSERT_EQ(miss.code, 200) << gateway_->Output();
  EXPECT_TRUE(HasHeader(miss.headers, "x-cache: MISS") || HasHeader(miss.headers, "X-Cache: MISS"))
      << miss.headers;
  EXPECT_TRUE(miss.body == want);
  auto hit = Curl(path, Proto());
  ASSERT_EQ(hit.code, 200);
  EXPECT_TRUE(HasHeader(hit.headers, "x-cache: HIT") || HasHeader(hit.headers, "X-Cache: HIT"))
      << hit.headers;
  EXPECT_TRUE(hit.body == want);
  auto range = Curl(path, {GetParam().curl_protocol(), "-r", "1000000-1065535"});
  ASSERT_EQ(range.code, 206);
  EXPECT_TRUE(range.body == want.substr(1000000, 65536));
  EXPECT_EQ(OriginHits(path), 2);  // one fill, and the test's own Origin()

  // Six clients on two workers at once for a key nobody has: one origin request.
  const std::string slow = "/gen/2000000/ucx-b?pace=20";
  std::vector<Background> bg;
  for (int i = 0; i < 6; ++i) bg.push_back(CurlInBackground(slow, fmt::format("p{}", i), Proto()));
  const std::string want_b = Origin("/gen/2000000/ucx-b");
  for (auto& b : bg) {
    auto r = Finish(b);
    EXPECT_EQ(r.code, 200);
    EXPECT_TRUE(r.body == want_b) << r.body.size();
  }
  EXPECT_EQ(OriginHits(slow), 1);

  auto purge = Curl(path, {GetParam().curl_protocol(), "-X", "PURGE"});
  EXPECT_EQ(purge.code, 200) << purge.headers;
  auto again = Curl(path, Proto());
  ASSERT_EQ(again.code, 200);
  EXPECT_TRUE(again.body == want);
  EXPECT_EQ(OriginHits(path), 3);
}

TEST_P(GatewayOverUcx, ACoreKilledIsA503AndTheNextRequestsAreServedOnceItIsBack) {
  StartGateway(GetParam().net);
  ASSERT_FALSE(port_.empty()) << gateway_->Output();
  const std::string path = "/gen/500000/ucx-k";
  const std::string want = Origin(path);
  ASSERT_EQ(Curl(path, Proto()).code, 200);
  core_.reset();  // SIGKILL
  auto down = Curl(path, Proto());
  EXPECT_EQ(down.code, 503) << down.headers;
  ASSERT_TRUE(StartCore());
  // The gateway reconnects with back-off: bounded wait for the first good answer.
  test::MirrorHarness::Reply r;
  for (int i = 0; i < 100; ++i) {
    r = Curl(path, Proto());
    if (r.code == 200) break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(r.code, 200) << gateway_->Output();
  EXPECT_TRUE(r.body == want);
  auto next = Curl("/gen/70000/ucx-after", Proto());  // a new key after the fault
  EXPECT_EQ(next.code, 200);
  EXPECT_TRUE(next.body == Origin("/gen/70000/ucx-after"));
}

INSTANTIATE_TEST_SUITE_P(Modes, GatewayOverUcx, test::AllNetModes(), test::NetModeName);

// RESP objects, pub/sub and memcache through a gateway whose core link is UCX.
class FrontsOverUcx : public testing::Test, public test::MirrorHarness {
 protected:
  void SetUp() override {
    ASSERT_TRUE(test::HaveCurlAndPython());
    core_env_ = gateway_env_ = kUcxEnv;
    uint16_t port = test::FreeLoopbackPortRange(2);
    ASSERT_NE(port, 0);
    core_target_ = fmt::format("ucx://127.0.0.1:{}", port);
    ASSERT_TRUE(StartCoreAndOrigin(
        "ucx-fronts", {"--cores", "2", "--rdma-listen", fmt::format("127.0.0.1:{}", port)}));
    resp_ = test::SocketPath("uresp");
    mc_ = test::SocketPath("umc");
    StartGateway("sync", {"--resp-unix", resp_, "--memcache-unix", mc_, "--memcache-threads", "1"});
    ASSERT_TRUE(test::WaitForPath(resp_, 10s)) << gateway_->Output();
    ASSERT_TRUE(test::WaitForPath(mc_, 10s)) << gateway_->Output();
  }
  void TearDown() override {
    StopAll();
    std::filesystem::remove(resp_);
    std::filesystem::remove(mc_);
  }
  std::string resp_, mc_;
};

TEST_F(FrontsOverUcx, RespObjectsPubSubAndMemcache) {
  using test::Encode;
  test::Conn c(resp_), sub(resp_);
  ASSERT_TRUE(c.ok() && sub.ok());
  auto one = [](test::Conn& k) {  // the next reply
    test::Value got;
    auto [before, closed] = k.ReadUntil([&](const test::Value& v) {
      got = v;
      return true;
    });
    EXPECT_FALSE(closed);
    return got;
  };
  std::string big(300000, 'v');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
  c.Send(Encode({"SET", "ucx:k", big}));
  EXPECT_EQ(one(c).str, "OK");
  c.Send(Encode({"GET", "ucx:k"}));
  EXPECT_TRUE(one(c).str == big);
  c.Send(Encode({"STRLEN", "ucx:k"}));
  EXPECT_EQ(one(c).str, "300000");

  sub.Send(Encode({"SUBSCRIBE", "ucx-ch"}));
  auto confirmation = one(sub);
  ASSERT_EQ(confirmation.items.size(), 3u) << confirmation.Dump();
  EXPECT_EQ(confirmation.items[0].str, "subscribe");
  c.Send(Encode({"PUBLISH", "ucx-ch", "over-ucx"}));
  EXPECT_EQ(one(c).str, "1");
  test::Value msg = one(sub);
  ASSERT_EQ(msg.items.size(), 3u) << msg.Dump();
  EXPECT_EQ(msg.items[2].str, "over-ucx");

  // memcache: a value set and read back whole.
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, mc_.c_str(), sizeof a.sun_path - 1);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string req = fmt::format("set mk 7 0 {}\r\n{}\r\nget mk\r\n", big.size(), big);
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  std::string got;
  char buf[65536];
  while (!got.ends_with("END\r\n")) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  EXPECT_EQ(got, fmt::format("STORED\r\nVALUE mk 7 {}\r\n{}\r\nEND\r\n", big.size(), big));
}

}  // namespace
}  // namespace goblin
