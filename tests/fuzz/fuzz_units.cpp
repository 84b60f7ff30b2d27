// Fuzz target: size, duration and CPU-list parsers. Any input must give a value or an
// error; a value must round-trip through the formatter.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "goblin/common/topology.h"
#include "goblin/common/units.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto s = goblin::ParseSize(text, {.allow_zero = true})) {
    if (goblin::ParseSize(goblin::FormatSize(*s), {.allow_zero = true}).value() != *s) std::abort();
    (void)goblin::HumanSize(*s);
  }
  if (auto d = goblin::ParseDuration(text)) {
    if (goblin::ParseDuration(goblin::FormatDuration(*d)).value() != *d) std::abort();
  }
  if (size < 256) (void)goblin::ParseCpuList(text);
  return 0;
}
