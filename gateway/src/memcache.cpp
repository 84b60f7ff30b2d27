#include "goblin/gateway/memcache.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace goblin::gateway::memcache {
namespace {

constexpr std::string_view kError = "ERROR\r\n";
constexpr std::string_view kBadFormat = "CLIENT_ERROR bad command line format\r\n";
constexpr std::string_view kBadExptime = "CLIENT_ERROR invalid exptime argument\r\n";
constexpr std::string_view kBadDelta = "CLIENT_ERROR invalid numeric delta argument\r\n";
constexpr std::string_view kDeleteUsage =
    "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n";
constexpr size_t kMaxTokens = 24;  // memcached's MAX_TOKENS: 23 tokens + the terminal one

// A token copied with a terminating NUL for strto*; tokens longer than this are never
// numbers memcached would take either (they would overflow or not end in the number).
struct CToken {
  char buf[64];
  bool fits;
  explicit CToken(std::string_view t) : fits(t.size() < sizeof buf) {
    size_t n = fits ? t.size() : 0;
    std::memcpy(buf, t.data(), n);
    buf[n] = '\0';
  }
};

bool EndsNumber(const char* str, const char* end) {
  return end != str && (*end == '\0' || std::isspace(static_cast<unsigned char>(*end)));
}

Parsed Reply(std::string_view r) { return {Parsed::Kind::kReply, r}; }
Parsed Silent() { return {Parsed::Kind::kReply, {}}; }
Parsed Go() { return {Parsed::Kind::kRequest, {}}; }

}  // namespace

bool IsStorage(Cmd c) {
  switch (c) {
    case Cmd::kSet:
    case Cmd::kAdd:
    case Cmd::kReplace:
    case Cmd::kAppend:
    case Cmd::kPrepend:
    case Cmd::kCas:
    case Cmd::kMetaSet:
      return true;
    default:
      return false;
  }
}

bool ParseU64(std::string_view token, uint64_t* out) {
  *out = 0;
  CToken t(token);
  if (!t.fits) return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(t.buf, &end, 10);
  if (errno == ERANGE || end == t.buf || !EndsNumber(t.buf, end)) return false;
  if (static_cast<long long>(v) < 0 && std::strchr(t.buf, '-') != nullptr) return false;
  *out = v;
  return true;
}

bool ParseU32(std::string_view token, uint32_t* out) {
  uint64_t v = 0;
  *out = 0;
  if (!ParseU64(token, &v)) return false;
  *out = static_cast<uint32_t>(v);  // memcached keeps the low bits of an unsigned long
  return true;
}

bool ParseI32(std::string_view token, int32_t* out) {
  *out = 0;
  CToken t(token);
  if (!t.fits) return false;
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(t.buf, &end, 10);
  if (errno == ERANGE || end == t.buf || !EndsNumber(t.buf, end)) return false;
  *out = static_cast<int32_t>(v);  // (memcached assigns a long to an int32_t)
  return true;
}

bool ParseStoredNumber(std::string_view value, uint64_t* out) {
  *out = 0;
  if (value.empty()) return false;
  // strtoull stops at the first byte that is not part of the number; memcached's value is
  // followed by "\r\n", which ends it as white space does.
  char buf[96];
  size_t n = std::min(value.size(), sizeof buf - 3);
  std::memcpy(buf, value.data(), n);
  size_t len = n;
  if (n == value.size()) {
    buf[len++] = '\r';
    buf[len++] = '\n';
  }
  buf[len] = '\0';
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(buf, &end, 10);
  if (errno == ERANGE || end == buf) return false;
  if (end == buf + len && n < value.size()) return false;  // digits beyond what we looked at
  if (!EndsNumber(buf, end)) return false;
  if (static_cast<long long>(v) < 0 && std::memchr(buf, '-', static_cast<size_t>(end - buf)))
    return false;
  *out = v;
  return true;
}

uint64_t ExptimeToTtlNanos(int64_t exptime, int64_t now_unix_s) {
  constexpr uint64_t kSecond = 1'000'000'000ULL;
  if (exptime == 0) return 0;
  if (exptime < 0) return 1;
  if (exptime > kRelativeExptimeMax) {
    if (exptime <= now_unix_s) return 1;
    return static_cast<uint64_t>(exptime - now_unix_s) * kSecond;
  }
  return static_cast<uint64_t>(exptime) * kSecond;
}

namespace {
constexpr std::string_view kFlagsHeader = "X-Memcache-Flags: ";
}

uint32_t FlagsFromMetadata(std::string_view m) {
  for (size_t pos = 0; pos < m.size();) {
    size_t eol = m.find("\r\n", pos);
    std::string_view line = m.substr(pos, eol == std::string_view::npos ? eol : eol - pos);
    if (line.size() > kFlagsHeader.size() && line.starts_with(kFlagsHeader)) {
      uint32_t v = 0;
      std::string_view digits = line.substr(kFlagsHeader.size());
      for (char c : digits) {
        if (c < '0' || c > '9') return 0;
        v = v * 10 + static_cast<uint32_t>(c - '0');
      }
      return v;
    }
    if (eol == std::string_view::npos) break;
    pos = eol + 2;
  }
  return 0;
}

std::string MetadataForFlags(uint32_t flags) {
  if (flags == 0) return {};
  std::string s(kFlagsHeader);
  s += std::to_string(flags);
  s += "\r\n";
  return s;
}

constexpr std::string_view kBinaryKeyLine = "X-Memcache-Binary-Key: 1\r\n";

std::string MetadataFor(uint32_t flags, bool binary_key) {
  std::string s = MetadataForFlags(flags);
  if (binary_key) s += kBinaryKeyLine;
  return s;
}

bool KeyIsBinary(std::string_view metadata) {
  return metadata.find(kBinaryKeyLine) != std::string_view::npos;
}

namespace {
constexpr std::string_view kBase64 =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}  // namespace

bool Base64Decode(std::string_view in, std::string* out) {
  uint8_t table[256];
  std::memset(table, 0x80, sizeof table);
  for (size_t i = 0; i < kBase64.size(); ++i) table[static_cast<uint8_t>(kBase64[i])] = uint8_t(i);
  table[static_cast<uint8_t>('=')] = 0;
  size_t count = 0;
  for (char ch : in) count += table[static_cast<uint8_t>(ch)] != 0x80 ? 1 : 0;
  if (count == 0 || count % 4 != 0) return false;
  out->clear();
  uint8_t block[4];
  size_t n = 0, pad = 0;
  for (char ch : in) {
    const uint8_t v = table[static_cast<uint8_t>(ch)];
    if (v == 0x80) continue;
    if (ch == '=') ++pad;
    block[n++] = v;
    if (n < 4) continue;
    out->push_back(static_cast<char>((block[0] << 2) | (block[1] >> 4)));
    out->push_back(static_cast<char>((block[1] << 4) | (block[2] >> 2)));
    out->push_back(static_cast<char>((block[2] << 6) | block[3]));
    n = 0;
    if (pad > 0) {
      if (pad > 2) return false;  // (invalid padding)
      out->resize(out->size() - pad);
      break;
    }
  }
  return true;
}

std::string Base64Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    const uint32_t v =
        (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8) | uint8_t(in[i + 2]);
    out += kBase64[(v >> 18) & 63];
    out += kBase64[(v >> 12) & 63];
    out += kBase64[(v >> 6) & 63];
    out += kBase64[v & 63];
  }
  if (i < in.size()) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    if (i + 1 < in.size()) v |= uint32_t(uint8_t(in[i + 1])) << 8;
    out += kBase64[(v >> 18) & 63];
    out += kBase64[(v >> 12) & 63];
    out += i + 1 < in.size() ? kBase64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string DeltaResult(uint64_t result, size_t value_len) {
  std::string s = std::to_string(result);
  if (s.size() < value_len) s.append(value_len - s.size(), ' ');
  return s;
}

LineStatus NextLine(std::string_view in, size_t pos, std::string_view* line, size_t* next) {
  std::string_view rest = in.substr(pos);
  size_t nl = rest.find('\n');
  if (nl == std::string_view::npos) {
    if (rest.size() <= kMaxLineWithoutNewline) return LineStatus::kNeedMore;
    // Only a multi-get may be this long (after at most 100 leading spaces).
    size_t sp = rest.find_first_not_of(' ');
    if (sp == std::string_view::npos || sp > 100) return LineStatus::kClose;
    std::string_view s = rest.substr(sp);
    if (!s.starts_with("get ") && !s.starts_with("gets ")) return LineStatus::kClose;
    return rest.size() > kMaxGetLine ? LineStatus::kClose : LineStatus::kNeedMore;
  }
  size_t end = nl;
  if (end > 1 && rest[end - 1] == '\r') --end;
  *line = rest.substr(0, end);
  *next = pos + nl + 1;
  return LineStatus::kLine;
}

Parsed ParseLine(std::string_view line, Request* out) {
  // memcached's tokenizer: split on ' ' (runs of spaces are one separator), at most 23
  // tokens; the rest of the line is one unprocessed remainder (gets continue through it).
  std::string_view tok[kMaxTokens];
  size_t n = 0;
  size_t i = 0;
  std::string_view rest;  // after the 23rd token
  while (i < line.size()) {
    if (line[i] == ' ') {
      ++i;
      continue;
    }
    size_t j = line.find(' ', i);
    if (j == std::string_view::npos) j = line.size();
    if (n == kMaxTokens - 1) {
      rest = line.substr(i);
      break;
    }
    tok[n++] = line.substr(i, j - i);
    i = j;
  }
  const size_t ntokens = n + 1;  // memcached counts the terminal token
  Request& r = *out;
  r = Request{};
  r.keys.clear();
  if (n == 0 || tok[0].size() < 2) return Reply(kError);
  const std::string_view cmd = tok[0];
  auto noreply = [&] {
    r.noreply = ntokens >= 2 && n >= 1 && tok[n - 1] == "noreply";
    return r.noreply;
  };
  auto reply = [&](std::string_view s) { return r.noreply ? Silent() : Reply(s); };

  if (cmd.size() == 2 && cmd[0] == 'm') {
    switch (cmd[1]) {
      case 'n':
        r.cmd = Cmd::kMetaNoop;
        return Go();
      case 'g':
        r.cmd = Cmd::kMetaGet;
        break;
      case 's':
        r.cmd = Cmd::kMetaSet;
        break;
      case 'd':
        r.cmd = Cmd::kMetaDelete;
        break;
      case 'a':
        r.cmd = Cmd::kMetaArith;
        break;
      case 'e':  // memcached's debug dump of an item
        if (ntokens < 3 || tok[1].size() > kKeyMaxLength) return Reply(kBadFormat);
        r.cmd = Cmd::kMetaDebug;
        r.key = tok[1];
        return Go();
      default:
        return Reply(kError);
    }
    if (ntokens < 3) return Reply(kError);
    if (tok[1].size() > kKeyMaxLength) return Reply(kBadFormat);
    r.key = tok[1];
    size_t first = 2;
    if (r.cmd == Cmd::kMetaSet) {
      if (ntokens == 3) return Reply(kBadFormat);
      if (ntokens > 20) return Reply("CLIENT_ERROR options flags too long\r\n");
      int32_t vlen = 0;
      if (!ParseI32(tok[2], &vlen) || vlen < 0 || vlen > INT32_MAX - 2) return Reply(kBadFormat);
      r.bytes = static_cast<uint32_t>(vlen);
      first = 3;
    } else if (ntokens > 20) {
      return Reply(r.cmd == Cmd::kMetaGet ? "CLIENT_ERROR options flags are too long\r\n"
                                          : "CLIENT_ERROR options flags too long\r\n");
    }
    auto fail = [&](std::string_view e) {
      Parsed p = Reply(e);
      p.swallow = r.cmd == Cmd::kMetaSet;
      return p;
    };
    // memcached's preparse: a repeated or unknown flag ends it at once; a bad value is noted
    // (the last one noted is the answer) and the rest still read.
    MetaFlags& f = r.meta;
    f.count = 0;
    bool seen[128] = {};
    std::string_view err;
    bool bad_default = false;
    // md and ma answer every preparse failure with one text.
    const bool arith = r.cmd == Cmd::kMetaArith || r.cmd == Cmd::kMetaDelete;
    const std::string_view dup_or_invalid =
        arith ? "CLIENT_ERROR invalid or duplicate flag\r\n" : "";
    for (size_t k = first; k < n; ++k) {
      std::string_view t = tok[k];
      const auto o = static_cast<unsigned char>(t[0]);
      f.tokens[f.count++] = t;
      if (o >= 127 || seen[o]) {
        return fail(arith ? dup_or_invalid : "CLIENT_ERROR duplicate flag\r\n");
      }
      seen[o] = true;
      std::string_view arg = t.substr(1);
      switch (o) {
        case 'N':
          if (!ParseI32(arg, &f.vivify_ttl))
            err = "CLIENT_ERROR bad token in command line format\r\n";
          f.vivify = true;
          break;
        case 'T':
          if (!ParseI32(arg, &f.ttl)) err = "CLIENT_ERROR bad token in command line format\r\n";
          f.has_ttl = true;
          break;
        case 'C':
          if (!ParseU64(arg, &f.cas)) err = "CLIENT_ERROR bad token in command line format\r\n";
          f.has_cas = true;
          break;
        case 'F':  // (memcached notes the failure without a text of its own: the default)
          if (!ParseU32(arg, &f.client_flags)) bad_default = true;
          f.has_flags = true;
          break;
        case 'M':
          if (t.size() != 2) {
            err = "CLIENT_ERROR incorrect length for M token\r\n";
          } else {
            f.mode = t[1];
          }
          break;
        case 'J':
          if (!ParseU64(arg, &f.initial)) err = "CLIENT_ERROR invalid numeric initial value\r\n";
          break;
        case 'D':
          if (!ParseU64(arg, &f.delta)) err = "CLIENT_ERROR invalid numeric delta value\r\n";
          break;
        case 'v':
          f.value = true;
          break;
        case 'q':
          f.quiet = true;
          break;
        case 'O':
        case 'k':
        case 's':
        case 't':
        case 'c':
        case 'f':
          break;
        case 'b':  // base64 keys: decoded here, a failure noted in turn with the others
          f.binary_key = true;
          if (Base64Decode(r.key, &r.key_storage)) {
            r.key = r.key_storage;
          } else {
            err = "CLIENT_ERROR error decoding key\r\n";
          }
          break;
        case 'R':  // recache
          if (!ParseI32(arg, &f.recache_ttl))
            err = "CLIENT_ERROR bad token in command line format\r\n";
          f.recache = true;
          break;
        case 'I':  // invalidate (stale items)
          f.invalidate = true;
          break;
        case 'u':
          f.no_bump = true;
          break;
        case 'h':  // hit before
        case 'l':  // last access
        case 'P':  // (proxy hints: memcached takes and ignores them)
        case 'L':
          break;
        default:
          return fail(arith ? dup_or_invalid : "CLIENT_ERROR invalid flag\r\n");
      }
    }
    // (the last text noted, the key's decoding among them, else a failure without a text)
    if (!err.empty()) return fail(arith ? dup_or_invalid : err);
    if (bad_default) return fail(arith ? dup_or_invalid : kBadFormat);
    if (r.cmd == Cmd::kMetaSet && f.mode != 0 &&
        std::string_view("SEAPR").find(f.mode) == std::string_view::npos)
      return fail("CLIENT_ERROR invalid mode for ms M token\r\n");
    if (r.cmd == Cmd::kMetaArith && f.mode != 0 &&
        std::string_view("I+D-").find(f.mode) == std::string_view::npos)
      return fail("CLIENT_ERROR invalid mode for ma M token\r\n");
    for (size_t k = 0; k < f.count; ++k) {
      if (f.tokens[k][0] == 'O' && f.tokens[k].size() > 32)
        return fail("CLIENT_ERROR opaque token too long\r\n");
    }
    return Go();
  }

  // ---- the get family ----
  auto get = [&](Cmd c, bool touch) -> Parsed {
    if (ntokens < 3) return Reply(kError);
    r.cmd = c;
    size_t first = 1;
    if (touch) {
      if (!ParseI32(tok[1], &r.exptime)) return Reply(kBadExptime);
      first = 2;
    }
    auto too_long = [&] {  // (the keys before it are looked up, a gat's touched: then this)
      r.fail_reply = kBadFormat;
      return Go();
    };
    for (size_t k = first; k < n; ++k) {
      if (tok[k].size() > kKeyMaxLength) return too_long();
      r.keys.push_back(tok[k]);
    }
    // Keys past the 23rd token: memcached tokenizes the remainder again, without a limit.
    for (size_t p = 0; p < rest.size();) {
      if (rest[p] == ' ') {
        ++p;
        continue;
      }
      size_t q = rest.find(' ', p);
      if (q == std::string_view::npos) q = rest.size();
      if (q - p > kKeyMaxLength) return too_long();
      r.keys.push_back(rest.substr(p, q - p));
      p = q;
    }
    return Go();
  };
  if (cmd[0] == 'g') {
    if (ntokens < 3) return Reply(kError);
    if (cmd == "get") return get(Cmd::kGet, false);
    if (cmd == "gets") return get(Cmd::kGets, false);
    if (cmd == "gat") return get(Cmd::kGat, true);
    if (cmd == "gats") return get(Cmd::kGats, true);
    return Reply(kError);
  }
  if (cmd == "bget") return get(Cmd::kGet, false);

  // ---- storage ----
  auto update = [&](Cmd c) -> Parsed {
    const bool cas = c == Cmd::kCas;
    if (cas ? (ntokens != 7 && ntokens != 8) : (ntokens != 6 && ntokens != 7)) return Reply(kError);
    r.cmd = c;
    noreply();
    if (tok[1].size() > kKeyMaxLength) return reply(kBadFormat);
    r.key = tok[1];
    int32_t vlen = 0;
    if (!(ParseU32(tok[2], &r.flags) && ParseI32(tok[3], &r.exptime) && ParseI32(tok[4], &vlen)))
      return reply(kBadFormat);
    if (cas && !ParseU64(tok[5], &r.cas)) return reply(kBadFormat);
    if (vlen < 0 || vlen > INT32_MAX - 2) return reply(kBadFormat);
    r.bytes = static_cast<uint32_t>(vlen);
    return Go();
  };
  if (cmd == "set") return update(Cmd::kSet);
  if (cmd == "add") return update(Cmd::kAdd);
  if (cmd == "append") return update(Cmd::kAppend);
  if (cmd == "cas") return update(Cmd::kCas);
  if (cmd == "replace") return update(Cmd::kReplace);
  if (cmd == "prepend") return update(Cmd::kPrepend);

  if (cmd == "incr" || cmd == "decr") {
    if (ntokens != 4 && ntokens != 5) return Reply(kError);
    r.cmd = cmd == "incr" ? Cmd::kIncr : Cmd::kDecr;
    noreply();
    if (tok[1].size() > kKeyMaxLength) return reply(kBadFormat);
    r.key = tok[1];
    if (!ParseU64(tok[2], &r.delta)) return reply(kBadDelta);
    return Go();
  }
  if (cmd == "delete") {
    if (ntokens < 3 || ntokens > 5) return Reply(kError);
    r.cmd = Cmd::kDelete;
    if (ntokens > 3) {
      const bool hold_is_zero = tok[2] == "0";
      const bool sets_noreply = noreply();
      const bool valid = (ntokens == 4 && (hold_is_zero || sets_noreply)) ||
                         (ntokens == 5 && hold_is_zero && sets_noreply);
      if (!valid) return reply(kDeleteUsage);
    }
    if (tok[1].size() > kKeyMaxLength) return reply(kBadFormat);
    r.key = tok[1];
    return Go();
  }
  if (cmd == "touch") {
    if (ntokens != 4 && ntokens != 5) return Reply(kError);
    r.cmd = Cmd::kTouch;
    noreply();
    if (tok[1].size() > kKeyMaxLength) return reply(kBadFormat);
    r.key = tok[1];
    if (!ParseI32(tok[2], &r.exptime)) return reply(kBadExptime);
    return Go();
  }
  if (cmd == "flush_all") {
    if (ntokens < 2 || ntokens > 4) return Reply(kError);
    r.cmd = Cmd::kFlushAll;
    noreply();
    if (ntokens != (r.noreply ? 3u : 2u)) {
      if (!ParseI32(tok[1], &r.exptime)) return reply(kBadExptime);
      r.has_delay = true;
    }
    return Go();
  }
  if (cmd == "version") {
    r.cmd = Cmd::kVersion;
    return Go();
  }
  if (cmd == "quit") {
    r.cmd = Cmd::kQuit;
    return Go();
  }
  if (cmd == "verbosity") {
    if (ntokens != 3 && ntokens != 4) return Reply(kError);
    r.cmd = Cmd::kVerbosity;
    noreply();
    uint32_t level = 0;
    if (!ParseU32(tok[1], &level)) return reply(kBadFormat);
    return Go();
  }
  if (cmd == "stats") {
    r.cmd = Cmd::kStats;
    if (n >= 2) r.stats_arg = tok[1];
    return Go();
  }
  if (cmd == "shutdown") {
    r.cmd = Cmd::kShutdown;
    return Reply("ERROR: shutdown not enabled\r\n");
  }
  return Reply(kError);
}

}  // namespace goblin::gateway::memcache
