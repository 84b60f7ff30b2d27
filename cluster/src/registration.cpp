#include "goblin/cluster/registration.h"

#include "goblin/common/log.h"

namespace goblin::cluster {
namespace {
constexpr char kLog[] = "etcd";
}

Registration::Registration(RegistrationOptions options, std::unique_ptr<EtcdClient> etcd)
    : options_(std::move(options)), etcd_(std::move(etcd)) {
  key_ = MemberKey(options_.prefix, options_.member.name);
  value_ = EncodeMember(options_.member);
}

Result<std::unique_ptr<Registration>> Registration::Start(const RegistrationOptions& options) {
  if (options.member.name.empty() || options.member.name.find('/') != std::string::npos) {
    return Err(StatusCode::kInvalidArgument, "member name '{}': empty or with '/'",
               options.member.name);
  }
  if (options.member.address.empty()) {
    return Err(StatusCode::kInvalidArgument, "member '{}': no address to advertise",
               options.member.name);
  }
  if (options.ttl.count() < 1) return Err(StatusCode::kInvalidArgument, "lease TTL below 1 s");
  GOBLIN_ASSIGN_OR_RETURN(auto etcd, EtcdClient::Open(options.etcd));
  std::unique_ptr<Registration> r(new Registration(options, std::move(etcd)));
  r->Register();  // at once, so a core that starts with etcd up is visible when it says so
  r->thread_ = std::thread([p = r.get()] { p->Run(); });
  return r;
}

Registration::~Registration() { Stop(); }

bool Registration::Register() {
  auto lease = etcd_->GrantLease(options_.ttl);
  Result<int64_t> put = lease ? etcd_->Put(key_, value_, *lease) : Err(lease.error());
  if (!put) {
    if (lease) (void)etcd_->RevokeLease(*lease);
    if (!outage_logged_) {
      GOBLIN_LOG_WARN(kLog, "cannot register {} in etcd ({}); retrying every second", key_,
                      put.error());
      outage_logged_ = true;
    }
    return false;
  }
  lease_.store(*lease, std::memory_order_release);
  uint64_t n = registrations_.fetch_add(1, std::memory_order_relaxed) + 1;
  GOBLIN_LOG_INFO(kLog, "{} {} in etcd as {} (lease {:x}, TTL {} s)",
                  n == 1 ? "registered" : "registered again", options_.member.address, key_, *lease,
                  options_.ttl.count());
  outage_logged_ = false;
  return true;
}

bool Registration::WaitFor(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  return !cv_.wait_for(lock, d, [this] { return stop_; });
}

void Registration::Run() {
  const auto renew = std::chrono::milliseconds(options_.ttl) / 3;
  const std::chrono::milliseconds retry{1000};
  for (;;) {
    if (lease_.load(std::memory_order_relaxed) == 0) {
      if (!WaitFor(Register() ? renew : retry)) return;
      continue;
    }
    auto left = etcd_->KeepAlive(lease_.load(std::memory_order_relaxed));
    if (!left) {
      if (!outage_logged_) {
        GOBLIN_LOG_WARN(kLog, "etcd keep-alive of {} failed ({}); retrying every second", key_,
                        left.error());
        outage_logged_ = true;
      }
      if (!WaitFor(retry)) return;
      continue;
    }
    if (*left <= 0) {
      GOBLIN_LOG_WARN(kLog,
                      "the lease of {} expired (etcd unreachable longer than {} s?): "
                      "registering again",
                      key_, options_.ttl.count());
      lease_.store(0, std::memory_order_release);
      continue;
    }
    if (outage_logged_) GOBLIN_LOG_INFO(kLog, "etcd answers again; {} kept its lease", key_);
    outage_logged_ = false;
    if (!WaitFor(renew)) return;
  }
}

void Registration::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (int64_t lease = lease_.exchange(0); lease != 0) {
    if (auto r = etcd_->RevokeLease(lease); !r) {
      GOBLIN_LOG_WARN(kLog, "could not revoke the lease of {} ({}): it expires within {} s", key_,
                      r.error(), options_.ttl.count());
    } else {
      GOBLIN_LOG_INFO(kLog, "left etcd: {} revoked", key_);
    }
  }
}

}  // namespace goblin::cluster
