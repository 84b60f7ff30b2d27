// Fuzz target: journal replay over arbitrary file contents. The input follows a valid
// journal header (so the record walk is reached); replay must deliver only records whose
// length, sequence and checksum are right, and never read or allocate without bound.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "goblin/store/journal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/dev/shm/goblin-fuzz-journal-" + std::to_string(getpid());
  unlink(path.c_str());
  {
    auto j = goblin::store::Journal::Open(path, 1);  // writes a fresh header
    if (!j) std::abort();
  }
  FILE* f = std::fopen(path.c_str(), "ab");
  if (f == nullptr) std::abort();
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  auto j = goblin::store::Journal::Open(path, 1);
  if (!j) std::abort();
  uint64_t expect = 1;
  auto st = j->Replay([&](uint64_t lsn, uint16_t, std::span<const uint8_t> p) {
    if (lsn != expect++ || p.size() > goblin::store::kJournalMaxPayload) std::abort();
  });
  if (st && st->records + 1 != expect) std::abort();
  unlink(path.c_str());
  return 0;
}
