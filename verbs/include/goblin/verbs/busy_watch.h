// How long a UCX worker has been busy without progress, and what the loop does about it.
// ucp_worker_arm says "busy" while events are pending; progress normally takes them at once.
// A worker that stays busy while its progress takes nothing is either waiting on a peer that
// does not read (a send of ours waits for room: doze rather than spin) or stuck (a shared-memory
// client died mid-send and blocked the receive FIFO: the server checks its peers and may
// replace the worker; see UcxServer::kStuckNs).
// Both spans count only time without progress: any progress (Progressed: every poll round
// whose progress took something) starts them again. The loop asks (OnBusy) only after it had
// nothing to do for its busy-poll time, so two such moments a second apart, with a second of
// steady work between them, are not a second of being stuck.
// Threading: the loop thread of the server that owns it.
#pragma once

#include <cstdint>

namespace goblin::verbs {

class BusyWatch {
 public:
  enum class Verdict : uint8_t {
    kSpin,        // poll again
    kDoze,        // a send of ours has waited for room for doze_after_ns: sleep 1 ms instead
    kCheckPeers,  // busy without progress for stuck_ns: see whether a peer died mid-send
  };
  BusyWatch(uint64_t doze_after_ns, uint64_t stuck_ns)
      : doze_after_ns_(doze_after_ns), stuck_ns_(stuck_ns) {}

  // The worker made progress (took a message, completed a send).
  void Progressed() { busy_since_ns_ = stuck_since_ns_ = 0; }
  // The worker armed (nothing pending): the loop sleeps.
  void Armed() { busy_since_ns_ = stuck_since_ns_ = 0; }
  // The worker said busy at `now`; `sending`: a send of ours has not completed.
  Verdict OnBusy(uint64_t now, bool sending) {
    if (busy_since_ns_ == 0) busy_since_ns_ = now;
    // (a send of ours waiting is a reason to be busy: not stuck)
    if (sending || stuck_since_ns_ == 0) stuck_since_ns_ = now;
    if (now - stuck_since_ns_ > stuck_ns_) return Verdict::kCheckPeers;
    if (sending && now - busy_since_ns_ > doze_after_ns_) return Verdict::kDoze;
    return Verdict::kSpin;
  }

 private:
  uint64_t doze_after_ns_, stuck_ns_;
  uint64_t busy_since_ns_ = 0;   // busy, with no progress, since then
  uint64_t stuck_since_ns_ = 0;  // (and no send of ours waiting, since then)
};

}  // namespace goblin::verbs
