// The pub/sub engine: Redis 7 semantics for channels, patterns and shard channels, with
// subscribers as opaque ids (the core maps them to ring sessions and gateway clients).
// - Channels: one hash lookup per publish, whatever the number of channels.
// - Patterns: indexed by their literal prefix in a byte trie; a publish walks the channel's
//   bytes down the trie and runs the compiled matcher only on patterns whose prefix the
//   channel starts with (patterns starting with a wildcard are checked on every publish).
// - Publish reports each receiving group (kind, pattern, subscribers) to a visitor; the
//   receiver count is Redis's: channel subscribers plus one per (matching pattern,
//   subscriber). Nothing on the publish path allocates once scratch space has grown.
// - Counts are Redis's too: a subscriber's channel+pattern count (SUBSCRIBE/PSUBSCRIBE
//   replies) and its shard-channel count (SSUBSCRIBE replies) are separate.
// Threading: one owner thread (the core's loop).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "goblin/common/function_ref.h"
#include "goblin/common/string_hash.h"
#include "goblin/pubsub/glob.h"

namespace goblin::pubsub {

using SubscriberId = uint64_t;
enum class Kind : uint8_t { kChannel = 0, kPattern = 1, kShard = 2 };

struct EngineStats {
  uint64_t publishes = 0;
  uint64_t deliveries = 0;        // (message, receiver) pairs
  uint64_t patterns_checked = 0;  // matcher runs (the index keeps this near the matches)
  uint64_t patterns_matched = 0;
};

class Engine {
 public:
  Engine();
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  struct Change {
    bool changed = false;  // false: already subscribed / was not subscribed
    uint32_t count = 0;    // the subscriber's count after it (see above)
  };
  Change Subscribe(SubscriberId sub, Kind kind, std::string_view name);
  Change Unsubscribe(SubscriberId sub, Kind kind, std::string_view name);
  // The names `sub` is subscribed to with `kind` (for UNSUBSCRIBE with no argument).
  std::vector<std::string> Names(SubscriberId sub, Kind kind) const;
  // Channel + pattern count (kChannel/kPattern) or shard count (kShard).
  uint32_t Count(SubscriberId sub, Kind kind) const;
  // Forgets everything of a subscriber (its connection ended).
  void Remove(SubscriberId sub);

  // Called once per receiving group: kind kChannel/kShard with an empty pattern, or
  // kPattern with the matching pattern. The span is valid during the call only. (A
  // FunctionRef: a std::function of the core's visitor, which captures more than two
  // pointers, allocated once per PUBLISH.)
  using Visitor =
      FunctionRef<void(Kind kind, std::string_view pattern, std::span<const SubscriberId>)>;
  // PUBLISH (sharded = false: channel subscribers and matching patterns) or SPUBLISH
  // (shard subscribers only). Returns the receiver count.
  uint64_t Publish(std::string_view channel, bool sharded, const Visitor& visit);

  // PUBSUB CHANNELS [pattern] / SHARDCHANNELS [pattern] (empty pattern: all).
  std::vector<std::string> Channels(std::string_view pattern, bool shard, bool has_pattern) const;
  uint64_t NumSub(std::string_view channel, bool shard) const;
  uint64_t NumPat() const { return patterns_by_name_.size(); }
  size_t subscribers() const { return subs_.size(); }
  const EngineStats& stats() const { return stats_; }

 private:
  using NameSet = std::unordered_set<std::string, StringHash, std::equal_to<>>;
  struct SubscriberState {
    NameSet channels, patterns, shards;
  };
  using SubList = std::vector<SubscriberId>;
  using ChannelMap = std::unordered_map<std::string, SubList, StringHash, std::equal_to<>>;
  struct PatternEntry;
  class PatternIndex;

  static bool AddTo(SubList& list, SubscriberId sub);
  static bool RemoveFrom(SubList& list, SubscriberId sub);
  Change Apply(SubscriberId sub, Kind kind, std::string_view name, bool subscribe);

  std::unordered_map<SubscriberId, SubscriberState> subs_;
  ChannelMap channels_, shards_;
  std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>> patterns_by_name_;
  std::unique_ptr<PatternIndex> index_;
  EngineStats stats_;
};

}  // namespace goblin::pubsub
