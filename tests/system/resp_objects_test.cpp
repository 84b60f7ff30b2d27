// The RESP front's objects end to end (goblin-gateway + goblin-core with a disk tier), for
// what the differential test against redis-server cannot show: keyspace events Redis would
// raise at its own pace (expired, evicted) or that come from another front (memcache), the
// core going away and coming back (what the next request sees), values larger than the
// front serves, malformed and truncated input, and a client that stops reading.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <map>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "tests/system/process.h"
#include "tests/system/resp_test_client.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using test::Conn;
using test::Encode;
using test::Value;

class RespObjects : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fmt::format("{}/respobj-{}", test::TmpDir(), getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto prep =
        test::RunCommand({GOBLIN_CORE_BIN, "--prepare", dir_ + "/ssd"}, dir_ + "/prepare.log", 30s);
    ASSERT_EQ(prep.first, 0) << prep.second;
    core_sock_ = test::SocketPath("roc");
    resp_sock_ = test::SocketPath("rog");
    mc_sock_ = test::SocketPath("rom");
    ASSERT_NO_FATAL_FAILURE(StartCore());
    gateway_ = std::make_unique<test::Process>(
        std::vector<std::string>{GOBLIN_GATEWAY_BIN, "--core", "unix:" + core_sock_, "--resp-port",
                                 "0", "--resp-unix", resp_sock_, "--memcache-port", "0",
                                 "--memcache-unix", mc_sock_, "--resp-max-value", "3M"},
        dir_ + "/gateway.log");
    ASSERT_TRUE(test::WaitForPath(resp_sock_, 10s)) << gateway_->Output();
    ASSERT_TRUE(test::WaitForPath(mc_sock_, 10s)) << gateway_->Output();
  }
  void StartCore() {
    // A small tier (16 extents of 1 MiB a shard): a few large values make it evict.
    core_ = std::make_unique<test::Process>(std::vector<std::string>{GOBLIN_CORE_BIN,
                                                                     "--listen-unix",
                                                                     core_sock_,
                                                                     "--memory",
                                                                     "32M",
                                                                     "--block",
                                                                     "64K",
                                                                     "--ram-head",
                                                                     "64K",
                                                                     "--ssd-dir",
                                                                     dir_ + "/ssd",
                                                                     "--extent-size",
                                                                     "1M",
                                                                     "--tier-file-size",
                                                                     "8M",
                                                                     "--ssd-size",
                                                                     "32M",
                                                                     "--cores",
                                                                     "2",
                                                                     "--client-output-limit",
                                                                     "1M"},
                                            dir_ + "/core.log");
    ASSERT_TRUE(test::WaitForPath(core_sock_, 10s)) << core_->Output();
  }
  void TearDown() override {
    gateway_.reset();
    core_.reset();
    fs::remove(core_sock_);
    fs::remove(resp_sock_);
    fs::remove(mc_sock_);
    fs::remove_all(dir_);
  }
  // One command, its one reply (after which a PING marker says nothing else came).
  static Value Call(Conn& c, const std::vector<std::string>& cmd) {
    static int marker = 0;
    const std::string m = "mark-" + std::to_string(++marker);
    c.Send(Encode(cmd) + Encode({"PING", m}));
    auto [vs, closed] = c.ReadUntil([&](const Value& v) { return v.type == '$' && v.str == m; });
    EXPECT_FALSE(closed);
    EXPECT_EQ(vs.size(), 1u) << cmd[0];
    return vs.empty() ? Value{} : vs[0];
  }
  std::string dir_, core_sock_, resp_sock_, mc_sock_;
  std::unique_ptr<test::Process> core_, gateway_;
};

// Waits (bounded) for a keyspace notification on `sub` matching channel and message.
bool WaitEvent(Conn& sub, const std::string& channel, const std::string& message,
               std::vector<std::string>* seen) {
  bool found = false;
  auto deadline = std::chrono::steady_clock::now() + 4s;
  sub.ReadUntil([&](const Value& v) {
    if (v.items.size() == 4 && v.items[0].str == "pmessage") {
      seen->push_back(v.items[2].str + " " + v.items[3].str.substr(0, 40));
      found = v.items[2].str == channel && v.items[3].str == message;
    }
    return found || std::chrono::steady_clock::now() > deadline;
  });
  return found;
}

TEST_F(RespObjects, KeyspaceEventsComeFromExpiryEvictionAndTheOtherFronts) {
  Conn c(resp_sock_), sub(resp_sock_);
  ASSERT_TRUE(c.ok() && sub.ok());
  EXPECT_EQ(Call(c, {"CONFIG", "SET", "notify-keyspace-events", "KEA"}).Dump(), "+OK");
  EXPECT_EQ(Call(c, {"CONFIG", "GET", "notify-keyspace-events"}).Dump(),
            "*[$notify-keyspace-events,$AKE,]");
  sub.Send(Encode({"PSUBSCRIBE", "__key*@0__:*"}));
  sub.ReadUntil([](const Value& v) { return v.items.size() == 3; });
  std::vector<std::string> seen;
  // A short life: set, expire, then expired by the core's sweep (nobody reads it).
  EXPECT_EQ(Call(c, {"SET", "brief", "x", "PX", "150"}).Dump(), "+OK");
  EXPECT_TRUE(WaitEvent(sub, "__keyevent@0__:set", "brief", &seen));
  EXPECT_TRUE(WaitEvent(sub, "__keyevent@0__:expire", "brief", &seen));
  EXPECT_TRUE(WaitEvent(sub, "__keyspace@0__:brief", "expired", &seen))
      << fmt::format("{}", fmt::join(seen, "; "));
  // A memcache set is an object event too.
  {
    Conn mc(mc_sock_);
    ASSERT_TRUE(mc.ok());
    mc.Send("set from-memcache 0 0 2\r\nhi\r\n");
    EXPECT_TRUE(WaitEvent(sub, "__keyevent@0__:set", "from-memcache", &seen));
  }
  EXPECT_EQ(Call(c, {"GET", "from-memcache"}).Dump(), "$hi");
  // Evicted: 2.5 MB values into 2 x 16 MiB.
  const std::string big(2'500'000, 'b');
  for (int i = 0; i < 24; ++i) {
    EXPECT_EQ(Call(c, {"SET", "big" + std::to_string(i), big}).Dump(), "+OK") << i;
  }
  EXPECT_TRUE(WaitEvent(sub, "__keyspace@0__:big0", "evicted", &seen) ||
              WaitEvent(sub, "__keyspace@0__:big1", "evicted", &seen))
      << fmt::format("{}", fmt::join(seen, "; "));
  const std::string info = Call(c, {"INFO", "stats"}).str;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(info, m, std::regex("evicted_keys:([0-9]+)"))) << info;
  EXPECT_GT(std::stoi(m[1]), 0);
  ASSERT_TRUE(std::regex_search(info, m, std::regex("expired_keys:([0-9]+)"))) << info;
  EXPECT_GT(std::stoi(m[1]), 0);
  // Off: nothing more (once what was on its way has come, a marker publish arrives with
  // nothing before it).
  EXPECT_EQ(Call(c, {"CONFIG", "SET", "notify-keyspace-events", ""}).Dump(), "+OK");
  sub.Send(Encode({"SUBSCRIBE", "end", "drained"}));
  std::this_thread::sleep_for(300ms);
  Call(c, {"PUBLISH", "drained", "."});
  sub.ReadUntil([](const Value& v) {
    return v.items.size() == 3 && v.items[0].str == "message" && v.items[1].str == "drained";
  });
  EXPECT_EQ(Call(c, {"SET", "quiet", "q"}).Dump(), "+OK");
  Call(c, {"PUBLISH", "end", "."});
  auto [after, closed] = sub.ReadUntil(
      [](const Value& v) { return v.items.size() == 3 && v.items[0].str == "message"; });
  for (const Value& v : after) EXPECT_NE(v.items.size(), 4u) << v.Dump();
  // A bad class is refused, the setting unchanged.
  EXPECT_EQ(Call(c, {"CONFIG", "SET", "notify-keyspace-events", "KQ"}).Dump(),
            "-ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - "
            "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.");
  EXPECT_EQ(Call(c, {"CONFIG", "GET", "notify-keyspace-events"}).Dump(),
            "*[$notify-keyspace-events,$,]");
}

TEST_F(RespObjects, TheCoreGoingAwayIsAnErrorAndTheNextRequestsAreServedOnceItIsBack) {
  Conn c(resp_sock_);
  ASSERT_TRUE(c.ok());
  const std::string v(700'000, 'v');
  EXPECT_EQ(Call(c, {"SET", "kept", v, "EX", "1000"}).Dump(), "+OK");
  // Requests in flight when it dies, and the ones after, are answered -ERR; the connection
  // stays usable.
  c.Send(Encode({"SET", "lost?", v}));
  core_.reset();  // SIGKILL
  fs::remove(core_sock_);
  {
    auto [vs, closed] = c.ReadUntil([](const Value&) { return true; });  // (its reply)
    EXPECT_FALSE(closed);
  }
  for (const char* cmd : {"GET", "TTL", "DEL", "EXISTS"}) {
    const Value r = Call(c, {cmd, "kept"});
    EXPECT_EQ(r.Dump(), "-ERR goblin-core is unavailable") << cmd;
  }
  // (the SET in flight: OK if it made it before the kill, else the error)
  ASSERT_NO_FATAL_FAILURE(StartCore());
  Value got;
  for (int i = 0; i < 200; ++i) {
    got = Call(c, {"GET", "kept"});
    if (got.type == '$') break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(got.str.size(), v.size());
  EXPECT_EQ(got.str, v);
  const Value ttl = Call(c, {"TTL", "kept"});
  EXPECT_GT(std::stoi(ttl.str), 900) << ttl.Dump();
  EXPECT_EQ(Call(c, {"SET", "after", "a"}).Dump(), "+OK");
  EXPECT_EQ(Call(c, {"GET", "after"}).Dump(), "$a");
}

TEST_F(RespObjects, BadInputGetsTheProtocolsErrorAndLosesNothing) {
  Conn c(resp_sock_);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(Call(c, {"SET", "safe", "value"}).Dump(), "+OK");
  // A value over --resp-max-value: an error, the stream cut short, the next request served.
  const std::string big(3'500'000, 'x');
  EXPECT_EQ(Call(c, {"SET", "toobig", big}).Dump(), "+OK");
  EXPECT_EQ(Call(c, {"GET", "toobig"}).Dump(),
            "-ERR the value is 3500000 bytes; this front serves values of up to 3145728 bytes");
  EXPECT_EQ(Call(c, {"STRLEN", "toobig"}).Dump(), ":3500000");
  EXPECT_EQ(Call(c, {"GETRANGE", "toobig", "-3", "-1"}).Dump(), "$xxx");
  EXPECT_EQ(Call(c, {"GET", "safe"}).Dump(), "$value");
  // Malformed: the protocol error, then the connection closes; others carry on.
  for (const std::string& junk :
       {std::string("*1\r\n$99999999999\r\n"), std::string("*2\r\n$3\r\nGET\r\n:12\r\n"),
        std::string("*1\r\n$3\r\nGET\r\n*x\r\n")}) {
    Conn bad(resp_sock_);
    ASSERT_TRUE(bad.ok());
    bad.Send(junk);
    auto [vs, closed] = bad.ReadUntil([](const Value&) { return false; });
    EXPECT_TRUE(closed);
    ASSERT_FALSE(vs.empty());  // (the last: after a GET's arity error)
    EXPECT_EQ(vs.back().type, '-');
    EXPECT_NE(vs.back().str.find("Protocol error"), std::string::npos) << vs.back().str;
  }
  // Binary junk is an inline command as Redis reads it: unknown, the connection stays.
  {
    Conn junk(resp_sock_);
    ASSERT_TRUE(junk.ok());
    const Value r = Call(junk, {"\x01\x02\xff"});
    EXPECT_EQ(r.type, '-');
    EXPECT_NE(r.str.find("unknown command"), std::string::npos) << r.str;
    junk.Send(std::string("\x01\x02\xff\r\n", 5));
    auto [vs, closed] = junk.ReadUntil([](const Value&) { return true; });
    EXPECT_FALSE(closed);
    EXPECT_EQ(Call(junk, {"GET", "safe"}).Dump(), "$value");
  }
  // A SET cut off mid-value stores nothing.
  {
    Conn cut(resp_sock_);
    ASSERT_TRUE(cut.ok());
    cut.Send("*3\r\n$3\r\nSET\r\n$4\r\ncut1\r\n$1000\r\npartial");
  }
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(Call(c, {"EXISTS", "cut1"}).Dump(), ":0");
  EXPECT_EQ(Call(c, {"GET", "safe"}).Dump(), "$value");
  // Keys the core's messages cannot carry (over 64 KiB): an error, nothing else.
  const std::string long_key(70'000, 'k');
  const Value r = Call(c, {"SET", long_key, "v"});
  EXPECT_EQ(r.type, '-') << r.Dump().substr(0, 100);
  EXPECT_EQ(Call(c, {"DBSIZE"}).Dump(), ":2");
}

TEST_F(RespObjects, APipelinedClientSeesItsOwnWritesInOrder) {
  // Reads run on behind each other; a write stops the client until it is done. Whatever
  // runs at once, each GET answers what the pipeline wrote before it (keys on both shards).
  Conn c(resp_sock_);
  ASSERT_TRUE(c.ok());
  std::map<std::string, std::string> model;
  std::string batch;
  std::vector<std::string> want;
  for (int i = 0; i < 400; ++i) {
    const std::string k = "p" + std::to_string(i % 7), k2 = "p" + std::to_string((i * 3) % 7);
    if (i % 3 == 0) {
      const std::string v =
          "v" + std::to_string(i) + std::string(static_cast<size_t>(i * 37 % 3000), 'x');
      batch += Encode({"SET", k, v});
      want.push_back("+OK");
      model[k] = v;
    } else if (i % 11 == 0) {
      batch += Encode({"DEL", k});
      want.push_back(model.erase(k) ? ":1" : ":0");
    }
    for (const std::string& key : {k, k2}) {
      batch += Encode({"GET", key});
      auto it = model.find(key);
      want.push_back(it == model.end() ? "$null" : "$" + it->second);
    }
    batch += Encode({"STRLEN", k2});
    auto it = model.find(k2);
    want.push_back(":" + std::to_string(it == model.end() ? 0 : it->second.size()));
  }
  c.Send(batch);
  std::vector<std::string> got;
  auto [rest, closed] = c.ReadUntil([&](const Value& v) {
    got.push_back(v.Dump());
    return got.size() == want.size();
  });
  ASSERT_FALSE(closed);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "reply " << i;
}

// Many reads of small values at once (pipelined on several connections): each is one piece
// from the core, and the core's replies to the gateway must wait for its ring, not pile up
// past the core's output limit (1M here) and get the gateway dropped (seen with
// redis-benchmark -P 16 -d 65536: every client then read "goblin-core is unavailable").
TEST_F(RespObjects, ManyPipelinedReadsOfSmallValuesWaitForTheCoresRing) {
  Conn w(resp_sock_);
  ASSERT_TRUE(w.ok());
  std::vector<std::string> values;
  for (int i = 0; i < 40; ++i) {
    values.push_back(std::string(60'000, static_cast<char>('a' + i % 26)) + std::to_string(i));
    ASSERT_EQ(Call(w, {"SET", "small" + std::to_string(i), values.back()}).Dump(), "+OK");
  }
  std::vector<std::unique_ptr<Conn>> readers;
  for (int c = 0; c < 4; ++c) {
    readers.push_back(std::make_unique<Conn>(resp_sock_));
    ASSERT_TRUE(readers.back()->ok());
    std::string batch;
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < 40; ++i) batch += Encode({"GET", "small" + std::to_string(i)});
    }
    readers.back()->Send(batch);
  }
  for (auto& r : readers) {
    size_t n = 0;
    auto [rest, closed] = r->ReadUntil([&](const Value& v) {
      EXPECT_EQ(v.Dump(), "$" + values[n % 40]) << "reply " << n;
      return ++n == 120;
    });
    ASSERT_FALSE(closed);
    ASSERT_EQ(n, 120u);
  }
  // ... and the next request is served by the same gateway session.
  EXPECT_EQ(Call(w, {"GET", "small7"}).Dump(), "$" + values[7]);
  EXPECT_EQ(core_->Output().find("dropping it"), std::string::npos) << core_->Output();
}

TEST_F(RespObjects, AClientThatStopsReadingIsNotReadAndTheOthersAreServed) {
  Conn c(resp_sock_), slow(resp_sock_);
  ASSERT_TRUE(c.ok() && slow.ok());
  const std::string v(1'000'000, 's');
  EXPECT_EQ(Call(c, {"SET", "val", v}).Dump(), "+OK");
  // 200 GETs of 1 MB, not read: the gateway stops reading this client at 64 MiB of replies.
  std::string many;
  for (int i = 0; i < 200; ++i) many += Encode({"GET", "val"});
  slow.Send(many);
  std::this_thread::sleep_for(500ms);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Call(c, {"STRLEN", "val"}).Dump(), ":1000000");
  // What the gateway holds for it (CLIENT LIST: obl its output, omem replies waiting their
  // turn): at most 64 MiB, plus the 16 reads it may have in flight.
  const std::string list = Call(c, {"CLIENT", "LIST"}).str;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(list, m, std::regex("obl=([0-9]+) oll=[0-9]+ omem=([0-9]+)[^\n]* cmd=get")))
      << list;
  const uint64_t held = std::stoull(m[1]) + std::stoull(m[2]);
  EXPECT_GT(held, 0u);
  std::cout << "held for the non-reader: " << held << " bytes\n";
  EXPECT_LT(held, (64u << 20) + 17u * 1'000'100) << "the gateway holds a non-reader's replies";
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_LT(test::RssKib(gateway_->pid()), 400u * 1024);  // (a sanitizer's heap is larger)
#endif
  // It catches up: every reply, whole, in order.
  size_t n = 0;
  // (200 MB: 5 s is tight for a sanitizer build on a busy machine; CI met it)
  auto [vs, closed] = slow.ReadUntil(
      [&](const Value& x) {
        EXPECT_EQ(x.str.size(), v.size());
        return ++n == 200;
      },
      60s);
  EXPECT_FALSE(closed);
  EXPECT_EQ(n, 200u);
}

}  // namespace
}  // namespace goblin
