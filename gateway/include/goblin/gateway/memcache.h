// memcached 1.6's text protocol (protocol.txt), the parsing half: finding a command line
// in a client's input, splitting it as memcached does (on ' ' only, at most 24 tokens; a
// get's keys are not limited), validating it with memcached's rules and numbers (its
// safe_strto* semantics: strtoul-style, wrap-around included), and the replies those rules
// give, byte for byte (ERROR, CLIENT_ERROR ..., whether `noreply` silences them). What a
// command does with the store is goblin-gateway's MemcacheServer; this file is pure and
// fuzzed (tests/fuzz/fuzz_memcache.cpp).
// Threading: stateless functions; a Request holds views into the line it was parsed from.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace goblin::gateway::memcache {

inline constexpr std::string_view kVersion = "1.6.18";  // the memcached semantics implemented
inline constexpr size_t kKeyMaxLength = 250;
// A line without '\n' after this many bytes closes the connection unless it is a get.
inline constexpr size_t kMaxLineWithoutNewline = 2048;
// ... and a get's line may grow to this before the connection is closed.
inline constexpr size_t kMaxGetLine = 1u << 20;
// Seconds: exptimes above this are absolute unix times (memcached's REALTIME_MAXDELTA).
inline constexpr int64_t kRelativeExptimeMax = 60 * 60 * 24 * 30;

enum class Cmd : uint8_t {
  kGet,
  kGets,
  kGat,
  kGats,
  kSet,
  kAdd,
  kReplace,
  kAppend,
  kPrepend,
  kCas,
  kDelete,
  kIncr,
  kDecr,
  kTouch,
  kFlushAll,
  kVersion,
  kVerbosity,
  kQuit,
  kStats,
  kMetaNoop,    // mn
  kMetaGet,     // mg
  kMetaSet,     // ms
  kMetaDelete,  // md
  kMetaArith,   // ma
  kMetaDebug,   // me
  kShutdown,    // refused: "ERROR: shutdown not enabled"
};
bool IsStorage(Cmd c);  // set, add, replace, append, prepend, cas, ms: a data block follows

// The flags of a meta command (mg, ms, md, ma), as memcached's preparse reads them. The
// tokens are kept in order: the reply's return flags (s, f, t, c, k, O) follow it.
struct MetaFlags {
  std::string_view tokens[24];
  size_t count = 0;
  bool value = false;    // v
  bool quiet = false;    // q
  bool has_ttl = false;  // T
  int32_t ttl = 0;
  bool has_flags = false;  // F (ms)
  uint32_t client_flags = 0;
  bool has_cas = false;  // C
  uint64_t cas = 0;
  bool vivify = false;  // N (mg: an empty item on a miss, won; ma: create on a miss)
  int32_t vivify_ttl = 0;
  bool recache = false;  // R (mg): win the recache when the item's TTL is below recache_ttl
  int32_t recache_ttl = 0;
  bool invalidate = false;  // I (md: mark stale; ms with C: an older CAS stores it stale)
  bool no_bump = false;     // u (mg): not counted as a read (h, l, LRU)
  uint64_t initial = 0;     // J (ma)
  uint64_t delta = 1;       // D (ma)
  char mode = 0;            // M: ms S E A P R; ma I + D -
  bool binary_key = false;  // b: the key token is base64 (Request::key is decoded)
};

struct Request {
  Cmd cmd = Cmd::kGet;
  bool noreply = false;
  std::string_view key;                // all but the get family and flush/verbosity/stats
  std::vector<std::string_view> keys;  // get, gets, gat, gats (each <= kKeyMaxLength)
  uint32_t flags = 0;
  int32_t exptime = 0;     // storage, touch, gat(s), flush_all (delay)
  bool has_delay = false;  // flush_all with a delay given
  uint32_t bytes = 0;      // storage: the data block's length (without its \r\n)
  uint64_t cas = 0;        // cas
  uint64_t delta = 0;      // incr, decr
  std::string_view stats_arg;
  // The get family with an over-long key: memcached answers `fail_reply` after it has
  // looked at the keys before it (a gat has touched them); `keys` holds those.
  std::string_view fail_reply;
  MetaFlags meta;           // mg, ms, md, ma
  std::string key_storage;  // a meta command's base64 key, decoded (`key` views it)
  bool is_meta = false;     // (set by the server when it carries out ms/ma as set/incr/...)
};

// The next command line in `in` from `pos`: its text without "\r\n" (memcached strips one
// '\r' before the '\n' when the line has more than one byte) and where the next begins.
enum class LineStatus : uint8_t { kNeedMore, kLine, kClose };
LineStatus NextLine(std::string_view in, size_t pos, std::string_view* line, size_t* next);

// What a line asks for: a request to carry out, or an immediate reply (`reply`, with its
// "\r\n"; empty when `noreply` silenced it). A storage request whose line was refused has
// no data block read after it: memcached reads the block as the next command line.
struct Parsed {
  enum class Kind : uint8_t { kRequest, kReply } kind = Kind::kReply;
  std::string_view reply;
  // An ms refused after its data length was read: memcached reads the data block (and
  // drops it) before the next command (Request::bytes says how long it is).
  bool swallow = false;
};
Parsed ParseLine(std::string_view line, Request* out);

// memcached's number parsing (util.c safe_strto*): leading white space and a sign accepted
// as strtoul/strtol accept them, the token must end there, a negative value refused for the
// unsigned forms only when it wraps; the 32-bit forms keep the low 32 bits.
bool ParseU32(std::string_view token, uint32_t* out);
bool ParseI32(std::string_view token, int32_t* out);
bool ParseU64(std::string_view token, uint64_t* out);
// The number at the start of a stored value, as incr/decr read it (false: non-numeric).
bool ParseStoredNumber(std::string_view value, uint64_t* out);

// An exptime as a time to live in nanoseconds from `now_unix_s`: 0 = never; 1 = already
// expired (negative, or an absolute time not in the future).
uint64_t ExptimeToTtlNanos(int64_t exptime, int64_t now_unix_s);

// Client flags kept in an object's metadata (a header line, so HTTP shows them too); 0 when
// absent.
uint32_t FlagsFromMetadata(std::string_view metadata);
std::string MetadataForFlags(uint32_t flags);  // "" for 0
// A value stored by a meta command with a base64 key (b) keeps that in its metadata
// (`X-Memcache-Binary-Key: 1`, after the flags line): memcached returns such an item's key
// base64-encoded (k) with b, however it is asked for.
std::string MetadataFor(uint32_t flags, bool binary_key);
bool KeyIsBinary(std::string_view metadata);
// memcached's base64 (RFC 1341, Jouni Malinen's decoder): characters outside the alphabet
// are skipped, the rest must come in fours, '=' ends it. False: not decodable.
bool Base64Decode(std::string_view in, std::string* out);
std::string Base64Encode(std::string_view in);

// incr/decr: the value memcached leaves after the operation (`value_len`: the stored length;
// a shorter result is padded with spaces to it, as memcached rewrites in place).
std::string DeltaResult(uint64_t result, size_t value_len);

}  // namespace goblin::gateway::memcache
