// RespServer's insides, in pieces:
//   resp_server.cpp      the loop, clients' sockets, replies in command order, the command
//                        table and dispatch
//   resp_connection.cpp  connection commands: HELLO, AUTH, CLIENT, COMMAND, RESET, ...
//   resp_pubsub.cpp      (P|S)(UN)SUBSCRIBE, (S)PUBLISH, PUBSUB: requests to the core's
//                        pub/sub engine, confirmations and deliveries
//   resp_objects.cpp     the store's objects as Redis strings: GET, SET, DEL, EXPIRE, SCAN, ...
//   resp_info.cpp        INFO, CONFIG, DBSIZE's and FLUSHALL's fan-out over the shards
// Threading: everything on the server's one loop thread.
#pragma once

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core_link.h"
#include "core_objects.h"
#include "goblin/common/fd.h"
#include "goblin/gateway/resp.h"
#include "goblin/gateway/resp_server.h"
#include "goblin/wire/goblin_wire.h"
#include "published_stats.h"

namespace goblin::gateway {
namespace resp_detail {

inline constexpr std::string_view kLog = "resp";
inline constexpr std::string_view kRedisVersion = "7.0.15";  // the semantics implemented

inline std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

inline bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// Redis's "value is not an integer" parsing (string2ll).
inline bool ParseInt(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 20 || s[0] == '+') return false;
  if (s.size() > 1 && (s[0] == '0' || (s[0] == '-' && s[1] == '0'))) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

// epoll tags: small numbers for fixed fds, client ids above.
inline constexpr uint64_t kTagStop = 1, kTagCoreBell = 2, kTagCoreSock = 3, kTagTcp = 4,
                          kTagUnix = 5;
inline constexpr uint64_t kFirstClientTag = 16;
// A client's replies it has not read: past this it is not read (nor its commands run) until
// it has taken half of them.
inline constexpr size_t kOutputPause = 64u << 20;
// A client's pipelined reads at once: it may hold kOutputPause plus this many values.
inline constexpr uint32_t kMaxReadsInFlight = 16;

// One reply slot's answer from one or more requests (a request split to fit the ring, or
// sent to several cores): complete when none is open.
struct PubsubAssembly {
  std::string reply;
  uint32_t open = 0;
  bool reset_after = false;  // RESET: +RESET when the last completes
  bool query = false;        // PUBSUB: entries merged over the cores, the reply built at the end
  wire::PubsubQueryKind q = wire::PubsubQueryKind::kChannels;
  int64_t number = 0;
  std::vector<std::pair<std::string, int64_t>> entries;
};
}  // namespace resp_detail

class RespServer::Impl {
 public:
  explicit Impl(const RespServerOptions& o) : options_(o) {}

  VoidResult Init();
  VoidResult Run(int stop_fd);
  RespStats stats_;
  PublishedStats<RespStats> published_;  // (the metrics endpoint's copy)
  int port_ = 0;

 private:
  using Argv = std::vector<std::string_view>;
  struct Slot {  // one reply in command order
    bool ready = false;
    bool muted = false;  // dropped when it comes (CLIENT REPLY OFF/SKIP)
    std::string bytes;
  };
  enum class ReplyMode : uint8_t { kOn, kOff, kSkip };
  struct Client {
    uint64_t id = 0;
    UniqueFd fd;
    std::string in;
    size_t in_pos = 0;
    std::string out;
    size_t out_pos = 0;
    std::deque<Slot> slots;  // replies behind a pending core reply
    size_t slot_bytes = 0;   // their bytes (ready ones)
    uint64_t first_seq = 0;  // sequence number of slots.front()
    Proto proto = Proto::kResp2;
    bool authed = false;
    std::string name, lib_name, lib_ver;
    std::string addr, laddr;  // "ip:port" (TCP) or "path:0" (unix), as CLIENT LIST shows
    bool unix_socket = false;
    uint64_t created_ns = 0, last_ns = 0;  // MonotonicNanos: connected, last command
    std::string last_cmd = "NULL";
    uint32_t sub_count = 0;   // as last confirmed by the core
    uint32_t psub_count = 0;  // (patterns: for CLIENT LIST)
    // Its shard channels as confirmed, each with the pub/sub shard (core) it is on: several
    // cores carry them (SSUBSCRIBE goes to the channel's owner).
    std::unordered_map<std::string, uint16_t> shard_channels;
    int blocked = 0;       // (un)subscribe requests in flight: parsing waits for them
    bool waiting = false;  // a write (or a read of several steps) in flight: parsing waits
    uint64_t write_seq = UINT64_MAX;  // ... its reply slot
    uint32_t reads = 0;               // single-step reads in flight (they do not stop parsing)
    bool cur_write = false;           // the command being run writes (BlockFor waits for it)
    bool muted = false;       // the command being run replies nothing (CLIENT REPLY OFF/SKIP)
    bool out_paused = false;  // not read while its unread replies are over kOutputPause
    ReplyMode reply_mode = ReplyMode::kOn;
    bool skip_next = false;  // CLIENT REPLY SKIP: the next command's reply is dropped
    bool close_after_write = false;
    bool closed = false;
    bool epollout = false;
    bool stalled = false;  // not read while the core link is backlogged
    uint64_t soft_since = 0;
    size_t out_size() const { return out.size() - out_pos; }
    uint32_t shard_count() const { return static_cast<uint32_t>(shard_channels.size()); }
    bool subscribed() const { return sub_count > 0 || !shard_channels.empty(); }
  };
  enum class ReqKind : uint8_t { kSubscribe, kPublish, kQuery, kSilent };
  struct Pending {  // a pub/sub request to the core awaiting its reply
    uint64_t client = 0;
    uint64_t seq = 0;       // the client's reply slot (has_slot)
    bool has_slot = false;  // its answer is part of that slot's reply (an Assembly)
    bool blocks = false;    // the client waits for it (Client::blocked)
    bool notify = false;    // confirmations pushed to the client as they come (moved channels)
    uint16_t shard = 0;     // the pub/sub shard it went to
    ReqKind kind = ReqKind::kSilent;
    wire::SubKind sub_kind = wire::SubKind::kChannel;
    bool subscribe = true;
    bool all = false;   // unsubscribe-all: ends with an empty ack
    size_t expect = 0;  // confirmations expected (named requests)
    size_t got = 0;
    wire::PubsubQueryKind query = wire::PubsubQueryKind::kChannels;
    int64_t number = 0;
    std::vector<std::pair<std::string, int64_t>> entries;
    std::string reply;  // being built
  };
  using Assembly = resp_detail::PubsubAssembly;

  struct SlotKeyHash {
    size_t operator()(const std::pair<uint64_t, uint64_t>& k) const {
      return std::hash<uint64_t>{}(k.first * 0x9e3779b97f4a7c15ULL ^ k.second);
    }
  };
  // The command table (resp_server.cpp): arity as Redis's (-n: at least n), where it may
  // run, the handler, and what COMMAND INFO says of it.
  using Handler = void (Impl::*)(Client&, Argv&);
  struct CommandSpec {
    const char* name;
    int arity;
    bool in_subscribed;  // allowed in RESP2 subscribed mode
    bool no_auth;        // allowed before AUTH
    Handler handler;
    std::initializer_list<const char*> flags;  // COMMAND INFO's
    int first_key = 0, last_key = 0, key_step = 0;
  };
  static std::span<const CommandSpec> Commands();
  static const CommandSpec* FindCommand(std::string_view lower_name);
  static bool Writes(const CommandSpec& spec);  // its flags say "write" (and CONFIG)

  // ---- resp_server.cpp: event handling, replies ----
  void Accept(int listen_fd, bool tcp);
  void OnReadable(Client& c);
  void ProcessInput(Client& c);
  void Execute(Client& c, Argv& argv);
  void FlushClient(Client& c);
  void Close(Client& c, std::string_view why);
  void CheckOutputLimits(Client& c);
  void Reply(Client& c, std::string bytes);  // in command order
  void AppendOut(Client& c, std::string&& bytes);
  uint64_t PendingSlot(Client& c);  // reserves a slot for a core reply
  void CompleteSlot(uint64_t client, uint64_t seq, std::string bytes);
  // A command that waits for the core: its reply slot. After a write (cur_write) the client
  // runs no further command until Unblock, so each command sees the writes before it;
  // reads of one step (one request per key) run on behind each other (the core answers a
  // shard's requests in order, so a write after them cannot overtake them), up to
  // kMaxReadsInFlight, while its replies not yet written (sent or waiting their turn) are
  // under kOutputPause.
  uint64_t BlockFor(Client& c);
  void Unblock(uint64_t client, uint64_t seq, std::string bytes);
  Client* FindClient(uint64_t id);
  std::string Err(std::string_view text) {
    std::string s;
    RespWriter(&s).Error(text);
    return s;
  }
  void OnCoreMessage(uint16_t shard, std::span<const uint8_t> m);
  void OnCoreDown();  // its replies will never come, its subscriptions are gone
  // Back-pressure: a client is not read while the core link's queue is over its limit.
  void Stall(Client& c);
  void ResumeStalled();
  void SetReadInterest(Client& c);

  // ---- resp_connection.cpp ----
  void CmdPing(Client& c, Argv& argv);
  void CmdEcho(Client& c, Argv& argv);
  void CmdQuit(Client& c, Argv& argv);
  void CmdSelect(Client& c, Argv& argv);
  void CmdAuth(Client& c, Argv& argv);
  void CmdHello(Client& c, Argv& argv);
  void CmdClient(Client& c, Argv& argv);
  void CmdCommand(Client& c, Argv& argv);
  void CmdReset(Client& c, Argv& argv);
  bool CheckPassword(std::string_view user, std::string_view pass) const;
  std::string ClientInfoLine(const Client& c) const;  // a CLIENT LIST line (no newline)
  void ClientKill(Client& c, Argv& argv);

  // ---- resp_pubsub.cpp ----
  void CmdSubscribe(Client& c, Argv& argv);  // all six, by name
  void CmdPublish(Client& c, Argv& argv);    // PUBLISH, SPUBLISH
  void CmdPubsub(Client& c, Argv& argv);
  // Sends (P|S)(UN)SUBSCRIBE for `session` to pub/sub shard `shard` (split to fit the ring).
  // With `c`: the confirmations are (part of) its reply slot `seq` (nothing if `silent`) and
  // it waits for them before its next command. `notify`: each confirmation is pushed to the
  // session's client as it comes (a shard channel that moved to another core).
  void SendSubscribe(Client* c, uint64_t session, wire::SubKind kind, bool subscribe,
                     std::span<const std::string_view> names, uint64_t seq, bool silent,
                     uint16_t shard, bool notify = false);
  // The pub/sub shards the client's shard channels are on.
  static std::vector<uint16_t> ShardChannelShards(const Client& c);
  enum class Sent { kOk, kTooLarge, kDown };
  Sent SendToCore(FunctionRef<size_t(uint8_t*, size_t)> encode, size_t max_bytes, uint16_t shard);
  // Registers a request whose answer is part of slot (client, seq).
  void AddPart(Pending& p, uint64_t client, uint64_t seq);
  // A request of the slot could not be sent: the client gets `error` now, the others'
  // answers are dropped.
  void FailSlot(uint64_t client, uint64_t seq, std::string error);
  void FinishPart(Pending& fin);
  // A pub/sub answer (true), or not one (false: someone else's).
  bool OnPubsubMessage(uint16_t template_id, uint64_t corr, std::span<const uint8_t> m);
  void OnDelivery(const wire::DeliveryDecoder& d);
  // etcd://: cores joined; shard channels whose owner is now another core are left there
  // and their subscribers told (sunsubscribe), as Redis Cluster does when a slot moves.
  void OnCoresJoined();
  // etcd://: one core (not the first: pub/sub's) was lost alone, shards [first, first + count).
  // Its shard channels' subscribers are told ("sunsubscribe" pushes, as when a slot moves),
  // pub/sub requests waiting for it fail (a PUBSUB fan-out merges the others' answers),
  // object requests on it end (reads go to the key's next owner); the rest goes on.
  void OnCoreLost(uint16_t first, uint16_t count);
  void OnPubsubMoved(uint16_t old_shard);

  // ---- resp_objects.cpp ----
  void CmdGet(Client& c, Argv& argv);
  void CmdSet(Client& c, Argv& argv);
  void CmdSetFamily(Client& c, Argv& argv);  // SETNX, SETEX, PSETEX
  void CmdGetEx(Client& c, Argv& argv);
  void CmdGetDel(Client& c, Argv& argv);
  void CmdGetSet(Client& c, Argv& argv);
  void CmdDel(Client& c, Argv& argv);  // DEL, UNLINK
  void CmdExists(Client& c, Argv& argv);
  void CmdStrlen(Client& c, Argv& argv);
  void CmdGetRange(Client& c, Argv& argv);
  void CmdMGet(Client& c, Argv& argv);
  void CmdMSet(Client& c, Argv& argv);    // MSET, MSETNX
  void CmdTtl(Client& c, Argv& argv);     // TTL, PTTL, EXPIRETIME, PEXPIRETIME
  void CmdExpire(Client& c, Argv& argv);  // EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT
  void CmdPersist(Client& c, Argv& argv);
  void CmdType(Client& c, Argv& argv);
  void CmdScan(Client& c, Argv& argv);
  // SET's write once its options are read (and, for GET/NX with GET, the old value).
  struct SetArgs;
  void StartSet(Client& c, uint64_t seq, std::shared_ptr<SetArgs> a, int attempt);
  std::string CoreError(const Status& s) const;  // "-ERR goblin-core: ..." for a failure

  // ---- resp_info.cpp ----
  void CmdDbsize(Client& c, Argv& argv);
  void CmdFlushAll(Client& c, Argv& argv);  // FLUSHALL, FLUSHDB
  void CmdInfo(Client& c, Argv& argv);
  void CmdConfig(Client& c, Argv& argv);
  void CmdTime(Client& c, Argv& argv);
  // Asks every shard for its totals: done(their sums) (or the first failure).
  void ShardTotals(std::function<void(Result<CoreObjects::ScanPage>)> done);
  std::string InfoText(std::string_view sections, const CoreObjects::ScanPage& totals) const;

  RespServerOptions options_;
  UniqueFd epoll_, tcp_, unix_;
  std::unique_ptr<CoreLink> core_;
  std::unique_ptr<CoreObjects> objects_;
  std::unordered_map<uint64_t, std::unique_ptr<Client>> clients_;
  uint64_t next_client_ = resp_detail::kFirstClientTag;
  std::unordered_map<uint64_t, Pending> pending_;  // pub/sub requests by correlation id
  // Replies of split or fanned-out requests being assembled, by (client, slot).
  std::unordered_map<std::pair<uint64_t, uint64_t>, Assembly, SlotKeyHash> partial_;
  uint64_t next_corr_ = 1;
  std::vector<Client*> dirty_;     // clients with output to write
  std::vector<uint64_t> stalled_;  // clients not read until the core link drains
  std::vector<uint64_t> resume_;   // clients whose object command finished: parse on
  std::string delivery_fmt_[2];
  RespParser parser_;
  Argv argv_;
  std::string err_;
  uint64_t started_ns_ = 0;  // MonotonicNanos at Init
  uint64_t keyspace_hits_ = 0, keyspace_misses_ = 0, expired_keys_ = 0;
  uint64_t total_net_in_ = 0, total_net_out_ = 0;
};

}  // namespace goblin::gateway
