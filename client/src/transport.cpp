#include "goblin/client/transport.h"

#include "goblin/common/config.h"
#include "goblin/ring/client.h"
#if GOBLIN_HAVE_UCX
#include "goblin/verbs/ucx_client.h"
#endif

namespace goblin::client {
namespace {

class RingTransport final : public Transport {
 public:
  explicit RingTransport(std::unique_ptr<ring::RingClient> r) : ring_(std::move(r)) {}
  uint64_t client_id() const override { return ring_->client_id(); }
  uint16_t shard_count() const override { return ring_->shard_count(); }
  uint32_t server_pid() const override { return ring_->server_pid(); }
  uint32_t max_message() const override { return ring_->max_message(); }
  VoidResult Send(std::span<const uint8_t> msg, std::chrono::nanoseconds timeout) override {
    return ring_->Send(msg, timeout);
  }
  uint8_t* Reserve(uint32_t max) override { return ring_->Reserve(max); }
  void Commit(uint32_t len) override { ring_->Commit(len); }
  void WaitForRoom(std::chrono::nanoseconds timeout) override { ring_->WaitForRoom(timeout); }
  Result<size_t> Poll(FunctionRef<void(std::span<const uint8_t>)> fn, size_t max) override {
    return ring_->Poll([&](std::span<const uint8_t> m) { fn(m); }, max);
  }
  Result<bool> Wait(std::chrono::nanoseconds timeout) override { return ring_->Wait(timeout); }
  int wake_fd() const override { return ring_->doorbell_fd(); }
  int liveness_fd() const override { return ring_->socket_fd(); }
  bool PrepareSleep(bool want_space) override { return ring_->PrepareSleep(want_space); }
  void FinishSleep() override { ring_->FinishSleep(); }
  VoidResult CheckAlive() override { return ring_->CheckAlive(); }
  bool local() const override { return true; }
  VoidResult ReceiveSideFrame(std::vector<uint8_t>* msg, std::vector<UniqueFd>* fds,
                              std::chrono::milliseconds timeout) override {
    return ring_->ReceiveSideFrame(msg, fds, timeout);
  }
  VoidResult AttachRemotePools(std::span<const uint8_t>) override {
    return Err(StatusCode::kUnimplemented, "the ring plane maps the pools");
  }
  VoidResult ReadRemote(uint8_t, uint64_t, std::span<uint8_t>, std::chrono::nanoseconds) override {
    return Err(StatusCode::kUnimplemented, "the ring plane maps the pools");
  }

 private:
  std::unique_ptr<ring::RingClient> ring_;
};

#if GOBLIN_HAVE_UCX
class UcxTransport final : public Transport {
 public:
  explicit UcxTransport(std::unique_ptr<verbs::UcxClient> u) : ucx_(std::move(u)) {}
  uint64_t client_id() const override { return ucx_->client_id(); }
  uint16_t shard_count() const override { return ucx_->shard_count(); }
  std::string shard_addresses() const override { return ucx_->shard_addresses(); }
  uint32_t server_pid() const override { return ucx_->server_pid(); }
  uint32_t max_message() const override { return ucx_->max_message(); }
  VoidResult Send(std::span<const uint8_t> msg, std::chrono::nanoseconds timeout) override {
    return ucx_->Send(msg, timeout);
  }
  uint8_t* Reserve(uint32_t max) override { return ucx_->Reserve(max); }
  void Commit(uint32_t len) override { ucx_->Commit(len); }
  void WaitForRoom(std::chrono::nanoseconds timeout) override { ucx_->WaitForRoom(timeout); }
  bool sends_payload_by_reference() const override { return true; }
  uint32_t put_alignment() const override { return ucx_->put_alignment(); }
  uint32_t put_head_cut() const override { return ucx_->put_head_cut(); }
  VoidResult SendWithPayload(std::span<const uint8_t> header, std::span<const uint8_t> payload,
                             std::chrono::nanoseconds timeout) override {
    return ucx_->SendWithPayload(header, payload, timeout);
  }
  VoidResult RegisterPayloads(std::span<const uint8_t> bytes) override {
    return ucx_->RegisterPayloads(bytes);
  }
  VoidResult FlushPayloads(std::chrono::nanoseconds timeout) override {
    return ucx_->Flush(timeout);
  }
  Result<size_t> Poll(FunctionRef<void(std::span<const uint8_t>)> fn, size_t max) override {
    return ucx_->Poll(fn, max);
  }
  Result<bool> Wait(std::chrono::nanoseconds timeout) override { return ucx_->Wait(timeout); }
  DirectFn* SetDirect(DirectFn* fn) override { return ucx_->SetDirect(fn); }
  size_t TakeDirect() override { return ucx_->TakeDirect(); }
  int wake_fd() const override { return ucx_->wake_fd(); }
  int liveness_fd() const override { return -1; }
  bool PrepareSleep(bool) override { return ucx_->PrepareSleep(); }
  void FinishSleep() override { ucx_->FinishSleep(); }
  VoidResult CheckAlive() override { return ucx_->CheckAlive(); }
  bool local() const override { return false; }
  bool may_map_in_place() const override { return ucx_->shared_memory(); }
  VoidResult ReceiveSideFrame(std::vector<uint8_t>*, std::vector<UniqueFd>*,
                              std::chrono::milliseconds) override {
    return Err(StatusCode::kUnimplemented, "no side frames over UCX");
  }
  VoidResult AttachRemotePools(std::span<const uint8_t> reply) override {
    return ucx_->AttachRemotePools(reply);
  }
  VoidResult ReadRemote(uint8_t kind, uint64_t offset, std::span<uint8_t> dst,
                        std::chrono::nanoseconds timeout) override {
    return ucx_->ReadRemote(kind, offset, dst, timeout);
  }

 private:
  std::unique_ptr<verbs::UcxClient> ucx_;
};
#endif

}  // namespace

Result<std::unique_ptr<Transport>> ConnectRing(const std::string& socket_path,
                                               const TransportOptions& options) {
  ring::ClientOptions ro;
  ro.name = options.name;
  ro.ring_bytes = options.ring_bytes;
  ro.peer_kind = options.peer_kind;
  ro.connect_timeout = options.timeout;
  ro.shard = options.shard;
  ro.spin = options.spin;
  ro.spin_yield = options.spin_yield;
  GOBLIN_ASSIGN_OR_RETURN(auto r, ring::RingClient::Connect(socket_path, ro));
  return std::unique_ptr<Transport>(new RingTransport(std::move(r)));
}

Result<std::unique_ptr<Transport>> ConnectUcx(const std::string& host_port,
                                              const TransportOptions& options) {
#if GOBLIN_HAVE_UCX
  verbs::UcxClientOptions uo;
  uo.name = options.name;
  uo.peer_kind = options.peer_kind;
  uo.timeout = options.timeout;
  uo.shard = options.shard;
  uo.busy_poll = options.spin;
  uo.spin_yield = options.spin_yield;
  uo.handed_over = options.handed_over;
  GOBLIN_ASSIGN_OR_RETURN(auto u, verbs::UcxClient::Connect(host_port, uo));
  return std::unique_ptr<Transport>(new UcxTransport(std::move(u)));
#else
  (void)host_port;
  (void)options;
  return Err(StatusCode::kUnimplemented, "this libgoblin was built without UCX");
#endif
}

namespace {

// HOST of HOST:PORT ([v6]:port too).
std::string_view HostOf(std::string_view host_port) {
  size_t colon = host_port.rfind(':');
  return colon == std::string_view::npos ? host_port : host_port.substr(0, colon);
}

}  // namespace

Result<std::vector<std::unique_ptr<Transport>>> ConnectShards(bool ucx, const std::string& address,
                                                              const TransportOptions& options) {
  std::vector<std::unique_ptr<Transport>> out;
  TransportOptions o = options;
  o.shard = 0;
  GOBLIN_ASSIGN_OR_RETURN(auto first, ucx ? ConnectUcx(address, o) : ConnectRing(address, o));
  const uint16_t n = first->shard_count();
  std::vector<std::string> addresses;
  if (ucx && n > 1) {
    const std::string all = first->shard_addresses();
    std::string_view list = all;
    while (!list.empty()) {
      size_t comma = list.find(',');
      addresses.emplace_back(list.substr(0, comma));
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    }
    if (addresses.size() != n) {
      return Err(StatusCode::kCorruption, "the core has {} shards but listed {} UCX addresses", n,
                 addresses.size());
    }
    for (std::string& a : addresses) {
      std::string_view host = HostOf(a);
      if (host == "0.0.0.0" || host == "::" || host == "[::]" || host.empty()) {
        a = fmt::format("{}{}", HostOf(address), a.substr(host.size()));
      }
    }
  }
  out.push_back(std::move(first));
  for (uint16_t i = 1; i < n; ++i) {
    o.shard = i;
    auto t = ucx ? ConnectUcx(addresses[i], o) : ConnectRing(address, o);
    if (!t) return Err(t.error().WithContext(fmt::format("shard {} of {}", i, n)));
    if ((*t)->shard_count() != n) {
      return Err(StatusCode::kFailedPrecondition, "shard {} reports {} shards, shard 0 {}", i,
                 (*t)->shard_count(), n);
    }
    out.push_back(std::move(*t));
  }
  return out;
}

}  // namespace goblin::client
