// goblin-core as a real process: the goblin CLI and libgoblin talk to it over the ring
// plane; bad flags, unserved requests, client death and shutdown behave as documented.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <thread>

#include "goblin/client/connection.h"
#include "goblin/common/shard.h"
#include "goblin/ring/client.h"
#include "goblin/sbe/wire_flags.h"
#include "goblin/wire/goblin_wire.h"
#include "tests/system/core_process.h"
#include "tests/system/process.h"

namespace goblin {
namespace {

using namespace std::chrono_literals;
using test::Process;
using test::RunCommand;

using Core = test::CoreProcess;

TEST(CoreSystem, CliPingsTheCore) {
  Core core("cliping");
  auto [rc, out] = RunCommand({GOBLIN_CLI_BIN, "--target", "unix:" + core.sock, "ping", "-c", "5",
                               "-i", "1ms", "-s", "100"},
                              core.log + ".cli");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("pong seq=5"), std::string::npos) << out;
  EXPECT_NE(out.find("5 pings: min/avg/max"), std::string::npos) << out;
  EXPECT_NE(out.find("100-byte payload"), std::string::npos) << out;
}

TEST(CoreSystem, LibgoblinPingsAndReportsOversize) {
  Core core("lib");
  auto c = client::Connection::Open("unix:" + core.sock);
  ASSERT_TRUE(c) << c.error().ToString();
  for (int i = 0; i < 100; ++i) {
    auto rtt = (*c)->Ping("x");
    ASSERT_TRUE(rtt) << rtt.error().ToString();
    EXPECT_GT(rtt->count(), 0);
  }
  auto big = (*c)->Ping(std::string(5000, 'y'));  // cannot fit a 4 KiB ring
  ASSERT_FALSE(big);
  EXPECT_NE(big.error().message().find("does not fit"), std::string::npos);
  EXPECT_TRUE((*c)->Ping("still fine"));
  EXPECT_EQ((*c)->server_pid(), static_cast<uint32_t>(core.proc.pid()));
}

TEST(CoreSystem, UnservedRequestGetsAnErrorNamingIt) {
  Core core("unserved");
  auto c = ring::RingClient::Connect(core.sock, {});
  ASSERT_TRUE(c);
  uint8_t buf[256];
  auto ask = [&](size_t n, wire::ErrorCode want_code, std::string_view want_text) {
    ASSERT_TRUE((*c)->Send({buf, n}, 5s));
    ASSERT_TRUE((*c)->Wait(5s).value_or(false));
    std::string text;
    uint64_t corr = 0;
    ASSERT_TRUE((*c)->Poll([&](std::span<const uint8_t> m) {
      auto e = wire::ErrorDecoder::Decode(m);
      ASSERT_TRUE(e);
      text = std::string(e->text());
      corr = e->correlation_id();
      EXPECT_EQ(e->code(), want_code);
    }));
    EXPECT_EQ(corr, 42u);
    EXPECT_NE(text.find(want_text), std::string::npos) << text;
  };
  // A reply type sent as a request.
  wire::PutResultEncoder pr(buf, sizeof buf);
  ask(pr.set_correlation_id(42).Finish(), wire::ErrorCode::kUnimplemented, "PutResult");
  // Without --ssd-dir the core says why objects are not served.
  wire::ObjectGetEncoder get(buf, sizeof buf);
  ask(get.set_correlation_id(42).set_key("k").Finish(), wire::ErrorCode::kFailedPrecondition,
      "no disk tier");
  // A message that is not SBE at all: an error, and the session survives.
  uint8_t junk[16] = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_TRUE((*c)->Send({junk, sizeof junk}, 5s));
  ASSERT_TRUE((*c)->Wait(5s).value_or(false));
  ASSERT_TRUE(
      (*c)->Poll([&](std::span<const uint8_t> m) { EXPECT_TRUE(wire::ErrorDecoder::Decode(m)); }));
  auto again = client::Connection::Open(core.sock);
  ASSERT_TRUE(again);
  EXPECT_TRUE((*again)->Ping());
}

// A core with a small disk tier (1 MiB extents, so objects span several I/O buffers).
struct StoreCore {
  explicit StoreCore(const std::string& tag, std::vector<std::string> extra = {})
      : tier(fmt::format("{}/tier-{}-{}", test::TmpDir(), tag, getpid())) {
    std::filesystem::remove_all(tier);
    auto [rc, out] = RunCommand({GOBLIN_CORE_BIN, "--prepare", tier}, tier + ".log");
    EXPECT_EQ(rc, 0) << out;
    std::vector<std::string> args{"--ssd-dir",        tier,  "--extent-size", "1M",
                                  "--tier-file-size", "64M", "--io-buffers",  "16"};
    args.insert(args.end(), extra.begin(), extra.end());
    core.emplace(tag, args);
  }
  ~StoreCore() {
    core.reset();
    std::filesystem::remove_all(tier);
    std::filesystem::remove(tier + ".log");
  }
  std::string tier;
  std::optional<Core> core;
};

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed + (i >> 12));
  return v;
}

Result<std::vector<uint8_t>> GetAll(client::Connection& c, const std::string& key) {
  std::vector<uint8_t> out;
  GOBLIN_ASSIGN_OR_RETURN(auto meta, c.Get(key, [&](uint64_t off, std::span<const uint8_t> b) {
    if (off != out.size()) return VoidResult(Err(StatusCode::kCorruption, "out of order"));
    out.insert(out.end(), b.begin(), b.end());
    return VoidResult();
  }));
  if (!meta.found) return Err(StatusCode::kNotFound, "miss");
  return out;
}

// A writer that takes a lease and then goes quiet must not hold the key hostage: after
// --fill-timeout the core aborts the fill itself, its follower is told (Aborted), the key is
// free for the next writer, and the stalled writer's own commit fails.
TEST(CoreSystem, AFillNobodyFeedsIsAbortedByTheCore) {
  StoreCore sc("stall", {"--fill-timeout", "1s"});
  auto writer = client::Connection::Open("unix:" + sc.core->sock);
  auto reader = client::Connection::Open("unix:" + sc.core->sock);
  auto other = client::Connection::Open("unix:" + sc.core->sock);
  ASSERT_TRUE(writer && reader && other);
  std::atomic<bool> started{false}, stalled{true};
  std::optional<Result<uint64_t>> put;
  std::thread t([&] {
    bool first = true;
    put = (*writer)->Put(
        "stalled",
        [&](std::span<uint8_t> out) -> Result<size_t> {
          if (first) {
            first = false;
            size_t n = std::min<size_t>(out.size(), 4096);
            std::fill_n(out.begin(), n, uint8_t{7});
            started = true;
            return n;
          }
          std::this_thread::sleep_for(4s);  // the origin went quiet
          stalled = false;
          return size_t{0};
        },
        1 << 20);
  });
  for (int i = 0; i < 500 && !started; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(started);
  std::this_thread::sleep_for(100ms);  // (the first bytes reach the core)
  uint64_t got = 0;
  auto follow = (*reader)->Get(
      "stalled",
      [&](uint64_t, std::span<const uint8_t> b) {
        got += b.size();
        return VoidResult();
      },
      0, UINT64_MAX, /*follow_fill=*/true);
  ASSERT_FALSE(follow) << "a follower of a fill nobody feeds must not wait for ever";
  EXPECT_EQ(follow.error().code(), StatusCode::kAborted) << follow.error().ToString();
  EXPECT_TRUE(stalled) << "the core should have aborted the fill before the writer woke up";
  // The key is free again while the first writer still sleeps.
  std::vector<uint8_t> data = {1, 2, 3};
  auto again = (*other)->Put("stalled", data);
  EXPECT_TRUE(again) << again.error().ToString();
  EXPECT_TRUE(stalled);
  t.join();
  ASSERT_TRUE(put.has_value());
  EXPECT_FALSE(*put) << "the stalled writer's fill must not commit";
  auto back = GetAll(**reader, "stalled");
  ASSERT_TRUE(back) << back.error().ToString();
  EXPECT_EQ(*back, data);
  EXPECT_NE(sc.core->proc.Output().find("received nothing for 1s: aborted"), std::string::npos)
      << sc.core->proc.Output();
}

// Many fills and purges: background checkpoints keep the journal under a fixed bound; a
// crash (SIGKILL) right after the last acknowledgement keeps every acknowledged change; a
// clean stop leaves nothing to replay.
TEST(CoreSystem, TheJournalStaysBoundedAndRestartsKeepEveryAcknowledgedChange) {
  const std::string tier = fmt::format("{}/tier-journal-{}", test::TmpDir(), getpid());
  std::filesystem::remove_all(tier);
  ASSERT_EQ(RunCommand({GOBLIN_CORE_BIN, "--prepare", tier}, tier + ".log").first, 0);
  const std::vector<std::string> args{"--ssd-dir",
                                      tier,
                                      "--extent-size",
                                      "64K",
                                      "--tier-file-size",
                                      "64M",
                                      "--io-buffers",
                                      "16",
                                      "--memory",
                                      "16M",
                                      "--checkpoint-journal-records",
                                      "300",
                                      "--checkpoint-journal-size",
                                      "1M"};
  auto version_bytes = [](int key, int version) {
    std::vector<uint8_t> v(1000 + static_cast<size_t>((key * 7919 + version * 104729) % 7000));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(key + version * 31 + i);
    return v;
  };
  std::map<int, int> want;  // key -> version (absent: deleted or never put)
  uint64_t max_journal = 0;
  {
    Core core("journal", args);
    auto c = client::Connection::Open("unix:" + core.sock);
    ASSERT_TRUE(c);
    uint32_t rng = 12345;
    for (int op = 0; op < 4000; ++op) {
      rng = rng * 1103515245 + 12345;
      int key = static_cast<int>((rng >> 8) % 150);
      std::string name = fmt::format("j/{}", key);
      if ((rng >> 20) % 5 == 0) {
        auto d = (*c)->Delete(name);
        ASSERT_TRUE(d) << d.error().ToString();
        want.erase(key);
      } else {
        auto p = (*c)->Put(name, version_bytes(key, op));
        ASSERT_TRUE(p) << p.error().ToString();
        want[key] = op;
      }
      if (op % 100 == 0) {
        max_journal =
            std::max<uint64_t>(max_journal, std::filesystem::file_size(tier + "/index.journal"));
      }
    }
    // ~4,000 records would be ~5 MiB of journal; checkpoints every ~300 keep it small.
    EXPECT_LT(max_journal, 1u << 20);
    core.proc.Signal(SIGKILL);  // a crash right after the last acknowledgement
    core.proc.Wait(5s);
  }
  auto check = [&](const std::string& sock) {
    auto c = client::Connection::Open("unix:" + sock);
    ASSERT_TRUE(c);
    for (int key = 0; key < 150; ++key) {
      std::string name = fmt::format("j/{}", key);
      auto got = GetAll(**c, name);
      auto it = want.find(key);
      if (it == want.end()) {
        EXPECT_FALSE(got) << name << " was deleted";
      } else {
        ASSERT_TRUE(got) << name << ": " << got.error().ToString();
        EXPECT_EQ(*got, version_bytes(key, it->second)) << name;
      }
    }
  };
  {
    Core core("journal2", args);
    ASSERT_NO_FATAL_FAILURE(check(core.sock));
    std::string log = core.proc.Output();
    EXPECT_NE(log.find("from the checkpoint"), std::string::npos) << log;
    EXPECT_EQ(log.find(" 0 from the checkpoint"), std::string::npos) << log;
    core.proc.Signal(SIGTERM);  // a clean stop: checkpoint, empty journal
    EXPECT_EQ(core.proc.Wait(10s), 0) << core.proc.Output();
    EXPECT_NE(core.proc.Output().find("checkpoint of"), std::string::npos) << core.proc.Output();
  }
  {
    Core core("journal3", args);
    ASSERT_NO_FATAL_FAILURE(check(core.sock));
    EXPECT_NE(core.proc.Output().find(", 0 journal records"), std::string::npos)
        << core.proc.Output();
  }
  std::filesystem::remove_all(tier);
  std::filesystem::remove(tier + ".log");
}

// --cores 3: keys spread over the shards by goblin::ShardOf; libgoblin reaches each shard
// directly; a shard refuses a key of another shard and pub/sub outside shard 0 (wrongShard),
// and a Hello for a shard that does not exist is refused.
TEST(CoreSystem, ShardsOwnTheirKeysAndRefuseOthers) {
  StoreCore sc("shards", {"--cores", "3"});
  auto c = client::Connection::Open("unix:" + sc.core->sock);
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_EQ((*c)->shard_count(), 3);
  std::array<int, 3> per_shard{};
  for (int i = 0; i < 60; ++i) {
    std::string key = fmt::format("spread/{}", i);
    ASSERT_TRUE((*c)->Put(key, Pattern(1000 + static_cast<size_t>(i), static_cast<uint8_t>(i))));
    ++per_shard[ShardOf(key, 3)];
  }
  for (int n : per_shard) EXPECT_GT(n, 5);  // the hash spreads them
  for (int i = 0; i < 60; ++i) {
    auto got = GetAll(**c, fmt::format("spread/{}", i));
    ASSERT_TRUE(got) << got.error().ToString();
    EXPECT_EQ(*got, Pattern(1000 + static_cast<size_t>(i), static_cast<uint8_t>(i)));
  }
  // Each shard's own connection: its keys are found, another shard's are refused.
  for (uint16_t shard = 0; shard < 3; ++shard) {
    ring::ClientOptions co;
    co.shard = shard;
    auto r = ring::RingClient::Connect(sc.core->sock, co);
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_EQ((*r)->shard(), shard);
    EXPECT_EQ((*r)->shard_count(), 3);
    for (int i = 0; i < 6; ++i) {
      std::string key = fmt::format("spread/{}", i);
      uint8_t buf[256];
      size_t n =
          wire::ObjectHeadEncoder(buf, sizeof buf).set_correlation_id(7).set_key(key).Finish();
      ASSERT_TRUE((*r)->Send({buf, n}, 5s));
      ASSERT_TRUE((*r)->Wait(5s).value_or(false));
      ASSERT_TRUE((*r)->Poll([&](std::span<const uint8_t> m) {
        if (ShardOf(key, 3) == shard) {
          auto info = wire::ObjectInfoDecoder::Decode(m);
          ASSERT_TRUE(info) << "shard " << shard << " key " << key;
          EXPECT_EQ(info->status(), wire::LookupStatus::kHit);
        } else {
          auto e = wire::ErrorDecoder::Decode(m);
          ASSERT_TRUE(e) << "shard " << shard << " answered for " << key;
          EXPECT_EQ(e->code(), wire::ErrorCode::kWrongShard);
          EXPECT_NE(e->text().find("belongs to shard"), std::string::npos) << e->text();
        }
      }));
    }
    if (shard != 0) {
      uint8_t buf[128];
      size_t n = wire::PublishEncoder(buf, sizeof buf)
                     .set_correlation_id(9)
                     .set_channel("c")
                     .set_payload("p")
                     .Finish();
      ASSERT_TRUE((*r)->Send({buf, n}, 5s));
      ASSERT_TRUE((*r)->Wait(5s).value_or(false));
      ASSERT_TRUE((*r)->Poll([&](std::span<const uint8_t> m) {
        auto e = wire::ErrorDecoder::Decode(m);
        ASSERT_TRUE(e);
        EXPECT_EQ(e->code(), wire::ErrorCode::kWrongShard);
        EXPECT_NE(e->text().find("pub/sub is served by shard 0"), std::string::npos) << e->text();
      }));
    }
  }
  ring::ClientOptions beyond;
  beyond.shard = 3;
  auto no = ring::RingClient::Connect(sc.core->sock, beyond);
  ASSERT_FALSE(no);
  EXPECT_NE(no.error().message().find("shard 3 does not exist"), std::string::npos)
      << no.error().ToString();
  // Pub/sub through libgoblin goes to shard 0 and keeps Redis's counts.
  auto sub = client::Connection::Open("unix:" + sc.core->sock);
  ASSERT_TRUE(sub);
  std::vector<std::string> chans{"news"};
  ASSERT_TRUE((*sub)->Subscribe(client::Connection::SubKind::kChannel, chans));
  EXPECT_EQ((*c)->Publish("news", "hello").value_or(0), 1u);
  auto msg = (*sub)->NextMessage(5s);
  ASSERT_TRUE(msg && *msg);
  EXPECT_EQ((*msg)->payload, "hello");
  // A delete and a miss go to the key's shard too.
  EXPECT_TRUE((*c)->Delete("spread/1").value_or(false));
  EXPECT_FALSE((*c)->Head("spread/1").value().found);
}

// A tier keeps the shard count it was first used with: another count is refused with a
// message naming the one it needs; the same count finds every object again.
TEST(CoreSystem, RestartWithAnotherShardCountIsRefusedAndTheSameKeepsEveryObject) {
  const std::string tier = fmt::format("{}/tier-reshard-{}", test::TmpDir(), getpid());
  std::filesystem::remove_all(tier);
  ASSERT_EQ(RunCommand({GOBLIN_CORE_BIN, "--prepare", tier}, tier + ".log").first, 0);
  auto args = [&](int cores) {
    return std::vector<std::string>{"--ssd-dir",        tier,
                                    "--extent-size",    "1M",
                                    "--tier-file-size", "64M",
                                    "--io-buffers",     "16",
                                    "--cores",          std::to_string(cores)};
  };
  {
    Core core("reshard", args(2));
    auto c = client::Connection::Open("unix:" + core.sock);
    ASSERT_TRUE(c);
    for (int i = 0; i < 30; ++i) {
      ASSERT_TRUE((*c)->Put(fmt::format("k/{}", i), Pattern(70000, static_cast<uint8_t>(i))));
    }
    core.proc.Signal(SIGTERM);
    EXPECT_EQ(core.proc.Wait(10s), 0) << core.proc.Output();
  }
  for (int other : {1, 3}) {
    std::vector<std::string> cmd{GOBLIN_CORE_BIN, "--listen-unix", tier + ".sock",
                                 "--memory",      "16M",           "--block",
                                 "64K",           "--ram-head",    "64K"};
    for (const auto& a : args(other)) cmd.push_back(a);
    auto [rc, out] = RunCommand(cmd, tier + ".log");
    EXPECT_EQ(rc, 1) << out;
    EXPECT_NE(out.find("laid out for 2 shards"), std::string::npos) << out;
    EXPECT_NE(out.find("--cores 2"), std::string::npos) << out;
  }
  {
    Core core("reshard2", args(2));
    auto c = client::Connection::Open("unix:" + core.sock);
    ASSERT_TRUE(c);
    for (int i = 0; i < 30; ++i) {
      auto got = GetAll(**c, fmt::format("k/{}", i));
      ASSERT_TRUE(got) << i << ": " << got.error().ToString();
      EXPECT_EQ(*got, Pattern(70000, static_cast<uint8_t>(i)));
    }
  }
  // A one-shard store is not reopened by several shards either.
  const std::string one = tier + "-one";
  std::filesystem::remove_all(one);
  ASSERT_EQ(RunCommand({GOBLIN_CORE_BIN, "--prepare", one}, tier + ".log").first, 0);
  {
    Core core("reshard1", {"--ssd-dir", one, "--extent-size", "1M", "--tier-file-size", "64M"});
    auto c = client::Connection::Open("unix:" + core.sock);
    ASSERT_TRUE(c);
    ASSERT_TRUE((*c)->Put("solo", Pattern(5000, 1)));
  }
  auto [rc, out] = RunCommand(
      {GOBLIN_CORE_BIN, "--listen-unix", tier + ".sock", "--ssd-dir", one, "--cores", "2",
       "--memory", "16M", "--block", "64K", "--ram-head", "64K", "--tier-file-size", "64M"},
      tier + ".log");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("laid out for 1 shard and"), std::string::npos) << out;
  std::filesystem::remove_all(tier);
  std::filesystem::remove_all(one);
  std::filesystem::remove(tier + ".log");
}

// Without --cores the core runs the shard count its tier is laid out for (a restart keeps
// every object without repeating the flag); a new store runs one shard per CPU it may use.
TEST(CoreSystem, WithoutCoresATierKeepsItsShardsAndANewStoreTakesOneShardPerCpu) {
  const std::string tier = fmt::format("{}/tier-autocores-{}", test::TmpDir(), getpid());
  const std::string sock = test::SocketPath("autocores");
  std::filesystem::remove_all(tier);
  ASSERT_EQ(RunCommand({GOBLIN_CORE_BIN, "--prepare", tier}, tier + ".log").first, 0);
  auto start = [&](const std::string& dir, std::vector<std::string> more, const std::string& log) {
    std::filesystem::remove(sock);
    std::vector<std::string> argv{GOBLIN_CORE_BIN,
                                  "--listen-unix",
                                  sock,
                                  "--ssd-dir",
                                  dir,
                                  "--extent-size",
                                  "1M",
                                  "--memory",
                                  "16M",
                                  "--tier-file-size",
                                  "64M",
                                  "--block",
                                  "64K",
                                  "--ram-head",
                                  "64K"};
    argv.insert(argv.end(), more.begin(), more.end());
    auto p = std::make_unique<test::Process>(argv, tier + log);
    EXPECT_TRUE(test::WaitForPath(sock, 10s)) << p->Output();
    return p;
  };
  {
    auto p = start(tier, {"--cores", "2"}, ".1.log");
    auto c = client::Connection::Open("unix:" + sock);
    ASSERT_TRUE(c) << c.error().ToString() << p->Output();
    EXPECT_EQ((*c)->shard_count(), 2);
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE((*c)->Put(fmt::format("auto/{}", i), Pattern(3000, static_cast<uint8_t>(i))));
    }
    p->Signal(SIGTERM);
    EXPECT_EQ(p->Wait(10s), 0) << p->Output();
  }
  {
    auto p = start(tier, {"--cpus", "0"}, ".2.log");  // one CPU, but the tier has two shards
    auto c = client::Connection::Open("unix:" + sock);
    ASSERT_TRUE(c) << c.error().ToString() << p->Output();
    EXPECT_EQ((*c)->shard_count(), 2);
    EXPECT_NE(p->Output().find("2 shards (the layout of tier"), std::string::npos) << p->Output();
    for (int i = 0; i < 20; ++i) {
      auto got = GetAll(**c, fmt::format("auto/{}", i));
      ASSERT_TRUE(got) << i << ": " << got.error().ToString();
      EXPECT_EQ(*got, Pattern(3000, static_cast<uint8_t>(i)));
    }
  }
  // A new store: one shard per CPU of --cpus (the first two this test may run on, when it has
  // two; the count is checked against what the core was given, whatever the machine).
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<int> mine;
  for (int i = 0; i < CPU_SETSIZE && mine.size() < 2; ++i) {
    if (CPU_ISSET(i, &set)) mine.push_back(i);
  }
  const std::string fresh = tier + "-new";
  std::filesystem::remove_all(fresh);
  ASSERT_EQ(RunCommand({GOBLIN_CORE_BIN, "--prepare", fresh}, tier + ".log").first, 0);
  {
    std::string list = std::to_string(mine[0]);
    if (mine.size() > 1) list += "," + std::to_string(mine[1]);
    auto p = start(fresh, {"--cpus", list}, ".3.log");
    auto c = client::Connection::Open("unix:" + sock);
    ASSERT_TRUE(c) << c.error().ToString() << p->Output();
    EXPECT_EQ((*c)->shard_count(), mine.size());
    EXPECT_NE(p->Output().find("(one per CPU of --cpus/--numa)"), std::string::npos) << p->Output();
    ASSERT_TRUE((*c)->Put("auto/new", Pattern(3000, 9)));
  }
  std::filesystem::remove_all(tier);
  std::filesystem::remove_all(fresh);
}

TEST(CoreSystem, ZeroCopyGetReadsTheCoresMemoryInPlace) {
  StoreCore sc("zc");
  auto c = client::Connection::Open("unix:" + sc.core->sock);
  ASSERT_TRUE(c) << c.error().ToString();
  auto data = Pattern((5 << 20) + 123, 1);
  ASSERT_TRUE((*c)->Put("/zc", data));
  auto got = GetAll(**c, "/zc");
  ASSERT_TRUE(got) << got.error().ToString();
  EXPECT_EQ(*got, data);
  EXPECT_TRUE((*c)->pools_mapped());
  EXPECT_EQ((*c)->stats().bytes_lent, data.size());  // head from the pool, tail from I/O buffers
  EXPECT_EQ((*c)->stats().bytes_copied, 0u);
  // The same through copies, for a client that does not map.
  auto copy = client::Connection::Open("unix:" + sc.core->sock, {.zero_copy = false});
  ASSERT_TRUE(copy);
  EXPECT_EQ(GetAll(**copy, "/zc").value(), data);
  EXPECT_EQ((*copy)->stats().bytes_copied, data.size());
  // Many gets in a row: every loan came back (else the core would run out of buffers).
  for (int i = 0; i < 20; ++i) ASSERT_EQ(GetAll(**c, "/zc").value(), data) << i;
}

// A raw ring client asks for the pools' fds (MapPools): from then on its gets may be lent.
void MapPools(ring::RingClient& raw, std::vector<UniqueFd>* fds) {
  uint8_t buf[256];
  ASSERT_TRUE(
      raw.Send({buf, wire::MapPoolsEncoder(buf, sizeof buf).set_correlation_id(1).Finish()}, 5s));
  // (Wait may return early: the side frame makes the socket readable before the reply.)
  for (int i = 0; i < 100 && !raw.Wait(50ms).value_or(false);) ++i;
  ASSERT_TRUE(
      raw.Poll([](std::span<const uint8_t> m) { EXPECT_TRUE(wire::PoolMapDecoder::Decode(m)); }));
  std::vector<uint8_t> side;
  ASSERT_TRUE(raw.ReceiveSideFrame(&side, fds, 5s));
}

std::map<std::string, uint64_t> CoreStats(const StoreCore& sc) {  // goblinctl stats
  return test::CoreCounters(GOBLIN_CTL_BIN, sc.core->sock, sc.tier + ".st");
}

// The fds a client receives cannot be mapped writable, and a client that keeps its loans
// stalls only itself: at the per-session limit the core stops lending, and everything it
// held comes back when it goes away.
TEST(CoreSystem, LoansAreReadOnlyBoundedAndReturnedWhenTheClientLeaves) {
  StoreCore sc("loans");
  auto c = client::Connection::Open("unix:" + sc.core->sock);
  ASSERT_TRUE(c);
  auto data = Pattern(12 << 20, 2);
  ASSERT_TRUE((*c)->Put("/held", data));

  auto raw = ring::RingClient::Connect(sc.core->sock, {});
  ASSERT_TRUE(raw);
  uint8_t buf[256];
  std::vector<UniqueFd> fds;
  ASSERT_NO_FATAL_FAILURE(MapPools(**raw, &fds));
  // Head pool, I/O buffers, head table: none writable; then the touch table, the one
  // writable mapping (a reader marks the heads it served itself: nothing else there).
  ASSERT_EQ(fds.size(), 4u);
  void* touch = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fds[3].get(), 0);
  EXPECT_NE(touch, MAP_FAILED);
  if (touch != MAP_FAILED) munmap(touch, 4096);
  fds.pop_back();
  for (auto& fd : fds) {
    void* w = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    EXPECT_EQ(w, MAP_FAILED);
    EXPECT_EQ(errno, EACCES);
    void* r = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd.get(), 0);
    ASSERT_NE(r, MAP_FAILED);
    EXPECT_NE(mprotect(r, 4096, PROT_READ | PROT_WRITE), 0);
    munmap(r, 4096);
  }
  // Ask for loans and never release them.
  wire::ObjectGetEncoder get(buf, sizeof buf);
  size_t n = get.set_correlation_id(2)
                 .set_length(UINT64_MAX)
                 .set_flags(wire::kGetLoans)
                 .set_key("/held")
                 .Finish();
  ASSERT_TRUE((*raw)->Send({buf, n}, 5s));
  int loans = 0;
  auto poll = [&] {
    ASSERT_TRUE((*raw)->Poll([&](std::span<const uint8_t> m) {
      if (wire::LoanDecoder::Decode(m)) ++loans;
    }));
  };
  for (int i = 0; i < 100 && loans < 6; ++i) {
    if ((*raw)->Wait(100ms).value_or(false)) poll();
  }
  (*raw)->Wait(300ms).value_or(false);  // nothing more comes
  poll();
  EXPECT_EQ(loans, static_cast<int>(6));  // CoreService::kMaxLoansPerSession, then it waits
  // Other clients are served meanwhile, byte-exactly.
  EXPECT_EQ(GetAll(**c, "/held").value(), data);
  raw->reset();  // leaves holding its loans: the core takes them back
  for (int i = 0; i < 10; ++i) ASSERT_EQ(GetAll(**c, "/held").value(), data) << i;
}

// Puts `keys` (24 MiB each, Pattern(.., k)) with `c`; then a raw ring client maps the pools
// and asks for them with kGetLoans, correlation ids 10, 11, ...: the loan tests' reader,
// which gives back only the loans it chooses.
void RawLoanGets(const StoreCore& sc, client::Connection& c, const std::vector<std::string>& keys,
                 std::unique_ptr<ring::RingClient>* raw, std::vector<UniqueFd>* fds) {
  for (size_t k = 0; k < keys.size(); ++k) {
    ASSERT_TRUE(c.Put(keys[k], Pattern(24 << 20, static_cast<uint8_t>(k))));
  }
  auto r = ring::RingClient::Connect(sc.core->sock, {});
  ASSERT_TRUE(r);
  *raw = std::move(*r);
  ASSERT_NO_FATAL_FAILURE(MapPools(**raw, fds));
  uint8_t buf[256];
  for (size_t k = 0; k < keys.size(); ++k) {
    size_t n = wire::ObjectGetEncoder(buf, sizeof buf)
                   .set_correlation_id(10 + k)
                   .set_length(UINT64_MAX)
                   .set_flags(wire::kGetLoans)
                   .set_key(keys[k])
                   .Finish();
    ASSERT_TRUE((*raw)->Send({buf, n}, 5s));
  }
}

// Streams paused at the session's loan limit take turns: each returned loan wakes the stream
// that paused first (not every stream of the session, which then all but one pause again,
// and not always the first stream in the session's list, which starved the others).
TEST(CoreSystem, ReturnedLoansWakeThePausedStreamsInTurn) {
  StoreCore sc("loanturns");
  auto c = client::Connection::Open("unix:" + sc.core->sock);
  ASSERT_TRUE(c);
  const std::vector<std::string> keys{"/turn/a", "/turn/b", "/turn/c"};
  std::unique_ptr<ring::RingClient> raw;
  std::vector<UniqueFd> fds;
  ASSERT_NO_FATAL_FAILURE(RawLoanGets(sc, **c, keys, &raw, &fds));
  uint8_t buf[256];
  std::deque<std::pair<uint64_t, uint64_t>> held;  // (correlation id, loan id), oldest first
  auto poll = [&](std::chrono::milliseconds wait) {
    if (raw->Wait(wait).value_or(false)) {
      ASSERT_TRUE(raw->Poll([&](std::span<const uint8_t> m) {
        if (auto l = wire::LoanDecoder::Decode(m))
          held.emplace_back(l->correlation_id(), l->loan_id());
      }));
    }
  };
  // The session's limit (CoreService::kMaxLoansPerSession), then all three streams pause.
  for (int i = 0; i < 100 && held.size() < 6; ++i) ASSERT_NO_FATAL_FAILURE(poll(100ms));
  ASSERT_EQ(held.size(), 6u);
  uint64_t pauses = 0;
  for (int i = 0; i < 100 && pauses < 3; ++i) {
    if (i > 0) std::this_thread::sleep_for(50ms);
    pauses = CoreStats(sc)["loan_pauses"];
  }
  ASSERT_GE(pauses, 3u);
  ASSERT_NO_FATAL_FAILURE(poll(200ms));
  ASSERT_EQ(held.size(), 6u);
  // One loan back at a time: exactly one new loan each time, the streams in turn.
  std::map<uint64_t, int> turns;
  constexpr int kReleases = 9;
  for (int r = 0; r < kReleases; ++r) {
    size_t n = wire::LoanReleaseEncoder(buf, sizeof buf).set_loan_id(held.front().second).Finish();
    held.pop_front();
    ASSERT_TRUE(raw->Send({buf, n}, 5s));
    for (int i = 0; i < 100 && held.size() < 6; ++i) ASSERT_NO_FATAL_FAILURE(poll(50ms));
    ASSERT_NO_FATAL_FAILURE(poll(100ms));  // (nothing more: the session is at its limit again)
    ASSERT_EQ(held.size(), 6u) << "release " << r;
    ++turns[held.back().first];
  }
  for (size_t k = 0; k < keys.size(); ++k) {
    EXPECT_EQ(turns[10 + k], kReleases / 3) << keys[k];
  }
  // Each returned loan woke one stream, which lent once and paused again (the streams' own
  // disk reads may wake one now and then): not all three per loan.
  uint64_t after = CoreStats(sc)["loan_pauses"];
  EXPECT_LE(after - pauses, uint64_t{kReleases} + 3) << after << " " << pauses;
  EXPECT_GE(after - pauses, uint64_t{kReleases});
  // Other clients are served meanwhile, byte-exactly; the raw client leaves with its loans.
  EXPECT_EQ(GetAll(**c, keys[1]).value(), Pattern(24 << 20, 1));
  raw.reset();
  for (size_t k = 0; k < keys.size(); ++k) {
    EXPECT_EQ(GetAll(**c, keys[k]).value(), Pattern(24 << 20, static_cast<uint8_t>(k)));
  }
}

// ObjectGetCancel with kCancelTakeBackLoans (a reader that gave up and drops the rest
// unread): the core takes back that get's loans still out at once, and the room they free
// goes to the streams paused at the session's limit; a LoanRelease of one of them later is
// ignored. Without the flag (the gateway's cancel) the loans stay out until released.
TEST(CoreSystem, ACancelThatTakesBackLoansFreesThemForTheOtherStreams) {
  StoreCore sc("takeback");
  auto c = client::Connection::Open("unix:" + sc.core->sock);
  ASSERT_TRUE(c);
  const std::vector<std::string> keys{"/back/a", "/back/b", "/back/c"};
  std::unique_ptr<ring::RingClient> raw;
  std::vector<UniqueFd> fds;
  ASSERT_NO_FATAL_FAILURE(RawLoanGets(sc, **c, keys, &raw, &fds));
  uint8_t buf[256];
  auto send = [&](size_t n) { ASSERT_TRUE(raw->Send({buf, n}, 5s)); };
  std::map<uint64_t, std::vector<uint64_t>> held;  // loan ids received, by correlation id
  size_t received = 0;
  auto poll = [&](std::chrono::milliseconds wait) {
    if (raw->Wait(wait).value_or(false)) {
      ASSERT_TRUE(raw->Poll([&](std::span<const uint8_t> m) {
        if (auto l = wire::LoanDecoder::Decode(m)) {
          held[l->correlation_id()].push_back(l->loan_id());
          ++received;
        }
      }));
    }
  };
  auto settle = [&](size_t want) {  // polls until `want` loans came, then a little more
    for (int i = 0; i < 100 && received < want; ++i) ASSERT_NO_FATAL_FAILURE(poll(50ms));
    ASSERT_NO_FATAL_FAILURE(poll(200ms));
  };
  auto release = [&](uint64_t id) {
    ASSERT_NO_FATAL_FAILURE(
        send(wire::LoanReleaseEncoder(buf, sizeof buf).set_loan_id(id).Finish()));
  };
  // The session's limit (CoreService::kMaxLoansPerSession), the streams paused.
  ASSERT_NO_FATAL_FAILURE(settle(6));
  ASSERT_EQ(received, 6u);
  // A get that holds loans, cancelled with the flag: they come back at once, the other
  // streams take exactly their room, nothing more of the cancelled get arrives.
  const uint64_t back = held.begin()->first;
  const std::vector<uint64_t> taken = held[back];
  ASSERT_NO_FATAL_FAILURE(send(wire::ObjectGetCancelEncoder(buf, sizeof buf)
                                   .set_correlation_id(back)
                                   .set_flags(wire::kCancelTakeBackLoans)
                                   .Finish()));
  ASSERT_NO_FATAL_FAILURE(settle(6 + taken.size()));
  EXPECT_EQ(received, 6 + taken.size());
  EXPECT_EQ(held[back].size(), taken.size());
  EXPECT_EQ(CoreStats(sc)["loans_taken_back"], taken.size());
  // Releases of the loans taken back find nothing: no room, no new loan.
  for (uint64_t id : taken) ASSERT_NO_FATAL_FAILURE(release(id));
  ASSERT_NO_FATAL_FAILURE(poll(300ms));
  EXPECT_EQ(received, 6 + taken.size());
  // Without the flag: that stream ends, its loans stay out (still no room); each one
  // released makes room for one loan of the stream still going.
  uint64_t plain = 0;
  for (const auto& [corr, ids] : held) {
    if (corr != back && !ids.empty()) plain = corr;
  }
  ASSERT_NE(plain, 0u);
  ASSERT_NO_FATAL_FAILURE(
      send(wire::ObjectGetCancelEncoder(buf, sizeof buf).set_correlation_id(plain).Finish()));
  ASSERT_NO_FATAL_FAILURE(poll(300ms));
  EXPECT_EQ(received, 6 + taken.size());
  const std::vector<uint64_t> plain_ids = held[plain];
  for (size_t i = 0; i < plain_ids.size(); ++i) {
    ASSERT_NO_FATAL_FAILURE(release(plain_ids[i]));
    ASSERT_NO_FATAL_FAILURE(settle(6 + taken.size() + i + 1));
    EXPECT_EQ(received, 6 + taken.size() + i + 1) << "release " << i;
  }
  EXPECT_EQ(held[plain].size(), plain_ids.size());
  EXPECT_EQ(held[back].size(), taken.size());
  EXPECT_EQ(CoreStats(sc)["loans_taken_back"], taken.size());
  // The other client reads every object whole meanwhile; the raw client leaves with its loans.
  for (size_t k = 0; k < keys.size(); ++k) {
    EXPECT_EQ(GetAll(**c, keys[k]).value(), Pattern(24 << 20, static_cast<uint8_t>(k)));
  }
  raw.reset();
  uint64_t out = 1;
  for (int i = 0; i < 100 && out != 0; ++i) {
    if (i > 0) std::this_thread::sleep_for(20ms);
    out = CoreStats(sc)["loans_out"];
  }
  EXPECT_EQ(out, 0u);
}

TEST(CoreSystem, KilledClientDoesNotDisturbTheCore) {
  Core core("killclient");
  for (int i = 0; i < 3; ++i) {
    Process pinger({GOBLIN_CLI_BIN, "--target", core.sock, "ping", "-c", "1000", "-i", "1ms"},
                   core.log + ".pinger");
    std::this_thread::sleep_for(50ms);
    pinger.Signal(SIGKILL);
    EXPECT_EQ(pinger.Wait(5s), 128 + SIGKILL);
  }
  auto c = client::Connection::Open(core.sock);
  ASSERT_TRUE(c);
  EXPECT_TRUE((*c)->Ping());
  EXPECT_EQ(core.proc.Wait(10ms), -1);  // still running
}

TEST(CoreSystem, SigtermStopsCleanlyAndRemovesTheSocket) {
  Core core("sigterm");
  auto c = client::Connection::Open(core.sock);
  ASSERT_TRUE(c);
  core.proc.Signal(SIGTERM);
  EXPECT_EQ(core.proc.Wait(10s), 0) << core.proc.Output();
  EXPECT_NE(core.proc.Output().find("shutting down"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(core.sock));
  auto r = (*c)->Ping();
  ASSERT_FALSE(r);  // the client sees the core gone
}

TEST(CoreSystem, BadFlagsGiveOneClearMessage) {
  std::string log = test::TmpDir() + "/badflags.log";
  auto [rc1, out1] = RunCommand({GOBLIN_CORE_BIN, "--ring-bytes", "5000"}, log);
  EXPECT_EQ(rc1, 1);
  EXPECT_NE(out1.find("power of two"), std::string::npos) << out1;
  auto [rc2, out2] = RunCommand({GOBLIN_CORE_BIN, "--ring-bytes", "12Q"}, log);
  EXPECT_EQ(rc2, 2);
  EXPECT_NE(out2.find("unknown unit"), std::string::npos) << out2;
  auto [rc3, out3] = RunCommand({GOBLIN_CORE_BIN, "--no-such-flag"}, log);
  EXPECT_EQ(rc3, 2);
  EXPECT_NE(out3.find("--no-such-flag"), std::string::npos) << out3;
  auto [rc4, out4] =
      RunCommand({GOBLIN_CORE_BIN, "--numa", "99", "--listen-unix", log + ".sock"}, log);
  EXPECT_EQ(rc4, 1);
  EXPECT_NE(out4.find("no such node"), std::string::npos) << out4;
  auto [rc5, out5] =
      RunCommand({GOBLIN_CLI_BIN, "--target", "unix:/nonexistent/x.sock", "ping"}, log);
  EXPECT_EQ(rc5, 1);
  EXPECT_NE(out5.find("cannot connect"), std::string::npos) << out5;
  auto [rc6, out6] = RunCommand({GOBLIN_CLI_BIN, "--target", "tcp:1.2.3.4", "ping"}, log);
  EXPECT_EQ(rc6, 1);
  EXPECT_NE(out6.find("neither unix:PATH"), std::string::npos) << out6;
  // Tier flags: sizes, pairings and capacities are checked before anything is opened.
  std::string tier = test::TmpDir() + "/badflags-tier";
  std::filesystem::remove_all(tier);
  ASSERT_EQ(RunCommand({GOBLIN_CORE_BIN, "--prepare", tier}, log).first, 0);
  auto [rc7, out7] = RunCommand({GOBLIN_CORE_BIN, "--ssd-dir", tier, "--hdd-size", "1G"}, log);
  EXPECT_EQ(rc7, 1);
  EXPECT_NE(out7.find("--hdd-size needs --hdd-dir"), std::string::npos) << out7;
  auto [rc8, out8] = RunCommand({GOBLIN_CORE_BIN, "--listen-unix", log + ".sock", "--ssd-dir", tier,
                                 "--ssd-size", "10M", "--memory", "16M"},
                                log);
  EXPECT_EQ(rc8, 1);
  EXPECT_NE(out8.find("less than one"), std::string::npos) << out8;
  auto [rc9, out9] = RunCommand({GOBLIN_CORE_BIN, "--ssd-dir", tier, "--io-depth", "0"}, log);
  EXPECT_EQ(rc9, 2);
  EXPECT_NE(out9.find("--io-depth"), std::string::npos) << out9;
  std::filesystem::remove_all(tier);
}

TEST(CoreSystem, TiersMustBePreparedAndAreNeverShared) {
  std::string base = fmt::format("{}/tiers-{}", test::TmpDir(), getpid());
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base + "/foreign");
  { std::ofstream(base + "/foreign/keep.txt") << "not goblin's"; }
  std::string log = base + ".log";
  // A foreign directory is refused and left alone.
  auto [rc1, out1] = RunCommand({GOBLIN_CORE_BIN, "--prepare", base + "/foreign"}, log);
  EXPECT_EQ(rc1, 1);
  EXPECT_NE(out1.find("not empty"), std::string::npos) << out1;
  EXPECT_TRUE(std::filesystem::exists(base + "/foreign/keep.txt"));
  // An unprepared tier is refused at start with the command that fixes it.
  auto [rc2, out2] =
      RunCommand({GOBLIN_CORE_BIN, "--listen-unix", base + "/x.sock", "--memory", "8M", "--block",
                  "64K", "--ram-head", "64K", "--ssd-dir", base + "/ssd"},
                 log);
  EXPECT_EQ(rc2, 1);
  EXPECT_NE(out2.find("No such file"), std::string::npos) << out2;
  auto [rc3, out3] = RunCommand({GOBLIN_CORE_BIN, "--prepare", base + "/ssd"}, log);
  EXPECT_EQ(rc3, 0) << out3;
  EXPECT_NE(out3.find("is a Goblin disk tier"), std::string::npos) << out3;
  // Prepared: the core starts, and a second core on the same tier is refused.
  Core core("tier", {"--ssd-dir", base + "/ssd"});
  EXPECT_NE(core.proc.Output().find("disk tier"), std::string::npos) << core.proc.Output();
  auto [rc4, out4] =
      RunCommand({GOBLIN_CORE_BIN, "--listen-unix", base + "/y.sock", "--memory", "8M", "--block",
                  "64K", "--ram-head", "64K", "--ssd-dir", base + "/ssd"},
                 log);
  EXPECT_EQ(rc4, 1);
  EXPECT_NE(out4.find("in use by another goblin-core"), std::string::npos) << out4;
  core.proc.Signal(SIGTERM);
  EXPECT_EQ(core.proc.Wait(10s), 0);
  std::filesystem::remove_all(base);
}

TEST(CoreSystem, PoolFlagsAreCheckedUpFront) {
  std::string log = test::TmpDir() + "/poolflags.log";
  std::string sock = test::TmpDir() + "/poolflags.sock";
  auto [rc1, out1] = RunCommand(
      {GOBLIN_CORE_BIN, "--listen-unix", sock, "--block", "100K", "--ram-head", "64K"}, log);
  EXPECT_EQ(rc1, 1);
  EXPECT_NE(out1.find("power of two"), std::string::npos) << out1;
  auto [rc2, out2] = RunCommand({GOBLIN_CORE_BIN, "--listen-unix", sock, "--memory", "1M",
                                 "--block", "256K", "--ram-head", "512K"},
                                log);
  EXPECT_EQ(rc2, 1);
  EXPECT_NE(out2.find("--ram-head 512K is larger than --block 256K"), std::string::npos) << out2;
  auto [rc3, out3] =
      RunCommand({GOBLIN_CORE_BIN, "--listen-unix", sock, "--memory", "64G", "--block", "32M",
                  "--ram-head", "32M", "--hugepages", "on", "--cores", "1"},
                 log);
  EXPECT_EQ(rc3, 1);  // nobody reserved 32,768 HugeTLB pages on this machine
  EXPECT_NE(out3.find("--hugepages on needs 32768 free 2 MiB HugeTLB pages"), std::string::npos)
      << out3;
  auto [rc4, out4] = RunCommand({GOBLIN_CORE_BIN, "--hdd-dir", "/tmp"}, log);
  EXPECT_EQ(rc4, 1);
  EXPECT_NE(out4.find("--hdd-dir needs --ssd-dir"), std::string::npos) << out4;
  auto [rc5, out5] = RunCommand({GOBLIN_CORE_BIN, "--hugepages", "maybe"}, log);
  EXPECT_EQ(rc5, 2);
}

TEST(CoreSystem, SecondCoreOnTheSameSocketIsRefused) {
  Core core("twice");
  auto [rc, out] = RunCommand({GOBLIN_CORE_BIN, "--listen-unix", core.sock, "--memory", "8M",
                               "--block", "64K", "--ram-head", "64K"},
                              core.log + ".2");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("already listening"), std::string::npos) << out;
  auto c = client::Connection::Open(core.sock);
  ASSERT_TRUE(c);
  EXPECT_TRUE((*c)->Ping());  // the first one was not disturbed
}

}  // namespace
}  // namespace goblin
