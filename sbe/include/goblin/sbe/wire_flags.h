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
// memcache meta reads (schema version 6). A lookup counts as a read of the object (its
// "fetched" mark and last-access time, reported before the lookup as kInfoFetched and
// idleSeconds) unless kGetNoBump (mg u). kGetVivify: a miss creates an empty object
// (vivifyTtlNanos) that this reader has won (mg N). Also valid in ObjectHead.flags.
inline constexpr uint32_t kGetNoBump = 1u << 4;
inline constexpr uint32_t kGetVivify = 1u << 5;
// A meta read (mg): a stale version's first such reader wins its recache (kInfoWon); other
// reads (a classic get, a read-modify-write) leave the won mark alone.
inline constexpr uint32_t kGetMeta = 1u << 6;
// With kGetFollowFill: wait for a reserved fill's head even when the key has a committed
// version. A reservation over a committed version is a revalidation (kPutReserve with
// kPutIfGeneration); other gets read the committed version meanwhile (an HTTP cache may
// serve it stale), a reader whose stale copy may not be served waits with this flag.
inline constexpr uint32_t kGetAwaitReserved = 1u << 7;
// With kGetLoans: when the range's first piece is in memory at once, the answer is an
// ObjectLent (the object's info and the loan of that piece in one message) instead of an
// ObjectInfo with a Loan behind it: a reader's first byte arrives with the answer, one
// message sooner; the rest follows as Loans (schema version 9). libgoblin asks wherever it
// reads the pools in place.
inline constexpr uint32_t kGetLoanInAnswer = 1u << 8;
// With kGetFollowFill: a fill of the key that is committing (every byte in, its record on
// the way) is waited for, and the get is answered from the version it commits, with its
// generation; others read a committing fill as a hit of generation 0. A reader that must
// revalidate what it reads needs a version it can name (goblin-gateway, when a committing
// fill's answer is stale already: a no-cache response, or a zero TTL).
inline constexpr uint32_t kGetAwaitCommit = 1u << 9;

// ObjectGetCancel.flags (schema version 11): the reader has given back every loan of this
// get it received and will not touch the ones still on their way (it drops them unread): the
// core takes back at once every loan of the get still out, so a reader that abandons a get
// and then sits idle holds nothing (libgoblin, when a sink fails). A reader that may still be
// sending lent bytes on (goblin-gateway) cancels without it and releases them itself.
inline constexpr uint32_t kCancelTakeBackLoans = 1u << 0;

// ObjectPurge.flags (schema version 7): mark the objects stale (as ObjectDelete
// kDeleteInvalidate does one) instead of deleting them: an HTTP soft purge.
inline constexpr uint32_t kPurgeSoft = 1u << 0;
// ObjectPurge.flags (schema version 7): `prefix` is a tag; the objects whose version
// carries it (PutBegin/PutHead tags) are purged (or, with kPurgeSoft, marked stale).
inline constexpr uint32_t kPurgeTag = 1u << 1;

// ObjectInfo.marks (schema version 6), on a hit.
inline constexpr uint8_t kInfoFetched = 1u << 0;    // read before this lookup (mg h)
inline constexpr uint8_t kInfoStale = 1u << 1;      // invalidated (md I, ms I): mg X
inline constexpr uint8_t kInfoTokenSent = 1u << 2;  // another reader won before: mg Z
inline constexpr uint8_t kInfoWon = 1u << 3;        // this reader won the recache: mg W

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
// inProgress (read the object); unless kPutIfGeneration names that object's version (an
// HTTP revalidation of a stale version: reserved, and a new version filled only replaces
// that one); with nothing committed the reservation is granted as a plain one.
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
// A kPutIfGeneration put whose ifGeneration is *older* than the current version's is
// stored all the same, as a stale version that keeps the expiry (and the won mark) of the
// one it replaces (memcache ms I with C). Schema version 6.
inline constexpr uint32_t kPutStaleIfOlder = 1u << 5;
// The new version keeps the replaced one's marks (stale, won, fetched, last access): a
// read-modify-write in place, as memcached's incr of a number that keeps its length.
inline constexpr uint32_t kPutKeepMarks = 1u << 6;
// The key is a variant of an HTTP object (its part before the first NUL byte names the
// object: ShardOf): the core keeps at most --max-variants of them, dropping the least
// recently used when another commits (the version carries kMarkVariant). On a reservation
// it applies to the version the reservation fills.
inline constexpr uint32_t kPutVariant = 1u << 7;

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
// The touch is not a read of the object (memcache mg T: its lookup decides). Schema 6.
inline constexpr uint32_t kTouchNoBump = 1u << 5;

// ObjectDelete.flags (schema version 6)
// Keep the version's bytes but mark it stale under a new generation (a CAS that older
// tokens no longer match), its won mark cleared: the next reader wins the recache (md I).
inline constexpr uint32_t kDeleteInvalidate = 1u << 0;
inline constexpr uint32_t kDeleteSetTtl = 1u << 1;  // ... and give it ttlNanos (0: none)

// PutHead.flags
// The origin's answer is not to be stored: the reservation ends and the ObjectGets waiting
// for it read a miss (each asks for itself). A reservation that ends any other way without
// a head (PutAbort, the owner gone, the fill timed out) answers them Error(aborted).
inline constexpr uint32_t kHeadUncacheable = 1u << 0;

}  // namespace goblin::wire
