#include "goblin/store/journal.h"
#include "tests/support/scratch.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace goblin::store {
namespace {

namespace fs = std::filesystem;

struct Rec {
  uint64_t lsn;
  uint16_t type;
  std::string payload;
  bool operator==(const Rec&) const = default;
};

class JournalTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::ScratchDir("journal");
    path_ = (dir_ / "index.journal").string();
  }
  void TearDown() override {
    SetJournalCrashAfterBytesForTest(-1);
    fs::remove_all(dir_);
  }
  std::vector<Rec> ReplayAll(ReplayStats* stats = nullptr) {
    auto j = Journal::Open(path_);
    EXPECT_TRUE(j) << j.error().ToString();
    std::vector<Rec> out;
    auto s = j->Replay([&](uint64_t lsn, uint16_t type, std::span<const uint8_t> p) {
      out.push_back({lsn, type, std::string(p.begin(), p.end())});
    });
    EXPECT_TRUE(s);
    if (stats) *stats = *s;
    return out;
  }
  static std::string Payload(int i) {
    return std::string(static_cast<size_t>(i % 50), 'a' + i % 26) + std::to_string(i);
  }
  fs::path dir_;
  std::string path_;
};

TEST_F(JournalTest, AppendSyncReopenReplay) {
  std::vector<Rec> want;
  {
    auto j = Journal::Open(path_, 100);
    ASSERT_TRUE(j);
    ASSERT_TRUE(j->Replay([](auto, auto, auto) { FAIL() << "new journal has records"; }));
    for (int i = 0; i < 50; ++i) {
      std::string p = Payload(i);
      auto lsn = j->Append(static_cast<uint16_t>(i % 3),
                           {reinterpret_cast<const uint8_t*>(p.data()), p.size()});
      ASSERT_TRUE(lsn);
      want.push_back({*lsn, static_cast<uint16_t>(i % 3), p});
      if (i % 7 == 0) {
        ASSERT_TRUE(j->Sync());
      }
    }
    ASSERT_TRUE(j->Sync());
    EXPECT_EQ(j->next_lsn(), 150u);
  }
  ReplayStats st;
  auto got = ReplayAll(&st);
  EXPECT_EQ(got, want);
  EXPECT_EQ(want.front().lsn, 100u);
  EXPECT_EQ(st.next_lsn, 150u);
  EXPECT_EQ(st.discarded_bytes, 0u);
}

TEST_F(JournalTest, AppendingBeforeReplayIsRefused) {
  auto j = Journal::Open(path_);
  ASSERT_TRUE(j);
  uint8_t b = 1;
  EXPECT_FALSE(j->Append(1, {&b, 1}));
  std::vector<uint8_t> huge(kJournalMaxPayload + 1);
  ASSERT_TRUE(j->Replay([](auto, auto, auto) {}));
  EXPECT_FALSE(j->Append(1, huge));
}

// A crash at every byte of a sync: replay returns exactly the records that were written
// whole, never a partial one, and the journal keeps working afterwards.
TEST_F(JournalTest, CrashAtEveryByteLeavesAWholePrefix) {
  constexpr int kDurable = 3, kPending = 4;
  size_t pending_bytes = 0;
  std::vector<size_t> ends;  // cumulative pending size after each pending record
  {
    auto j = Journal::Open(path_);
    ASSERT_TRUE(j->Replay([](auto, auto, auto) {}));
    for (int i = 0; i < kDurable; ++i) {
      std::string p = Payload(i);
      ASSERT_TRUE(j->Append(1, {reinterpret_cast<const uint8_t*>(p.data()), p.size()}));
    }
    ASSERT_TRUE(j->Sync());
  }
  for (int i = 0; i < kPending; ++i) {
    pending_bytes += 24 + Payload(kDurable + i).size();
    ends.push_back(pending_bytes);
  }
  fs::copy_file(path_, path_ + ".base");
  for (size_t cut = 0; cut <= pending_bytes; ++cut) {
    fs::copy_file(path_ + ".base", path_, fs::copy_options::overwrite_existing);
    {
      auto j = Journal::Open(path_);
      ASSERT_TRUE(j->Replay([](auto, auto, auto) {}));
      for (int i = 0; i < kPending; ++i) {
        std::string p = Payload(kDurable + i);
        ASSERT_TRUE(j->Append(2, {reinterpret_cast<const uint8_t*>(p.data()), p.size()}));
      }
      SetJournalCrashAfterBytesForTest(static_cast<int64_t>(cut));
      EXPECT_FALSE(j->Sync());
      SetJournalCrashAfterBytesForTest(-1);
    }  // the "process" dies here
    size_t whole = 0;
    while (whole < ends.size() && ends[whole] <= cut) ++whole;
    ReplayStats st;
    auto got = ReplayAll(&st);
    ASSERT_EQ(got.size(), kDurable + whole) << "cut at " << cut;
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i].payload, Payload(static_cast<int>(i)));
    EXPECT_EQ(st.discarded_bytes, cut - (whole ? ends[whole - 1] : 0)) << cut;
    // New records follow the last good one and survive the next replay.
    {
      auto j = Journal::Open(path_);
      ASSERT_TRUE(j->Replay([](auto, auto, auto) {}));
      uint8_t b = 9;
      ASSERT_TRUE(j->Append(3, {&b, 1}));
      ASSERT_TRUE(j->Sync());
    }
    auto after = ReplayAll();
    ASSERT_EQ(after.size(), got.size() + 1);
    EXPECT_EQ(after.back().type, 3);
    EXPECT_EQ(after.back().lsn, got.size() + 1);
  }
}

TEST_F(JournalTest, DamagedRecordEndsTheReplayThere) {
  std::vector<uint64_t> offsets;
  {
    auto j = Journal::Open(path_);
    ASSERT_TRUE(j->Replay([](auto, auto, auto) {}));
    for (int i = 0; i < 10; ++i) {
      offsets.push_back(j->file_bytes());
      std::string p = Payload(i);
      ASSERT_TRUE(j->Append(1, {reinterpret_cast<const uint8_t*>(p.data()), p.size()}));
    }
    ASSERT_TRUE(j->Sync());
  }
  {
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<long>(offsets[6] + 24));  // first payload byte of record 7
    f.put('#');
  }
  ReplayStats st;
  auto got = ReplayAll(&st);
  EXPECT_EQ(got.size(), 6u);
  EXPECT_GT(st.discarded_bytes, 0u);
  EXPECT_EQ(fs::file_size(path_), offsets[6]);  // cut there
}

TEST_F(JournalTest, RestartAfterACheckpoint) {
  {
    auto j = Journal::Open(path_);
    ASSERT_TRUE(j->Replay([](auto, auto, auto) {}));
    uint8_t b = 1;
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(j->Append(1, {&b, 1}));
    ASSERT_TRUE(j->Restart(j->next_lsn()));  // state through LSN 5 is in a checkpoint
    EXPECT_EQ(j->next_lsn(), 6u);
    ASSERT_TRUE(j->Append(2, {&b, 1}));
    ASSERT_TRUE(j->Sync());
  }
  auto got = ReplayAll();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].lsn, 6u);
  // A crash during a restart leaves "<journal>.new" behind; the real journal is intact.
  std::ofstream(path_ + ".new") << "half-written";
  EXPECT_EQ(ReplayAll().size(), 1u);
}

TEST_F(JournalTest, AFailedSyncStopsTheJournal) {
  auto j = Journal::Open(path_);
  ASSERT_TRUE(j->Replay([](auto, auto, auto) {}));
  uint8_t b = 1;
  ASSERT_TRUE(j->Append(1, {&b, 1}));
  SetJournalCrashAfterBytesForTest(3);
  EXPECT_FALSE(j->Sync());
  SetJournalCrashAfterBytesForTest(-1);
  EXPECT_FALSE(j->Append(1, {&b, 1}));
  auto again = j->Sync();
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().message().find("restart"), std::string::npos);
}

TEST_F(JournalTest, NotAJournal) {
  std::ofstream(path_) << "this is some other file, not ours";
  auto j = Journal::Open(path_);
  ASSERT_FALSE(j);
  EXPECT_EQ(j.error().code(), StatusCode::kCorruption);
}

}  // namespace
}  // namespace goblin::store
