#include "goblin/store/index.h"
#include "tests/support/scratch.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

namespace goblin::store {
namespace {

namespace fs = std::filesystem;

class IndexTest : public testing::Test {
 protected:
  void SetUp() override { dir_ = test::ScratchDir("index").string(); }
  void TearDown() override {
    SetJournalCrashAfterBytesForTest(-1);
    fs::remove_all(dir_);
  }
  static ObjectRecord Obj(const std::string& key, uint64_t size, uint32_t file = 0) {
    ObjectRecord r;
    r.key = key;
    r.size = size;
    r.created_unix_ns = 1000;
    r.metadata = "content-type: text/plain\netag: \"" + key + "\"";
    uint64_t half = size / 2;
    r.extents = {{0, 0, file, 0, half, 0x1111}, {1, 1, file + 1, 4096, size - half, 0x2222}};
    return r;
  }
  static std::map<std::string, ObjectRecord> Snapshot(const Index& idx) {
    std::map<std::string, ObjectRecord> m;
    idx.ForEach([&](const ObjectRecord& r) { m[r.key] = r; });
    return m;
  }
  std::unique_ptr<Index> OpenIndex() {
    auto i = Index::Open(dir_);
    EXPECT_TRUE(i) << i.error().ToString();
    return i ? std::move(*i) : nullptr;
  }
  std::string dir_;
};

TEST_F(IndexTest, CommitFindReplaceDelete) {
  auto idx = OpenIndex();
  std::vector<Extent> released;
  auto g1 = idx->Commit(Obj("/a", 100), &released);
  ASSERT_TRUE(g1);
  EXPECT_TRUE(released.empty());
  auto g2 = idx->Commit(Obj("/b", 200), &released);
  ASSERT_TRUE(g2);
  EXPECT_GT(*g2, *g1);
  const ObjectRecord* a = idx->Find("/a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->size, 100u);
  EXPECT_EQ(a->generation, *g1);
  EXPECT_EQ(idx->Find("/c"), nullptr);
  // A HashedKey's digest is the index's own: the same records, no second hash.
  EXPECT_EQ(idx->Find(HashedKey("/a")), a);
  EXPECT_EQ(idx->Find(HashedKey("/c")), nullptr);
  const HashedKey h("/b");
  EXPECT_EQ(KeyDigest::Of("/b"), (KeyDigest{h.digest.hi, h.digest.lo}));
  // Replacing hands back the old extents.
  ASSERT_TRUE(idx->Commit(Obj("/a", 300, 7), &released));
  ASSERT_EQ(released.size(), 2u);
  EXPECT_EQ(released[0].file, 0u);
  EXPECT_EQ(idx->Find("/a")->size, 300u);
  EXPECT_EQ(idx->size(), 2u);
  released.clear();
  EXPECT_TRUE(idx->Delete("/b", &released).value());
  EXPECT_EQ(released.size(), 2u);
  EXPECT_FALSE(idx->Delete("/b", &released).value());
  EXPECT_EQ(idx->size(), 1u);
}

TEST_F(IndexTest, ReopenReplaysTheJournal) {
  std::map<std::string, ObjectRecord> want;
  {
    auto idx = OpenIndex();
    for (int i = 0; i < 100; ++i)
      ASSERT_TRUE(idx->Commit(Obj("/k" + std::to_string(i), 1000 + i), nullptr));
    for (int i = 0; i < 100; i += 3) ASSERT_TRUE(idx->Delete("/k" + std::to_string(i), nullptr));
    ASSERT_TRUE(idx->Commit(Obj("/k1", 5), nullptr));
    want = Snapshot(*idx);
  }
  auto idx = OpenIndex();
  EXPECT_EQ(Snapshot(*idx), want);
  EXPECT_EQ(idx->recovery().journal_records, 100u + 34u + 1u);
  // Generations keep increasing after a restart.
  auto g = idx->Commit(Obj("/new", 1), nullptr);
  ASSERT_TRUE(g);
  EXPECT_GT(*g, want.at("/k1").generation);
}

TEST_F(IndexTest, CheckpointThenJournal) {
  std::map<std::string, ObjectRecord> want;
  {
    auto idx = OpenIndex();
    for (int i = 0; i < 50; ++i)
      ASSERT_TRUE(idx->Commit(Obj("/c" + std::to_string(i), 10), nullptr));
    uint64_t before = idx->journal_bytes();
    ASSERT_TRUE(idx->Checkpoint());
    EXPECT_LT(idx->journal_bytes(), before);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(idx->Delete("/c" + std::to_string(i), nullptr));
    ASSERT_TRUE(idx->Commit(Obj("/after", 10), nullptr));
    want = Snapshot(*idx);
  }
  auto idx = OpenIndex();
  EXPECT_EQ(Snapshot(*idx), want);
  EXPECT_EQ(idx->recovery().from_checkpoint, 50u);
  EXPECT_EQ(idx->recovery().journal_records, 6u);
}

// A crash after the checkpoint was renamed into place but before the journal restarted:
// the old journal's records are all in the checkpoint and must not apply twice.
TEST_F(IndexTest, CrashBetweenCheckpointAndJournalRestart) {
  std::map<std::string, ObjectRecord> want;
  {
    auto idx = OpenIndex();
    for (int i = 0; i < 20; ++i)
      ASSERT_TRUE(idx->Commit(Obj("/x" + std::to_string(i), 10), nullptr));
    ASSERT_TRUE(idx->Delete("/x3", nullptr));
    fs::copy_file(dir_ + "/index.journal", dir_ + "/journal.before");
    ASSERT_TRUE(idx->Checkpoint());
    want = Snapshot(*idx);
  }
  fs::copy_file(dir_ + "/journal.before", dir_ + "/index.journal",
                fs::copy_options::overwrite_existing);
  auto idx = OpenIndex();
  EXPECT_EQ(Snapshot(*idx), want);
  EXPECT_EQ(idx->recovery().journal_records, 0u);
  ASSERT_TRUE(idx->Commit(Obj("/x3", 1), nullptr));  // and it keeps working
  auto again = OpenIndex();
  EXPECT_EQ(again->size(), 20u);
}

// A crash at every byte of a commit's journal write: after a restart the object is either
// absent (the record was cut) or present whole; what was committed before is untouched.
TEST_F(IndexTest, CrashDuringCommitNeverShowsAPartialObject) {
  {
    auto idx = OpenIndex();
    ASSERT_TRUE(idx->Commit(Obj("/kept", 10), nullptr));
  }
  size_t record_bytes = 24 + EncodeRecord(Obj("/torn", 1234)).size();
  fs::copy_file(dir_ + "/index.journal", dir_ + "/base");
  std::vector<size_t> cuts;
  for (size_t c = 0; c < record_bytes; c += 7) cuts.push_back(c);
  cuts.push_back(record_bytes - 1);
  cuts.push_back(record_bytes);  // written whole, "crashed" before the acknowledgement
  for (size_t cut : cuts) {
    fs::copy_file(dir_ + "/base", dir_ + "/index.journal", fs::copy_options::overwrite_existing);
    {
      auto idx = OpenIndex();
      SetJournalCrashAfterBytesForTest(static_cast<int64_t>(cut));
      EXPECT_FALSE(idx->Commit(Obj("/torn", 1234), nullptr));
      SetJournalCrashAfterBytesForTest(-1);
    }
    auto idx = OpenIndex();
    ASSERT_NE(idx->Find("/kept"), nullptr) << cut;
    const ObjectRecord* t = idx->Find("/torn");
    if (cut < record_bytes) {
      EXPECT_EQ(t, nullptr) << cut;
    } else {
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(t->size, 1234u);
      EXPECT_EQ(t->extents.size(), 2u);
    }
  }
}

TEST_F(IndexTest, DamagedCheckpointRefusesToStart) {
  {
    auto idx = OpenIndex();
    ASSERT_TRUE(idx->Commit(Obj("/a", 10), nullptr));
    ASSERT_TRUE(idx->Checkpoint());
  }
  {
    std::fstream f(dir_ + "/index.checkpoint", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  auto idx = Index::Open(dir_);
  ASSERT_FALSE(idx);
  EXPECT_EQ(idx.error().code(), StatusCode::kCorruption);
  EXPECT_NE(idx.error().message().find("checksum"), std::string::npos);
}

TEST_F(IndexTest, JournalThatSkipsRecordsIsCorruption) {
  {
    auto idx = OpenIndex();
    ASSERT_TRUE(idx->Commit(Obj("/a", 10), nullptr));
    ASSERT_TRUE(idx->Checkpoint());
  }
  fs::remove(dir_ + "/index.journal");
  {
    auto j = Journal::Open(dir_ + "/index.journal", 50);  // as if records 2..49 were lost
    ASSERT_TRUE(j);
  }
  auto idx = Index::Open(dir_);
  ASSERT_FALSE(idx);
  EXPECT_NE(idx.error().message().find("records are missing"), std::string::npos);
}

// ---- group commit and background checkpoints (a worker thread) ----

// Polls until everything appended is durable (bounded).
void PollUntilDurable(Index& idx) {
  for (int i = 0; i < 5000 && idx.durable_lsn() < idx.last_lsn(); ++i) {
    ASSERT_TRUE(idx.Poll());
    usleep(200);
  }
  ASSERT_EQ(idx.durable_lsn(), idx.last_lsn());
}

TEST_F(IndexTest, GroupCommitMakesManyRecordsDurableWithOneSync) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx->StartWorker());
  const uint64_t before = idx->durable_lsn();
  uint64_t lsn = 0;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(idx->Commit(Obj("/g" + std::to_string(i), 100 + i), nullptr, &lsn));
    EXPECT_NE(idx->Find("/g" + std::to_string(i)), nullptr);  // visible at once
  }
  ASSERT_TRUE(idx->Delete("/g0", nullptr, &lsn));
  EXPECT_EQ(lsn, idx->last_lsn());
  EXPECT_EQ(idx->durable_lsn(), before);  // nothing synced on this thread
  ASSERT_NO_FATAL_FAILURE(PollUntilDurable(*idx));
  // 101 records, one job (nothing was in flight when the first Poll came).
  EXPECT_EQ(idx->stats().group_syncs, 1u);
  EXPECT_EQ(idx->stats().synced_records, 101u);
  auto snap = Snapshot(*idx);
  idx.reset();
  auto again = OpenIndex();
  EXPECT_EQ(Snapshot(*again), snap);
}

TEST_F(IndexTest, ABackgroundCheckpointKeepsTheJournalBounded) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx->StartWorker());
  idx->set_checkpoint_policy({.journal_bytes = 64 << 10, .journal_records = 200});
  // 20 keys, rewritten and deleted again and again: 5,000 records over a bounded map.
  uint64_t max_journal = 0;
  for (int i = 0; i < 5000; ++i) {
    std::string key = "/k" + std::to_string(i % 20);
    if (i % 7 == 6) {
      ASSERT_TRUE(idx->Delete(key, nullptr));
    } else {
      ASSERT_TRUE(idx->Commit(Obj(key, 1000 + i), nullptr));
    }
    ASSERT_TRUE(idx->Poll());
    max_journal = std::max(max_journal, idx->journal_bytes());
    // (records pile up only while a checkpoint is being written: wait for each here, so
    // the bound below does not depend on this disk's speed)
    for (int w = 0; w < 5000 && idx->checkpoint_running(); ++w) {
      ASSERT_TRUE(idx->Poll());
      usleep(100);
    }
  }
  ASSERT_NO_FATAL_FAILURE(PollUntilDurable(*idx));
  EXPECT_GE(idx->stats().checkpoints, 5000u / 201);
  EXPECT_EQ(idx->stats().checkpoint_failures, 0u);
  // 5,000 records would be ~400 KiB of journal; it never held more than ~200 of them.
  EXPECT_LT(max_journal, 32u << 10);
  EXPECT_LT(fs::file_size(dir_ + "/index.journal"), 32u << 10);
  auto snap = Snapshot(*idx);
  EXPECT_LE(snap.size(), 20u);
  idx.reset();
  auto again = OpenIndex();
  EXPECT_EQ(Snapshot(*again), snap);
  EXPECT_LT(again->recovery().journal_records, 2000u);  // (most came from the checkpoint)
}

// A background checkpoint is encoded a slice per Poll while the map changes between the
// slices (replaced, deleted, touched and new keys, the scan table growing): the file is
// fuzzy, and the index reopened from it and the journal after its LSN is exactly the map.
TEST_F(IndexTest, ACheckpointEncodedInSlicesWhileTheMapChangesReopensExact) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx->StartWorker());
  idx->set_checkpoint_policy({.journal_bytes = 1ull << 30, .journal_records = 12000});
  for (int i = 0; i < 11999; ++i) {
    ASSERT_TRUE(idx->Commit(Obj("/k" + std::to_string(i), 100 + i), nullptr));
  }
  ASSERT_FALSE(idx->checkpoint_running());
  ASSERT_TRUE(idx->Commit(Obj("/k11999", 7), nullptr));
  ASSERT_TRUE(idx->Poll());
  ASSERT_TRUE(idx->checkpoint_encoding());
  std::mt19937 rng(11);
  int slices = 0, next_new = 0;
  while (idx->checkpoint_encoding()) {
    for (int j = 0; j < 600; ++j) {
      const std::string key = "/k" + std::to_string(rng() % 12000);
      switch (rng() % 4) {
        case 0:
          ASSERT_TRUE(idx->Commit(Obj(key, 5000 + j), nullptr));
          break;
        case 1:
          ASSERT_TRUE(idx->Delete(key, nullptr));
          break;
        case 2:
          ASSERT_TRUE(idx->Touch(key, 1'000'000'000ULL * (1 + rng() % 1000)));
          break;
        default:
          ASSERT_TRUE(idx->Commit(Obj("/new" + std::to_string(next_new++), 9), nullptr));
      }
    }
    ASSERT_TRUE(idx->Poll());
    ++slices;
  }
  EXPECT_GE(slices, 2);  // (12,000 records in slices of 4,096: the first one began it)
  for (int w = 0; w < 5000 && idx->checkpoint_running(); ++w) {
    ASSERT_TRUE(idx->Poll());
    usleep(100);
  }
  ASSERT_FALSE(idx->checkpoint_running());
  EXPECT_EQ(idx->stats().checkpoints, 1u);
  EXPECT_GT(idx->stats().last_checkpoint_slice_ns, 0u);
  ASSERT_NO_FATAL_FAILURE(PollUntilDurable(*idx));
  auto snap = Snapshot(*idx);
  idx.reset();
  auto again = OpenIndex();
  EXPECT_GT(again->recovery().from_checkpoint, 10000u);
  EXPECT_GT(again->recovery().journal_records, 0u);
  EXPECT_TRUE(Snapshot(*again) == snap);
}

TEST_F(IndexTest, ACrashBetweenTheBackgroundCheckpointAndTheJournalRestartLosesNothing) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx->StartWorker());
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(idx->Commit(Obj("/c" + std::to_string(i), 10), nullptr));
  ASSERT_NO_FATAL_FAILURE(PollUntilDurable(*idx));
  idx->set_checkpoint_policy({.journal_bytes = 1, .journal_records = 1});
  ASSERT_TRUE(idx->Poll());  // the checkpoint file job starts
  ASSERT_TRUE(idx->checkpoint_running());
  // More changes while it is written: they go to the old journal (and are kept aside).
  ASSERT_TRUE(idx->Commit(Obj("/after", 20), nullptr));
  ASSERT_TRUE(idx->Delete("/c3", nullptr));
  // Durable in the old journal; the restart has not happened when the process "dies".
  for (int i = 0; i < 5000 && idx->durable_lsn() < idx->last_lsn(); ++i) {
    ASSERT_TRUE(idx->Poll());
    usleep(200);
    if (idx->checkpoint_running() && !fs::exists(dir_ + "/index.checkpoint")) continue;
  }
  auto snap = Snapshot(*idx);
  ASSERT_TRUE(snap.count("/after"));
  ASSERT_FALSE(snap.count("/c3"));
  // A copy of the directory as a crash would leave it: whatever the checkpoint/journal pair
  // is right now (checkpoint written or not, journal restarted or not), it recovers `snap`.
  std::string copy = dir_ + "-crash";
  // (the background job may rename a file while the copy walks the directory: copy again)
  std::error_code copied;
  for (int attempt = 0; attempt < 50; ++attempt) {
    fs::remove_all(copy);
    copied.clear();
    fs::copy(dir_, copy, copied);
    if (!copied) break;
    usleep(1000);
  }
  ASSERT_FALSE(copied) << copied.message();
  idx.reset();
  auto crashed = Index::Open(copy);
  ASSERT_TRUE(crashed) << crashed.error().ToString();
  EXPECT_EQ(Snapshot(**crashed), snap);
  fs::remove_all(copy);
  auto again = OpenIndex();
  EXPECT_EQ(Snapshot(*again), snap);
}

TEST_F(IndexTest, AFailedGroupSyncStopsEverything) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx->StartWorker());
  ASSERT_TRUE(idx->Commit(Obj("/ok", 10), nullptr));
  ASSERT_NO_FATAL_FAILURE(PollUntilDurable(*idx));
  SetJournalCrashAfterBytesForTest(5);
  ASSERT_TRUE(idx->Commit(Obj("/lost", 10), nullptr));
  bool failed = false;
  for (int i = 0; i < 5000 && !failed; ++i) {
    failed = !idx->Poll();
    usleep(200);
  }
  EXPECT_TRUE(failed);
  SetJournalCrashAfterBytesForTest(-1);
  EXPECT_FALSE(idx->Commit(Obj("/after", 10), nullptr));  // fail-stop
  EXPECT_FALSE(idx->SyncNow());
  idx.reset();
  auto again = OpenIndex();
  EXPECT_NE(again->Find("/ok"), nullptr);
  EXPECT_EQ(again->Find("/lost"), nullptr);  // never acknowledged: may be lost, and is
}

TEST(IndexRecord, RoundTripAndHostileInput) {
  ObjectRecord r;
  r.key = "/path?q=1";
  r.size = 30;
  r.metadata = std::string("\0binary\xff", 8);
  r.extents = {{0, 0, 1, 2, 10, 3}, {1, 7, 4, 5, 20, 6}};
  auto bytes = EncodeRecord(r);
  auto back = DecodeRecord(bytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, r);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_FALSE(DecodeRecord({bytes.data(), cut})) << cut;
  }
  auto extra = bytes;
  extra.push_back(0);
  EXPECT_FALSE(DecodeRecord(extra));
  r.size = 31;  // extents do not add up
  EXPECT_FALSE(DecodeRecord(EncodeRecord(r)));
  // Durable marks: one trailing byte when there are any; read marks are not recorded.
  r.size = 30;
  r.marks = kMarkStale;
  r.read_marks = kMarkTokenSent | kMarkFetched;
  r.access_unix_s = 12345;
  auto stale = EncodeRecord(r);
  EXPECT_EQ(stale.size(), bytes.size() + 1);
  back = DecodeRecord(stale);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->marks, kMarkStale);
  EXPECT_EQ(back->read_marks, 0);
  EXPECT_EQ(*back, r);  // (equal as stored)
  stale.back() = 0x80;  // a mark this binary does not know
  EXPECT_FALSE(DecodeRecord(stale));
}

TEST_F(IndexTest, TagsAreIndexedReplacedDeletedAndReplayed) {
  auto idx = OpenIndex();
  auto tagged = [](const std::string& key, const std::string& tags) {
    ObjectRecord r = Obj(key, 100);
    r.tags = tags;
    return r;
  };
  auto keys = [&](const char* tag) {  // (as a purge resolves them, sorted)
    std::vector<std::string> v;
    idx->KeysWithTag(idx->TagMembers(tag), tag, &v);
    std::sort(v.begin(), v.end());
    return v;
  };
  ASSERT_TRUE(idx->Commit(tagged("/a", "red blue"), nullptr));
  ASSERT_TRUE(idx->Commit(tagged("/b", "red"), nullptr));
  ASSERT_TRUE(idx->Commit(tagged("/c", ""), nullptr));
  EXPECT_EQ(keys("red"), (std::vector<std::string>{"/a", "/b"}));
  EXPECT_EQ(keys("blue"), std::vector<std::string>{"/a"});
  EXPECT_TRUE(keys("green").empty());
  // A new version replaces the old one's tags; a delete drops them.
  ASSERT_TRUE(idx->Commit(tagged("/a", "green"), nullptr));
  EXPECT_EQ(keys("red"), std::vector<std::string>{"/b"});
  EXPECT_TRUE(keys("blue").empty());
  EXPECT_EQ(keys("green"), std::vector<std::string>{"/a"});
  ASSERT_TRUE(idx->Delete("/b", nullptr));
  EXPECT_TRUE(keys("red").empty());
  EXPECT_EQ(idx->tags(), 1u);
  // A refresh and an invalidation keep them; the journal and a checkpoint bring them back.
  ASSERT_TRUE(idx->Invalidate("/a", false, 0));
  ASSERT_TRUE(idx->Refresh("/a", "etag: \"2\"", 2000, 0));
  EXPECT_EQ(idx->Find("/a")->tags, "green");
  idx.reset();
  idx = OpenIndex();
  EXPECT_EQ(keys("green"), std::vector<std::string>{"/a"});
  EXPECT_EQ(idx->Find("/a")->marks, 0);  // (the refresh cleared the stale mark)
  ASSERT_TRUE(idx->Checkpoint());
  idx.reset();
  idx = OpenIndex();
  EXPECT_EQ(keys("green"), std::vector<std::string>{"/a"});
  EXPECT_EQ(idx->Find("/c")->tags, "");
  // The encoding: tags after the marks byte (0 when there are none), a damaged list refused.
  ObjectRecord r = tagged("/t", "x y");
  auto bytes = EncodeRecord(r);
  auto back = DecodeRecord(bytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, r);
  r.marks = kMarkStale;
  EXPECT_EQ(*DecodeRecord(EncodeRecord(r)), r);
  bytes.pop_back();
  EXPECT_FALSE(DecodeRecord(bytes));
}

// A tag's members past the linear-scan size (a position map) and back under it: every
// insert, replace and delete keeps exactly the records carrying it.
TEST_F(IndexTest, ATagOfManyMembersStaysExactThroughGrowthAndShrinking) {
  auto idx = OpenIndex();
  std::set<std::string> want;
  auto check = [&](int step) {
    std::vector<std::string> v;
    idx->KeysWithTag(idx->TagMembers("many"), "many", &v);
    EXPECT_EQ(idx->TagMembers("many").size(), want.size()) << step;
    EXPECT_EQ(std::set<std::string>(v.begin(), v.end()), want) << step;
  };
  std::mt19937 rng(7);
  for (int step = 0; step < 600; ++step) {
    const std::string key = "/m" + std::to_string(rng() % 60);
    const int op = static_cast<int>(rng() % 3);
    if (op == 2) {
      ASSERT_TRUE(idx->Delete(key, nullptr));
      want.erase(key);
    } else {
      ObjectRecord r = Obj(key, 10);
      r.tags = op == 0 ? "many" : "other";  // (a replace may drop the tag)
      ASSERT_TRUE(idx->Commit(r, nullptr));
      if (op == 0) {
        want.insert(key);
      } else {
        want.erase(key);
      }
    }
    if (step % 50 == 0) check(step);
  }
  check(600);
  const std::set<std::string> left = want;
  for (const std::string& k : left) {  // (down to none)
    ASSERT_TRUE(idx->Delete(k, nullptr));
    want.erase(k);
    check(-1);
  }
  EXPECT_TRUE(idx->TagMembers("many").empty());
}

// Records marked kMarkVariant are grouped by their key's part before the first NUL (an
// HTTP object's variants); unmarked ones, and marked keys without a NUL, are not.
TEST_F(IndexTest, VariantsAreGroupedByTheirObjectAndReplayed) {
  using namespace std::string_literals;
  auto idx = OpenIndex();
  auto variant = [](const std::string& key) {
    ObjectRecord r = Obj(key, 100);
    r.marks = kMarkVariant;
    return r;
  };
  auto keys = [&](const std::string& object) {
    std::vector<std::string> v;
    for (const ObjectRecord* r : idx->Variants(object)) v.push_back(r->key);
    std::sort(v.begin(), v.end());
    return v;
  };
  ASSERT_TRUE(idx->Commit(variant("h/a\0#ae=gzip"s), nullptr));
  ASSERT_TRUE(idx->Commit(variant("h/a\0#ae=br"s), nullptr));
  ASSERT_TRUE(idx->Commit(variant("h/ab\0#ae=br"s), nullptr));
  ASSERT_TRUE(idx->Commit(Obj("h/a\0#ae="s, 100), nullptr));  // (not marked)
  ASSERT_TRUE(idx->Commit(variant("h/a"), nullptr));          // (marked, no NUL)
  EXPECT_EQ(keys("h/a"), (std::vector<std::string>{"h/a\0#ae=br"s, "h/a\0#ae=gzip"s}));
  EXPECT_EQ(keys("h/ab"), (std::vector<std::string>{"h/ab\0#ae=br"s}));
  EXPECT_TRUE(keys("h/").empty());
  EXPECT_EQ(idx->variant_objects(), 2u);
  // A new version of one keeps it in the group, an invalidation too; a delete drops it.
  ASSERT_TRUE(idx->Commit(variant("h/a\0#ae=br"s), nullptr));
  ASSERT_TRUE(idx->Invalidate("h/a\0#ae=br"s, false, 0));
  ASSERT_TRUE(idx->Delete("h/ab\0#ae=br"s, nullptr));
  EXPECT_EQ(keys("h/a").size(), 2u);
  EXPECT_EQ(idx->variant_objects(), 1u);
  // The mark is durable: the journal and a checkpoint group them again.
  idx.reset();
  idx = OpenIndex();
  EXPECT_EQ(keys("h/a"), (std::vector<std::string>{"h/a\0#ae=br"s, "h/a\0#ae=gzip"s}));
  EXPECT_EQ(idx->Find("h/a\0#ae=br"s)->marks, kMarkVariant | kMarkStale);
  ASSERT_TRUE(idx->Checkpoint());
  idx.reset();
  idx = OpenIndex();
  EXPECT_EQ(keys("h/a").size(), 2u);
  EXPECT_EQ(idx->variant_objects(), 1u);
}

TEST_F(IndexTest, InvalidateGivesANewGenerationInPlaceAndIsReplayed) {
  auto idx = OpenIndex();
  auto g1 = idx->Commit(Obj("/s", 100), nullptr);
  ASSERT_TRUE(g1);
  const ObjectRecord* r = idx->Find("/s");
  const Extent* extents = r->extents.data();
  r->read_marks = kMarkTokenSent | kMarkFetched;
  auto g2 = idx->Invalidate("/s", true, 5000);
  ASSERT_TRUE(g2);
  EXPECT_GT(*g2, *g1);
  r = idx->Find("/s");
  EXPECT_EQ(r->extents.data(), extents);  // (loans point into it: not moved)
  EXPECT_EQ(r->generation, *g2);
  EXPECT_EQ(r->marks, kMarkStale);
  EXPECT_EQ(r->read_marks, kMarkFetched);  // (the win is cleared)
  EXPECT_EQ(r->expires_unix_ns, 5000u);
  EXPECT_EQ(idx->expiring(), 1u);
  EXPECT_EQ(idx->Invalidate("/absent", false, 0).value(), 0u);
  const ObjectRecord want = *r;
  idx.reset();
  idx = OpenIndex();  // from the journal
  ASSERT_NE(idx->Find("/s"), nullptr);
  EXPECT_EQ(*idx->Find("/s"), want);
  ASSERT_TRUE(idx->Checkpoint());
  idx.reset();
  idx = OpenIndex();  // from the checkpoint
  ASSERT_NE(idx->Find("/s"), nullptr);
  EXPECT_EQ(*idx->Find("/s"), want);
  auto g3 = idx->Commit(Obj("/t", 10), nullptr);  // generations go on after it
  ASSERT_TRUE(g3);
  EXPECT_GT(*g3, *g2);
}

}  // namespace
}  // namespace goblin::store
