// pubsub_engine_bench: the cost of routing one publication inside pubsub::Engine, without
// any transport (Google Benchmark). Literal channels 1..16,384 (one hash probe: flat);
// patterns 1..8,192 with distinct literal prefixes, matching and unmatched publications
// (the prefix index visits only the candidates); and the worst case for the index,
// patterns that start with a wildcard (every one is checked, like Redis's scan).
#include <benchmark/benchmark.h>

#include <string>

#include "goblin/pubsub/engine.h"

namespace {

using goblin::pubsub::Engine;
using goblin::pubsub::Kind;

uint64_t Publish(Engine& e, const std::string& channel) {
  uint64_t n = 0;
  e.Publish(channel, false,
            [&](Kind, std::string_view, std::span<const uint64_t> subs) { n += subs.size(); });
  return n;
}

void BM_Literal(benchmark::State& state) {
  const auto channels = static_cast<size_t>(state.range(0));
  Engine e;
  for (size_t i = 0; i < channels; ++i)
    e.Subscribe(1, Kind::kChannel, "bench:lit:" + std::to_string(i));
  const std::string target = "bench:lit:" + std::to_string(channels - 1);
  for (auto _ : state) benchmark::DoNotOptimize(Publish(e, target));
  if (Publish(e, target) != 1) state.SkipWithError("wrong receiver count");
}
BENCHMARK(BM_Literal)->Arg(1)->Arg(1024)->Arg(16384);

// arg 0: patterns; arg 1: 1 = a matching publication, 0 = unmatched.
void BM_Pattern(benchmark::State& state) {
  const auto patterns = static_cast<size_t>(state.range(0));
  const bool hit = state.range(1) != 0;
  Engine e;
  for (size_t i = 0; i < patterns; ++i)
    e.Subscribe(1, Kind::kPattern, "bench:pat:" + std::to_string(i) + ":*");
  const std::string target =
      hit ? "bench:pat:" + std::to_string(patterns - 1) + ":evt" : "bench:miss:evt";
  for (auto _ : state) benchmark::DoNotOptimize(Publish(e, target));
  if (Publish(e, target) != (hit ? 1u : 0u)) state.SkipWithError("wrong receiver count");
}
BENCHMARK(BM_Pattern)->ArgsProduct({{1, 64, 1024, 8192}, {1, 0}});

// Patterns that start with '*' have no literal prefix: every publication checks them all.
void BM_PatternLeadingWildcard(benchmark::State& state) {
  const auto patterns = static_cast<size_t>(state.range(0));
  Engine e;
  for (size_t i = 0; i < patterns; ++i)
    e.Subscribe(1, Kind::kPattern, "*:pat:" + std::to_string(i) + ":*");
  const std::string target = "bench:pat:" + std::to_string(patterns - 1) + ":evt";
  for (auto _ : state) benchmark::DoNotOptimize(Publish(e, target));
  if (Publish(e, target) != 1) state.SkipWithError("wrong receiver count");
}
BENCHMARK(BM_PatternLeadingWildcard)->Arg(1)->Arg(64)->Arg(1024)->Arg(8192);

}  // namespace

BENCHMARK_MAIN();
