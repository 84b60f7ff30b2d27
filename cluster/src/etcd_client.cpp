// EtcdClient over gRPC's synchronous API: membership calls are rare (a keep-alive every few
// seconds, a watch event when a core comes or goes), so a thread blocked in a call is the
// simplest correct shape; nothing here is on a data path.
#include "goblin/cluster/etcd_client.h"

#include <grpcpp/grpcpp.h>
#include <netdb.h>
#include <sys/socket.h>

#include <arpa/inet.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "etcd/v3.grpc.pb.h"
#include "goblin/common/file.h"

namespace goblin::cluster {
namespace pb = etcdserverpb;

namespace {

Status FromGrpc(std::string_view what, const grpc::Status& s) {
  StatusCode code = StatusCode::kUnavailable;
  switch (s.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      code = StatusCode::kTimeout;
      break;
    case grpc::StatusCode::NOT_FOUND:
      code = StatusCode::kNotFound;
      break;
    case grpc::StatusCode::INVALID_ARGUMENT:
      code = StatusCode::kInvalidArgument;
      break;
    case grpc::StatusCode::FAILED_PRECONDITION:
      code = StatusCode::kFailedPrecondition;
      break;
    case grpc::StatusCode::CANCELLED:
      code = StatusCode::kAborted;
      break;
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
      code = StatusCode::kPermissionDenied;
      break;
    default:
      break;
  }
  return Status(code, fmt::format("etcd {}: {}", what, s.error_message()));
}

// Resolves every endpoint now and names them all in one gRPC target ("ipv4:a:p,b:p"), so
// round_robin spreads calls over them and skips a dead one. gRPC's URI takes one address
// family: IPv4 addresses when there are any, else IPv6.
Result<std::string> ChannelTarget(const std::vector<std::string>& endpoints) {
  std::vector<std::string> v4, v6;
  for (const std::string& e : endpoints) {
    size_t colon = e.rfind(':');
    std::string host = e.substr(0, colon), port = e.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
      return Err(StatusCode::kInvalidArgument, "etcd endpoint '{}': {}", e, gai_strerror(rc));
    }
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      char ip[INET6_ADDRSTRLEN] = {};
      if (a->ai_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, ip, sizeof ip);
        v4.push_back(fmt::format("{}:{}", ip, port));
      } else if (a->ai_family == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, ip, sizeof ip);
        v6.push_back(fmt::format("[{}]:{}", ip, port));
      }
    }
    freeaddrinfo(res);
  }
  const auto& list = v4.empty() ? v6 : v4;
  if (list.empty()) return Err(StatusCode::kInvalidArgument, "etcd endpoints: no address");
  return fmt::format("{}:{}", v4.empty() ? "ipv6" : "ipv4", fmt::join(list, ","));
}

// A stream that ended early: its status, or "unavailable" when the stream says OK.
grpc::Status StreamEnded(const grpc::Status& s) {
  return s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream ended") : s;
}

void SetDeadline(grpc::ClientContext& ctx, std::chrono::milliseconds timeout) {
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
}

EtcdKeyValue FromPb(const pb::KeyValue& kv) {
  return EtcdKeyValue{kv.key(), kv.value(), kv.mod_revision(), kv.lease()};
}

}  // namespace

Result<std::vector<std::string>> ParseEtcdEndpoints(std::string_view text, bool* tls) {
  std::vector<std::string> out;
  int plain = 0, secure = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string_view e =
        text.substr(pos, comma == std::string_view::npos ? text.npos : comma - pos);
    pos = comma == std::string_view::npos ? text.size() + 1 : comma + 1;
    if (e.empty()) continue;
    if (e.starts_with("https://")) {
      e.remove_prefix(8);
      ++secure;
    } else {
      if (e.starts_with("http://")) e.remove_prefix(7);
      ++plain;
    }
    while (e.ends_with('/')) e.remove_suffix(1);
    size_t colon = e.rfind(':');
    if (colon == std::string_view::npos || colon + 1 == e.size() ||
        e.substr(colon + 1).find_first_not_of("0123456789") != std::string_view::npos ||
        (e.find(':') != colon && !e.starts_with('['))) {
      return Err(StatusCode::kInvalidArgument, "etcd endpoint '{}': want HOST:PORT", e);
    }
    out.emplace_back(e);
  }
  if (out.empty()) return Err(StatusCode::kInvalidArgument, "no etcd endpoint in '{}'", text);
  if (plain != 0 && secure != 0) {
    return Err(StatusCode::kInvalidArgument,
               "etcd endpoints '{}': http:// and https:// mixed (one etcd cluster, one scheme)",
               text);
  }
  if (secure != 0 && tls == nullptr) {
    return Err(StatusCode::kInvalidArgument,
               "etcd endpoints '{}': no https:// here (TLS is turned on by a CA or a client "
               "certificate: GOBLIN_ETCD_CACERT, --etcd-cacert)",
               text);
  }
  if (tls != nullptr) *tls = secure != 0;
  return out;
}

namespace {

Result<std::string> ReadPem(const std::string& path, std::string_view what) {
  auto pem = ReadFile(path);
  if (!pem) return Err(StatusCode::kInvalidArgument, "etcd {} '{}': cannot read", what, path);
  if (pem->find("-----BEGIN ") == std::string::npos) {
    return Err(StatusCode::kInvalidArgument, "etcd {} '{}': not a PEM file", what, path);
  }
  return pem;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

}  // namespace

VoidResult SplitEtcdUser(EtcdSecurity& s, const std::string& password_file) {
  if (size_t colon = s.user.find(':'); colon != std::string::npos) {
    s.password = s.user.substr(colon + 1);
    s.user.resize(colon);
  }
  if (!password_file.empty()) {
    GOBLIN_ASSIGN_OR_RETURN(s.password, ReadSecretFile(password_file, "etcd password file"));
  }
  if (s.user.empty() && !s.password.empty()) {
    return Err(StatusCode::kInvalidArgument, "etcd: a password without a user name");
  }
  return {};
}

Result<EtcdSecurity> EtcdSecurityFromEnvironment() {
  EtcdSecurity s;
  s.ca_file = Env("GOBLIN_ETCD_CACERT");
  s.cert_file = Env("GOBLIN_ETCD_CERT");
  s.key_file = Env("GOBLIN_ETCD_KEY");
  s.user = Env("GOBLIN_ETCD_USER");
  GOBLIN_RETURN_IF_ERROR(SplitEtcdUser(s, Env("GOBLIN_ETCD_PASSWORD_FILE")));
  return s;
}

std::string PrefixRangeEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

// One channel and its stubs. A channel whose connection attempt met an etcd still starting
// (listening, not yet serving) was seen to stay unusable for ~10 s after etcd was ready (gRPC
// 1.51, round_robin): after a call fails with kUnavailable the client makes a new channel
// (at most every 500 ms), each with a subchannel pool of its own, so a restarted etcd is
// used as soon as it answers.
struct EtcdClient::Channel {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Lease::Stub> lease;
  std::unique_ptr<pb::Watch::Stub> watch;
  std::unique_ptr<pb::Auth::Stub> auth;
};

// etcd auth: the token every call carries. Shared with the watches, which drop a token etcd
// refused so the next call authenticates again.
struct EtcdClient::Token {
  std::mutex mu;
  std::string token;
  void Forget(const std::string& bad) {
    std::lock_guard lock(mu);
    if (token == bad) token.clear();
  }
};

struct EtcdClient::Impl {
  std::string target;
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string tls_name;  // the name every member's certificate is checked against
  std::string user, password;
  std::shared_ptr<Token> token = std::make_shared<Token>();
  std::atomic<uint64_t> authentications{0};
  std::mutex mu;
  std::shared_ptr<Channel> current;
  std::chrono::steady_clock::time_point made;

  std::shared_ptr<Channel> Make() const {
    grpc::ChannelArguments args;
    args.SetLoadBalancingPolicyName("round_robin");
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    // A watch waits for hours without a message: keep-alive pings find a dead etcd (etcd
    // accepts pings every 5 s and more seldom; faster ones get the connection closed).
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
    if (!tls_name.empty()) args.SetSslTargetNameOverride(tls_name);
    auto c = std::make_shared<Channel>();
    c->channel = grpc::CreateCustomChannel(target, credentials, args);
    c->kv = pb::KV::NewStub(c->channel);
    c->lease = pb::Lease::NewStub(c->channel);
    c->watch = pb::Watch::NewStub(c->channel);
    c->auth = pb::Auth::NewStub(c->channel);
    return c;
  }
  std::shared_ptr<Channel> Get() {
    std::lock_guard lock(mu);
    return current;
  }
  // After a call on `used` ended with `s`; returns `s`.
  grpc::Status Checked(const std::shared_ptr<Channel>& used, grpc::Status s) {
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE) Failed(used);
    return s;
  }
  void Failed(const std::shared_ptr<Channel>& used) {
    std::lock_guard lock(mu);
    auto now = std::chrono::steady_clock::now();
    if (used != current || now - made < std::chrono::milliseconds(500)) return;
    current = Make();
    made = now;
  }

  // The token to send (authenticating first when there is none); empty without auth.
  Result<std::string> CurrentToken(const std::shared_ptr<Channel>& ch,
                                   std::chrono::milliseconds timeout) {
    if (user.empty()) return std::string();
    {
      std::lock_guard lock(token->mu);
      if (!token->token.empty()) return token->token;
    }
    grpc::ClientContext ctx;
    SetDeadline(ctx, timeout);
    pb::AuthenticateRequest req;
    req.set_name(user);
    req.set_password(password);
    pb::AuthenticateResponse resp;
    grpc::Status s = Checked(ch, ch->auth->Authenticate(&ctx, req, &resp));
    if (!s.ok()) {
      Status st = FromGrpc(fmt::format("authenticate as '{}'", user), s);
      // etcd says a wrong name or password with InvalidArgument, auth being off with
      // FailedPrecondition: both are the caller's credentials, not etcd's availability.
      if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
          s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
        st = Status(StatusCode::kPermissionDenied, st.message());
      }
      return Err(std::move(st));
    }
    authentications.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(token->mu);
    token->token = resp.token();
    return token->token;
  }

  // One unary call with the client's deadline and token; a token etcd no longer knows
  // (expired: etcd's simple tokens live 5 minutes unused) is renewed and the call made again
  // once.
  template <typename Call>
  VoidResult Unary(std::string_view what, std::chrono::milliseconds timeout, Call&& call) {
    for (int attempt = 0;; ++attempt) {
      auto ch = Get();
      GOBLIN_ASSIGN_OR_RETURN(std::string t, CurrentToken(ch, timeout));
      grpc::ClientContext ctx;
      SetDeadline(ctx, timeout);
      if (!t.empty()) ctx.AddMetadata("token", t);
      grpc::Status s = Checked(ch, call(ctx, *ch));
      if (s.ok()) return {};
      if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED && !t.empty()) {
        token->Forget(t);
        if (attempt == 0) continue;
      }
      return Err(FromGrpc(what, s));
    }
  }
};

EtcdClient::EtcdClient(EtcdOptions options, std::unique_ptr<Impl> impl)
    : options_(std::move(options)), impl_(std::move(impl)) {}
EtcdClient::~EtcdClient() = default;

uint64_t EtcdClient::authentications() const {
  return impl_->authentications.load(std::memory_order_relaxed);
}

Result<std::unique_ptr<EtcdClient>> EtcdClient::Open(const EtcdOptions& options) {
  if (options.endpoints.empty()) return Err(StatusCode::kInvalidArgument, "no etcd endpoint");
  GOBLIN_ASSIGN_OR_RETURN(std::string target, ChannelTarget(options.endpoints));
  auto impl = std::make_unique<Impl>();
  impl->target = target;
  const EtcdSecurity& sec = options.security;
  if (sec.cert_file.empty() != sec.key_file.empty()) {
    return Err(StatusCode::kInvalidArgument,
               "etcd: a client certificate needs its key and a key its certificate");
  }
  if (sec.tls || !sec.ca_file.empty() || !sec.cert_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!sec.ca_file.empty()) {
      GOBLIN_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(sec.ca_file, "CA certificate"));
    }
    if (!sec.cert_file.empty()) {
      GOBLIN_ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadPem(sec.cert_file, "client certificate"));
      GOBLIN_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPem(sec.key_file, "client key"));
    }
    impl->credentials = grpc::SslCredentials(ssl);
    // The host as the first endpoint names it: one channel serves every member, so their
    // certificates must all carry this name (etcd's own guides put every member's names and
    // addresses in each).
    std::string_view host = options.endpoints.front();
    host = host.substr(0, host.rfind(':'));
    if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    impl->tls_name = std::string(host);
  } else {
    impl->credentials = grpc::InsecureChannelCredentials();
  }
  impl->user = sec.user;
  impl->password = sec.password;
  impl->current = impl->Make();
  impl->made = std::chrono::steady_clock::now();
  return std::unique_ptr<EtcdClient>(new EtcdClient(options, std::move(impl)));
}

Result<int64_t> EtcdClient::Put(std::string_view key, std::string_view value, int64_t lease) {
  pb::PutRequest req;
  req.set_key(std::string(key));
  req.set_value(std::string(value));
  req.set_lease(lease);
  pb::PutResponse resp;
  GOBLIN_RETURN_IF_ERROR(impl_->Unary("put", options_.timeout, [&](auto& ctx, Channel& ch) {
    return ch.kv->Put(&ctx, req, &resp);
  }));
  return resp.header().revision();
}

Result<std::optional<EtcdKeyValue>> EtcdClient::Get(std::string_view key) {
  pb::RangeRequest req;
  req.set_key(std::string(key));
  pb::RangeResponse resp;
  GOBLIN_RETURN_IF_ERROR(impl_->Unary("get", options_.timeout, [&](auto& ctx, Channel& ch) {
    return ch.kv->Range(&ctx, req, &resp);
  }));
  if (resp.kvs_size() == 0) return std::optional<EtcdKeyValue>();
  return std::optional<EtcdKeyValue>(FromPb(resp.kvs(0)));
}

Result<EtcdClient::Listing> EtcdClient::GetPrefix(std::string_view prefix) {
  pb::RangeRequest req;
  req.set_key(std::string(prefix));
  req.set_range_end(PrefixRangeEnd(prefix));
  pb::RangeResponse resp;
  GOBLIN_RETURN_IF_ERROR(impl_->Unary("range", options_.timeout, [&](auto& ctx, Channel& ch) {
    return ch.kv->Range(&ctx, req, &resp);
  }));
  Listing out;
  out.revision = resp.header().revision();
  out.kvs.reserve(static_cast<size_t>(resp.kvs_size()));
  for (const auto& kv : resp.kvs()) out.kvs.push_back(FromPb(kv));
  return out;
}

Result<int64_t> EtcdClient::Delete(std::string_view key) {
  pb::DeleteRangeRequest req;
  req.set_key(std::string(key));
  pb::DeleteRangeResponse resp;
  GOBLIN_RETURN_IF_ERROR(impl_->Unary("delete", options_.timeout, [&](auto& ctx, Channel& ch) {
    return ch.kv->DeleteRange(&ctx, req, &resp);
  }));
  return resp.deleted();
}

Result<int64_t> EtcdClient::GrantLease(std::chrono::seconds ttl) {
  pb::LeaseGrantRequest req;
  req.set_ttl(std::max<int64_t>(1, ttl.count()));
  pb::LeaseGrantResponse resp;
  GOBLIN_RETURN_IF_ERROR(impl_->Unary("lease grant", options_.timeout, [&](auto& ctx, Channel& ch) {
    return ch.lease->LeaseGrant(&ctx, req, &resp);
  }));
  if (!resp.error().empty())
    return Err(StatusCode::kUnavailable, "etcd lease grant: {}", resp.error());
  return resp.id();
}

Result<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  auto ch = impl_->Get();
  GOBLIN_ASSIGN_OR_RETURN(std::string token, impl_->CurrentToken(ch, options_.timeout));
  grpc::ClientContext ctx;
  SetDeadline(ctx, options_.timeout);
  if (!token.empty()) ctx.AddMetadata("token", token);
  auto stream = ch->lease->LeaseKeepAlive(&ctx);
  pb::LeaseKeepAliveRequest req;
  req.set_id(lease);
  pb::LeaseKeepAliveResponse resp;
  bool ok = stream->Write(req) && stream->Read(&resp);
  stream->WritesDone();
  grpc::Status s = stream->Finish();
  if (!ok) {
    s = StreamEnded(s);
    if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED) impl_->token->Forget(token);
    impl_->Failed(ch);
    return Err(FromGrpc("lease keep-alive", s));
  }
  return resp.ttl();
}

VoidResult EtcdClient::RevokeLease(int64_t lease) {
  pb::LeaseRevokeRequest req;
  req.set_id(lease);
  pb::LeaseRevokeResponse resp;
  return impl_->Unary("lease revoke", options_.timeout, [&](auto& ctx, Channel& ch) {
    return ch.lease->LeaseRevoke(&ctx, req, &resp);
  });
}

struct EtcdWatch::Impl {
  std::shared_ptr<EtcdClient::Channel> channel;  // outlives the stream
  std::shared_ptr<EtcdClient::Token> tokens;
  std::string token;  // the one the stream was opened with (empty: no auth)
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<pb::WatchRequest, pb::WatchResponse>> stream;
  std::string prefix;
  bool ended = false;
};

EtcdWatch::EtcdWatch(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

EtcdWatch::~EtcdWatch() {
  if (!impl_->ended) {
    impl_->ctx.TryCancel();
    (void)impl_->stream->Finish();
  }
}

void EtcdWatch::Cancel() { impl_->ctx.TryCancel(); }

Result<std::unique_ptr<EtcdWatch>> EtcdClient::WatchPrefix(std::string_view prefix,
                                                           int64_t start_revision) {
  auto impl = std::make_unique<EtcdWatch::Impl>();
  impl->prefix = std::string(prefix);
  auto ch = impl_->Get();
  impl->channel = ch;
  GOBLIN_ASSIGN_OR_RETURN(impl->token, impl_->CurrentToken(ch, options_.timeout));
  impl->tokens = impl_->token;
  if (!impl->token.empty()) impl->ctx.AddMetadata("token", impl->token);
  impl->stream = ch->watch->Watch(&impl->ctx);
  pb::WatchRequest req;
  auto* create = req.mutable_create_request();
  create->set_key(std::string(prefix));
  create->set_range_end(PrefixRangeEnd(prefix));
  create->set_start_revision(start_revision);
  if (!impl->stream->Write(req)) {
    grpc::Status s = impl->stream->Finish();
    impl->ended = true;
    s = StreamEnded(s);
    if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED) impl->tokens->Forget(impl->token);
    impl_->Failed(ch);
    return Err(FromGrpc("watch", s));
  }
  return std::unique_ptr<EtcdWatch>(new EtcdWatch(std::move(impl)));
}

Result<std::vector<EtcdEvent>> EtcdWatch::Next() {
  if (impl_->ended) return Err(StatusCode::kAborted, "etcd watch of '{}' ended", impl_->prefix);
  pb::WatchResponse resp;
  while (impl_->stream->Read(&resp)) {
    if (resp.canceled()) {
      // etcd cancels a watch whose token it no longer accepts ("permission denied"): the next
      // call authenticates again rather than sending that token forever.
      if (!impl_->token.empty() && resp.compact_revision() == 0) {
        impl_->tokens->Forget(impl_->token);
      }
      impl_->ctx.TryCancel();
      (void)impl_->stream->Finish();
      impl_->ended = true;
      return Err(
          resp.compact_revision() != 0 ? StatusCode::kFailedPrecondition : StatusCode::kAborted,
          "etcd watch of '{}' cancelled{}{}", impl_->prefix,
          resp.compact_revision() != 0
              ? fmt::format(" (revision compacted to {})", resp.compact_revision())
              : std::string(),
          resp.cancel_reason().empty() ? "" : ": " + resp.cancel_reason());
    }
    if (resp.events_size() == 0) continue;  // created, progress
    std::vector<EtcdEvent> out;
    out.reserve(static_cast<size_t>(resp.events_size()));
    for (const auto& e : resp.events()) {
      EtcdEvent ev;
      ev.type = e.type() == pb::Event::DELETE ? EtcdEvent::Type::kDelete : EtcdEvent::Type::kPut;
      ev.kv = FromPb(e.kv());
      out.push_back(std::move(ev));
    }
    return out;
  }
  grpc::Status s = impl_->stream->Finish();
  impl_->ended = true;
  if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED && impl_->tokens) {
    impl_->tokens->Forget(impl_->token);
  }
  return Err(FromGrpc("watch", StreamEnded(s)));
}

}  // namespace goblin::cluster
