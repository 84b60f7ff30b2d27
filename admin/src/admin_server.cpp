#include "goblin/admin/admin_server.h"

#include <sys/stat.h>

#include <grpcpp/resource_quota.h>

namespace goblin::admin {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

bool ConstantTimeEqual(std::string_view a, std::string_view b) {
  if (b.empty()) return false;
  unsigned char diff = a.size() != b.size() ? 1 : 0;
  for (size_t i = 0, n = std::max(a.size(), b.size()); i < n; ++i) {
    diff |= static_cast<unsigned char>((i < a.size() ? a[i] : 0) ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

}  // namespace

grpc::Status Authorize(const grpc::ServerContext& context, const std::string& token) {
  const std::string peer = context.peer();
  if (peer.starts_with("unix:")) return grpc::Status::OK;  // the socket's mode decided
  auto md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "goblin admin over TCP: send 'authorization: Bearer TOKEN' metadata");
  }
  std::string_view v(it->second.data(), it->second.size());
  constexpr std::string_view kBearer = "Bearer ";
  if (!v.starts_with(kBearer) || !ConstantTimeEqual(v.substr(kBearer.size()), token)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "goblin admin: wrong token");
  }
  return grpc::Status::OK;
}

void HealthService::SetServing(bool serving) {
  std::lock_guard lock(mu_);
  if (serving_ == serving) return;
  serving_ = serving;
  ++version_;
  changed_.notify_all();
}

void HealthService::Shutdown() {
  std::lock_guard lock(mu_);
  shutdown_ = true;
  changed_.notify_all();
}

HealthCheckResponse::ServingStatus HealthService::StatusFor(const std::string& service) const {
  if (!service.empty() && service != "goblin.admin.v1.Admin")
    return HealthCheckResponse::SERVICE_UNKNOWN;
  return serving_ ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

grpc::Status HealthService::Check(grpc::ServerContext* context, const HealthCheckRequest* req,
                                  HealthCheckResponse* resp) {
  if (auto a = Authorize(*context, token_); !a.ok()) return a;
  std::lock_guard lock(mu_);
  auto st = StatusFor(req->service());
  if (st == HealthCheckResponse::SERVICE_UNKNOWN) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service " + req->service());
  }
  resp->set_status(st);
  return grpc::Status::OK;
}

grpc::Status HealthService::Watch(grpc::ServerContext* context, const HealthCheckRequest* req,
                                  grpc::ServerWriter<HealthCheckResponse>* writer) {
  if (auto a = Authorize(*context, token_); !a.ok()) return a;
  std::unique_lock lock(mu_);
  uint64_t sent = UINT64_MAX;
  while (!shutdown_ && !context->IsCancelled()) {
    if (sent != version_) {
      HealthCheckResponse r;
      r.set_status(StatusFor(req->service()));
      sent = version_;
      lock.unlock();
      bool ok = writer->Write(r);
      lock.lock();
      if (!ok) break;
      continue;
    }
    // Woken by a change; checks for cancellation at least every 200 ms.
    changed_.wait_for(lock, std::chrono::milliseconds(200));
  }
  return grpc::Status::OK;
}

Result<std::unique_ptr<AdminServer>> AdminServer::Start(const AdminOptions& options,
                                                        grpc::Service* admin) {
  if (options.unix_path.empty() && options.tcp_listen.empty()) {
    return Err(StatusCode::kInvalidArgument, "the admin server needs a unix path or a TCP address");
  }
  if (!options.tcp_listen.empty() && options.token.empty()) {
    return Err(StatusCode::kInvalidArgument,
               "an admin TCP listener needs a token (--admin-token-file)");
  }
  std::unique_ptr<AdminServer> s(new AdminServer());
  s->options_ = options;
  s->health_ = std::make_unique<HealthService>(options.token);
  grpc::ServerBuilder b;
  if (!options.unix_path.empty()) {
    ::unlink(options.unix_path.c_str());  // a socket left by a crash
    b.AddListeningPort("unix:" + options.unix_path, grpc::InsecureServerCredentials());
  }
  if (!options.tcp_listen.empty()) {
    b.AddListeningPort(options.tcp_listen, grpc::InsecureServerCredentials(), &s->tcp_port_);
  }
  grpc::ResourceQuota quota("goblin-admin");
  quota.SetMaxThreads(std::max(2, options.max_threads));
  b.SetResourceQuota(quota);
  b.SetMaxReceiveMessageSize(1 << 20);
  b.RegisterService(admin);
  b.RegisterService(s->health_.get());
  s->server_ = b.BuildAndStart();
  if (!s->server_) {
    return Err(StatusCode::kUnavailable, "cannot listen for admin calls on {}{}{}",
               options.unix_path.empty() ? "" : "unix:" + options.unix_path,
               options.unix_path.empty() || options.tcp_listen.empty() ? "" : " and ",
               options.tcp_listen);
  }
  if (!options.tcp_listen.empty() && s->tcp_port_ == 0) {
    s->server_->Shutdown();
    return Err(StatusCode::kUnavailable, "cannot listen for admin calls on {}", options.tcp_listen);
  }
  if (!options.unix_path.empty() && chmod(options.unix_path.c_str(), options.unix_mode) != 0) {
    s->server_->Shutdown();
    return Err(ErrnoStatus("chmod " + options.unix_path, errno));
  }
  return s;
}

void AdminServer::Shutdown(std::chrono::milliseconds grace) {
  if (shut_down_) return;
  shut_down_ = true;
  if (!server_) return;  // (it never started: Start's error path destroys it)
  health_->SetServing(false);
  health_->Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + grace);
  server_->Wait();
  if (!options_.unix_path.empty()) ::unlink(options_.unix_path.c_str());
}

AdminServer::~AdminServer() { Shutdown(std::chrono::milliseconds(0)); }

}  // namespace goblin::admin
