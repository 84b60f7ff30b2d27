// Unix-domain stream sockets for the ring plane's handshake and liveness: listen (refusing
// to clobber a live server or a non-socket file), connect with a timeout, and length-prefixed
// SBE frames that can carry file descriptors (SCM_RIGHTS). Slow-path only. Thread-safe
// functions; the fds belong to their caller.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "goblin/common/fd.h"
#include "goblin/common/status.h"

namespace goblin::ring {

// Binds and listens on `path` (non-blocking, close-on-exec). The socket appears at `path`
// already listening (bound under a temporary name, then renamed), so "wait for the file,
// then connect" never races. A stale socket file left by a dead server is replaced; a path
// where a server still answers, or that is not a socket, is an error.
Result<UniqueFd> ListenUnix(const std::string& path, int backlog = 128);

// Connects to `path`; the returned socket is blocking.
Result<UniqueFd> ConnectUnix(const std::string& path, std::chrono::milliseconds timeout);

// Sends one frame (4-byte length + msg) with `fds` attached. Blocking; fails on a short send.
VoidResult SendFrame(int sock, std::span<const uint8_t> msg, std::span<const int> fds = {});

// Receives one frame of at most max_bytes into `out`, collecting any passed fds. Waits up
// to `timeout`. EOF before a whole frame is an Unavailable error.
VoidResult RecvFrame(int sock, uint32_t max_bytes, std::chrono::milliseconds timeout,
                     std::vector<uint8_t>* out, std::vector<UniqueFd>* fds);

// Non-blocking read of whatever is available into `buf`, collecting passed fds. Returns the
// byte count, 0 at EOF; EAGAIN yields a Timeout error with no message.
Result<size_t> ReadSome(int sock, std::span<uint8_t> buf, std::vector<UniqueFd>* fds);

}  // namespace goblin::ring
