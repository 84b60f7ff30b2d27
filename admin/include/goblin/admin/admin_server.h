// AdminServer: goblin-core's gRPC admin endpoint. Listens on a unix socket (file mode 0600
// by default: file permissions decide who may call) and, when asked, on TCP, where every
// call must carry the token as metadata "authorization: Bearer TOKEN" (compared in constant
// time; refused with UNAUTHENTICATED otherwise). Serves the caller's goblin.admin.v1.Admin
// implementation and the standard grpc.health.v1.Health service (SERVING until
// SetServing(false), e.g. at shutdown; Watch streams changes).
// Threading: gRPC's own threads run the services; Authorize() and SetServing() are
// thread-safe; Start/Shutdown from the owning thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/grpcpp.h>

#include "goblin/common/status.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace goblin::admin {

struct AdminOptions {
  std::string unix_path;  // "" : no unix listener
  unsigned unix_mode = 0600;
  std::string tcp_listen;  // HOST:PORT ("" : none; port 0: any free port)
  std::string token;       // required (non-empty) with tcp_listen
  int max_threads = 4;     // gRPC threads serving calls
};

// OK for calls on the unix socket; a TCP call must present `token`.
grpc::Status Authorize(const grpc::ServerContext& context, const std::string& token);

class HealthService final : public grpc::health::v1::Health::Service {
 public:
  explicit HealthService(std::string token) : token_(std::move(token)) {}
  void SetServing(bool serving);
  // Ends Watch streams (so a server shutdown does not wait for them).
  void Shutdown();
  grpc::Status Check(grpc::ServerContext* context, const grpc::health::v1::HealthCheckRequest* req,
                     grpc::health::v1::HealthCheckResponse* resp) override;
  grpc::Status Watch(grpc::ServerContext* context, const grpc::health::v1::HealthCheckRequest* req,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>* writer) override;

 private:
  grpc::health::v1::HealthCheckResponse::ServingStatus StatusFor(const std::string& service) const;
  const std::string token_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  bool serving_ = true;
  bool shutdown_ = false;
  uint64_t version_ = 0;
};

class AdminServer {
 public:
  // Binds the listeners and starts serving `admin` (not owned; outlives the server).
  static Result<std::unique_ptr<AdminServer>> Start(const AdminOptions& options,
                                                    grpc::Service* admin);
  ~AdminServer();
  void SetServing(bool serving) { health_->SetServing(serving); }
  // Stops accepting calls; waits up to `grace` for calls in progress.
  void Shutdown(std::chrono::milliseconds grace);
  int tcp_port() const { return tcp_port_; }  // the bound port (0: no TCP listener)
  const std::string& unix_path() const { return options_.unix_path; }

 private:
  AdminServer() = default;
  AdminOptions options_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<grpc::Server> server_;
  int tcp_port_ = 0;
  bool shut_down_ = false;
};

}  // namespace goblin::admin
