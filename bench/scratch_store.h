// A store in a scratch tier under $TMPDIR for the in-process benchmarks (store_hit_bench,
// core_get_bench), filled with `keys` objects of `object_size` bytes whose heads are all in
// RAM (blocks and heads of `block` bytes, 512 MiB of pool); removed with the object.
// Threading: one thread, as a shard's loop.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "goblin/store/store.h"
#include "goblin/store/tier_dir.h"

namespace goblin::bench {

class ScratchStore {
 public:
  ScratchStore(const std::string& name, size_t block, size_t object_size,
               const std::vector<std::string>& keys) {
    const char* tmp = std::getenv("TMPDIR");
    dir_ = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name + "." +
           std::to_string(getpid()) + "." + std::to_string(object_size);
    std::filesystem::remove_all(dir_);
    if (!store::PrepareTier(dir_)) Fail("cannot prepare the scratch tier " + dir_);
    store::StoreOptions o;
    o.pool.memory = 512ull << 20;
    o.pool.block = block;
    o.pool.hugepages = store::HugePages::kOff;
    o.pool.lock = false;
    o.ram_head = block;
    o.tier_dirs = {{dir_}};
    o.tier.extent_bytes = static_cast<uint32_t>(block);
    o.tier.file_bytes = 64 << 20;
    o.tier.max_files = 64;
    o.io_buffers = 16;
    auto s = store::Store::Open(o);
    if (!s) Fail("store: " + s.error().ToString());
    store_ = std::move(*s);
    std::vector<uint8_t> data(object_size, 0x5a);
    for (const std::string& key : keys) {
      auto f = store_->BeginFill(key, 0, "content-type: application/octet-stream");
      if (!f || f->first != store::Store::FillStart::kGranted) Fail("fill of " + key);
      if (!store_->Append(f->second, data) || !store_->Commit(f->second, data.size()))
        Fail("commit of " + key);
    }
    while (store_->Poll() && store_->MillisUntilDue() == 0) {
    }
  }
  ~ScratchStore() {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  ScratchStore(const ScratchStore&) = delete;
  ScratchStore& operator=(const ScratchStore&) = delete;
  store::Store& operator*() const { return *store_; }
  store::Store* operator->() const { return store_.get(); }
  store::Store* get() const { return store_.get(); }

 private:
  [[noreturn]] static void Fail(const std::string& why) {
    std::fprintf(stderr, "%s\n", why.c_str());
    std::abort();
  }
  std::string dir_;
  std::unique_ptr<store::Store> store_;
};

}  // namespace goblin::bench
