#include "goblin/cluster/directory.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>

#include "goblin/common/log.h"

namespace goblin::cluster {
namespace {
constexpr char kLog[] = "etcd";
}

Directory::Directory(std::unique_ptr<EtcdClient> etcd, std::string prefix)
    : etcd_(std::move(etcd)), prefix_(std::move(prefix)) {}

Result<std::unique_ptr<Directory::Listener>> Directory::Listen() const {
  UniqueFd fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!fd) return ErrnoErr("eventfd", errno);
  std::lock_guard lock(mu_);
  listeners_.push_back(fd.get());
  return std::unique_ptr<Listener>(new Listener(this, std::move(fd)));
}

Directory::Listener::~Listener() {
  std::lock_guard lock(dir_->mu_);
  std::erase(dir_->listeners_, fd_.get());
}

void Directory::Listener::Drain() const {
  uint64_t v;
  (void)!read(fd_.get(), &v, sizeof v);
}

Result<std::shared_ptr<Directory>> Directory::Shared(const EtcdOptions& etcd,
                                                     std::string_view prefix) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<Directory>> open;
  std::string key = MembersPrefix(prefix);
  for (const std::string& e : etcd.endpoints) key += "|" + e;
  const EtcdSecurity& sec = etcd.security;  // (another identity: another client)
  key += fmt::format("|{}|{}|{}|{}", sec.tls, sec.ca_file, sec.cert_file, sec.user);
  std::lock_guard lock(mu);
  if (auto d = open[key].lock()) return d;
  GOBLIN_ASSIGN_OR_RETURN(std::unique_ptr<Directory> d, Open(etcd, prefix));
  std::shared_ptr<Directory> shared(std::move(d));
  open[key] = shared;
  return shared;
}

Result<std::unique_ptr<Directory>> Directory::Open(const EtcdOptions& etcd,
                                                   std::string_view prefix) {
  GOBLIN_ASSIGN_OR_RETURN(auto client, EtcdClient::Open(etcd));
  std::unique_ptr<Directory> d(new Directory(std::move(client), MembersPrefix(prefix)));
  GOBLIN_RETURN_IF_ERROR(d->List());
  d->thread_ = std::thread([p = d.get()] { p->Run(); });
  return d;
}

Directory::~Directory() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    if (watch_) watch_->Cancel();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<const DirectorySnapshot> Directory::snapshot() const {
  std::lock_guard lock(mu_);
  return snapshot_;
}

bool Directory::WaitUntil(const std::function<bool(const std::vector<Member>&)>& pred,
                          std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return snapshot_ && pred(snapshot_->members); });
}

void Directory::Publish() {
  auto s = std::make_shared<DirectorySnapshot>();
  s->members = members_;
  {
    std::lock_guard lock(mu_);
    s->generation = generation_.load(std::memory_order_relaxed) + 1;
    snapshot_ = std::move(s);
    generation_.store(snapshot_->generation, std::memory_order_release);
  }
  cv_.notify_all();
  const uint64_t one = 1;
  std::lock_guard lock(mu_);
  for (int fd : listeners_) (void)!write(fd, &one, sizeof one);
}

VoidResult Directory::List() {
  GOBLIN_ASSIGN_OR_RETURN(auto listing, etcd_->GetPrefix(prefix_));
  std::vector<Member> members;
  for (const EtcdKeyValue& kv : listing.kvs) {
    std::string_view name = std::string_view(kv.key).substr(prefix_.size());
    auto m = DecodeMember(name, kv.value);
    if (!m) {
      if (bad_logged_.insert(kv.key).second) {
        GOBLIN_LOG_WARN(kLog, "skipping {}: {}", kv.key, m.error());
      }
      continue;
    }
    m->mod_revision = kv.mod_revision;
    members.push_back(std::move(*m));
  }
  std::sort(members.begin(), members.end(),
            [](const Member& a, const Member& b) { return a.name < b.name; });
  members_ = std::move(members);
  revision_ = listing.revision;
  Publish();
  return {};
}

void Directory::Apply(const std::vector<EtcdEvent>& events) {
  for (const EtcdEvent& e : events) {
    revision_ = std::max(revision_, e.kv.mod_revision);
    std::string_view name = std::string_view(e.kv.key).substr(prefix_.size());
    auto it = std::lower_bound(members_.begin(), members_.end(), name,
                               [](const Member& m, std::string_view n) { return m.name < n; });
    bool found = it != members_.end() && it->name == name;
    if (e.type == EtcdEvent::Type::kDelete) {
      if (found) members_.erase(it);
      continue;
    }
    auto m = DecodeMember(name, e.kv.value);
    if (!m) {
      if (bad_logged_.insert(e.kv.key).second) {
        GOBLIN_LOG_WARN(kLog, "skipping {}: {}", e.kv.key, m.error());
      }
      if (found) members_.erase(it);
      continue;
    }
    m->mod_revision = e.kv.mod_revision;
    if (found) {
      *it = std::move(*m);
    } else {
      members_.insert(it, std::move(*m));
    }
  }
  Publish();
}

void Directory::Run() {
  std::chrono::milliseconds backoff{100};
  bool listed = true;  // Open listed
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (stop_) return;
    }
    if (!listed) {
      if (auto r = List(); !r) {
        std::unique_lock lock(mu_);
        if (cv_.wait_for(lock, backoff, [this] { return stop_; })) return;
        backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
        continue;
      }
    }
    auto w = etcd_->WatchPrefix(prefix_, revision_ + 1);
    EtcdWatch* watch = nullptr;
    if (w) {
      std::lock_guard lock(mu_);
      if (stop_) return;
      watch_ = std::move(*w);
      watch = watch_.get();
    }
    Status ended = w ? Status() : w.error();
    while (watch != nullptr) {
      auto events = watch->Next();
      if (!events) {
        ended = events.error();
        break;
      }
      backoff = std::chrono::milliseconds(100);
      Apply(*events);
    }
    {
      std::unique_lock lock(mu_);
      watch_.reset();
      if (stop_) return;
      GOBLIN_LOG_WARN(kLog, "watch of {} ended ({}); listing again", prefix_, ended);
      restarts_.fetch_add(1, std::memory_order_relaxed);
      if (cv_.wait_for(lock, backoff, [this] { return stop_; })) return;
    }
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
    listed = false;
  }
}

}  // namespace goblin::cluster
