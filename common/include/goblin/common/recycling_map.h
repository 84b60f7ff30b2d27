// RecyclingMap: an std::unordered_map whose erased nodes are kept (up to a bound) and reused
// by later insertions, so a map with steady churn (requests in flight by correlation id,
// loans out by id) stops allocating once warm: an insert takes a spare node (C++17 node
// handles: extract/insert move nodes without allocating), an erase gives it back. The
// bucket array grows to the high-water mark and stays. Iterators and references behave as
// std::unordered_map's. Hot-path rule: docs/hot-path.md.
// Threading: none (like the map it wraps); one owner thread.
#pragma once

#include <cstddef>
#include <functional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace goblin {

template <class K, class V, class Hash = std::hash<K>>
class RecyclingMap {
 public:
  using Map = std::unordered_map<K, V, Hash>;
  using iterator = typename Map::iterator;
  using const_iterator = typename Map::const_iterator;
  using value_type = typename Map::value_type;

  // At most `max_spare` erased nodes are kept for reuse.
  explicit RecyclingMap(size_t max_spare = 4096) : max_spare_(max_spare) {}

  iterator begin() { return map_.begin(); }
  iterator end() { return map_.end(); }
  const_iterator begin() const { return map_.begin(); }
  const_iterator end() const { return map_.end(); }
  size_t size() const { return map_.size(); }
  bool empty() const { return map_.empty(); }
  iterator find(const K& k) { return map_.find(k); }
  const_iterator find(const K& k) const { return map_.find(k); }
  size_t count(const K& k) const { return map_.count(k); }
  bool contains(const K& k) const { return map_.find(k) != map_.end(); }

  // The value at `k`, default-constructed (in a recycled node when there is one) if absent.
  V& operator[](const K& k) { return try_emplace(k).first->second; }
  // Inserts V(args...) at `k` unless present; {iterator, inserted}.
  template <class... Args>
  std::pair<iterator, bool> try_emplace(const K& k, Args&&... args) {
    auto it = map_.find(k);
    if (it != map_.end()) return {it, false};
    if (spare_.empty()) return map_.try_emplace(k, std::forward<Args>(args)...);
    typename Map::node_type node = std::move(spare_.back());
    spare_.pop_back();
    node.key() = k;
    node.mapped() = V(std::forward<Args>(args)...);
    auto r = map_.insert(std::move(node));
    return {r.position, true};
  }
  template <class... Args>
  std::pair<iterator, bool> emplace(const K& k, Args&&... args) {
    return try_emplace(k, std::forward<Args>(args)...);
  }
  // Erases the entry at `it` (its node is kept for reuse); returns the next iterator.
  iterator erase(iterator it) {
    iterator next = std::next(it);
    typename Map::node_type node = map_.extract(it);
    if (spare_.size() < max_spare_) {
      node.mapped() = V();  // drop what the value held now, not at its reuse
      spare_.push_back(std::move(node));
    }
    return next;
  }
  size_t erase(const K& k) {
    auto it = map_.find(k);
    if (it == map_.end()) return 0;
    erase(it);
    return 1;
  }
  void clear() {
    while (!map_.empty()) erase(map_.begin());
  }
  // Erased nodes kept for reuse.
  size_t spare() const { return spare_.size(); }

 private:
  Map map_;
  std::vector<typename Map::node_type> spare_;
  size_t max_spare_;
};

}  // namespace goblin
