#include "goblin/core/keyspace_events.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

namespace goblin::core {
namespace {

// Redis's NOTIFY_* bits (server.h), so the strings round-trip as Redis's do.
enum : uint32_t {
  kKeyspace = 1 << 0,  // K
  kKeyevent = 1 << 1,  // E
  kGeneric = 1 << 2,   // g
  kString = 1 << 3,    // $
  kList = 1 << 4,      // l
  kSet = 1 << 5,       // s
  kHash = 1 << 6,      // h
  kZset = 1 << 7,      // z
  kExpired = 1 << 8,   // x
  kEvicted = 1 << 9,   // e
  kStream = 1 << 10,   // t
  kKeyMiss = 1 << 11,  // m
  kLoaded = 1 << 12,   // (module)
  kModule = 1 << 13,   // d
  kNew = 1 << 14,      // n
  kAll = kGeneric | kString | kList | kSet | kHash | kZset | kExpired | kEvicted | kStream |
         kModule,  // A
};

uint32_t ClassOf(store::ObjectEvent e) {
  switch (e) {
    case store::ObjectEvent::kSet:
      return kString;
    case store::ObjectEvent::kDel:
    case store::ObjectEvent::kExpire:
    case store::ObjectEvent::kPersist:
      return kGeneric;
    case store::ObjectEvent::kExpired:
      return kExpired;
    case store::ObjectEvent::kEvicted:
      return kEvicted;
  }
  return 0;
}

}  // namespace

Result<std::unique_ptr<KeyspaceEvents>> KeyspaceEvents::Create() {
  std::unique_ptr<KeyspaceEvents> k(new KeyspaceEvents());
  k->efd_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!k->efd_) return ErrnoErr("eventfd", errno);
  return k;
}

std::optional<uint32_t> KeyspaceEvents::ParseClasses(std::string_view s) {
  uint32_t f = 0;
  for (char c : s) {
    switch (c) {
      case 'A':
        f |= kAll;
        break;
      case 'g':
        f |= kGeneric;
        break;
      case '$':
        f |= kString;
        break;
      case 'l':
        f |= kList;
        break;
      case 's':
        f |= kSet;
        break;
      case 'h':
        f |= kHash;
        break;
      case 'z':
        f |= kZset;
        break;
      case 'x':
        f |= kExpired;
        break;
      case 'e':
        f |= kEvicted;
        break;
      case 'K':
        f |= kKeyspace;
        break;
      case 'E':
        f |= kKeyevent;
        break;
      case 't':
        f |= kStream;
        break;
      case 'm':
        f |= kKeyMiss;
        break;
      case 'd':
        f |= kModule;
        break;
      case 'n':
        f |= kNew;
        break;
      default:
        return std::nullopt;
    }
  }
  return f;
}

std::string KeyspaceEvents::ClassesString(uint32_t f) {
  std::string s;
  if ((f & kAll) == kAll) {
    s += 'A';
  } else {
    if (f & kGeneric) s += 'g';
    if (f & kString) s += '$';
    if (f & kList) s += 'l';
    if (f & kSet) s += 's';
    if (f & kHash) s += 'h';
    if (f & kZset) s += 'z';
    if (f & kExpired) s += 'x';
    if (f & kEvicted) s += 'e';
    if (f & kStream) s += 't';
    if (f & kModule) s += 'd';
  }
  if (f & kNew) s += 'n';
  if (f & kKeyspace) s += 'K';
  if (f & kKeyevent) s += 'E';
  if (f & kKeyMiss) s += 'm';
  return s;
}

void KeyspaceEvents::Post(store::ObjectEvent e, std::string_view key) {
  const uint32_t f = classes();
  if ((f & ClassOf(e)) == 0 || (f & (kKeyspace | kKeyevent)) == 0) return;
  bool ring = false;
  {
    std::lock_guard lock(mu_);
    ring = queue_.empty();
    queue_.push_back({e, std::string(key)});
    pending_.store(true, std::memory_order_release);
  }
  if (ring) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t w = write(efd_.get(), &one, sizeof one);
  }
}

size_t KeyspaceEvents::Poll() {
  if (!pending_.load(std::memory_order_acquire)) return 0;
  {
    std::lock_guard lock(mu_);
    taken_.swap(queue_);
    pending_.store(false, std::memory_order_release);
  }
  uint64_t drained = 0;
  [[maybe_unused]] ssize_t r = read(efd_.get(), &drained, sizeof drained);
  const uint32_t f = classes();
  for (const Queued& q : taken_) {
    if (!publisher_) break;
    const std::string_view name = store::ObjectEventName(q.event);
    if (f & kKeyspace) {  // (Redis: the keyspace channel first)
      channel_.assign("__keyspace@0__:").append(q.key);
      publisher_(channel_, name);
      ++published_;
    }
    if (f & kKeyevent) {
      channel_.assign("__keyevent@0__:").append(name);
      publisher_(channel_, q.key);
      ++published_;
    }
  }
  const size_t n = taken_.size();
  taken_.clear();
  return n;
}

}  // namespace goblin::core
