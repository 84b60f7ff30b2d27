// MemcacheServer: the meta commands (mg, ms, md, ma; mn is answered at once), carried out by
// the same machinery as the classic ones (mg: a get of one key, or ObjectHead without v;
// ms: set/add/replace/append/prepend/cas by its M mode and C; md: delete; ma: incr/decr,
// creating the value on a miss with N), with memcached 1.6's replies: HD / VA / EN / NS /
// EX / NF followed by the return flags in the order the command gave them, q silencing
// only the answer that means "as expected" (HD; EN for mg).
#include <fmt/format.h>

#include <chrono>

#include "goblin/sbe/wire_flags.h"
#include "goblin/wire/goblin_wire.h"
#include "http_util.h"
#include "memcache_server_impl.h"

namespace goblin::gateway {
namespace {
// memcached's "t": seconds left (-1: never expires).
std::string SecondsLeft(uint64_t expires_ns) {
  if (expires_ns == 0) return "-1";
  const uint64_t now = detail::NowUnixNanos();
  if (expires_ns <= now) return "0";
  return std::to_string((expires_ns - now + 999'999'999ULL) / 1'000'000'000ULL);
}
}  // namespace

void MemcacheServer::Impl::StartSwallow(Client& c, std::string_view reply, uint64_t bytes) {
  c.op = std::make_unique<Op>();
  Op& op = *c.op;
  op.cmd = memcache::Cmd::kSet;  // (a write whose block is read and dropped)
  op.seq = c.next_seq++;
  op.lease = Lease::kRefused;
  op.refusal = std::string(reply);
  op.data_left = bytes;
  op.size = bytes;
  PumpStore(c);
}

void MemcacheServer::Impl::StartMeta(Client& c, const memcache::Request& req) {
  using memcache::Cmd;
  const memcache::MetaFlags& f = req.meta;
  auto init = [&](Op& op) {
    op.meta = true;
    op.mf = f;
    op.meta_tokens.clear();
    for (size_t i = 0; i < f.count; ++i) op.meta_tokens.emplace_back(f.tokens[i]);
  };
  if (!core_->up()) return Write(c, "SERVER_ERROR goblin-core is unavailable\r\n");
  switch (req.cmd) {
    case Cmd::kMetaGet:
    case Cmd::kMetaDebug: {
      c.op = std::make_unique<Op>();
      Op& op = *c.op;
      init(op);
      op.cmd = req.cmd;
      op.seq = c.next_seq++;
      op.no_value = !f.value || req.cmd == Cmd::kMetaDebug;
      op.keys.resize(1);
      op.keys[0].key = std::string(req.key);
      ++stats_.cmd_get;
      return PumpGet(c);
    }
    case Cmd::kMetaSet: {
      memcache::Request r;
      r.is_meta = true;
      r.meta = f;
      r.key = req.key;
      r.bytes = req.bytes;
      r.flags = f.client_flags;
      r.exptime = f.has_ttl ? f.ttl : 0;
      switch (f.mode) {
        case 'E':
          r.cmd = Cmd::kAdd;
          break;
        case 'A':
          r.cmd = Cmd::kAppend;
          break;
        case 'P':
          r.cmd = Cmd::kPrepend;
          break;
        case 'R':
          r.cmd = Cmd::kReplace;
          break;
        default:
          r.cmd = Cmd::kSet;
          break;
      }
      if (f.has_cas && (r.cmd == Cmd::kSet || r.cmd == Cmd::kReplace)) {
        r.cmd = Cmd::kCas;
        r.cas = f.cas;
      }
      return StartStore(c, r);
    }
    case Cmd::kMetaDelete: {
      memcache::Request r;
      r.cmd = Cmd::kDelete;
      r.key = req.key;
      r.is_meta = true;  // (I: mark stale, T with it; carried out by the delete)
      r.meta = f;
      // C: only that version (else EX); C0 matches no version (generations start at 1)
      if (f.has_cas) r.cas = f.cas == 0 ? UINT64_MAX : f.cas;
      StartSimple(c, r);
      if (c.op) init(*c.op);
      return;
    }
    case Cmd::kMetaArith: {
      memcache::Request r;
      r.is_meta = true;
      r.meta = f;
      r.key = req.key;
      r.cmd = (f.mode == 'D' || f.mode == '-') ? Cmd::kDecr : Cmd::kIncr;
      r.delta = f.delta;
      return StartDelta(c, r);
    }
    default:
      return Write(c, "ERROR\r\n");
  }
}

std::string MemcacheServer::Impl::MetaFlagsOut(const Op& op, const GetKey* k, bool hit) const {
  using memcache::Cmd;
  std::string out;
  const std::string& key = op.keys.empty() ? op.key : op.keys[0].key;
  // k: base64 with b for an item stored with a base64 key (mg's hit: the item's mark, as
  // memcached's ITEM_KEY_BINARY; everything else, ma's hits too: the request's b).
  bool binary = op.mf.binary_key;
  if (hit && k != nullptr) binary = k->binary_key;
  for (const std::string& t : op.meta_tokens) {
    switch (t[0]) {
      case 'O':
        out += ' ';
        out += t;
        break;
      case 'k':
        out += " k";
        if (binary) {
          out += memcache::Base64Encode(key);
          out += " b";
        } else {
          out += key;
        }
        break;
      case 's':
        if (op.cmd == Cmd::kMetaGet && hit) out += " s" + std::to_string(k->size);
        break;
      case 'f':
        if (op.cmd == Cmd::kMetaGet && hit) out += " f" + std::to_string(k->flags);
        break;
      case 't':
        if (op.cmd == Cmd::kMetaGet && hit)  // (T: the expiry it gave)
          out += " t" + SecondsLeft(op.mf.has_ttl ? op.new_expires : k->expires_ns);
        if ((op.cmd == Cmd::kIncr || op.cmd == Cmd::kDecr) && hit)
          out += " t" + SecondsLeft(op.new_expires);
        break;
      case 'h':
        if (op.cmd == Cmd::kMetaGet && hit)
          out += (k->marks & wire::kInfoFetched) != 0 ? " h1" : " h0";
        break;
      case 'l':
        if (op.cmd == Cmd::kMetaGet && hit) out += " l" + std::to_string(k->idle_s);
        break;
      case 'c':
        if (op.cmd == Cmd::kMetaGet && hit) out += " c" + std::to_string(k->generation);
        if ((op.cmd == Cmd::kIncr || op.cmd == Cmd::kDecr) && hit)
          out += " c" + std::to_string(op.new_generation);
        if (op.cmd != Cmd::kMetaGet && op.cmd != Cmd::kIncr && op.cmd != Cmd::kDecr &&
            op.cmd != Cmd::kDelete) {
          out += " c" + std::to_string(hit ? op.new_generation : 0);  // (ms: 0 if not stored)
        }
        break;
      default:
        break;
    }
  }
  // memcached's order: another reader won before (Z), stale (X), this reader won (W).
  if (op.cmd == Cmd::kMetaGet && hit && k != nullptr) {
    if ((k->marks & wire::kInfoTokenSent) != 0) out += " Z";
    if ((k->marks & wire::kInfoStale) != 0) out += " X";
    if ((k->marks & wire::kInfoWon) != 0) out += " W";
  }
  return out;
}

std::string MemcacheServer::Impl::MetaReply(const Op& op, std::string_view classic) const {
  using memcache::Cmd;
  const bool quiet = op.mf.quiet;
  auto line = [&](std::string_view code, bool hit) {
    return std::string(code) + MetaFlagsOut(op, nullptr, hit) + "\r\n";
  };
  if (op.cmd == Cmd::kDelete) {
    if (classic == "DELETED\r\n") return quiet ? "" : line("HD", true);
    if (classic == "NOT_FOUND\r\n") return line("NF", false);
    if (classic == "EXISTS\r\n") return line("EX", false);  // (C: another version)
    return std::string(classic);
  }
  if (op.cmd == Cmd::kIncr || op.cmd == Cmd::kDecr) {
    if (classic == "NOT_FOUND\r\n") return line("NF", false);
    if (classic.empty() || classic[0] < '0' || classic[0] > '9') return std::string(classic);
    std::string_view number = classic.substr(0, classic.size() - 2);
    if (quiet && !op.vivifying) return "";  // (q silences a success, VA included)
    if (op.mf.value) {
      return "VA " + std::to_string(number.size()) + MetaFlagsOut(op, nullptr, true) + "\r\n" +
             std::string(classic);
    }
    // (a value ma created on a miss is answered even when quiet, as memcached does)
    return quiet && !op.vivifying ? "" : line("HD", true);
  }
  // ms
  if (classic == "STORED\r\n") return quiet ? "" : line("HD", true);
  if (classic == "NOT_STORED\r\n") return line("NS", false);
  if (classic == "EXISTS\r\n") return line("EX", false);
  if (classic == "NOT_FOUND\r\n") return line("NF", false);
  return std::string(classic);  // (errors: as they are, q or not)
}

}  // namespace goblin::gateway
