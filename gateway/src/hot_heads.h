// HotHeads: what one gateway worker learned about objects whose heads are in goblin-core's
// RAM, so that their hits are served from the pools it maps without asking the core
// (docs/hot-path.md, "Local hits"). Each entry is a head descriptor as the core gave it in an
// ObjectInfo (ObjectGet with kGetDescribe): the head table entry and its stamp, where the
// head sits, the object's size, version, times and stored headers. An entry is only a hint:
// every use checks the stamp in the core's head table (and the expiry) first, and again
// after the bytes were read; a stale one is erased and the request goes to the core.
// Bounded: a full table replaces a cold entry (CLOCK). Finding an entry allocates nothing;
// a new key allocates its node and strings once (a replaced slot keeps its strings' capacity).
// Threading: one worker's loop thread.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace goblin::gateway {

struct HotHead {
  std::string key;
  std::string metadata;  // the stored response headers, as the core keeps them
  uint64_t epoch = 0;    // the core link connection it was learned on
  uint16_t shard = 0;
  uint32_t entry = 0;               // head table entry...
  uint64_t stamp = 0;               // ...and the stamp it carries while it describes this head
  uint64_t offset = 0, length = 0;  // of the head in the shard's head pool
  uint64_t size = 0, generation = 0, created_ns = 0, expires_ns = 0;
  uint64_t fresh_until_ms = UINT64_MAX;  // its freshness end (policy::FreshUntilMs), read once
  bool referenced = false;               // CLOCK bit (this table's own replacement)
};

class HotHeads {
 public:
  explicit HotHeads(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {
    index_.reserve(capacity_);
  }
  HotHeads(const HotHeads&) = delete;
  HotHeads& operator=(const HotHeads&) = delete;

  HotHead* Find(std::string_view key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    HotHead& h = slots_[it->second];
    h.referenced = true;
    return &h;
  }
  // The entry for `key` to (re)fill: its own, else a free or replaced one, key set.
  HotHead& Slot(std::string_view key);
  void Erase(std::string_view key);
  void Clear();
  size_t size() const { return index_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  size_t capacity_;
  std::deque<HotHead> slots_;  // (a deque: index_ keys are views into slot keys, which must
                               // not move when slots are added)
  std::vector<uint32_t> free_;
  std::unordered_map<std::string_view, uint32_t> index_;
  size_t hand_ = 0;
};

}  // namespace goblin::gateway
