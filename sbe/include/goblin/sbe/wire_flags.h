// Bit values of the schema's `flags` fields, shared by the core and its clients.
// Threading: constants only.
#pragma once

#include <cstdint>

namespace goblin::wire {

// ObjectGet.flags
inline constexpr uint32_t kGetFollowFill = 1u << 0;  // stream an in-progress fill of the key
// Lend bytes in the pools the client mapped (MapPools) as Loan messages, each released with
// LoanRelease; bytes that cannot be lent still come as ObjectData.
inline constexpr uint32_t kGetLoans = 1u << 1;

}  // namespace goblin::wire
