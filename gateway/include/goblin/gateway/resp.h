// RESP: the Redis serialization protocol, as goblin-gateway reads and writes it.
// RespParser takes commands out of a connection's input buffer exactly as Redis does:
// multibulk arrays of bulk strings, and inline commands (a line of words, with Redis's
// quoting rules), with Redis's limits and protocol error texts (an error closes the
// connection after the reply). Arguments are views into the input buffer (or, for quoted
// inline words, into the parser's own storage) valid until the next Parse.
// RespWriter appends replies in RESP2 or RESP3 to an output buffer.
// Both are fuzzed (fuzz_resp_parser). Threading: one connection's loop.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace goblin::gateway {

struct RespLimits {
  size_t max_bulk = 512ull << 20;  // proto-max-bulk-len
  size_t max_args = 2147483647;    // multibulk count (INT_MAX, like Redis 7)
  size_t max_inline = 64 * 1024;   // inline request / count line
};

class RespParser {
 public:
  explicit RespParser(RespLimits limits = {}) : limits_(limits) {}
  enum class Status { kCommand, kNeedMore, kError };
  // Parses the next command of `in` at *pos. kCommand: `args` holds it (possibly empty for
  // an empty inline line or `*0`, which Redis ignores) and *pos is past it. kNeedMore: wait
  // for more input (*pos unchanged). kError: `error` holds Redis's text ("Protocol error:
  // ..."); reply with it and close. Before AUTH (when a password is required) Redis allows
  // only small requests: `authenticated` false applies those limits.
  Status Parse(std::string_view in, size_t* pos, std::vector<std::string_view>* args,
               std::string* error, bool authenticated = true);

 private:
  Status ParseInline(std::string_view in, size_t* pos, std::vector<std::string_view>* args,
                     std::string* error);
  RespLimits limits_;
  std::vector<std::string> words_;  // unquoted inline words
};

// Redis's sdssplitargs: words separated by spaces, "double quotes" with \n \r \t \b \a
// \\ \" and \xHH escapes, 'single quotes' with \' only. False on unbalanced quotes.
bool SplitInlineArgs(std::string_view line, std::vector<std::string>* out);

// Replies as a client reads them (the benchmark harness and tests): one complete RESP2 or
// RESP3 reply at a time, flattened depth-first into items (an aggregate's item carries its
// element count and is followed by its elements). Strings are views into the input, valid
// while it is. Nothing is allocated once `items` has grown. Fuzzed (fuzz_resp_parser).
struct RespItem {
  char type = 0;          // + - : $ * (RESP2); _ # , ( ! = % ~ > (RESP3; no attributes)
  int64_t integer = 0;    // ':' value; '$' '!' '=' length, '*' '~' '>' count (-1: null), '%' pairs
  std::string_view text;  // + - $ ! = , ( and # (the line or the bulk's bytes)
};
struct RespReplyLimits {
  size_t max_items = 1 << 20;  // items in one reply (nested elements count)
  size_t max_depth = 32;
  size_t max_bulk = 512ull << 20;
};
enum class ReplyStatus { kReply, kNeedMore, kError };
// kReply: `items` holds the reply and *pos is past it. kNeedMore: *pos unchanged. kError:
// `error` says what is malformed (the stream cannot be resynchronized).
ReplyStatus ParseReply(std::string_view in, size_t* pos, std::vector<RespItem>* items,
                       std::string* error, const RespReplyLimits& limits = {});

enum class Proto : uint8_t { kResp2 = 2, kResp3 = 3 };

class RespWriter {
 public:
  explicit RespWriter(std::string* out) : out_(out) {}
  void Simple(std::string_view s);  // +s
  void Error(std::string_view s);   // -s (s starts with the error code, e.g. "ERR ...")
  void Integer(int64_t v);
  void Bulk(std::string_view s);
  void Verbatim(Proto p, std::string_view s);  // RESP3: =txt:..., RESP2: a bulk string
  void Null(Proto p);                          // $-1 or _
  void Array(size_t n);
  void Map(Proto p, size_t pairs);  // *2n or %n
  void Push(Proto p, size_t n);     // *n or >n
  std::string* out() { return out_; }

 private:
  void Header(char type, int64_t n);
  std::string* out_;
};

}  // namespace goblin::gateway
