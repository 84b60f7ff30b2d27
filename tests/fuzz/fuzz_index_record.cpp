// Fuzz target: decoding of index records (journal and checkpoint payloads read from disk).
// A decoded record must re-encode to exactly the input.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "goblin/store/index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = goblin::store::DecodeRecord({data, size});
  if (r) {
    auto again = goblin::store::EncodeRecord(*r);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) std::abort();
  }
  return 0;
}
