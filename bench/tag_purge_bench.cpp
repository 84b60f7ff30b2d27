// tag_purge_bench: what a purge by tag costs a core shard's loop. Stores --objects small
// objects (--size bytes each) carrying one tag (and a tag of their own) in a Store as
// goblin-core configures one (group commit, a tier directory under --dir), then purges the
// tag exactly as CoreService does: a snapshot of the tag's members at once
// (Index::TagMembers), then their keys and deletes (or marks stale, --soft) in slices of
// --slice per loop round. Prints the time to collect the
// keys and the distribution of slice times: the longest a shard's loop is held at once,
// which is what a request arriving during the purge can wait for.
//   tag_purge_bench --dir /var/tmp/tp --objects 100000 [--size 1024] [--slice 1000] [--soft]
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "goblin/common/cli.h"
#include "goblin/common/clock.h"
#include "goblin/store/store.h"
#include "goblin/store/tier_dir.h"

namespace {

using namespace goblin;
namespace fs = std::filesystem;

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

int Run(const std::string& dir, uint64_t objects, uint64_t size, size_t slice, bool soft) {
  fs::remove_all(dir);
  if (auto p = store::PrepareTier(dir); !p) {
    fmt::print(stderr, "tag_purge_bench: {}\n", p.error());
    return 1;
  }
  store::StoreOptions o;
  o.pool.memory = 256ull << 20;
  o.pool.block = 64 << 10;
  o.pool.hugepages = store::HugePages::kOff;
  o.pool.lock = false;
  o.ram_head = 64 << 10;
  o.tier_dirs = {{dir}};
  o.tier.extent_bytes = 1 << 20;
  o.tier.file_bytes = 1ull << 30;
  o.group_commit = true;
  auto opened = store::Store::Open(o);
  if (!opened) {
    fmt::print(stderr, "tag_purge_bench: {}\n", opened.error());
    return 1;
  }
  auto& s = **opened;
  std::vector<uint8_t> data(size, 0x5a);
  uint64_t t0 = MonotonicNanos();
  for (uint64_t i = 0; i < objects; ++i) {
    const std::string key = fmt::format("cdn.example/product/{}", i);
    auto b = s.BeginFill(key, 0, "content-type: text/html\r\n");
    if (!b || b->first != store::Store::FillStart::kGranted) {
      fmt::print(stderr, "tag_purge_bench: fill {} refused\n", key);
      return 1;
    }
    (void)s.SetFillTags(b->second, fmt::format("catalog p{}", i));
    if (auto a = s.Append(b->second, data); !a) {
      fmt::print(stderr, "tag_purge_bench: {}\n", a.error());
      return 1;
    }
    if (auto c = s.Commit(b->second, size); !c) {
      fmt::print(stderr, "tag_purge_bench: {}\n", c.error());
      return 1;
    }
    if (i % 1000 == 999) (void)s.Poll();
  }
  (void)s.SyncNow();
  const double fill_s = static_cast<double>(MonotonicNanos() - t0) / 1e9;
  // The purge, as CoreService::PumpTagPurges does it.
  t0 = MonotonicNanos();
  const std::vector<store::KeyDigest> members = s.TagMembers("catalog");
  const double collect_ms = static_cast<double>(MonotonicNanos() - t0) / 1e6;
  std::vector<double> slices_ms;
  std::vector<std::string> keys;
  uint64_t purged = 0;
  const uint64_t all0 = MonotonicNanos();
  for (size_t next = 0; next < members.size();) {
    const uint64_t a = MonotonicNanos();
    const size_t n = std::min(slice, members.size() - next);
    keys.clear();
    s.KeysWithTag(std::span<const store::KeyDigest>(members).subspan(next, n), "catalog", &keys);
    next += n;
    for (const std::string& k : keys) {
      if (soft) {
        auto g = s.Invalidate(k, 0, false, 0);
        purged += g && *g != 0 ? 1 : 0;
      } else {
        auto d = s.Delete(k);
        purged += d && *d ? 1 : 0;
      }
    }
    slices_ms.push_back(static_cast<double>(MonotonicNanos() - a) / 1e6);
    (void)s.Poll();  // (the loop's other work between slices: group syncs)
  }
  (void)s.SyncNow();
  const double total_s = static_cast<double>(MonotonicNanos() - all0) / 1e9;
  fmt::print(
      "objects {} of {} B, stored in {:.1f} s; {} purge of tag 'catalog': {} objects, members "
      "snapshot in {:.1f} ms, {} slices of {}: p50 {:.2f} ms, p99 {:.2f} ms, max {:.2f} ms; "
      "all done in {:.2f} s\n",
      objects, size, fill_s, soft ? "soft" : "hard", purged, collect_ms, slices_ms.size(), slice,
      Pct(slices_ms, 0.5), Pct(slices_ms, 0.99), Pct(slices_ms, 1.0), total_s);
  opened->reset();
  fs::remove_all(dir);
  return purged == objects ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tag_purge_bench: what a purge by tag costs a core shard's loop"};
  std::string dir = "/var/tmp/goblin-tag-purge-bench";
  uint64_t objects = 100000, size = 1024;
  size_t slice = 1000;
  bool soft = false;
  app.add_option("--dir", dir, "Scratch tier directory (emptied)")->capture_default_str();
  app.add_option("--objects", objects, "Objects carrying the tag")->capture_default_str();
  app.add_option("--size", size, "Bytes per object")->capture_default_str();
  app.add_option("--slice", slice, "Objects purged per loop round (the core's: 1000)")
      ->capture_default_str();
  app.add_flag("--soft", soft, "Mark stale instead of deleting");
  CLI11_PARSE(app, argc, argv);
  return Run(dir, objects, size, slice, soft);
}
