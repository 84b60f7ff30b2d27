// An LD_PRELOAD interposer that counts a process's heap allocations, for tests that hold
// the hot path to "no allocation once warm" (docs/hot-path.md). Every call of malloc,
// calloc, realloc, posix_memalign, aligned_alloc, memalign, valloc and pvalloc adds one to
// a counter in a shared file named by GOBLIN_MALLOC_COUNT_FILE (created, 4 KiB; the count
// is a little-endian uint64 at offset 0, updated atomically from every thread), then calls
// glibc's own function. operator new lands in malloc, so C++ allocations count too; free
// is not counted. Without the variable (or when the file cannot be mapped) nothing is
// counted and the process runs as usual. Release builds only: a sanitizer replaces malloc.
// Threading: any thread; the counter is a relaxed atomic increment.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void* __libc_valloc(size_t);
void* __libc_pvalloc(size_t);
}

namespace {

std::atomic<uint64_t>* g_count = nullptr;

// Runs before main (and before most constructors that allocate: init_priority 101).
__attribute__((constructor(101))) void MapCounter() {
  const char* path = std::getenv("GOBLIN_MALLOC_COUNT_FILE");
  if (path == nullptr || *path == '\0') return;
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (ftruncate(fd, 4096) != 0) {
    close(fd);
    return;
  }
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return;
  g_count = static_cast<std::atomic<uint64_t>*>(p);
}

inline void Count() {
  if (auto* c = g_count) c->fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

extern "C" {

void* malloc(size_t n) {
  Count();
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t size) {
  Count();
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t n) {
  Count();
  return __libc_realloc(p, n);
}
int posix_memalign(void** out, size_t align, size_t n) {
  Count();
  if (align < sizeof(void*) || (align & (align - 1)) != 0) return 22;  // EINVAL
  void* p = __libc_memalign(align, n);
  if (p == nullptr && n != 0) return 12;  // ENOMEM
  *out = p;
  return 0;
}
void* aligned_alloc(size_t align, size_t n) {
  Count();
  return __libc_memalign(align, n);
}
void* memalign(size_t align, size_t n) {
  Count();
  return __libc_memalign(align, n);
}
void* valloc(size_t n) {
  Count();
  return __libc_valloc(n);
}
void* pvalloc(size_t n) {
  Count();
  return __libc_pvalloc(n);
}

}  // extern "C"
