// Something a reactor loop serves: a transport (the ring plane's server, the UCX plane's
// worker) or another source of work (the admin plane's executor). Its fd joins the loop's
// epoll set; Poll() runs every round; the loop sleeps only if every source's PrepareSleep()
// agrees, no longer than any source's max_sleep_ms().
// Threading: every call on the loop thread (after Loop::AddSource).
#pragma once

#include <cstddef>

namespace goblin::reactor {

class EventSource {
 public:
  virtual ~EventSource() = default;
  // Readable when the source has events (an eventfd, a worker's fd, an epoll fd of its own).
  virtual int event_fd() const = 0;
  // Makes progress; returns the units of work done (0 lets the loop go idle).
  virtual size_t Poll() = 0;
  // Requests arrive here (a transport): polled on every round of a busy-polling loop, where
  // other sources and the handler's background work run every few quiet rounds
  // (LoopOptions::background_every).
  virtual bool transport() const { return false; }
  // event_fd() was readable: take the events (accepts, closed sockets...). Called from the
  // loop's epoll round, not on every Poll (no system call per message).
  virtual void OnReady() {}
  // False when events are already pending (the loop must not sleep now).
  virtual bool PrepareSleep() = 0;
  // After the loop's sleep (or its decision not to): undo what PrepareSleep announced.
  virtual void FinishSleep() {}
  // The longest the loop may sleep without polling this source (-1: no bound).
  virtual int max_sleep_ms() const { return -1; }
  // The loop is ending: close every session (Handler::OnClose).
  virtual void Close() = 0;
};

}  // namespace goblin::reactor
