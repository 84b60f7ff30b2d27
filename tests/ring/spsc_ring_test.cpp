#include "goblin/ring/spsc_ring.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

namespace goblin::ring {
namespace {

// A ring in private memory (the layout is the same as in shared memory).
struct LocalRing {
  explicit LocalRing(uint32_t capacity) : data(capacity), capacity(capacity) {
    ctl = std::make_unique<RingControl>();
    InitRing(ctl.get(), capacity);
  }
  RingProducer Producer() { return RingProducer(ctl.get(), data.data(), capacity); }
  RingConsumer Consumer() { return RingConsumer(ctl.get(), data.data(), capacity); }
  std::unique_ptr<RingControl> ctl;
  std::vector<uint8_t> data;
  uint32_t capacity;
};

std::vector<uint8_t> Pattern(uint32_t seq, size_t len) {
  std::vector<uint8_t> v(len);
  for (size_t i = 0; i < len; ++i) v[i] = static_cast<uint8_t>(seq * 31 + i);
  return v;
}

TEST(SpscRing, ValidatesCapacity) {
  EXPECT_TRUE(ValidateCapacity(4096));
  EXPECT_TRUE(ValidateCapacity(1 << 20));
  EXPECT_FALSE(ValidateCapacity(2048));
  EXPECT_FALSE(ValidateCapacity(6000));
  EXPECT_FALSE(ValidateCapacity(0));
  EXPECT_FALSE(ValidateCapacity(1ull << 31));
}

TEST(SpscRing, WrapsAroundWithPaddingAndKeepsEveryRecordContiguous) {
  LocalRing r(4096);
  auto p = r.Producer();
  auto c = r.Consumer();
  std::mt19937 rng(1);
  uint32_t sent = 0, got = 0;
  // Many laps of the ring with sizes that do not divide it.
  for (int round = 0; round < 20000; ++round) {
    size_t len = rng() % 700;
    auto payload = Pattern(sent, len);
    ASSERT_TRUE(p.TryWrite(static_cast<int32_t>(sent), payload)) << round;
    p.Publish();
    ++sent;
    auto res = c.Poll([&](int32_t type, std::span<const uint8_t> m) {
      ASSERT_EQ(type, static_cast<int32_t>(got));
      auto want = Pattern(got, m.size());
      ASSERT_TRUE(std::equal(m.begin(), m.end(), want.begin()));
      ++got;
    });
    ASSERT_FALSE(res.corrupt);
  }
  EXPECT_EQ(got, sent);
  EXPECT_GT(r.ctl->tail.load(), 10u * 4096);  // it really went round
}

TEST(SpscRing, FullRingPushesBackThenAcceptsAgain) {
  LocalRing r(4096);
  auto p = r.Producer();
  auto c = r.Consumer();
  std::vector<uint8_t> payload(100, 7);
  int written = 0;
  while (p.TryWrite(1, payload)) ++written;
  p.Publish();
  EXPECT_EQ(written, 4096 / 112);  // 8-byte header + 100 rounded up to 112
  EXPECT_FALSE(p.TryWrite(1, payload));
  int read = 0;
  c.Poll([&](int32_t, std::span<const uint8_t>) { ++read; }, 3);
  EXPECT_EQ(read, 3);
  EXPECT_TRUE(p.TryWrite(1, payload));  // space came back
  p.Publish();
  c.Poll([&](int32_t, std::span<const uint8_t>) { ++read; });
  EXPECT_EQ(read, written + 1);
}

TEST(SpscRing, LargestRecordFillsTheWholeRing) {
  LocalRing r(4096);
  auto p = r.Producer();
  auto c = r.Consumer();
  EXPECT_EQ(p.max_payload(), 4088u);
  std::vector<uint8_t> small(10, 1), big(4088, 2);
  ASSERT_TRUE(p.TryWrite(1, small));
  p.Publish();
  EXPECT_FALSE(p.TryWrite(2, big));  // needs the whole ring: wait for the consumer
  p.Publish();                       // the padding written to the end must be seen
  c.Poll([](int32_t, std::span<const uint8_t>) {});
  ASSERT_TRUE(p.TryWrite(2, big));  // the record at offset 0
  p.Publish();
  size_t len = 0;
  c.Poll([&](int32_t t, std::span<const uint8_t> m) {
    EXPECT_EQ(t, 2);
    len = m.size();
  });
  EXPECT_EQ(len, 4088u);
}

// A poll that consumes nothing but a padding record still frees space and must say so:
// the channel wakes a waiting producer on `advanced`, not on `records` (once a lost wake-up).
TEST(SpscRing, PaddingOnlyPollReportsFreedSpace) {
  LocalRing r(4096);
  auto p = r.Producer();
  auto c = r.Consumer();
  std::vector<uint8_t> small(10, 1), big(4088, 2);
  ASSERT_TRUE(p.TryWrite(1, small));
  p.Publish();
  EXPECT_EQ(c.Poll([](int32_t, std::span<const uint8_t>) {}).records, 1u);
  EXPECT_FALSE(p.TryWrite(2, big));  // pads to the end, then finds no room
  p.Publish();
  PollResult pad_only = c.Poll([](int32_t, std::span<const uint8_t>) { FAIL(); });
  EXPECT_EQ(pad_only.records, 0u);
  EXPECT_TRUE(pad_only.advanced);
  EXPECT_FALSE(c.Poll([](int32_t, std::span<const uint8_t>) {}).advanced);
  ASSERT_TRUE(p.TryWrite(2, big));
}

TEST(SpscRing, ReserveCompleteWithShorterLength) {
  LocalRing r(4096);
  auto p = r.Producer();
  auto c = r.Consumer();
  uint8_t* w = p.Reserve(1000);
  ASSERT_NE(w, nullptr);
  std::memcpy(w, "hello", 5);
  p.Complete(5, 42);
  p.Publish();
  c.Poll([&](int32_t t, std::span<const uint8_t> m) {
    EXPECT_EQ(t, 42);
    EXPECT_EQ(std::string(m.begin(), m.end()), "hello");
  });
  EXPECT_EQ(r.ctl->head.load(), 16u);
}

TEST(SpscRing, CorruptSharedStateIsReportedNotFollowed) {
  {
    LocalRing r(4096);
    r.ctl->tail.store(1u << 20);  // more than the capacity
    auto c = r.Consumer();
    EXPECT_TRUE(c.Poll([](int32_t, std::span<const uint8_t>) { FAIL(); }).corrupt);
  }
  {
    LocalRing r(4096);
    auto p = r.Producer();
    ASSERT_TRUE(p.TryWrite(1, Pattern(0, 16)));
    p.Publish();
    int32_t huge = 1 << 30;
    std::memcpy(r.data.data(), &huge, 4);  // record length beyond the ring
    auto c = r.Consumer();
    EXPECT_TRUE(c.Poll([](int32_t, std::span<const uint8_t>) { FAIL(); }).corrupt);
  }
  {
    LocalRing r(4096);
    auto p = r.Producer();
    ASSERT_TRUE(p.TryWrite(1, Pattern(0, 16)));
    p.Publish();
    int32_t tiny = 3;
    std::memcpy(r.data.data(), &tiny, 4);  // shorter than a record header
    auto c = r.Consumer();
    EXPECT_TRUE(c.Poll([](int32_t, std::span<const uint8_t>) { FAIL(); }).corrupt);
  }
  {
    LocalRing r(4096);
    auto p = r.Producer();
    ASSERT_TRUE(p.TryWrite(1, Pattern(0, 16)));
    p.Publish();
    int32_t longer = 200;  // longer than what was published
    std::memcpy(r.data.data(), &longer, 4);
    auto c = r.Consumer();
    EXPECT_TRUE(c.Poll([](int32_t, std::span<const uint8_t>) { FAIL(); }).corrupt);
  }
}

TEST(SpscRing, WaitingFlagsTellThePeerToRing) {
  LocalRing r(4096);
  auto p = r.Producer();
  auto c = r.Consumer();
  ASSERT_TRUE(p.TryWrite(1, Pattern(0, 8)));
  EXPECT_FALSE(p.Publish());  // consumer awake: no doorbell needed
  c.SetWaiting(true);
  ASSERT_TRUE(p.TryWrite(1, Pattern(0, 8)));
  EXPECT_TRUE(p.Publish());
  // The doorbell rung, the announcement is taken: a burst rings once per sleep.
  ASSERT_TRUE(p.TryWrite(1, Pattern(0, 8)));
  EXPECT_FALSE(p.Publish());
  c.SetWaiting(true);  // (it read everything and is going to sleep again)
  ASSERT_TRUE(p.TryWrite(1, Pattern(0, 8)));
  EXPECT_TRUE(p.Publish());
  c.SetWaiting(false);
  EXPECT_FALSE(c.ProducerWaiting());
  p.SetWaiting(true);
  EXPECT_TRUE(c.ProducerWaiting());
}

}  // namespace
}  // namespace goblin::ring
