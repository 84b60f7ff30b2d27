#include "goblin/common/mapping.h"

#include <cerrno>

namespace goblin {

Result<Mapping> Mapping::MapShared(int fd, size_t bytes, int prot, std::string_view what) {
  if (bytes == 0) return Err(StatusCode::kInvalidArgument, "mmap({}): zero bytes", what);
  void* a = mmap(nullptr, bytes, prot, MAP_SHARED, fd, 0);
  if (a == MAP_FAILED) return Err(ErrnoStatus(fmt::format("mmap({})", what), errno));
  Mapping m;
  m.base_ = a;
  m.bytes_ = bytes;
  return m;
}

}  // namespace goblin
