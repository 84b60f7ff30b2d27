// store_hit_bench: what a hit costs the store itself, in process (Google Benchmark): the
// lookup and stream of an ObjectGet as goblin-core's loop makes it (Store::OpenStream with
// follow_fill and an AccessRequest, Peek, Consume, the stream given back), for RAM-head
// objects of a few sizes, over 4,096 keys (more than the CPU's L1 and L2 hold of the index,
// policy and heads: each hit walks them as a shard does under load) and over 256 (the
// native benchmark's set: the work itself, mostly from cache). No I/O,
// no transport: the part of a get's microseconds that is the store's (docs/benchmarks/).
//   store_hit_bench [--benchmark_*] (its tier lives in $TMPDIR, removed at exit)
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/scratch_store.h"
#include "goblin/store/store.h"

namespace {

using namespace goblin;
using namespace goblin::store;

// The keys shaped like a gateway's (host + path, ~40 bytes).
std::vector<std::string> Keys(size_t n) {
  std::vector<std::string> keys;
  for (size_t i = 0; i < n; ++i)
    keys.push_back("www.example.com/static/assets/obj-" + std::to_string(i * 7919));
  return keys;
}

struct Fixture {
  std::vector<std::string> keys;
  bench::ScratchStore store;
  Fixture(size_t object_size, size_t key_count)
      : keys(Keys(key_count)), store("store_hit_bench", 64 << 10, object_size, keys) {}
};

void BM_Hit(benchmark::State& state) {
  const auto key_count = static_cast<size_t>(state.range(1));
  Fixture f(static_cast<size_t>(state.range(0)), key_count);
  AccessRequest access;  // (the core's defaults: bump, no vivify, no meta)
  size_t i = 0;
  uint64_t bytes = 0;
  for (auto _ : state) {
    const std::string& key = f.keys[i];
    i = (i + 1531) % key_count;  // (a stride: no two neighbours in a row)
    AccessMarks marks;
    auto o = f.store->OpenStream(key, 0, UINT64_MAX, /*follow_fill=*/true, &access, &marks);
    if (!o || !o->stream) std::abort();
    std::span<const uint8_t> b;
    auto step = o->stream->Peek(&b);
    if (!step || *step != Store::Stream::Step::kData) std::abort();
    bytes += b.size();
    o->stream->Consume(b.size());
    benchmark::DoNotOptimize(b.data());
  }
  state.counters["first_piece_bytes"] =
      benchmark::Counter(static_cast<double>(bytes) / static_cast<double>(state.iterations()));
}
BENCHMARK(BM_Hit)->Args({1024, 4096})->Args({64 << 10, 4096})->Args({1024, 256});

void BM_Miss(benchmark::State& state) {
  constexpr size_t kKeys = 4096;
  Fixture f(1024, kKeys);
  AccessRequest access;
  std::vector<std::string> absent;
  for (const std::string& k : f.keys) absent.push_back(k + "-absent");
  size_t i = 0;
  for (auto _ : state) {
    const std::string& key = absent[i];
    i = (i + 1531) % kKeys;
    AccessMarks marks;
    auto o = f.store->OpenStream(key, 0, UINT64_MAX, true, &access, &marks);
    if (!o || o->stream) std::abort();
  }
}
BENCHMARK(BM_Miss);

}  // namespace

BENCHMARK_MAIN();
