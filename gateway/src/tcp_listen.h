// A front's TCP listener: a non-blocking IPv4 socket bound to address:port (port -1: any free
// port), with the options the fronts choose. Shared by the HTTP, RESP and memcache fronts.
// Threading: a pure function (the caller's setup).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "goblin/common/fd.h"
#include "goblin/common/status.h"

namespace goblin::gateway {

struct TcpListenOptions {
  bool reuse_port = false;           // SO_REUSEPORT: several loops each listen on the port
  bool reuse_port_required = false;  // ... and failing to set it is an error
  bool nodelay = false;              // accepted connections inherit TCP_NODELAY
  int defer_accept_s = 0;            // TCP_DEFER_ACCEPT: accepted once their first bytes are in
  int send_buffer = 0;               // accepted connections inherit SO_SNDBUF (0: autotuned)
  int backlog = 1024;
  std::string_view what;  // for errors ("memcache", ...)
};

// A connection's peer on this host: loopback, or its own address (a client that dialled one of
// the host's addresses; Linux carries that over loopback too). `local` and `peer` in network
// byte order.
inline bool PeerOnThisHost(in_addr_t local, in_addr_t peer) {
  return (ntohl(peer) >> 24) == 127 || peer == local;
}

// The same for an accepted connection `fd` from `peer` (a getsockname only when the peer is
// not on loopback).
inline bool PeerOnThisHost(int fd, const sockaddr_in& peer) {
  if ((ntohl(peer.sin_addr.s_addr) >> 24) == 127) return true;
  sockaddr_in local{};
  socklen_t len = sizeof local;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return false;
  return PeerOnThisHost(local.sin_addr.s_addr, peer.sin_addr.s_addr);
}

// The listening fd and the port it is bound to.
inline Result<std::pair<UniqueFd, int>> ListenTcp(const std::string& address, int port,
                                                  const TcpListenOptions& o) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoErr("socket", errno);
  UniqueFd owned(fd);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (o.reuse_port && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0 &&
      o.reuse_port_required) {
    return ErrnoErr("setsockopt SO_REUSEPORT", errno);
  }
  if (o.nodelay) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (o.defer_accept_s > 0) {
    setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &o.defer_accept_s, sizeof o.defer_accept_s);
  }
  if (o.send_buffer > 0 &&
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &o.send_buffer, sizeof o.send_buffer) != 0) {
    return ErrnoErr("setsockopt SO_SNDBUF", errno);
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port < 0 ? 0 : port));
  if (inet_pton(AF_INET, address.c_str(), &a.sin_addr) != 1) {
    return Err(StatusCode::kInvalidArgument, "--listen-address '{}' is not an IPv4 address",
               address);
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    return ErrnoErr(o.what.empty() ? fmt::format("bind {}:{}", address, port)
                                   : fmt::format("bind {}:{} ({})", address, port, o.what),
                    errno);
  }
  if (listen(fd, o.backlog) != 0) return ErrnoErr("listen", errno);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return std::pair<UniqueFd, int>(std::move(owned), ntohs(a.sin_port));
}

}  // namespace goblin::gateway
