// libgoblin's transports behind Connection: the ring plane (unix:PATH, shared memory on
// this host) and the UCX plane (ucx://HOST:PORT). Chosen once at Open(); the Connection
// speaks the same SBE messages over either. In the tree (not installed) for the other
// in-tree client of goblin-core: goblin-gateway's CoreLink, so the gateway reaches the core
// the way libgoblin does (one transport per shard; a later step runs it over UCX).
// Threading: as Connection (one thread at a time).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "goblin/common/fd.h"
#include "goblin/common/function_ref.h"
#include "goblin/common/status.h"

namespace goblin::client {

class Transport {
 public:
  virtual ~Transport() = default;
  virtual uint64_t client_id() const = 0;
  virtual uint32_t server_pid() const = 0;
  virtual uint32_t max_message() const = 0;
  // How many shards the core runs (Welcome), and on the UCX plane where each listens.
  virtual uint16_t shard_count() const = 0;
  virtual std::string shard_addresses() const { return {}; }
  // Waits for room up to `timeout`.
  virtual VoidResult Send(std::span<const uint8_t> msg, std::chrono::nanoseconds timeout) = 0;
  // Encode in place: Reserve(max) (nullptr: no room now), then Commit(len).
  virtual uint8_t* Reserve(uint32_t max) = 0;
  virtual void Commit(uint32_t len) = 0;
  // After a Reserve that found no room: waits (spin, then sleep) up to `timeout` for the
  // core to make some, or for a message from it (poll it, then Reserve again).
  virtual void WaitForRoom(std::chrono::nanoseconds timeout) = 0;
  // Non-blocking send of an encoded message: kFull when there is no room now.
  enum class TrySendResult : uint8_t { kOk, kFull, kTooLarge };
  TrySendResult TrySend(std::span<const uint8_t> msg) {
    if (msg.size() > max_message()) return TrySendResult::kTooLarge;
    uint8_t* p = Reserve(static_cast<uint32_t>(msg.size()));
    if (p == nullptr) return TrySendResult::kFull;
    std::memcpy(p, msg.data(), msg.size());
    Commit(static_cast<uint32_t>(msg.size()));
    return TrySendResult::kOk;
  }
  // Remote planes: `header` (an SBE message ending in an empty varData32) with `payload`
  // as its bytes, the payload sent by reference (UCX reads it, or over verbs the core
  // RDMA-reads it, until FlushPayloads returns: the caller keeps it unchanged until then).
  // Together at most max_message(). Unimplemented on the ring plane (it copies into the ring).
  virtual bool sends_payload_by_reference() const { return false; }
  // The core's disk extent size (Welcome.putAlignment): pieces of a put sent by reference
  // that cross no multiple of it land whole in the core's write buffers. 0: none.
  virtual uint32_t put_alignment() const { return 0; }
  // Where the first extent ends (Welcome.putHeadCut): extents after it start every
  // put_alignment() bytes from there. 0: at multiples of put_alignment().
  virtual uint32_t put_head_cut() const { return 0; }
  virtual VoidResult SendWithPayload(std::span<const uint8_t> /*header*/,
                                     std::span<const uint8_t> /*payload*/,
                                     std::chrono::nanoseconds /*timeout*/) {
    return Err(StatusCode::kUnimplemented, "payloads by reference need a remote plane");
  }
  // Registers the memory the next payloads come from (until FlushPayloads), optional.
  virtual VoidResult RegisterPayloads(std::span<const uint8_t> /*bytes*/) { return {}; }
  virtual VoidResult FlushPayloads(std::chrono::nanoseconds /*timeout*/) { return {}; }
  virtual Result<size_t> Poll(FunctionRef<void(std::span<const uint8_t>)> fn,
                              size_t max = SIZE_MAX) = 0;
  virtual Result<bool> Wait(std::chrono::nanoseconds timeout) = 0;
  // While a synchronous exchange waits: a receiver that messages may be handed to as they
  // arrive instead of through Poll (UCX: from inside its progress, where the receiver may
  // Send but not Wait or Poll; UcxClient::SetDirect). Wait() returns true for them, and
  // TakeDirect() says how many went there. Returns the receiver replaced. Planes that hand
  // messages out by polling anyway (the ring) have none.
  using DirectFn = FunctionRef<void(std::span<const uint8_t>)>;
  virtual DirectFn* SetDirect(DirectFn* /*fn*/) { return nullptr; }
  virtual size_t TakeDirect() { return 0; }
  virtual int wake_fd() const = 0;
  virtual int liveness_fd() const = 0;  // -1: wake_fd() reports that too
  // Before sleeping on wake_fd(): false if messages are pending. `want_space`: also be woken
  // when the core frees room for sends (ring plane; UCX sends complete on their own).
  virtual bool PrepareSleep(bool want_space) = 0;
  virtual void FinishSleep() = 0;
  virtual VoidResult CheckAlive() = 0;
  // The core shares this host's memory with us: its pools can be mapped (zero-copy loans).
  virtual bool local() const = 0;
  // A plane without fd passing whose client may still share the core's host memory (UCX
  // allowed shared memory): Connection maps the pools through /proc (MapPoolsInPlace).
  virtual bool may_map_in_place() const { return false; }
  virtual VoidResult ReceiveSideFrame(std::vector<uint8_t>* msg, std::vector<UniqueFd>* fds,
                                      std::chrono::milliseconds timeout) = 0;
  // Remote planes: one-sided reads of the core's pools. AttachRemotePools takes the core's
  // RemotePools answer to MapPools; ReadRemote then gets [offset, offset + dst.size()) of pool
  // `kind` (wire::PoolKind) without the core's loop. Unimplemented on the ring plane (it maps).
  virtual VoidResult AttachRemotePools(std::span<const uint8_t> reply) = 0;
  virtual VoidResult ReadRemote(uint8_t kind, uint64_t offset, std::span<uint8_t> dst,
                                std::chrono::nanoseconds timeout) = 0;
};

struct TransportOptions {
  std::string name;
  uint8_t peer_kind = 0;
  uint32_t ring_bytes = 4096;
  std::chrono::milliseconds timeout{5000};
  uint16_t shard = 0;
  std::chrono::nanoseconds spin = std::chrono::microseconds(50);  // before sleeping
  bool spin_yield = true;  // give the CPU away while spinning
  // Connected on one thread, then used on another (one at a time): UCX's worker is made for
  // that (UCS_THREAD_MODE_SERIALIZED) rather than for one thread.
  bool handed_over = false;
};

Result<std::unique_ptr<Transport>> ConnectRing(const std::string& socket_path,
                                               const TransportOptions& options);
// Unimplemented when this build has no UCX.
Result<std::unique_ptr<Transport>> ConnectUcx(const std::string& host_port,
                                              const TransportOptions& options);

// One transport per core shard, in shard order: shard 0 at `address` first (its Welcome says
// how many there are), then the others (ring: the same socket; UCX: the addresses shard 0
// listed, a wildcard host replaced by the host of `address`).
Result<std::vector<std::unique_ptr<Transport>>> ConnectShards(bool ucx, const std::string& address,
                                                              const TransportOptions& options);

}  // namespace goblin::client
