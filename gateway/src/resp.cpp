#include "goblin/gateway/resp.h"

#include <algorithm>
#include <charconv>
#include <cstring>

namespace goblin::gateway {
namespace {

// Redis's string2ll for the count lines: an optional '-', digits, no leading '+', no
// spaces, fits in int64.
bool ParseCount(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  if (s[0] == '+') return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  if (ec != std::errc() || p != s.data() + s.size()) return false;
  // "-0" and leading zeros are rejected by Redis's string2ll.
  if (s.size() > 1 && (s[0] == '0' || (s[0] == '-' && s[1] == '0'))) return false;
  return true;
}

bool IsHex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }
int HexVal(char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

}  // namespace

bool SplitInlineArgs(std::string_view line, std::vector<std::string>* out) {
  out->clear();
  size_t i = 0, n = line.size();
  for (;;) {
    while (i < n && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    if (i >= n || line[i] == '\0') return true;  // (a C string: NUL ends it)
    std::string cur;
    bool inq = false, insq = false, done = false;
    while (!done) {
      if (inq) {
        if (i >= n || line[i] == '\0') return false;  // unterminated quotes
        if (line[i] == '\\' && i + 3 < n && line[i + 1] == 'x' && IsHex(line[i + 2]) &&
            IsHex(line[i + 3])) {
          cur.push_back(static_cast<char>(HexVal(line[i + 2]) * 16 + HexVal(line[i + 3])));
          i += 3;
        } else if (line[i] == '\\' && i + 1 < n) {
          ++i;
          char c = line[i];
          switch (c) {
            case 'n':
              c = '\n';
              break;
            case 'r':
              c = '\r';
              break;
            case 't':
              c = '\t';
              break;
            case 'b':
              c = '\b';
              break;
            case 'a':
              c = '\a';
              break;
            default:
              break;
          }
          cur.push_back(c);
        } else if (line[i] == '"') {
          // The closing quote must be followed by a space or the end.
          if (i + 1 < n && !std::isspace(static_cast<unsigned char>(line[i + 1]))) return false;
          done = true;
        } else {
          cur.push_back(line[i]);
        }
      } else if (insq) {
        if (i >= n || line[i] == '\0') return false;
        if (line[i] == '\\' && i + 1 < n && line[i + 1] == '\'') {
          ++i;
          cur.push_back('\'');
        } else if (line[i] == '\'') {
          if (i + 1 < n && !std::isspace(static_cast<unsigned char>(line[i + 1]))) return false;
          done = true;
        } else {
          cur.push_back(line[i]);
        }
      } else {
        if (i >= n) break;  // the word ends with the line
        char c = line[i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\0') {
          done = true;
        } else if (c == '"') {
          inq = true;
        } else if (c == '\'') {
          insq = true;
        } else {
          cur.push_back(c);
        }
      }
      if (i < n) ++i;
    }
    out->push_back(std::move(cur));
  }
}

RespParser::Status RespParser::ParseInline(std::string_view in, size_t* pos,
                                           std::vector<std::string_view>* args,
                                           std::string* error) {
  std::string_view rest = in.substr(*pos);
  size_t nl = rest.find('\n');
  if (nl == std::string_view::npos) {
    if (rest.size() > limits_.max_inline) {
      *error = "Protocol error: too big inline request";
      return Status::kError;
    }
    return Status::kNeedMore;
  }
  std::string_view line = rest.substr(0, nl);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (!SplitInlineArgs(line, &words_)) {
    *error = "Protocol error: unbalanced quotes in request";
    return Status::kError;
  }
  *pos += nl + 1;
  for (const auto& w : words_) args->emplace_back(w);
  return Status::kCommand;
}

RespParser::Status RespParser::Parse(std::string_view in, size_t* pos,
                                     std::vector<std::string_view>* args, std::string* error,
                                     bool authenticated) {
  args->clear();
  if (*pos >= in.size()) return Status::kNeedMore;
  if (in[*pos] != '*') return ParseInline(in, pos, args, error);
  // Count lines end at '\r'; the byte after it is taken to be '\n', as Redis does.
  auto line_end = [&](size_t from) -> size_t {
    size_t r = in.find('\r', from);
    return r == std::string_view::npos || r + 1 >= in.size() ? std::string_view::npos : r;
  };
  size_t p = *pos;
  size_t eol = line_end(p);
  if (eol == std::string_view::npos) {
    if (in.size() - p > limits_.max_inline) {
      *error = "Protocol error: too big mbulk count string";
      return Status::kError;
    }
    return Status::kNeedMore;
  }
  int64_t count = 0;
  if (!ParseCount(in.substr(p + 1, eol - p - 1), &count) ||
      count > static_cast<int64_t>(limits_.max_args)) {
    *error = "Protocol error: invalid multibulk length";
    return Status::kError;
  }
  if (count > 10 && !authenticated) {
    *error = "Protocol error: unauthenticated multibulk length";
    return Status::kError;
  }
  p = eol + 2;
  if (count <= 0) {  // *0 and *-1 are no command
    *pos = p;
    return Status::kCommand;
  }
  for (int64_t i = 0; i < count; ++i) {
    if (p >= in.size()) return Status::kNeedMore;
    eol = line_end(p);
    if (eol == std::string_view::npos) {
      if (in.size() - p > limits_.max_inline) {
        *error = "Protocol error: too big bulk count string";
        return Status::kError;
      }
      return Status::kNeedMore;
    }
    if (in[p] != '$') {
      *error = std::string("Protocol error: expected '$', got '") + in[p] + "'";
      return Status::kError;
    }
    int64_t len = 0;
    if (!ParseCount(in.substr(p + 1, eol - p - 1), &len) || len < 0 ||
        static_cast<uint64_t>(len) > limits_.max_bulk) {
      *error = "Protocol error: invalid bulk length";
      return Status::kError;
    }
    if (len > 16384 && !authenticated) {
      *error = "Protocol error: unauthenticated bulk length";
      return Status::kError;
    }
    p = eol + 2;
    if (in.size() - p < static_cast<size_t>(len) + 2) return Status::kNeedMore;
    args->emplace_back(in.substr(p, static_cast<size_t>(len)));
    p += static_cast<size_t>(len) + 2;  // Redis does not check the CRLF after a bulk
  }
  *pos = p;
  return Status::kCommand;
}
void RespWriter::Header(char type, int64_t n) {
  char buf[32];
  buf[0] = type;
  auto [e, ec] = std::to_chars(buf + 1, buf + 30, n);
  *e++ = '\r';
  *e++ = '\n';
  out_->append(buf, static_cast<size_t>(e - buf));
}

void RespWriter::Simple(std::string_view s) {
  out_->push_back('+');
  out_->append(s);
  out_->append("\r\n");
}

void RespWriter::Error(std::string_view s) {
  out_->push_back('-');
  out_->append(s);
  out_->append("\r\n");
}

void RespWriter::Integer(int64_t v) { Header(':', v); }

void RespWriter::Bulk(std::string_view s) {
  Header('$', static_cast<int64_t>(s.size()));
  out_->append(s);
  out_->append("\r\n");
}

void RespWriter::Verbatim(Proto p, std::string_view s) {
  if (p != Proto::kResp3) return Bulk(s);
  Header('=', static_cast<int64_t>(s.size() + 4));
  out_->append("txt:");
  out_->append(s);
  out_->append("\r\n");
}

void RespWriter::Null(Proto p) { out_->append(p == Proto::kResp3 ? "_\r\n" : "$-1\r\n"); }
void RespWriter::Array(size_t n) { Header('*', static_cast<int64_t>(n)); }
void RespWriter::Map(Proto p, size_t pairs) {
  if (p == Proto::kResp3) {
    Header('%', static_cast<int64_t>(pairs));
  } else {
    Header('*', static_cast<int64_t>(2 * pairs));
  }
}
void RespWriter::Push(Proto p, size_t n) {
  Header(p == Proto::kResp3 ? '>' : '*', static_cast<int64_t>(n));
}

// ---- replies ----

namespace {

// The line at `at` (without CRLF) and the position after it; false when incomplete.
bool ReplyLine(std::string_view in, size_t at, std::string_view* line, size_t* next) {
  size_t cr = in.find("\r\n", at);
  if (cr == std::string_view::npos) return false;
  *line = in.substr(at, cr - at);
  *next = cr + 2;
  return true;
}

bool ReplyInteger(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  bool neg = s[0] == '-';
  size_t i = neg ? 1 : 0;
  if (i == s.size()) return false;
  uint64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    uint64_t d = static_cast<uint64_t>(s[i] - '0');
    if (v > (static_cast<uint64_t>(INT64_MAX) - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  return true;
}

}  // namespace

ReplyStatus ParseReply(std::string_view in, size_t* pos, std::vector<RespItem>* items,
                       std::string* error, const RespReplyLimits& limits) {
  items->clear();
  size_t at = *pos;
  // Elements still owed by the open aggregates, innermost last.
  size_t owed[64];
  size_t depth = 0;
  const size_t max_depth = std::min<size_t>(limits.max_depth, 64);
  auto more = [&] {
    items->clear();
    return ReplyStatus::kNeedMore;
  };
  auto fail = [&](std::string_view what) {
    error->assign(what);
    items->clear();
    return ReplyStatus::kError;
  };
  for (;;) {
    if (at >= in.size()) return more();
    if (items->size() >= limits.max_items) return fail("reply has too many elements");
    char type = in[at];
    std::string_view line;
    size_t next;
    if (!ReplyLine(in, at + 1, &line, &next)) {
      if (in.size() - at > 64 * 1024) return fail("reply line too long");
      return more();
    }
    RespItem item;
    item.type = type;
    size_t children = 0;
    switch (type) {
      case '+':
      case '-':
      case ',':
      case '(':
      case '#':
        item.text = line;
        if (type == '#' && line != "t" && line != "f") return fail("bad boolean");
        break;
      case ':':
        if (!ReplyInteger(line, &item.integer)) return fail("bad integer");
        break;
      case '_':
        if (!line.empty()) return fail("bad null");
        break;
      case '$':
      case '!':
      case '=': {
        if (!ReplyInteger(line, &item.integer) || item.integer < -1) return fail("bad length");
        if (item.integer == -1) {
          if (type != '$') return fail("bad length");
          break;
        }
        auto len = static_cast<uint64_t>(item.integer);
        if (len > limits.max_bulk) return fail("bulk too long");
        if (in.size() - next < len + 2) return more();
        if (in[next + len] != '\r' || in[next + len + 1] != '\n') return fail("bulk without CRLF");
        item.text = in.substr(next, len);
        next += len + 2;
        break;
      }
      case '*':
      case '~':
      case '>':
      case '%': {
        if (!ReplyInteger(line, &item.integer) || item.integer < -1) return fail("bad count");
        if (item.integer == -1 && type != '*') return fail("bad count");
        if (item.integer > 0) {
          auto n = static_cast<uint64_t>(item.integer);
          if (n > limits.max_items) return fail("reply has too many elements");
          children = type == '%' ? n * 2 : n;
        }
        break;
      }
      default:
        return fail("unknown reply type");
    }
    items->push_back(item);
    at = next;
    if (children > 0) {
      if (depth >= max_depth) return fail("reply nested too deeply");
      owed[depth++] = children;
      continue;
    }
    // A complete element: settle the aggregates it completes.
    for (;;) {
      if (depth == 0) {
        *pos = at;
        return ReplyStatus::kReply;
      }
      if (--owed[depth - 1] > 0) break;
      --depth;
    }
  }
}

}  // namespace goblin::gateway
