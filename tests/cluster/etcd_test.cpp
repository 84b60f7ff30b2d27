// The etcd client, a core's registration under a lease and the directory routers watch,
// against a real etcd started by the test (Debian's etcd-server, one member on loopback).
#include <gtest/gtest.h>
#include <poll.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "goblin/cluster/directory.h"
#include "goblin/cluster/etcd_client.h"
#include "goblin/cluster/registration.h"
#include "tests/system/etcd_server.h"

namespace goblin::cluster {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class Etcd : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(test::EtcdServer::Installed()) << "etcd-server is not installed";
    dir_ = fmt::format("{}/etcdtest-{}", test::TmpDir(), getpid());
    fs::remove_all(dir_);
    etcd_ = std::make_unique<test::EtcdServer>(dir_);
    std::string log;
    ASSERT_TRUE(etcd_->Start(&log)) << log;
    auto c = EtcdClient::Open(etcd_->options());
    ASSERT_TRUE(c) << c.error().ToString();
    client_ = std::move(*c);
  }
  void TearDown() override {
    client_.reset();
    etcd_.reset();
    fs::remove_all(dir_);
  }
  Member Core(const std::string& name, uint16_t port) {
    Member m;
    m.name = name;
    m.address = fmt::format("ucx://127.0.0.1:{}", port);
    m.shards = 2;
    m.capacity = 8ull << 30;
    m.zone = "z1";
    return m;
  }
  RegistrationOptions Options(const Member& m, std::chrono::seconds ttl = 2s) {
    RegistrationOptions o;
    o.etcd = etcd_->options();
    o.prefix = "/t";
    o.member = m;
    o.ttl = ttl;
    return o;
  }
  // Polls until `key` is present (or absent), bounded.
  bool WaitKey(const std::string& key, bool present, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      auto kv = client_->Get(key);
      if (kv && kv->has_value() == present) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  // A registration's own state follows its Put: the key can be read from etcd a moment before
  // the registering thread has recorded the lease. Bounded wait for that.
  static bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }

  std::string dir_;
  std::unique_ptr<test::EtcdServer> etcd_;
  std::unique_ptr<EtcdClient> client_;
};

TEST(EtcdEndpoints, ParsesListsAndRejectsWhatItCannotUse) {
  auto e = ParseEtcdEndpoints("http://127.0.0.1:2379,10.0.0.2:2379/,[::1]:2379");
  ASSERT_TRUE(e) << e.error().ToString();
  EXPECT_EQ(*e, (std::vector<std::string>{"127.0.0.1:2379", "10.0.0.2:2379", "[::1]:2379"}));
  EXPECT_FALSE(ParseEtcdEndpoints(""));
  EXPECT_FALSE(ParseEtcdEndpoints("https://a:2379"));  // TLS where the caller cannot set it up
  bool tls = false;
  auto s = ParseEtcdEndpoints("https://a:2379,https://b:2379", &tls);
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_TRUE(tls);
  EXPECT_EQ(*s, (std::vector<std::string>{"a:2379", "b:2379"}));
  ASSERT_TRUE(ParseEtcdEndpoints("a:2379", &tls));
  EXPECT_FALSE(tls);
  auto mixed = ParseEtcdEndpoints("https://a:2379,http://b:2379", &tls);
  ASSERT_FALSE(mixed);
  EXPECT_NE(mixed.error().message().find("mixed"), std::string::npos);
  EXPECT_FALSE(ParseEtcdEndpoints("http://a"));
  EXPECT_FALSE(ParseEtcdEndpoints("a:b"));
  EXPECT_EQ(PrefixRangeEnd("/goblin/cores/"), "/goblin/cores0");
  EXPECT_EQ(PrefixRangeEnd("a\xff"), "b");
}

TEST_F(Etcd, KeysLeasesAndTheirExpiry) {
  auto rev = client_->Put("/t/a", "1");
  ASSERT_TRUE(rev) << rev.error().ToString();
  ASSERT_TRUE(client_->Put("/t/b", "2"));
  ASSERT_TRUE(client_->Put("/u/c", "3"));
  auto got = client_->Get("/t/a");
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ((*got)->value, "1");
  EXPECT_EQ((*got)->mod_revision, *rev);
  auto list = client_->GetPrefix("/t/");
  ASSERT_TRUE(list);
  ASSERT_EQ(list->kvs.size(), 2u);
  EXPECT_EQ(list->kvs[1].key, "/t/b");
  EXPECT_GE(list->revision, *rev);
  EXPECT_EQ(*client_->Delete("/t/a"), 1);
  EXPECT_EQ(*client_->Delete("/t/a"), 0);
  EXPECT_FALSE(client_->Get("/t/a")->has_value());

  auto lease = client_->GrantLease(2s);
  ASSERT_TRUE(lease) << lease.error().ToString();
  ASSERT_TRUE(client_->Put("/t/leased", "x", *lease));
  EXPECT_EQ(client_->Get("/t/leased")->value().lease, *lease);
  auto left = client_->KeepAlive(*lease);
  ASSERT_TRUE(left) << left.error().ToString();
  EXPECT_GE(*left, 1);
  // Not kept alive: gone within its TTL (etcd checks expiry every 500 ms).
  EXPECT_TRUE(WaitKey("/t/leased", false, 5s));
  EXPECT_EQ(*client_->KeepAlive(*lease), 0);  // an expired lease says TTL 0

  auto lease2 = client_->GrantLease(30s);
  ASSERT_TRUE(client_->Put("/t/revoked", "y", *lease2));
  ASSERT_TRUE(client_->RevokeLease(*lease2));
  EXPECT_FALSE(client_->Get("/t/revoked")->has_value());  // at once
  auto again = client_->RevokeLease(*lease2);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code(), StatusCode::kNotFound) << again.error().ToString();
}

TEST_F(Etcd, AnUnreachableEtcdIsAnErrorWithinTheTimeout) {
  etcd_->Kill();
  auto start = std::chrono::steady_clock::now();
  auto r = client_->Put("/t/x", "1");
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().code() == StatusCode::kUnavailable ||
              r.error().code() == StatusCode::kTimeout)
      << r.error().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST_F(Etcd, ARegistrationIsKeptAliveAndRevokedAtStop) {
  auto reg = Registration::Start(Options(Core("core-1", 7100)));
  ASSERT_TRUE(reg) << reg.error().ToString();
  EXPECT_TRUE((*reg)->registered());
  EXPECT_EQ((*reg)->key(), "/t/cores/core-1");
  auto kv = client_->Get("/t/cores/core-1");
  ASSERT_TRUE(kv && kv->has_value());
  auto m = DecodeMember("core-1", (*kv)->value);
  ASSERT_TRUE(m) << m.error().ToString();
  EXPECT_EQ(m->address, "ucx://127.0.0.1:7100");
  EXPECT_EQ(m->shards, 2u);
  EXPECT_EQ(m->zone, "z1");
  // Outlives its 2 s TTL several times over: kept alive.
  std::this_thread::sleep_for(5s);
  EXPECT_TRUE(client_->Get("/t/cores/core-1")->has_value());
  EXPECT_EQ((*reg)->registrations(), 1u);
  (*reg)->Stop();
  EXPECT_FALSE(client_->Get("/t/cores/core-1")->has_value());  // revoked, not left to expire
}

TEST_F(Etcd, ALostLeaseIsReplacedAndTheRecordPutAgain) {
  auto reg = Registration::Start(Options(Core("core-2", 7200)));
  ASSERT_TRUE(reg) << reg.error().ToString();
  int64_t first = (*reg)->lease();
  ASSERT_NE(first, 0);
  // Another party (an operator, etcd losing it) revokes the lease: the record goes with it.
  ASSERT_TRUE(client_->RevokeLease(first));
  EXPECT_FALSE(client_->Get("/t/cores/core-2")->has_value());
  // The next keep-alive (within TTL/3) finds TTL 0 and registers again under a new lease.
  ASSERT_TRUE(WaitKey("/t/cores/core-2", true, 5s));
  EXPECT_NE(client_->Get("/t/cores/core-2")->value().lease, first);
  EXPECT_TRUE(WaitUntil([&] { return (*reg)->registrations() >= 2; }, 2s));
  EXPECT_EQ((*reg)->registrations(), 2u);
}

TEST_F(Etcd, ACoreStartedBeforeEtcdRegistersWhenEtcdComesUp) {
  etcd_->Kill();
  auto reg = Registration::Start(Options(Core("core-3", 7300)));
  ASSERT_TRUE(reg) << reg.error().ToString();  // not an error: it keeps trying
  EXPECT_FALSE((*reg)->registered());
  std::string log;
  ASSERT_TRUE(etcd_->Start(&log)) << log;
  EXPECT_TRUE(WaitKey("/t/cores/core-3", true, 10s));
  EXPECT_TRUE(WaitUntil([&] { return (*reg)->registered(); }, 2s));
}

TEST_F(Etcd, TheDirectorySeesMembersComeAndGoAndRidesOutAnEtcdRestart) {
  auto a = Registration::Start(Options(Core("a", 1)));
  ASSERT_TRUE(a);
  ASSERT_TRUE(client_->Put("/t/cores/broken", "not json"));  // skipped, not fatal
  ASSERT_TRUE(client_->Put("/t/other", "{}"));               // outside the members prefix
  auto dir = Directory::Open(etcd_->options(), "/t");
  ASSERT_TRUE(dir) << dir.error().ToString();
  auto names = [](const std::vector<Member>& ms) {
    std::string s;
    for (const auto& m : ms) s += m.name + ",";
    return s;
  };
  EXPECT_EQ(names((*dir)->snapshot()->members), "a,");
  uint64_t gen = (*dir)->generation();

  auto b = Registration::Start(Options(Core("b", 2)));
  ASSERT_TRUE(b);
  ASSERT_TRUE((*dir)->WaitUntil([&](const auto& ms) { return names(ms) == "a,b,"; }, 5s))
      << names((*dir)->snapshot()->members);
  EXPECT_GT((*dir)->generation(), gen);
  EXPECT_EQ((*dir)->snapshot()->members[1].address, "ucx://127.0.0.1:2");

  (*a)->Stop();
  ASSERT_TRUE((*dir)->WaitUntil([&](const auto& ms) { return names(ms) == "b,"; }, 5s))
      << names((*dir)->snapshot()->members);

  // etcd goes away and comes back with its data: the watch is set up again, and a change
  // made after the restart is seen.
  etcd_->Kill();
  std::this_thread::sleep_for(300ms);
  std::string log;
  ASSERT_TRUE(etcd_->Start(&log)) << log;
  auto c = Registration::Start(Options(Core("c", 3)));
  ASSERT_TRUE(c);
  EXPECT_TRUE((*dir)->WaitUntil([&](const auto& ms) { return names(ms) == "b,c,"; }, 10s))
      << names((*dir)->snapshot()->members);
  EXPECT_GE((*dir)->watch_restarts(), 1u);
}

// Every router of a process shares one Directory per etcd and prefix; each event loop has a
// Listener of its own that becomes readable at every change.
TEST_F(Etcd, ASharedDirectoryWakesEachListener) {
  auto d1 = Directory::Shared(etcd_->options(), "/t");
  auto d2 = Directory::Shared(etcd_->options(), "/t/");
  auto other = Directory::Shared(etcd_->options(), "/u");
  ASSERT_TRUE(d1 && d2 && other) << (d1 ? "" : d1.error().ToString());
  EXPECT_EQ(d1->get(), d2->get());
  EXPECT_NE(d1->get(), other->get());
  auto l1 = (*d1)->Listen(), l2 = (*d2)->Listen();
  ASSERT_TRUE(l1 && l2);
  auto readable = [](const Directory::Listener& l, int ms) {
    pollfd p{l.fd(), POLLIN, 0};
    return poll(&p, 1, ms) == 1;
  };
  EXPECT_FALSE(readable(**l1, 0));
  auto a = Registration::Start(Options(Core("a", 1)));
  ASSERT_TRUE(a);
  EXPECT_TRUE(readable(**l1, 5000));
  EXPECT_TRUE(readable(**l2, 5000));
  (*l1)->Drain();
  EXPECT_FALSE(readable(**l1, 0));
  EXPECT_TRUE(readable(**l2, 0));  // (each its own)
  l2->reset();
  (*a)->Stop();
  EXPECT_TRUE(readable(**l1, 5000));
  // The last user gone, the next Shared opens a new one (and lists etcd afresh).
  l1->reset();
  d1->reset();
  d2->reset();
  auto d3 = Directory::Shared(etcd_->options(), "/t");
  ASSERT_TRUE(d3);
  EXPECT_TRUE((*d3)->WaitUntil([](const auto& ms) { return ms.empty(); }, 5s));
}

// etcd as deployments run it: TLS with client certificates (--client-cert-auth) and auth on
// (`etcdctl auth enable`), a user whose role may write only under /t/, and tokens that live
// 2 s unused (--auth-token-ttl), so the client must renew them.
class SecuredEtcd : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(test::EtcdServer::Installed()) << "etcd-server is not installed";
    dir_ = fmt::format("{}/etcdtls-{}", test::TmpDir(), getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // The client certificate's CN is no etcd user: what it may do comes from the password.
    std::string err = test::MakeEtcdCertificates(dir_, "goblin-client");
    ASSERT_TRUE(err.empty()) << err;
    etcd_ = std::make_unique<test::EtcdServer>(dir_);
    etcd_->UseTls(dir_ + "/ca.pem", dir_ + "/server.pem", dir_ + "/server.key", true);
    etcd_->AddArgs({"--auth-token-ttl", "2"});
    EtcdSecurity sec;
    sec.ca_file = dir_ + "/ca.pem";
    sec.cert_file = dir_ + "/client.pem";
    sec.key_file = dir_ + "/client.key";
    etcd_->set_client_security(sec);
    std::string log;
    ASSERT_TRUE(etcd_->Start(&log)) << log;
    err = etcd_->EnableAuth("goblin", "gpw", "/t/");
    ASSERT_TRUE(err.empty()) << err;
  }
  void TearDown() override {
    etcd_.reset();
    fs::remove_all(dir_);
  }
  // A one-shard member registered under /t with a 2 s lease, through this secured etcd.
  RegistrationOptions MemberOptions(const std::string& name, uint16_t port) const {
    RegistrationOptions ro;
    ro.etcd = etcd_->options();
    ro.prefix = "/t";
    ro.member.name = name;
    ro.member.address = fmt::format("ucx://127.0.0.1:{}", port);
    ro.member.shards = 1;
    ro.member.capacity = 1ull << 30;
    ro.ttl = 2s;
    return ro;
  }
  std::string dir_;
  std::unique_ptr<test::EtcdServer> etcd_;
};

TEST_F(SecuredEtcd, KeysLeasesAndWatchesOverTlsWithAuthTokensRenewed) {
  auto c = EtcdClient::Open(etcd_->options());
  ASSERT_TRUE(c) << c.error().ToString();
  auto& client = **c;
  ASSERT_TRUE(client.Put("/t/a", "1")) << client.Put("/t/a", "1").error().ToString();
  auto got = client.Get("/t/a");
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ((*got)->value, "1");
  EXPECT_EQ(client.authentications(), 1u);
  // The role covers /t/ only: etcd's refusal comes back as such.
  auto other = client.Put("/other", "x");
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().code(), StatusCode::kPermissionDenied) << other.error().ToString();

  // Unused for longer than its TTL, the token is gone from etcd: the next call renews it.
  std::this_thread::sleep_for(3500ms);
  got = client.Get("/t/a");
  ASSERT_TRUE(got) << got.error().ToString();
  EXPECT_TRUE(got->has_value());
  EXPECT_EQ(client.authentications(), 2u);

  // Membership end to end: a registration kept alive past several token lifetimes, seen and
  // seen leaving by a directory whose client is idle between watch events.
  RegistrationOptions ro = MemberOptions("core-s", 7400);
  auto dir = Directory::Open(etcd_->options(), "/t");
  ASSERT_TRUE(dir) << dir.error().ToString();
  auto reg = Registration::Start(ro);
  ASSERT_TRUE(reg) << reg.error().ToString();
  EXPECT_TRUE((*dir)->WaitUntil([](const auto& ms) { return ms.size() == 1; }, 5s));
  std::this_thread::sleep_for(5s);
  EXPECT_EQ((*reg)->registrations(), 1u);  // never lost its lease
  EXPECT_TRUE((*reg)->registered());
  (*reg)->Stop();
  EXPECT_TRUE((*dir)->WaitUntil([](const auto& ms) { return ms.empty(); }, 5s));
}

// etcd forgets its simple tokens when it restarts: a registration and a directory that held
// one carry on after it with new tokens (the record put again if its lease went too).
TEST_F(SecuredEtcd, AfterAnEtcdRestartRegistrationsAndWatchesGetNewTokens) {
  RegistrationOptions ro = MemberOptions("core-r", 7500);
  auto reg = Registration::Start(ro);
  ASSERT_TRUE(reg) << reg.error().ToString();
  auto dir = Directory::Open(etcd_->options(), "/t");
  ASSERT_TRUE(dir) << dir.error().ToString();
  ASSERT_TRUE((*dir)->WaitUntil([](const auto& ms) { return ms.size() == 1; }, 5s));
  etcd_->Kill();
  std::string log;
  ASSERT_TRUE(etcd_->Start(&log)) << log;
  // A member that registers after the restart is seen by the directory that watched before it.
  auto reg2 = Registration::Start(MemberOptions("core-s", 7600));
  ASSERT_TRUE(reg2) << reg2.error().ToString();
  EXPECT_TRUE((*dir)->WaitUntil([](const auto& ms) { return ms.size() == 2; }, 10s))
      << (*dir)->snapshot()->members.size();
  std::this_thread::sleep_for(3s);  // keep-alives across the new tokens' lifetime
  EXPECT_TRUE((*reg)->registered());
  EXPECT_TRUE((*reg2)->registered());
  (*reg)->Stop();
  (*reg2)->Stop();
  EXPECT_TRUE((*dir)->WaitUntil([](const auto& ms) { return ms.empty(); }, 5s));
}

TEST_F(SecuredEtcd, WrongCredentialsAndMissingCertificatesAreClearErrors) {
  // A wrong password: refused as the caller's fault, naming the user.
  EtcdOptions o = etcd_->options();
  o.security.password = "nope";
  auto c = EtcdClient::Open(o);
  ASSERT_TRUE(c);
  auto r = (*c)->Get("/t/a");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), StatusCode::kPermissionDenied) << r.error().ToString();
  EXPECT_NE(r.error().message().find("authenticate as 'goblin'"), std::string::npos)
      << r.error().ToString();
  // No user: the certificate's CN is no etcd user, so nothing may be read.
  o = etcd_->options();
  o.security.user.clear();
  o.security.password.clear();
  c = EtcdClient::Open(o);
  ASSERT_TRUE(c);
  r = (*c)->Get("/t/a");
  EXPECT_FALSE(r);
  // No client certificate where etcd demands one, and plain HTTP/2 to a TLS port: no
  // connection (bounded by the client's deadline).
  o = etcd_->options();
  o.security.cert_file.clear();
  o.security.key_file.clear();
  c = EtcdClient::Open(o);
  ASSERT_TRUE(c);
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE((*c)->Get("/t/a"));
  o = etcd_->options();
  o.security = {};
  c = EtcdClient::Open(o);
  ASSERT_TRUE(c);
  EXPECT_FALSE((*c)->Get("/t/a"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  // Files that are not there, or not PEM, or a certificate without its key: errors at Open.
  o = etcd_->options();
  o.security.ca_file = dir_ + "/missing.pem";
  c = EtcdClient::Open(o);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message().find("missing.pem"), std::string::npos) << c.error().ToString();
  o = etcd_->options();
  o.security.ca_file = dir_ + "/openssl.log";
  EXPECT_FALSE(EtcdClient::Open(o));
  o = etcd_->options();
  o.security.key_file.clear();
  EXPECT_FALSE(EtcdClient::Open(o));
}

TEST(EtcdSecurityEnvironment, ReadsTheVariablesAndSplitsTheUser) {
  const std::string pw = fmt::format("{}/etcdpw-{}", test::TmpDir(), getpid());
  {
    std::ofstream f(pw);
    f << "s3cret\n";
  }
  setenv("GOBLIN_ETCD_CACERT", "/ca.pem", 1);
  setenv("GOBLIN_ETCD_USER", "alice:pw1", 1);
  auto s = EtcdSecurityFromEnvironment();
  ASSERT_TRUE(s) << s.error().ToString();
  EXPECT_EQ(s->ca_file, "/ca.pem");
  EXPECT_EQ(s->user, "alice");
  EXPECT_EQ(s->password, "pw1");
  setenv("GOBLIN_ETCD_USER", "bob", 1);
  setenv("GOBLIN_ETCD_PASSWORD_FILE", pw.c_str(), 1);
  s = EtcdSecurityFromEnvironment();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->user, "bob");
  EXPECT_EQ(s->password, "s3cret");
  setenv("GOBLIN_ETCD_PASSWORD_FILE", (pw + ".missing").c_str(), 1);
  auto missing = EtcdSecurityFromEnvironment();
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("etcd password file"), std::string::npos);
  setenv("GOBLIN_ETCD_CERT", "/c.pem", 1);  // (a certificate without its key: Open refuses)
  for (const char* v : {"GOBLIN_ETCD_CACERT", "GOBLIN_ETCD_USER", "GOBLIN_ETCD_PASSWORD_FILE",
                        "GOBLIN_ETCD_CERT"}) {
    unsetenv(v);
  }
  s = EtcdSecurityFromEnvironment();
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->ca_file.empty() && s->cert_file.empty() && s->key_file.empty() &&
              s->user.empty() && s->password.empty());
  fs::remove(pw);
}

}  // namespace
}  // namespace goblin::cluster
