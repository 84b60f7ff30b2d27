// Member: the record a goblin-core keeps about itself in etcd, at <prefix>/cores/<name>, as
// JSON ({"address":"ucx://10.0.0.5:7100","shards":4,"capacity":...,"zone":"a",...}): what a
// router needs to reach it and weigh it. `etcdctl get --prefix /goblin/cores/` shows them.
// The record lives under the core's lease (registration.h): a core that stops cleanly takes
// it away at once, one that dies loses it when its lease expires.
// Threading: values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "goblin/common/status.h"

namespace goblin::cluster {

struct Member {
  std::string name;     // unique under the prefix: the last part of the key
  std::string address;  // where clients connect: "ucx://HOST:PORT" (shard 0; Welcome names all)
  std::string zone;     // free text (a rack, a failure domain); may be empty
  uint32_t shards = 1;
  uint64_t capacity = 0;  // bytes the core can hold (RAM pool + disk tiers): the routing weight
  uint32_t pid = 0;
  std::string version;
  uint64_t started_unix_ms = 0;
  std::string host;          // its hostname, and its ring socket there: a router on the same host
  std::string ring;          // reaches it through the ring plane instead (LocalRingPath)
  int64_t mod_revision = 0;  // etcd's, set by readers: a core that registers again gets a new one
};

// "<prefix>/cores/" and "<prefix>/cores/<name>"; the prefix has no trailing '/'.
std::string MembersPrefix(std::string_view prefix);
std::string MemberKey(std::string_view prefix, std::string_view name);

std::string EncodeMember(const Member& m);
// `name` comes from the key. A record without an address, or not JSON, is an error.
Result<Member> DecodeMember(std::string_view name, std::string_view json);

// The member's ring socket when it runs on this host (same hostname, the socket there);
// "" otherwise. Routers on a core host use it: hits read the core's memory in place.
std::string LocalRingPath(const Member& m);
// This host's name (gethostname), as cores write it into their records.
std::string ThisHostName();

// The member's routing weight: its capacity in GiB, at least 1 (a core with no disk tier and
// a small pool is not starved to nothing).
double MemberWeight(const Member& m);

// "/goblin", "goblin/" -> "/goblin"; "" -> "/goblin". Keys of several deployments may share
// one etcd under different prefixes.
std::string NormalizePrefix(std::string_view prefix);

}  // namespace goblin::cluster
