// RespServer: the store's objects as Redis strings. A RESP key is the core key as it is (the
// same object memcache and the HTTP mirror see: the mirror's http://host/path is "host/path"),
// a value its bytes (metadata: none is written; what HTTP or memcache wrote is kept only
// while their versions are current). Each command waits for the core (BlockFor) before the
// client's next one runs, so a pipelined client sees its own writes in order; commands over
// several keys (MGET, DEL, EXISTS, MSET) ask every key at once. What is not atomic, unlike
// Redis: MSET (each key is its own put), GETDEL and SET ... GET (a read, then a write
// conditional on the version read, tried again when another write came between: the reply
// is what was replaced), GETEX (a read, then a touch).
#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <optional>

#include "goblin/common/log.h"
#include "goblin/pubsub/glob.h"
#include "goblin/sbe/wire_flags.h"
#include "http_util.h"
#include "resp_server_impl.h"

namespace goblin::gateway {

using namespace resp_detail;

namespace {

constexpr int kMaxAttempts = 100;  // SET ... GET, GETDEL: writes that lost a race
constexpr std::string_view kNotInteger = "ERR value is not an integer or out of range";
constexpr std::string_view kSyntax = "ERR syntax error";

int64_t NowMs() { return static_cast<int64_t>(detail::NowUnixNanos() / 1'000'000); }

// A unix time in ms as a time to live in ns from now (at least 1: "now" has passed), capped
// where ns would overflow (about year 2554).
uint64_t TtlNsUntil(int64_t when_ms) {
  const uint64_t now = detail::NowUnixNanos();
  constexpr uint64_t kMaxMs = (UINT64_MAX / 2) / 1'000'000;
  const uint64_t when_ns =
      static_cast<uint64_t>(std::clamp<int64_t>(when_ms, 0, static_cast<int64_t>(kMaxMs))) *
      1'000'000ULL;
  return when_ns > now ? when_ns - now : 1;
}

std::string Bulk(std::string_view s) {
  std::string r;
  RespWriter(&r).Bulk(s);
  return r;
}
std::string Int(int64_t v) {
  std::string r;
  RespWriter(&r).Integer(v);
  return r;
}
std::string Simple(std::string_view s) {
  std::string r;
  RespWriter(&r).Simple(s);
  return r;
}

// SET's and GETEX's options (Redis's parseExtendedStringArgumentsOrReply): what each one
// excludes, in the order Redis checks it.
enum : uint32_t {
  kNx = 1,
  kXx = 2,
  kGet = 4,
  kKeepTtl = 8,
  kPersist = 16,
  kEx = 32,
  kPx = 64,
  kExAt = 128,
  kPxAt = 256,
};
constexpr uint32_t kAnyExpire = kEx | kPx | kExAt | kPxAt;

// Parses options from argv[first]; false: a syntax error.
bool ParseStringOptions(const std::vector<std::string_view>& argv, size_t first, bool set,
                        uint32_t* flags, std::string_view* expire) {
  for (size_t j = first; j < argv.size(); ++j) {
    const std::string_view opt = argv[j];
    const bool has_next = j + 1 < argv.size();
    if (set && IEquals(opt, "nx") && !(*flags & kXx)) {
      *flags |= kNx;
    } else if (set && IEquals(opt, "xx") && !(*flags & kNx)) {
      *flags |= kXx;
    } else if (set && IEquals(opt, "get")) {
      *flags |= kGet;
    } else if (set && IEquals(opt, "keepttl") && !(*flags & (kPersist | kAnyExpire))) {
      *flags |= kKeepTtl;
    } else if (!set && IEquals(opt, "persist") && !(*flags & (kAnyExpire | kKeepTtl))) {
      *flags |= kPersist;
    } else if (has_next && (IEquals(opt, "ex") || IEquals(opt, "px") || IEquals(opt, "exat") ||
                            IEquals(opt, "pxat"))) {
      const uint32_t f = IEquals(opt, "ex")     ? kEx
                         : IEquals(opt, "px")   ? kPx
                         : IEquals(opt, "exat") ? kExAt
                                                : kPxAt;
      if (*flags & (kKeepTtl | kPersist | (kAnyExpire & ~f))) return false;
      *flags |= f;
      *expire = argv[++j];
    } else {
      return false;
    }
  }
  return true;
}

// Redis's getExpireMillisecondsOrReply: the expiry as a unix time in ms, or the error.
std::optional<std::string> ExpireMs(std::string_view arg, uint32_t flags, std::string_view cmd,
                                    int64_t* ms) {
  if (!ParseInt(arg, ms)) return std::string(kNotInteger);
  const bool seconds = (flags & (kEx | kExAt)) != 0;
  const std::string bad = fmt::format("ERR invalid expire time in '{}' command", cmd);
  if (*ms <= 0 || (seconds && *ms > LLONG_MAX / 1000)) return bad;
  if (seconds) *ms *= 1000;
  if (flags & (kEx | kPx)) {
    if (*ms > LLONG_MAX - NowMs()) return bad;
    *ms += NowMs();
  }
  return std::nullopt;
}

}  // namespace

std::string RespServer::Impl::CoreError(const Status& s) const {
  std::string r;
  if (s.code() == StatusCode::kUnavailable) {
    RespWriter(&r).Error("ERR goblin-core is unavailable");
  } else if (s.code() == StatusCode::kOutOfRange) {  // (this gateway's: a value too large)
    RespWriter(&r).Error(fmt::format("ERR {}", s.message()));
  } else {
    RespWriter(&r).Error(fmt::format("ERR goblin-core: {}", s.message()));
  }
  return r;
}

// ---- reads ----

void RespServer::Impl::CmdGet(Client& c, Argv& argv) {
  const uint64_t seq = BlockFor(c);
  objects_->Get(argv[1], 0, UINT64_MAX,
                [this, id = c.id, seq, proto = c.proto](Result<CoreObjects::Object> o) {
                  if (!o) return Unblock(id, seq, CoreError(o.error()));
                  std::string r;
                  if (o->found) {
                    ++keyspace_hits_;
                    RespWriter(&r).Bulk(o->bytes);
                  } else {
                    ++keyspace_misses_;
                    RespWriter(&r).Null(proto);
                  }
                  Unblock(id, seq, std::move(r));
                });
}

void RespServer::Impl::CmdMGet(Client& c, Argv& argv) {
  struct State {
    std::vector<std::optional<std::string>> values;
    size_t left = 0;
    std::optional<Status> failed;
  };
  auto st = std::make_shared<State>();
  st->values.resize(argv.size() - 1);
  st->left = argv.size() - 1;
  const uint64_t seq = BlockFor(c);
  for (size_t i = 1; i < argv.size(); ++i) {
    objects_->Get(argv[i], 0, UINT64_MAX,
                  [this, id = c.id, seq, proto = c.proto, st, i](Result<CoreObjects::Object> o) {
                    if (!o) {
                      if (!st->failed) st->failed = o.error();
                    } else if (o->found) {
                      ++keyspace_hits_;
                      st->values[i - 1] = std::move(o->bytes);
                    } else {
                      ++keyspace_misses_;
                    }
                    if (--st->left > 0) return;
                    if (st->failed) return Unblock(id, seq, CoreError(*st->failed));
                    std::string r;
                    RespWriter w(&r);
                    w.Array(st->values.size());
                    for (auto& v : st->values) {
                      if (v) {
                        w.Bulk(*v);
                      } else {
                        w.Null(proto);
                      }
                    }
                    Unblock(id, seq, std::move(r));
                  });
  }
}

void RespServer::Impl::CmdStrlen(Client& c, Argv& argv) {
  const uint64_t seq = BlockFor(c);
  objects_->Head(argv[1], [this, id = c.id, seq](Result<CoreObjects::Object> o) {
    if (!o) return Unblock(id, seq, CoreError(o.error()));
    Unblock(id, seq, Int(o->found ? static_cast<int64_t>(o->size) : 0));
  });
}

void RespServer::Impl::CmdType(Client& c, Argv& argv) {
  const uint64_t seq = BlockFor(c);
  objects_->Head(argv[1], [this, id = c.id, seq](Result<CoreObjects::Object> o) {
    if (!o) return Unblock(id, seq, CoreError(o.error()));
    Unblock(id, seq, Simple(o->found ? "string" : "none"));
  });
}

void RespServer::Impl::CmdGetRange(Client& c, Argv& argv) {
  int64_t start = 0, end = 0;
  if (!ParseInt(argv[2], &start) || !ParseInt(argv[3], &end)) {
    return Reply(c, Err(kNotInteger));
  }
  const std::string key(argv[1]);
  if (start < 0 && end < 0 && start > end) return Reply(c, Bulk(""));
  if (start < 0 || end < 0) c.cur_write = true;  // (see below)
  const uint64_t seq = BlockFor(c);
  auto reply_range = [this, id = c.id, seq](Result<CoreObjects::Object> o) {
    if (!o) return Unblock(id, seq, CoreError(o.error()));
    Unblock(id, seq, Bulk(o->found ? std::string_view(o->bytes) : std::string_view()));
  };
  if (start >= 0 && end >= 0) {  // (no length needed: the core clips the range)
    if (start > end) return Unblock(c.id, seq, Bulk(""));
    const uint64_t length = static_cast<uint64_t>(end - start) + 1;
    return objects_->Get(key, static_cast<uint64_t>(start), length, reply_range);
  }
  // Negative indexes count from the end: its length first (two steps: a write after it must
  // wait, or it could come between them).
  objects_->Head(key, [this, id = c.id, seq, key, start, end,
                       reply_range](Result<CoreObjects::Object> o) mutable {
    if (!o) return Unblock(id, seq, CoreError(o.error()));
    const auto len = static_cast<int64_t>(o->size);
    if (!o->found || len == 0) return Unblock(id, seq, Bulk(""));
    if (start < 0) start = std::max<int64_t>(0, len + start);
    if (end < 0) end = std::max<int64_t>(0, len + end);
    end = std::min(end, len - 1);
    if (start > end) return Unblock(id, seq, Bulk(""));
    objects_->Get(key, static_cast<uint64_t>(start), static_cast<uint64_t>(end - start) + 1,
                  reply_range);
  });
}

void RespServer::Impl::CmdExists(Client& c, Argv& argv) {
  auto count = std::make_shared<std::pair<size_t, int64_t>>(argv.size() - 1, 0);
  auto failed = std::make_shared<std::optional<Status>>();
  const uint64_t seq = BlockFor(c);
  for (size_t i = 1; i < argv.size(); ++i) {
    objects_->Head(argv[i], [this, id = c.id, seq, count, failed](Result<CoreObjects::Object> o) {
      if (!o) {
        if (!*failed) *failed = o.error();
      } else if (o->found) {
        ++count->second;
      }
      if (--count->first > 0) return;
      Unblock(id, seq, *failed ? CoreError(**failed) : Int(count->second));
    });
  }
}

void RespServer::Impl::CmdTtl(Client& c, Argv& argv) {
  const std::string name = Lower(argv[0]);
  const bool ms = name[0] == 'p';
  const bool absolute = name.ends_with("expiretime");
  const uint64_t seq = BlockFor(c);
  objects_->Head(argv[1], [this, id = c.id, seq, ms, absolute](Result<CoreObjects::Object> o) {
    if (!o) return Unblock(id, seq, CoreError(o.error()));
    if (!o->found) return Unblock(id, seq, Int(-2));
    if (o->expires_ns == 0) return Unblock(id, seq, Int(-1));
    int64_t v = static_cast<int64_t>(o->expires_ns / 1'000'000);  // (Redis keeps ms)
    if (!absolute) v = std::max<int64_t>(0, v - NowMs());
    Unblock(id, seq, Int(ms ? v : (v + 500) / 1000));
  });
}

// ---- writes ----

struct RespServer::Impl::SetArgs {
  std::string key, value;
  uint32_t flags = 0;
  bool has_expire = false;
  int64_t expire_ms = 0;  // unix time
  // How the reply is written: SET's OK/nil, SETNX's 1/0, GETSET/SET GET's old value.
  enum class Reply : uint8_t { kOk, kInteger } reply = Reply::kOk;
  Proto proto = Proto::kResp2;
};

void RespServer::Impl::CmdSet(Client& c, Argv& argv) {
  auto a = std::make_shared<SetArgs>();
  std::string_view expire;
  if (!ParseStringOptions(argv, 3, true, &a->flags, &expire)) return Reply(c, Err(kSyntax));
  if (a->flags & kAnyExpire) {
    if (auto e = ExpireMs(expire, a->flags, "set", &a->expire_ms)) return Reply(c, Err(*e));
    a->has_expire = true;
  }
  a->key = std::string(argv[1]);
  a->value = std::string(argv[2]);
  a->proto = c.proto;
  StartSet(c, BlockFor(c), std::move(a), 0);
}

void RespServer::Impl::CmdSetFamily(Client& c, Argv& argv) {
  const std::string name = Lower(argv[0]);
  auto a = std::make_shared<SetArgs>();
  a->key = std::string(argv[1]);
  a->proto = c.proto;
  if (name == "setnx") {
    a->flags = kNx;
    a->reply = SetArgs::Reply::kInteger;
    a->value = std::string(argv[2]);
  } else {  // SETEX key seconds value, PSETEX key ms value
    a->flags = name == "setex" ? kEx : kPx;
    if (auto e = ExpireMs(argv[2], a->flags, name, &a->expire_ms)) return Reply(c, Err(*e));
    a->has_expire = true;
    a->value = std::string(argv[3]);
  }
  StartSet(c, BlockFor(c), std::move(a), 0);
}

void RespServer::Impl::CmdGetSet(Client& c, Argv& argv) {
  auto a = std::make_shared<SetArgs>();
  a->key = std::string(argv[1]);
  a->value = std::string(argv[2]);
  a->flags = kGet;
  a->proto = c.proto;
  StartSet(c, BlockFor(c), std::move(a), 0);
}

void RespServer::Impl::StartSet(Client& c, uint64_t seq, std::shared_ptr<SetArgs> a, int attempt) {
  const uint64_t id = c.id;
  CoreObjects::PutSpec spec;
  if (a->has_expire) spec.ttl_ns = TtlNsUntil(a->expire_ms);
  if (a->flags & kKeepTtl) spec.flags |= wire::kPutKeepExpiry;
  auto refused = [](const Status& s) {
    return s.code() == StatusCode::kAlreadyExists || s.code() == StatusCode::kNotFound ||
           s.code() == StatusCode::kFailedPrecondition;
  };
  if (!(a->flags & kGet)) {
    if (a->flags & kNx) spec.flags |= wire::kPutIfAbsent;
    if (a->flags & kXx) spec.flags |= wire::kPutIfPresent;
    objects_->Put(a->key, std::move(a->value), std::move(spec),  // (no retry: moved)
                  [this, id, seq, a, refused](Result<uint64_t> g) {
                    const bool integer = a->reply == SetArgs::Reply::kInteger;
                    if (g) return Unblock(id, seq, integer ? Int(1) : Simple("OK"));
                    if (refused(g.error())) {  // NX / XX did not hold
                      std::string r;
                      if (integer) {
                        RespWriter(&r).Integer(0);
                      } else {
                        RespWriter(&r).Null(a->proto);
                      }
                      return Unblock(id, seq, std::move(r));
                    }
                    Unblock(id, seq, CoreError(g.error()));
                  });
    return;
  }
  // GET: the old value is the reply, and the write replaces exactly that version.
  objects_->Get(
      a->key, 0, UINT64_MAX,
      [this, id, seq, a, attempt, spec, refused](Result<CoreObjects::Object> o) mutable {
        if (!o) return Unblock(id, seq, CoreError(o.error()));
        std::string old;
        if (o->found) {
          RespWriter(&old).Bulk(o->bytes);
        } else {
          RespWriter(&old).Null(a->proto);
        }
        if ((a->flags & kNx && o->found) || (a->flags & kXx && !o->found)) {
          return Unblock(id, seq, std::move(old));
        }
        if (o->found) {
          spec.flags |= wire::kPutIfGeneration;
          spec.if_generation = o->generation;
        } else {
          spec.flags |= wire::kPutIfAbsent;
        }
        objects_->Put(
            a->key, a->value, std::move(spec),
            [this, id, seq, a, attempt, old = std::move(old), refused](Result<uint64_t> g) {
              if (g) return Unblock(id, seq, old);
              if (refused(g.error()) && attempt + 1 < kMaxAttempts) {
                Client* c = FindClient(id);
                if (c == nullptr) return;
                return StartSet(*c, seq, a, attempt + 1);  // another write came between
              }
              Unblock(id, seq, CoreError(g.error()));
            });
      });
}

void RespServer::Impl::CmdMSet(Client& c, Argv& argv) {
  if (argv.size() % 2 == 0) {
    return Reply(c, Err("ERR wrong number of arguments for 'mset' command"));
  }
  auto left = std::make_shared<size_t>((argv.size() - 1) / 2);
  auto failed = std::make_shared<std::optional<Status>>();
  const uint64_t seq = BlockFor(c);
  for (size_t i = 1; i + 1 < argv.size(); i += 2) {
    objects_->Put(std::string(argv[i]), std::string(argv[i + 1]), {},
                  [this, id = c.id, seq, left, failed](Result<uint64_t> g) {
                    if (!g && !*failed) *failed = g.error();
                    if (--*left > 0) return;
                    Unblock(id, seq, *failed ? CoreError(**failed) : Simple("OK"));
                  });
  }
}

void RespServer::Impl::CmdDel(Client& c, Argv& argv) {
  auto count = std::make_shared<std::pair<size_t, int64_t>>(argv.size() - 1, 0);
  auto failed = std::make_shared<std::optional<Status>>();
  const uint64_t seq = BlockFor(c);
  for (size_t i = 1; i < argv.size(); ++i) {
    objects_->Delete(argv[i], 0, [this, id = c.id, seq, count, failed](Result<bool> d) {
      if (!d) {
        if (!*failed) *failed = d.error();
      } else if (*d) {
        ++count->second;
      }
      if (--count->first > 0) return;
      Unblock(id, seq, *failed ? CoreError(**failed) : Int(count->second));
    });
  }
}

void RespServer::Impl::CmdGetDel(Client& c, Argv& argv) {
  const uint64_t seq = BlockFor(c);
  struct Op {
    std::string key;
    Proto proto;
    int attempt = 0;
    std::function<void()> run;
  };
  auto op = std::make_shared<Op>(Op{std::string(argv[1]), c.proto, 0, {}});
  // Read, then delete exactly the version read (again if another write came between).
  op->run = [this, id = c.id, seq, w = std::weak_ptr<Op>(op)] {
    auto op = w.lock();
    if (!op) return;
    objects_->Get(op->key, 0, UINT64_MAX, [this, id, seq, op](Result<CoreObjects::Object> o) {
      if (!o) return Unblock(id, seq, CoreError(o.error()));
      if (!o->found) {
        std::string r;
        RespWriter(&r).Null(op->proto);
        return Unblock(id, seq, std::move(r));
      }
      objects_->Delete(op->key, o->generation,
                       [this, id, seq, op, value = std::move(o->bytes)](Result<bool> d) {
                         if (d && *d) return Unblock(id, seq, Bulk(value));
                         if ((d || d.error().code() == StatusCode::kFailedPrecondition) &&
                             ++op->attempt < kMaxAttempts) {
                           return op->run();  // deleted or replaced meanwhile: look again
                         }
                         Unblock(id, seq, d ? Bulk(value) : CoreError(d.error()));
                       });
    });
  };
  op->run();
}

void RespServer::Impl::CmdGetEx(Client& c, Argv& argv) {
  uint32_t flags = 0;
  std::string_view expire;
  if (!ParseStringOptions(argv, 2, false, &flags, &expire)) return Reply(c, Err(kSyntax));
  // (as Redis: a bad expire time is an error only for a key that is there)
  int64_t when = 0;
  std::optional<std::string> bad_expire;
  if (flags & kAnyExpire) bad_expire = ExpireMs(expire, flags, "getex", &when);
  const uint64_t seq = BlockFor(c);
  const std::string key(argv[1]);
  objects_->Get(key, 0, UINT64_MAX,
                [this, id = c.id, seq, key, flags, when, bad_expire,
                 proto = c.proto](Result<CoreObjects::Object> o) {
                  if (!o) return Unblock(id, seq, CoreError(o.error()));
                  if (!o->found) {
                    ++keyspace_misses_;
                    std::string r;
                    RespWriter(&r).Null(proto);
                    return Unblock(id, seq, std::move(r));
                  }
                  ++keyspace_hits_;
                  if (bad_expire) return Unblock(id, seq, Err(*bad_expire));
                  std::string reply = Bulk(o->bytes);
                  if (!(flags & (kAnyExpire | kPersist))) return Unblock(id, seq, std::move(reply));
                  // The touch, then the value (a failed touch is the reply: the value was not
                  // changed).
                  uint32_t touch = 0;
                  uint64_t ttl = 0;
                  if (flags & kPersist) {
                    touch = wire::kTouchIfExpiry;  // (nothing to do without one)
                  } else if ((flags & (kExAt | kPxAt)) && when <= NowMs()) {
                    touch = wire::kTouchDelete;
                  } else {
                    ttl = TtlNsUntil(when);
                  }
                  objects_->Touch(
                      key, ttl, touch,
                      [this, id, seq, reply = std::move(reply)](Result<CoreObjects::Touched> t) {
                        Unblock(id, seq, t ? reply : CoreError(t.error()));
                      });
                });
}

void RespServer::Impl::CmdExpire(Client& c, Argv& argv) {
  const std::string name = Lower(argv[0]);
  bool nx = false, xx = false, gt = false, lt = false;
  for (size_t j = 3; j < argv.size(); ++j) {
    if (IEquals(argv[j], "nx")) {
      nx = true;
    } else if (IEquals(argv[j], "xx")) {
      xx = true;
    } else if (IEquals(argv[j], "gt")) {
      gt = true;
    } else if (IEquals(argv[j], "lt")) {
      lt = true;
    } else {
      return Reply(c, Err(fmt::format("ERR Unsupported option {}", std::string(argv[j]))));
    }
  }
  if (nx && (xx || gt || lt)) {
    return Reply(c, Err("ERR NX and XX, GT or LT options at the same time are not compatible"));
  }
  if (gt && lt) return Reply(c, Err("ERR GT and LT options at the same time are not compatible"));
  int64_t when = 0;
  if (!ParseInt(argv[2], &when)) return Reply(c, Err(kNotInteger));
  const bool seconds = name == "expire" || name == "expireat";
  const int64_t base = name == "expire" || name == "pexpire" ? NowMs() : 0;
  const std::string bad = fmt::format("ERR invalid expire time in '{}' command", name);
  if (seconds) {
    if (when > LLONG_MAX / 1000 || when < LLONG_MIN / 1000) return Reply(c, Err(bad));
    when *= 1000;
  }
  if (when > LLONG_MAX - base) return Reply(c, Err(bad));
  when += base;
  uint32_t flags = (nx ? wire::kTouchIfNoExpiry : 0) | (xx ? wire::kTouchIfExpiry : 0) |
                   (gt ? wire::kTouchIfLater : 0) | (lt ? wire::kTouchIfSooner : 0);
  uint64_t ttl = 0;
  if (when <= NowMs()) {
    flags |= wire::kTouchDelete;  // (the conditions compare "now")
  } else {
    ttl = TtlNsUntil(when);
  }
  const uint64_t seq = BlockFor(c);
  objects_->Touch(argv[1], ttl, flags, [this, id = c.id, seq](Result<CoreObjects::Touched> t) {
    if (!t) return Unblock(id, seq, CoreError(t.error()));
    Unblock(id, seq, Int(t->found ? 1 : 0));
  });
}

void RespServer::Impl::CmdPersist(Client& c, Argv& argv) {
  const uint64_t seq = BlockFor(c);
  objects_->Touch(argv[1], 0, wire::kTouchIfExpiry,
                  [this, id = c.id, seq](Result<CoreObjects::Touched> t) {
                    if (!t) return Unblock(id, seq, CoreError(t.error()));
                    Unblock(id, seq, Int(t->found ? 1 : 0));
                  });
}

// ---- SCAN ----

void RespServer::Impl::CmdScan(Client& c, Argv& argv) {
  // The cursor: the shard's cursor times the shard count, plus the shard (shards are walked
  // in order, each from 0 until its cursor comes back to 0).
  uint64_t cursor = 0;
  {
    const std::string s(argv[1]);
    char* end = nullptr;
    errno = 0;
    cursor = std::strtoull(s.c_str(), &end, 10);
    // (as Redis's strtoul: "" is 0, "-1" wraps; leading spaces are refused)
    if ((!s.empty() && std::isspace(static_cast<unsigned char>(s[0]))) ||
        end != s.c_str() + s.size() || errno == ERANGE) {
      return Reply(c, Err("ERR invalid cursor"));
    }
  }
  int64_t count = 10;
  std::optional<std::string> match, type;
  for (size_t i = 2; i < argv.size();) {
    const size_t left = argv.size() - i;
    if (IEquals(argv[i], "count") && left >= 2) {
      if (!ParseInt(argv[i + 1], &count)) return Reply(c, Err(kNotInteger));
      if (count < 1) return Reply(c, Err(kSyntax));
      i += 2;
    } else if (IEquals(argv[i], "match") && left >= 2) {
      match = std::string(argv[i + 1]);
      if (*match == "*") match.reset();
      i += 2;
    } else if (IEquals(argv[i], "type") && left >= 2) {
      type = std::string(argv[i + 1]);
      i += 2;
    } else {
      return Reply(c, Err(kSyntax));
    }
  }
  const uint16_t shards = core_->shard_count();
  auto shard = static_cast<uint16_t>(cursor % shards);
  uint64_t at = cursor / shards;
  while (core_->shard_lost(shard)) {  // (the next shard)
    if (shard + 1 >= shards) {
      std::string r;
      RespWriter w(&r);
      w.Array(2);
      w.Bulk("0");
      w.Array(0);
      return Reply(c, std::move(r));
    }
    ++shard;
    at = 0;
  }
  const uint64_t seq = BlockFor(c);
  const auto want = static_cast<uint32_t>(std::min<int64_t>(count, 100000));
  objects_->Scan(shard, at, want,
                 [this, id = c.id, seq, shard, shards, match = std::move(match),
                  type = std::move(type)](Result<CoreObjects::ScanPage> p) {
                   if (!p) return Unblock(id, seq, CoreError(p.error()));
                   uint64_t next = 0;
                   if (p->next_cursor != 0) {
                     next = p->next_cursor * shards + shard;
                   } else if (shard + 1 < shards) {
                     next = shard + 1;  // (the next shard, from its start)
                   }
                   std::optional<pubsub::Glob> glob;
                   if (match) glob.emplace(*match);
                   const bool all_filtered = type && !IEquals(*type, "string");
                   std::vector<const std::string*> keys;
                   for (const std::string& k : p->keys) {
                     if (all_filtered || (glob && !glob->Match(k))) continue;
                     keys.push_back(&k);
                   }
                   std::string r;
                   RespWriter w(&r);
                   w.Array(2);
                   w.Bulk(std::to_string(next));
                   w.Array(keys.size());
                   for (const std::string* k : keys) w.Bulk(*k);
                   Unblock(id, seq, std::move(r));
                 });
}

}  // namespace goblin::gateway
