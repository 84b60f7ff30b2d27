// epoll registration helpers shared by the gateway's loops: an event's user data is a
// 64-bit tag (a connection id, or a fixed tag for the loop's own fds).
// Threading: pure functions over the caller's epoll fd.
#pragma once

#include <sys/epoll.h>

#include <cerrno>
#include <cstdint>

#include "goblin/common/status.h"

namespace goblin::gateway {

inline VoidResult EpollCtl(int ep, int op, int fd, uint32_t events, uint64_t tag) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = tag;
  if (epoll_ctl(ep, op, fd, &ev) != 0) return ErrnoErr("epoll_ctl", errno);
  return {};
}

inline VoidResult EpollAdd(int ep, int fd, uint32_t events, uint64_t tag) {
  return EpollCtl(ep, EPOLL_CTL_ADD, fd, events, tag);
}

}  // namespace goblin::gateway
