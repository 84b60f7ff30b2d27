// libgoblin internals shared by connection.cpp (requests, pub/sub, puts) and gets.cpp (the
// replies of gets, one at a time or many in flight): a Connection's per-shard link, the
// state of one get, and the helpers both read messages with.
// Threading: as Connection (one thread at a time).
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "goblin/client/connection.h"
#include "goblin/client/transport.h"
#include "goblin/sbe/runtime.h"
#include "goblin/wire/goblin_wire.h"

namespace goblin::client {

struct Connection::Link {
  struct Mapping {
    uint8_t* base = nullptr;
    uint64_t bytes = 0;
  };
  std::unique_ptr<Transport> transport;
  Mapping head_pool, io_pool, head_table;
  bool remote_mapped = false;  // UCX: the pools' rkeys are unpacked
  bool map_failed = false;
  // A get was abandoned on this remote link: pieces sent by reference (UCX rendezvous) may
  // still be on their way, held by the core until received (DrainAbandoned).
  bool drain = false;
  ~Link() {
    for (Mapping* m : {&head_pool, &io_pool, &head_table}) {
      if (m->base != nullptr) munmap(m->base, m->bytes);
    }
  }
};

// One get's reply in progress: the ObjectInfo, then Loans or ObjectData until the last.
struct Connection::GetState {
  Link* link = nullptr;
  uint64_t id = 0;      // the ObjectGet's correlation id
  uint64_t offset = 0;  // of the range asked for (where ObjectInfo's first bytes go)
  Sink owned_sink;      // (gets in flight own theirs; a synchronous Get lends its own)
  SinkRef sink;
  MetaHook on_meta;  // (none: false)
  ObjectMeta meta;
  bool have_info = false;
  Status error;
  // The reader gave up before the last bytes (its sink failed, or a loan lay outside the
  // pools): the core is told to end the stream and take back its loans (AbandonGet).
  bool abandoned = false;
};

namespace detail {

// (generic: Link is private to Connection)
inline bool Mapped(const auto& l) { return l.head_pool.base != nullptr; }

inline uint16_t TemplateOf(std::span<const uint8_t> m) { return sbe::Load<uint16_t>(m.data() + 2); }

inline Status ErrorReply(std::span<const uint8_t> m) {
  auto e = wire::ErrorDecoder::Decode(m);
  if (!e) return Status(StatusCode::kCorruption, "malformed Error reply");
  auto code = static_cast<uint16_t>(e->code());
  StatusCode sc =
      code >= 1 && code <= 14 ? static_cast<StatusCode>(code) : StatusCode::kFailedPrecondition;
  return Status(sc, fmt::format("goblin-core: {}", e->text()));
}

// (an ObjectInfo's, or an ObjectLent's)
// Into `m`, whose metadata string keeps its capacity (a get's answer allocates nothing).
inline void AssignMeta(Connection::ObjectMeta& m, const auto& info) {
  m.found = info.status() != wire::LookupStatus::kMiss;
  m.filling = info.status() == wire::LookupStatus::kFilling;
  if (!m.found) {  // (a miss carries nothing else)
    m.size = m.generation = m.created_unix_ns = m.expires_unix_ns = 0;
    m.metadata.clear();
    return;
  }
  m.size = info.object_size();
  m.generation = info.generation();
  m.created_unix_ns = info.created_nanos();
  m.expires_unix_ns = info.expires_nanos();
  m.metadata.assign(info.metadata());
}
inline Connection::ObjectMeta MetaOf(const auto& info) {
  Connection::ObjectMeta m;
  AssignMeta(m, info);
  return m;
}

}  // namespace detail
}  // namespace goblin::client
