// KeyspaceEvents: Redis's keyspace notifications for goblin-core's objects. Every shard's
// store reports what changed a key (store::ObjectEvent); when `notify-keyspace-events`
// selects that event's class, it is published on shard 0's pub/sub engine, Redis's way:
// `__keyspace@0__:<key>` with the event name (class K) and `__keyevent@0__:<event>` with the
// key (class E). Events of other shards travel to shard 0 through a queue of this object
// (an eventfd rings shard 0's loop when the queue stops being empty); nothing is queued
// while notifications are off (the default), so the cost then is one relaxed atomic load
// per event. The classes that apply: g (del, expire, persist), $ (set), x (expired),
// e (evicted), A (all of Redis's g$lshzxetd), K, E; the other Redis classes are accepted
// and have no events here.
// Threading: Post and flags from any shard's thread; the EventSource half and the
// publisher on shard 0's loop thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "goblin/common/fd.h"
#include "goblin/common/status.h"
#include "goblin/reactor/event_source.h"
#include "goblin/store/store.h"

namespace goblin::core {

class KeyspaceEvents final : public reactor::EventSource {
 public:
  static Result<std::unique_ptr<KeyspaceEvents>> Create();

  // Redis's notify-keyspace-events strings: nullopt for a character that is no class.
  static std::optional<uint32_t> ParseClasses(std::string_view s);
  static std::string ClassesString(uint32_t classes);  // as Redis's CONFIG GET shows them
  uint32_t classes() const { return classes_.load(std::memory_order_relaxed); }
  void set_classes(uint32_t c) { classes_.store(c, std::memory_order_relaxed); }

  // A store's event (any shard's thread): queued for shard 0 when its class is on.
  void Post(store::ObjectEvent e, std::string_view key);

  // Shard 0: publishes (channel, message) on its engine.
  using Publisher = std::function<void(std::string_view channel, std::string_view message)>;
  void set_publisher(Publisher p) { publisher_ = std::move(p); }
  uint64_t published() const { return published_; }

  // reactor::EventSource (shard 0's loop)
  int event_fd() const override { return efd_.get(); }
  size_t Poll() override;
  bool PrepareSleep() override { return !pending_.load(std::memory_order_acquire); }
  void Close() override {}

 private:
  KeyspaceEvents() = default;
  struct Queued {
    store::ObjectEvent event;
    std::string key;
  };
  std::atomic<uint32_t> classes_{0};
  UniqueFd efd_;
  std::mutex mu_;
  std::vector<Queued> queue_;  // under mu_
  std::vector<Queued> taken_;  // shard 0's, swapped with queue_
  std::atomic<bool> pending_{false};
  Publisher publisher_;
  uint64_t published_ = 0;
  std::string channel_;  // (reused)
};

}  // namespace goblin::core
