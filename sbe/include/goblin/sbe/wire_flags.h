// Bit values of the schema's `flags` fields and the protocol version spoken in Hello/Welcome,
// shared by the core and its clients on every plane.
// Threading: constants only.
#pragma once

#include <cstdint>

namespace goblin::wire {

// Hello/Welcome protocolVersion. 2: shards (Hello.shard, Welcome.shard/shardCount/
// shardAddresses).
inline constexpr uint16_t kProtocolVersion = 2;

// ObjectGet.flags
inline constexpr uint32_t kGetFollowFill = 1u << 0;  // stream an in-progress fill of the key
// Lend bytes in the pools the client mapped (MapPools) as Loan messages, each released with
// LoanRelease; bytes that cannot be lent still come as ObjectData.
inline constexpr uint32_t kGetLoans = 1u << 1;
// On a hit whose head is in RAM, publish it in the head table and name its entry in the
// ObjectInfo (headEntry, headStamp, headOffset, headLength): the reader may serve the head
// itself next time, validated by the stamp (goblin-gateway's local hits).
inline constexpr uint32_t kGetDescribe = 1u << 2;
// The reader takes the first bytes of the range in the ObjectInfo itself (firstBytes, at the
// range's offset; firstBytesEnd when they are all of it): its first byte arrives with the
// answer, not one message later. libgoblin asks on remote planes (UCX), where each message
// is a send of its own; schema version 2.
inline constexpr uint32_t kGetFirstBytes = 1u << 3;

// Loan.segments.flags
// The segment's bytes lie in a pool block whose pages are never rewritten while referenced
// (store::HeadPool::Stable): a reader that sends them on (goblin-gateway) may send them by
// reference (sendfile from the pool's fd) and release the loan as soon as the call returns.
inline constexpr uint8_t kSegmentStable = 1u << 0;

// PutBegin.flags
// Reserve the key before its head is known (a cache asks before it goes to the origin, so
// one origin request serves every client of every gateway): expectedSize, ttlNanos and
// metadata are ignored and come in PutHead; followers' ObjectGets wait in the core until it
// does (or the fill ends). A key with a committed object is not reserved: the answer is
// inProgress (read the object).
inline constexpr uint32_t kPutReserve = 1u << 0;
// Conditional puts (memcache add / replace / cas), checked when the fill begins and again
// when it commits (an unexpired committed version is "present"); a put whose condition
// fails is refused with Error: alreadyExists (kPutIfAbsent), notFound (kPutIfPresent, or
// kPutIfGeneration with nothing stored), failedPrecondition (kPutIfGeneration and another
// version is current). Schema version 4.
inline constexpr uint32_t kPutIfAbsent = 1u << 1;
inline constexpr uint32_t kPutIfPresent = 1u << 2;
inline constexpr uint32_t kPutIfGeneration = 1u << 3;  // PutBegin.ifGeneration must be current
// The new version keeps the expiry of the version it replaces (checked at commit; RESP
// SET KEEPTTL); ttlNanos applies when there is none. Schema version 5.
inline constexpr uint32_t kPutKeepExpiry = 1u << 4;

// ObjectTouch.flags (schema version 5): conditions on the current version's expiry, as
// Redis's EXPIRE options (a version without one counts as expiring never), and what to do
// when the new expiry is already past. TouchAck.found is 0 when a condition does not hold.
inline constexpr uint32_t kTouchIfNoExpiry = 1u << 0;  // NX: it has none
inline constexpr uint32_t kTouchIfExpiry = 1u << 1;    // XX: it has one
inline constexpr uint32_t kTouchIfLater = 1u << 2;     // GT: the new expiry is later
inline constexpr uint32_t kTouchIfSooner = 1u << 3;    // LT: the new expiry is sooner
// The new expiry has passed: the version is deleted (if the conditions hold; ttlNanos is
// then the "new expiry" the conditions compare, as 1 ns from now).
inline constexpr uint32_t kTouchDelete = 1u << 4;

// PutHead.flags
// The origin's answer is not to be stored: the reservation ends and the ObjectGets waiting
// for it read a miss (each asks for itself). A reservation that ends any other way without
// a head (PutAbort, the owner gone, the fill timed out) answers them Error(aborted).
inline constexpr uint32_t kHeadUncacheable = 1u << 0;

}  // namespace goblin::wire
