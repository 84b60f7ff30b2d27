#include "goblin/ring/channel.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>
#include <vector>

namespace goblin::ring {
namespace {

using namespace std::chrono_literals;

// Both ends of one channel in this process: the client end attaches to dup()s of the
// server's fds, exactly as it would after SCM_RIGHTS.
std::pair<RingChannel, RingChannel> MakePair(uint32_t capacity, WakeMode mode) {
  auto server = RingChannel::Create(capacity, mode, mode);
  EXPECT_TRUE(server) << server.error().ToString();
  auto client = RingChannel::Attach(
      UniqueFd(fcntl(server->memfd(), F_DUPFD_CLOEXEC, 0)),
      UniqueFd(fcntl(server->server_doorbell_fd(), F_DUPFD_CLOEXEC, 0)),
      UniqueFd(fcntl(server->client_doorbell_fd(), F_DUPFD_CLOEXEC, 0)), capacity, mode, mode);
  EXPECT_TRUE(client) << client.error().ToString();
  return {std::move(*server), std::move(*client)};
}

TEST(Channel, BothDirections) {
  auto [server, client] = MakePair(4096, WakeMode::kSpinThenSleep);
  std::vector<uint8_t> a{1, 2, 3}, b{9};
  ASSERT_EQ(client.TrySend(7, a), SendStatus::kOk);
  ASSERT_EQ(server.TrySend(8, b), SendStatus::kOk);
  int n = 0;
  server.Poll([&](int32_t t, std::span<const uint8_t> m) {
    EXPECT_EQ(t, 7);
    EXPECT_EQ(std::vector<uint8_t>(m.begin(), m.end()), a);
    ++n;
  });
  client.Poll([&](int32_t t, std::span<const uint8_t> m) {
    EXPECT_EQ(t, 8);
    EXPECT_EQ(std::vector<uint8_t>(m.begin(), m.end()), b);
    ++n;
  });
  EXPECT_EQ(n, 2);
}

// The seed's n/a cell: a 4,096-byte payload plus SBE and ring framing cannot fit a 4 KiB
// ring; it is rejected before anything is published.
TEST(Channel, OversizeMessageIsRejectedUpFront) {
  auto [server, client] = MakePair(4096, WakeMode::kSpinThenSleep);
  std::vector<uint8_t> msg(4096 + 8 + 16);
  EXPECT_EQ(client.TrySend(1, msg), SendStatus::kTooLarge);
  EXPECT_EQ(client.Reserve(5000), nullptr);
  EXPECT_FALSE(server.HasData());
  std::vector<uint8_t> fits(client.max_message());
  EXPECT_EQ(client.TrySend(1, fits), SendStatus::kOk);
  // A larger ring carries it.
  auto [s8, c8] = MakePair(8192, WakeMode::kSpinThenSleep);
  EXPECT_EQ(c8.TrySend(1, msg), SendStatus::kOk);
}

TEST(Channel, AttachRejectsMismatchedCapacity) {
  auto server = RingChannel::Create(4096, WakeMode::kSpinThenSleep, WakeMode::kSpinThenSleep);
  ASSERT_TRUE(server);
  auto bad = RingChannel::Attach(UniqueFd(fcntl(server->memfd(), F_DUPFD_CLOEXEC, 0)),
                                 UniqueFd(dup(server->server_doorbell_fd())),
                                 UniqueFd(dup(server->client_doorbell_fd())), 8192,
                                 WakeMode::kSpinThenSleep, WakeMode::kSpinThenSleep);
  EXPECT_FALSE(bad);
}

TEST(Channel, SleepingConsumerIsWokenByTheDoorbell) {
  auto [server, client] = MakePair(4096, WakeMode::kSpinThenSleep);
  std::thread producer([&c = client] {
    std::this_thread::sleep_for(50ms);
    std::vector<uint8_t> m{42};
    EXPECT_EQ(c.TrySend(1, m), SendStatus::kOk);
  });
  // Spin only 10 us, then sleep: only the doorbell can wake it before the timeout.
  bool woke = server.Wait(10us, 10s, false, -1);
  producer.join();
  EXPECT_TRUE(woke);
  EXPECT_TRUE(server.HasData());
}

// Two threads, spin-then-sleep on both sides (never two unbounded busy-pollers on two
// cores), random sizes, every payload checked and a running checksum compared.
TEST(Channel, TwoThreadStressWithChecksums) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr uint64_t kMessages = 1'000'000;  // the sanitizer builds run 10-30x slower
#else
  constexpr uint64_t kMessages = 10'000'000;
#endif
  auto [server, client] = MakePair(4096, WakeMode::kSpinThenSleep);
  auto fill = [](uint64_t seq, uint8_t* p, size_t len) {
    uint64_t x = seq * 0x9e3779b97f4a7c15ULL;
    for (size_t i = 0; i < len; ++i)
      p[i] = static_cast<uint8_t>(x >> ((i & 7) * 8)) ^ static_cast<uint8_t>(i);
  };
  auto length_of = [](uint64_t seq) { return static_cast<size_t>(8 + (seq * 7919) % 240); };
  uint64_t sent_sum = 0;
  std::thread producer([&, &c = client] {
    for (uint64_t seq = 0; seq < kMessages; ++seq) {
      size_t len = length_of(seq);
      uint8_t* p;
      while ((p = c.Reserve(static_cast<uint32_t>(len))) == nullptr) {
        c.Flush();
        c.Wait(20us, 10s, /*want_space=*/true, -1);
      }
      fill(seq, p, len);
      std::memcpy(p, &seq, 8);
      for (size_t i = 0; i < len; ++i) sent_sum += p[i];
      c.Complete(static_cast<uint32_t>(len), 1);
      if ((seq & 15) == 15) c.Flush();  // batch publishes
    }
    c.Flush();
  });
  uint64_t expected = 0, recv_sum = 0, bad = 0;
  std::vector<uint8_t> want(256);
  uint64_t deadline = 0;
  while (expected < kMessages) {
    auto r = server.Poll([&](int32_t, std::span<const uint8_t> m) {
      uint64_t seq;
      std::memcpy(&seq, m.data(), 8);
      size_t len = length_of(expected);
      fill(expected, want.data(), len);
      std::memcpy(want.data(), &expected, 8);
      if (seq != expected || m.size() != len || std::memcmp(m.data(), want.data(), len) != 0) ++bad;
      for (uint8_t b : m) recv_sum += b;
      ++expected;
    });
    ASSERT_FALSE(r.corrupt);
    if (r.records == 0) {
      ASSERT_TRUE(server.Wait(20us, 30s, false, -1) || server.HasData())
          << "producer stalled at " << expected << " (lost wake-up?)";
      (void)deadline;
    }
  }
  producer.join();
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(recv_sum, sent_sum);
  EXPECT_EQ(expected, kMessages);
}

}  // namespace
}  // namespace goblin::ring
