// Graceful shutdown on SIGINT/SIGTERM. Install() once from main before starting threads;
// afterwards any thread may poll requested() or wait on fd() (an eventfd that becomes
// readable at the first signal). A second SIGINT/SIGTERM exits at once with status 130.
// SIGPIPE is ignored process-wide: broken connections surface as EPIPE errors instead.
#pragma once

#include <chrono>

#include "goblin/common/status.h"

namespace goblin {

class ShutdownSignal {
 public:
  // Installs the handlers (idempotent) and returns the process-wide instance.
  static Result<ShutdownSignal*> Install();

  bool requested() const;
  // Readable (never drained by us) once shutdown was requested; for poll/epoll loops.
  int fd() const;
  // Blocks until shutdown is requested or the timeout passes; true if requested.
  bool Wait(std::chrono::milliseconds timeout) const;
  // Requests shutdown from inside the program (e.g. a fatal child exit in a supervisor).
  void Request();

  // The signal number that requested shutdown, or 0 if none / Request() was used.
  int signal_number() const;
};

}  // namespace goblin
