#include "goblin/pubsub/engine.h"

#include <algorithm>

namespace goblin::pubsub {

struct Engine::PatternEntry {
  explicit PatternEntry(std::string_view p) : glob(p) {}
  Glob glob;
  SubList subs;
  uint32_t node = 0;
  bool live = true;
};

// Patterns by literal prefix: a byte trie whose nodes list the patterns whose prefix ends
// there. Nodes count the patterns below them and are pruned when that reaches zero, so
// churn of distinct prefixes does not grow it.
class Engine::PatternIndex {
 public:
  PatternIndex() { nodes_.push_back({}); }

  uint32_t Add(std::string_view pattern) {
    uint32_t id;
    if (!free_entries_.empty()) {
      id = free_entries_.back();
      free_entries_.pop_back();
      entries_[id] = std::make_unique<PatternEntry>(pattern);
    } else {
      id = static_cast<uint32_t>(entries_.size());
      entries_.push_back(std::make_unique<PatternEntry>(pattern));
    }
    uint32_t node = 0;
    ++nodes_[0].subtree;
    for (char ch : entries_[id]->glob.literal_prefix()) {
      uint8_t b = static_cast<uint8_t>(ch);
      auto [it, inserted] = edges_.try_emplace(Edge(node, b), 0);
      if (inserted) {
        uint32_t child;
        if (!free_nodes_.empty()) {
          child = free_nodes_.back();
          free_nodes_.pop_back();
          nodes_[child] = Node{};
        } else {
          child = static_cast<uint32_t>(nodes_.size());
          nodes_.push_back({});
        }
        nodes_[child].parent = node;
        nodes_[child].byte = b;
        it->second = child;
      }
      node = it->second;
      ++nodes_[node].subtree;
    }
    nodes_[node].patterns.push_back(id);
    entries_[id]->node = node;
    return id;
  }

  void Remove(uint32_t id) {
    uint32_t node = entries_[id]->node;
    auto& list = nodes_[node].patterns;
    list.erase(std::find(list.begin(), list.end(), id));
    for (;;) {
      Node& n = nodes_[node];
      --n.subtree;
      if (node == 0) break;
      uint32_t parent = n.parent;
      if (n.subtree == 0) {
        edges_.erase(Edge(parent, n.byte));
        free_nodes_.push_back(node);
      }
      node = parent;
    }
    entries_[id].reset();
    free_entries_.push_back(id);
  }

  PatternEntry& at(uint32_t id) { return *entries_[id]; }
  const PatternEntry& at(uint32_t id) const { return *entries_[id]; }

  // Calls fn(entry) for every pattern whose literal prefix `channel` starts with.
  template <typename Fn>
  void ForCandidates(std::string_view channel, Fn&& fn) {
    uint32_t node = 0;
    for (size_t i = 0;; ++i) {
      for (uint32_t id : nodes_[node].patterns) fn(*entries_[id]);
      if (i == channel.size()) break;
      auto it = edges_.find(Edge(node, static_cast<uint8_t>(channel[i])));
      if (it == edges_.end()) break;
      node = it->second;
    }
  }

 private:
  struct Node {
    uint32_t parent = 0;
    uint8_t byte = 0;
    uint32_t subtree = 0;
    std::vector<uint32_t> patterns;
  };
  static uint64_t Edge(uint32_t node, uint8_t b) { return (uint64_t{node} << 8) | b; }

  std::vector<Node> nodes_;  // [0] is the root
  std::vector<uint32_t> free_nodes_;
  std::unordered_map<uint64_t, uint32_t> edges_;
  std::vector<std::unique_ptr<PatternEntry>> entries_;
  std::vector<uint32_t> free_entries_;
};

Engine::Engine() : index_(std::make_unique<PatternIndex>()) {}
Engine::~Engine() = default;

bool Engine::AddTo(SubList& list, SubscriberId sub) {
  if (std::find(list.begin(), list.end(), sub) != list.end()) return false;
  list.push_back(sub);
  return true;
}

bool Engine::RemoveFrom(SubList& list, SubscriberId sub) {
  auto it = std::find(list.begin(), list.end(), sub);
  if (it == list.end()) return false;
  list.erase(it);  // keeps subscription order, like Redis's client lists
  return true;
}

uint32_t Engine::Count(SubscriberId sub, Kind kind) const {
  auto it = subs_.find(sub);
  if (it == subs_.end()) return 0;
  if (kind == Kind::kShard) return static_cast<uint32_t>(it->second.shards.size());
  return static_cast<uint32_t>(it->second.channels.size() + it->second.patterns.size());
}

Engine::Change Engine::Apply(SubscriberId sub, Kind kind, std::string_view name, bool subscribe) {
  Change c;
  auto sit = subs_.find(sub);
  if (sit == subs_.end()) {
    if (!subscribe) return c;  // count 0
    sit = subs_.emplace(sub, SubscriberState{}).first;
  }
  SubscriberState& st = sit->second;
  NameSet& mine = kind == Kind::kChannel   ? st.channels
                  : kind == Kind::kPattern ? st.patterns
                                           : st.shards;
  auto have = mine.find(name);
  if (subscribe && have == mine.end()) {
    mine.emplace(name);
    c.changed = true;
    if (kind == Kind::kPattern) {
      auto [pit, inserted] = patterns_by_name_.try_emplace(std::string(name), 0);
      if (inserted) pit->second = index_->Add(name);
      AddTo(index_->at(pit->second).subs, sub);
    } else {
      ChannelMap& map = kind == Kind::kChannel ? channels_ : shards_;
      auto it = map.find(name);
      if (it == map.end()) it = map.emplace(std::string(name), SubList{}).first;
      AddTo(it->second, sub);
    }
  } else if (!subscribe && have != mine.end()) {
    mine.erase(have);
    c.changed = true;
    if (kind == Kind::kPattern) {
      auto pit = patterns_by_name_.find(name);
      PatternEntry& e = index_->at(pit->second);
      RemoveFrom(e.subs, sub);
      if (e.subs.empty()) {
        index_->Remove(pit->second);
        patterns_by_name_.erase(pit);
      }
    } else {
      ChannelMap& map = kind == Kind::kChannel ? channels_ : shards_;
      auto it = map.find(name);
      RemoveFrom(it->second, sub);
      if (it->second.empty()) map.erase(it);
    }
  }
  c.count = Count(sub, kind);
  if (st.channels.empty() && st.patterns.empty() && st.shards.empty()) subs_.erase(sit);
  return c;
}

Engine::Change Engine::Subscribe(SubscriberId sub, Kind kind, std::string_view name) {
  return Apply(sub, kind, name, true);
}

Engine::Change Engine::Unsubscribe(SubscriberId sub, Kind kind, std::string_view name) {
  return Apply(sub, kind, name, false);
}

std::vector<std::string> Engine::Names(SubscriberId sub, Kind kind) const {
  auto it = subs_.find(sub);
  if (it == subs_.end()) return {};
  const NameSet& s = kind == Kind::kChannel   ? it->second.channels
                     : kind == Kind::kPattern ? it->second.patterns
                                              : it->second.shards;
  return {s.begin(), s.end()};
}

void Engine::Remove(SubscriberId sub) {
  for (Kind k : {Kind::kChannel, Kind::kPattern, Kind::kShard}) {
    for (const std::string& n : Names(sub, k)) Apply(sub, k, n, false);
  }
}

uint64_t Engine::Publish(std::string_view channel, bool sharded, const Visitor& visit) {
  ++stats_.publishes;
  uint64_t receivers = 0;
  const ChannelMap& map = sharded ? shards_ : channels_;
  if (auto it = map.find(channel); it != map.end()) {
    receivers += it->second.size();
    visit(sharded ? Kind::kShard : Kind::kChannel, {}, it->second);
  }
  if (!sharded && !patterns_by_name_.empty()) {
    index_->ForCandidates(channel, [&](PatternEntry& e) {
      ++stats_.patterns_checked;
      if (!e.glob.Match(channel)) return;
      ++stats_.patterns_matched;
      receivers += e.subs.size();
      visit(Kind::kPattern, e.glob.pattern(), e.subs);
    });
  }
  stats_.deliveries += receivers;
  return receivers;
}

std::vector<std::string> Engine::Channels(std::string_view pattern, bool shard,
                                          bool has_pattern) const {
  std::vector<std::string> out;
  const ChannelMap& map = shard ? shards_ : channels_;
  if (!has_pattern) {
    for (const auto& [name, subs] : map) out.push_back(name);
    return out;
  }
  Glob g(pattern);
  for (const auto& [name, subs] : map) {
    if (g.Match(name)) out.push_back(name);
  }
  return out;
}

uint64_t Engine::NumSub(std::string_view channel, bool shard) const {
  const ChannelMap& map = shard ? shards_ : channels_;
  auto it = map.find(channel);
  return it == map.end() ? 0 : it->second.size();
}

}  // namespace goblin::pubsub
