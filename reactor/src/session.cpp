#include "goblin/reactor/session.h"

namespace goblin::reactor {

VoidResult Session::SendSideFrame(std::span<const uint8_t>, std::span<const int>) {
  return Err(StatusCode::kUnimplemented, "side frames need a local (ring) session");
}

Result<std::vector<uint8_t>> Session::PackRemoteKey(const void*, size_t) {
  return Err(StatusCode::kUnimplemented, "no one-sided reads on this plane");
}

Session::PayloadSend Session::SendWithPayload(std::span<const uint8_t>, std::span<const uint8_t>,
                                              uint64_t) {
  return {};
}

}  // namespace goblin::reactor
