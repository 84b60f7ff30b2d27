// Fuzz target: SBE decoding of every message in the schema (through the generated
// DebugString dispatcher, which touches every field, group entry and var-data section) and
// stream framing. Nothing may read outside the input.
#include <cstdint>
#include <span>

#include "goblin/sbe/framing.h"
#include "goblin/wire/goblin_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  (void)goblin::wire::DebugString(in);
  // The same bytes as a stream of frames.
  while (!in.empty()) {
    auto f = goblin::sbe::SplitFrame(in, 1 << 16);
    if (f.kind != goblin::sbe::FrameSplit::Kind::kFrame) break;
    (void)goblin::wire::DebugString(f.message);
    in = in.subspan(f.consumed);
  }
  return 0;
}
