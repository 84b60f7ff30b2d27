// core_get_bench: what goblin-core's handler spends on one get of a client that reads the
// pools in place, in process (Google Benchmark): CoreService::OnMessage of an ObjectGet
// flagged kGetLoans | kGetLoanInAnswer, as a ring or same-host UCX session sends it (plus
// kGetFollowFill, which libgoblin's Get sets only when asked: the fills' lookups more), to
// the ObjectLent it sends, then the LoanRelease the client sends back. Decode, the store's
// hit (bench/store_hit_bench alone), the loan and the encode (and, for a range not whole in
// a RAM head, a stream and a download): the core's own work between the transport's receive
// and its send. No transport: a session whose Send keeps the last message
// (docs/benchmarks/native.md).
//   core_get_bench [--benchmark_*] (its tier lives in $TMPDIR, removed at exit)
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/scratch_store.h"
#include "goblin/core/core_service.h"
#include "goblin/sbe/wire_flags.h"
#include "goblin/wire/goblin_wire.h"

namespace {

using namespace goblin;
using namespace goblin::store;

// A same-host session (a ring client's): keeps what the handler sends last.
class KeepingSession : public reactor::Session {
 public:
  KeepingSession() {
    id_ = 7;
    pid_ = static_cast<uint32_t>(getpid());
    name_ = "core_get_bench";
  }
  uint32_t max_message() const override { return 1 << 20; }
  size_t queued_bytes() const override { return 0; }
  reactor::SendOutcome Send(std::span<const uint8_t> msg) override {
    last.assign(msg.begin(), msg.end());
    return reactor::SendOutcome::kSent;
  }
  bool local() const override { return true; }
  VoidResult SendSideFrame(std::span<const uint8_t>, std::span<const int>) override { return {}; }
  std::vector<uint8_t> last;
};

std::vector<std::string> Keys(size_t n) {  // (native_objects_benchmark's)
  std::vector<std::string> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back("obj-" + std::to_string(i));
  return keys;
}

struct Fixture {
  std::vector<std::string> keys;
  bench::ScratchStore store;
  std::unique_ptr<core::CoreService> service;
  KeepingSession session;
  std::vector<std::vector<uint8_t>> gets;  // an encoded ObjectGet per key

  Fixture(size_t object_size, size_t key_count)
      : keys(Keys(key_count)), store("core_get_bench", 256 << 10, object_size, keys) {
    for (size_t i = 0; i < keys.size(); ++i) {
      std::vector<uint8_t> m(256);
      m.resize(wire::ObjectGetEncoder(m.data(), m.size())
                   .set_correlation_id(i + 1)
                   .set_offset(0)
                   .set_length(UINT64_MAX)
                   .set_flags(wire::kGetFollowFill | wire::kGetLoans | wire::kGetLoanInAnswer)
                   .set_key(keys[i])
                   .Finish());
      gets.push_back(std::move(m));
    }
    service = std::make_unique<core::CoreService>(store.get());
    service->OnOpen(session);
    uint8_t b[64];
    service->OnMessage(session,
                       {b, wire::MapPoolsEncoder(b, sizeof b).set_correlation_id(1).Finish()});
    if (!wire::PoolMapDecoder::Decode(session.last).has_value()) {
      std::fprintf(stderr, "MapPools was not answered with a PoolMap\n");
      std::abort();
    }
  }
  ~Fixture() {
    service->OnClose(session);
    service.reset();
  }
};

void BM_LentGet(benchmark::State& state) {
  const auto key_count = static_cast<size_t>(state.range(1));
  Fixture f(static_cast<size_t>(state.range(0)), key_count);
  size_t i = 0;
  uint8_t release[64];
  for (auto _ : state) {
    f.service->OnMessage(f.session, f.gets[i]);
    i = (i + 97) % key_count;  // (a stride: no two neighbours in a row)
    auto lent = wire::ObjectLentDecoder::Decode(f.session.last);
    if (!lent || lent->last() == 0) {
      state.SkipWithError("the answer was not an ObjectLent of the whole object");
      break;
    }
    const size_t n =
        wire::LoanReleaseEncoder(release, sizeof release).set_loan_id(lent->loan_id()).Finish();
    f.service->OnMessage(f.session, {release, n});
  }
}
BENCHMARK(BM_LentGet)->Args({256 << 10, 256})->Args({1024, 256})->Args({1024, 4096});

}  // namespace

BENCHMARK_MAIN();
