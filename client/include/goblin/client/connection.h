// libgoblin: the native client library. A Connection talks to one goblin-core over the
// transport its target names, chosen once at Open(): "unix:PATH" is the shared-memory ring
// plane (the UCX plane, "ucx://HOST:PORT", comes with the native RDMA work). Requests are
// synchronous and carry correlation ids. Threading: one thread uses a Connection at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "goblin/common/status.h"

namespace goblin::ring {
class RingClient;
}

namespace goblin::client {

struct Target {
  enum class Kind { kUnix, kUcx } kind;
  std::string address;  // socket path, or host:port
};

// "unix:/run/goblin/core.sock", "/run/goblin/core.sock" (a bare path means unix:) or
// "ucx://host:port".
Result<Target> ParseTarget(std::string_view text);

struct ConnectOptions {
  std::string name = "libgoblin";
  uint32_t ring_bytes = 4096;
  std::chrono::milliseconds timeout = std::chrono::seconds(5);
};

class Connection {
 public:
  static Result<std::unique_ptr<Connection>> Open(std::string_view target,
                                                  const ConnectOptions& options = {});
  ~Connection();

  uint64_t client_id() const;
  uint32_t server_pid() const;
  uint32_t max_message() const;

  // Round trip of a Ping carrying `payload`; returns the measured time.
  Result<std::chrono::nanoseconds> Ping(std::string_view payload = {});

 private:
  Connection() = default;
  // Waits for the reply with this correlation id, turning an Error reply into a Status.
  Result<std::vector<uint8_t>> AwaitReply(uint64_t correlation_id);

  std::unique_ptr<ring::RingClient> ring_;
  ConnectOptions options_;
  uint64_t next_correlation_ = 1;
};

}  // namespace goblin::client
