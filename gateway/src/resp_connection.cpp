// RespServer: connection commands (PING, ECHO, QUIT, SELECT, AUTH, HELLO, CLIENT, COMMAND,
// RESET): answered here, without the core.
#include <fmt/format.h>

#include <optional>

#include "goblin/common/clock.h"
#include "resp_server_impl.h"

namespace goblin::gateway {

using namespace resp_detail;

bool RespServer::Impl::CheckPassword(std::string_view user, std::string_view pass) const {
  return user == "default" && !options_.requirepass.empty() && pass == options_.requirepass;
}

void RespServer::Impl::CmdPing(Client& c, Argv& argv) {
  const size_t argc = argv.size();
  if (argc > 2) return Reply(c, Err("ERR wrong number of arguments for 'ping' command"));
  std::string r;
  RespWriter w(&r);
  if (c.proto == Proto::kResp2 && c.subscribed()) {
    w.Array(2);
    w.Bulk("pong");
    w.Bulk(argc == 2 ? argv[1] : "");
  } else if (argc == 2) {
    w.Bulk(argv[1]);
  } else {
    w.Simple("PONG");
  }
  Reply(c, std::move(r));
}

void RespServer::Impl::CmdEcho(Client& c, Argv& argv) {
  std::string r;
  RespWriter(&r).Bulk(argv[1]);
  Reply(c, std::move(r));
}

void RespServer::Impl::CmdQuit(Client& c, Argv& /*argv*/) {
  std::string r;
  RespWriter(&r).Simple("OK");
  Reply(c, std::move(r));
  c.close_after_write = true;
}

void RespServer::Impl::CmdSelect(Client& c, Argv& argv) {
  int64_t db = 0;
  if (!ParseInt(argv[1], &db)) return Reply(c, Err("ERR value is not an integer or out of range"));
  if (db != 0) return Reply(c, Err("ERR DB index is out of range"));
  std::string r;
  RespWriter(&r).Simple("OK");
  Reply(c, std::move(r));
}

void RespServer::Impl::CmdAuth(Client& c, Argv& argv) {
  const size_t argc = argv.size();
  if (argc > 3) return Reply(c, Err("ERR syntax error"));
  if (options_.requirepass.empty()) {
    return Reply(c, Err("ERR AUTH <password> called without any password configured for the "
                        "default user. Are you sure your configuration is correct?"));
  }
  std::string_view user = argc == 3 ? argv[1] : "default", pass = argv[argc - 1];
  if (!CheckPassword(user, pass)) {
    return Reply(c, Err("WRONGPASS invalid username-password pair or user is disabled."));
  }
  c.authed = true;
  std::string r;
  RespWriter(&r).Simple("OK");
  Reply(c, std::move(r));
}

void RespServer::Impl::CmdHello(Client& c, Argv& argv) {
  Proto proto = c.proto;
  size_t i = 1;
  if (argv.size() >= 2) {
    int64_t v = 0;
    if (!ParseInt(argv[1], &v)) {
      return Reply(c, Err("ERR Protocol version is not an integer or out of range"));
    }
    if (v < 2 || v > 3) return Reply(c, Err("NOPROTO unsupported protocol version"));
    proto = v == 3 ? Proto::kResp3 : Proto::kResp2;
    i = 2;
  }
  std::optional<std::pair<std::string_view, std::string_view>> auth;
  std::optional<std::string_view> setname;
  for (; i < argv.size(); ++i) {
    size_t more = argv.size() - i - 1;
    if (IEquals(argv[i], "AUTH") && more >= 2) {
      auth = std::pair{argv[i + 1], argv[i + 2]};
      i += 2;
    } else if (IEquals(argv[i], "SETNAME") && more >= 1) {
      setname = argv[i + 1];
      i += 1;
    } else {
      return Reply(c,
                   Err(fmt::format("ERR Syntax error in HELLO option '{}'", std::string(argv[i]))));
    }
  }
  if (auth) {
    if (!CheckPassword(auth->first, auth->second)) {
      return Reply(c, Err("WRONGPASS invalid username-password pair or user is disabled."));
    }
    c.authed = true;
  }
  if (!c.authed) {
    return Reply(c, Err("NOAUTH HELLO must be called with the client already authenticated, "
                        "otherwise the HELLO AUTH <user> <pass> option can be used to "
                        "authenticate the client and select the RESP protocol version at the "
                        "same time"));
  }
  if (setname) {
    for (char ch : *setname) {
      if (ch < '!' || ch > '~') {
        return Reply(c, Err("ERR Client names cannot contain spaces, newlines or special "
                            "characters."));
      }
    }
    c.name = std::string(*setname);
  }
  c.proto = proto;
  std::string r;
  RespWriter w(&r);
  w.Map(proto, 7);
  w.Bulk("server");
  w.Bulk("goblin");
  w.Bulk("version");
  w.Bulk(kRedisVersion);
  w.Bulk("proto");
  w.Integer(proto == Proto::kResp3 ? 3 : 2);
  w.Bulk("id");
  w.Integer(static_cast<int64_t>(c.id));
  w.Bulk("mode");
  w.Bulk("standalone");
  w.Bulk("role");
  w.Bulk("master");
  w.Bulk("modules");
  w.Array(0);
  Reply(c, std::move(r));
}

std::string RespServer::Impl::ClientInfoLine(const Client& x) const {
  // Redis 7's CLIENT LIST fields (memory fields: what this gateway holds for the client).
  const uint64_t now = MonotonicNanos();
  char flag_chars[3];
  size_t n_flags = 0;
  if (x.subscribed()) flag_chars[n_flags++] = 'P';
  if (x.unix_socket) flag_chars[n_flags++] = 'U';
  if (x.close_after_write) flag_chars[n_flags++] = 'A';
  const std::string_view flags = n_flags > 0 ? std::string_view(flag_chars, n_flags) : "N";
  const size_t pending = x.slot_bytes;
  const uint64_t sub = x.sub_count >= x.psub_count ? x.sub_count - x.psub_count : 0;
  return fmt::format(
      "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={} db=0 sub={} psub={} ssub={} "
      "multi=-1 qbuf={} qbuf-free={} argv-mem=0 multi-mem=0 rbs={} rbp={} obl={} oll={} omem={} "
      "tot-mem={} "
      "events=r{} cmd={} user=default redir=-1 resp={} lib-name={} lib-ver={}",
      x.id, x.addr, x.laddr, x.fd.get(), x.name, (now - x.created_ns) / 1'000'000'000,
      (now - x.last_ns) / 1'000'000'000, flags, sub, x.psub_count, x.shard_count(),
      x.in.size() - x.in_pos, x.in.capacity() - x.in.size(), x.in.capacity(), x.in.capacity(),
      x.out_size(), x.slots.size(), pending, x.in.capacity() + x.out.capacity() + pending,
      x.epollout ? "w" : "", x.last_cmd, x.proto == Proto::kResp3 ? 3 : 2, x.lib_name, x.lib_ver);
}

void RespServer::Impl::ClientKill(Client& c, Argv& argv) {
  std::string r;
  RespWriter w(&r);
  if (argv.size() == 3) {  // the old form: CLIENT KILL addr:port
    for (auto& [id, x] : clients_) {
      if (x->closed || x->addr != argv[2]) continue;
      if (x.get() == &c) {
        c.close_after_write = true;
      } else {
        Close(*x, "");
      }
      w.Simple("OK");
      return Reply(c, std::move(r));
    }
    return Reply(c, Err("ERR No such client"));
  }
  if (argv.size() % 2 != 0) return Reply(c, Err("ERR syntax error"));
  std::optional<uint64_t> id;
  std::optional<std::string> type, addr, laddr;
  std::optional<uint64_t> maxage;
  bool skipme = true;
  for (size_t i = 2; i + 1 < argv.size(); i += 2) {
    const std::string opt = Lower(argv[i]);
    const std::string_view val = argv[i + 1];
    int64_t n = 0;
    if (opt == "id") {
      if (!ParseInt(val, &n) || n <= 0) {
        return Reply(c, Err("ERR client-id should be greater than 0"));
      }
      id = static_cast<uint64_t>(n);
    } else if (opt == "type") {
      std::string t = Lower(val);
      if (t != "normal" && t != "pubsub" && t != "master" && t != "slave" && t != "replica") {
        return Reply(c, Err(fmt::format("ERR Unknown client type '{}'", std::string(val))));
      }
      type = t;
    } else if (opt == "user") {
      if (val != "default") {
        return Reply(c, Err(fmt::format("ERR No such user '{}'", std::string(val))));
      }
    } else if (opt == "addr") {
      addr = std::string(val);
    } else if (opt == "laddr") {
      laddr = std::string(val);
    } else if (opt == "skipme") {
      if (IEquals(val, "yes")) {
        skipme = true;
      } else if (IEquals(val, "no")) {
        skipme = false;
      } else {
        return Reply(c, Err("ERR syntax error"));
      }
    } else if (opt == "maxage") {
      if (!ParseInt(val, &n) || n < 0) {
        return Reply(c, Err("ERR value is not an integer or out of range"));
      }
      maxage = static_cast<uint64_t>(n);
    } else {
      return Reply(c, Err("ERR syntax error"));
    }
  }
  const uint64_t now = MonotonicNanos();
  int64_t killed = 0;
  std::vector<Client*> victims;
  for (auto& [xid, x] : clients_) {
    if (x->closed) continue;
    if (id && x->id != *id) continue;
    if (type) {
      const bool pubsub = x->subscribed();
      if (*type == "pubsub" ? !pubsub : (*type == "normal" ? pubsub : true)) continue;
    }
    if (addr && x->addr != *addr) continue;
    if (laddr && x->laddr != *laddr) continue;
    if (maxage && (now - x->created_ns) / 1'000'000'000 < *maxage) continue;
    if (skipme && x.get() == &c) continue;
    victims.push_back(x.get());
  }
  for (Client* x : victims) {
    ++killed;
    if (x == &c) {
      c.close_after_write = true;
    } else {
      Close(*x, "");
    }
  }
  w.Integer(killed);
  Reply(c, std::move(r));
}

void RespServer::Impl::CmdClient(Client& c, Argv& argv) {
  std::string sub = Lower(argv[1]);
  std::string r;
  RespWriter w(&r);
  auto arity = [&](size_t want) {
    if (argv.size() == want) return true;
    Reply(c, Err(fmt::format("ERR wrong number of arguments for 'client|{}' command", sub)));
    return false;
  };
  if (sub == "id") {
    if (!arity(2)) return;
    w.Integer(static_cast<int64_t>(c.id));
  } else if (sub == "getname") {
    if (!arity(2)) return;
    if (c.name.empty()) {
      w.Null(c.proto);
    } else {
      w.Bulk(c.name);
    }
  } else if (sub == "setname") {
    if (!arity(3)) return;
    for (char ch : argv[2]) {
      if (ch < '!' || ch > '~') {
        return Reply(c, Err("ERR Client names cannot contain spaces, newlines or special "
                            "characters."));
      }
    }
    c.name = std::string(argv[2]);
    w.Simple("OK");
  } else if (sub == "setinfo") {
    if (!arity(4)) return;
    std::string attr = Lower(argv[2]);
    if (attr != "lib-name" && attr != "lib-ver") {
      return Reply(c, Err(fmt::format("ERR Unrecognized option '{}'", std::string(argv[2]))));
    }
    for (char ch : argv[3]) {
      if (ch < '!' || ch > '~') {
        return Reply(c, Err(fmt::format("ERR {} cannot contain spaces, newlines or special "
                                        "characters.",
                                        attr)));
      }
    }
    (attr == "lib-name" ? c.lib_name : c.lib_ver) = std::string(argv[3]);
    w.Simple("OK");
  } else if (sub == "info") {
    w.Verbatim(c.proto, ClientInfoLine(c) + "\n");
  } else if (sub == "list") {
    std::optional<std::string> type;
    std::vector<uint64_t> ids;
    if (argv.size() >= 3) {
      if (IEquals(argv[2], "type") && argv.size() == 4) {
        std::string t = Lower(argv[3]);
        if (t != "normal" && t != "pubsub" && t != "master" && t != "replica" && t != "slave") {
          return Reply(c, Err(fmt::format("ERR Unknown client type '{}'", std::string(argv[3]))));
        }
        type = t;
      } else if (IEquals(argv[2], "id") && argv.size() >= 4) {
        for (size_t i = 3; i < argv.size(); ++i) {
          int64_t n = 0;
          if (!ParseInt(argv[i], &n) || n <= 0) {
            return Reply(c, Err("ERR Invalid client ID"));
          }
          ids.push_back(static_cast<uint64_t>(n));
        }
      } else {
        return Reply(c, Err("ERR syntax error"));
      }
    }
    std::vector<const Client*> list;
    for (auto& [id, x] : clients_) {
      if (x->closed) continue;
      if (!ids.empty() && std::find(ids.begin(), ids.end(), x->id) == ids.end()) continue;
      if (type &&
          (*type == "pubsub" ? !x->subscribed() : (*type == "normal" ? x->subscribed() : true))) {
        continue;
      }
      list.push_back(x.get());
    }
    std::sort(list.begin(), list.end(),
              [](const Client* a, const Client* b) { return a->id < b->id; });
    std::string text;
    for (const Client* x : list) text += ClientInfoLine(*x) + "\n";
    w.Verbatim(c.proto, text);
  } else if (sub == "kill") {
    return ClientKill(c, argv);
  } else if (sub == "reply") {
    if (IEquals(argv[2], "on")) {
      c.reply_mode = ReplyMode::kOn;
      c.muted = false;
      w.Simple("OK");
    } else if (IEquals(argv[2], "off")) {
      c.reply_mode = ReplyMode::kOff;
      c.muted = true;
      return;
    } else if (IEquals(argv[2], "skip")) {
      if (c.reply_mode == ReplyMode::kOn) c.skip_next = true;
      c.muted = true;
      return;
    } else {
      return Reply(c, Err("ERR syntax error"));
    }
  } else if (sub == "help") {
    static constexpr const char* kHelp[] = {
        "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GETNAME",
        "    Return the name of the current connection.",
        "ID",
        "    Return the ID of the current connection.",
        "INFO",
        "    Return information about the current client connection.",
        "KILL <ip:port>",
        "    Kill connection made from <ip:port>.",
        "KILL <option> <value> [<option> <value> [...]]",
        "    Kill connections. Options are:",
        "    * ADDR (<ip:port>|<unixsocket>:0)",
        "      Kill connections made from the specified address",
        "    * LADDR (<ip:port>|<unixsocket>:0)",
        "      Kill connections made to specified local address",
        "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
        "      Kill connections by type.",
        "    * USER <username>",
        "      Kill connections authenticated by <username>.",
        "    * SKIPME (YES|NO)",
        "      Skip killing current connection (default: yes).",
        "    * ID <client-id>",
        "      Kill connections by client id.",
        "    * MAXAGE <maxage>",
        "      Kill connections older than the specified age.",
        "LIST [options ...]",
        "    Return information about client connections. Options:",
        "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
        "      Return clients of specified type.",
        "REPLY (ON|OFF|SKIP)",
        "    Control the replies sent to the current connection.",
        "SETNAME <connection-name>",
        "    Assign the name <connection-name> to the current connection.",
        "SETINFO <option> <value>",
        "    Set client meta attr (lib-name or lib-ver).",
        "HELP",
        "    Prints this help."};
    w.Array(std::size(kHelp));
    for (const char* line : kHelp) w.Simple(line);
  } else {
    return Reply(
        c, Err(fmt::format("ERR unknown subcommand '{}'. Try CLIENT HELP.", std::string(argv[1]))));
  }
  Reply(c, std::move(r));
}

void RespServer::Impl::CmdCommand(Client& c, Argv& argv) {
  // Enough for clients that probe it: COUNT, DOCS (none), INFO and the list of what we serve.
  std::string r;
  RespWriter w(&r);
  auto write_info = [&](const CommandSpec& i) {
    w.Array(10);
    w.Bulk(i.name);
    w.Integer(i.arity);
    w.Array(i.flags.size());
    for (const char* f : i.flags) w.Simple(f);
    w.Integer(i.first_key);
    w.Integer(i.last_key);
    w.Integer(i.key_step);
    w.Array(0);  // ACL categories
    w.Array(0);  // tips
    w.Array(0);  // key specs
    w.Array(0);  // subcommands
  };
  const auto commands = Commands();
  if (argv.size() == 1) {
    w.Array(commands.size());
    for (const CommandSpec& i : commands) write_info(i);
  } else if (IEquals(argv[1], "COUNT")) {
    w.Integer(static_cast<int64_t>(commands.size()));
  } else if (IEquals(argv[1], "DOCS")) {
    w.Map(c.proto, 0);
  } else if (IEquals(argv[1], "INFO")) {
    w.Array(argv.size() - 2);
    for (size_t a = 2; a < argv.size(); ++a) {
      if (const CommandSpec* spec = FindCommand(Lower(argv[a]))) {
        write_info(*spec);
      } else {
        w.Null(c.proto);
      }
    }
  } else {
    return Reply(c, Err(fmt::format("ERR unknown subcommand '{}'. Try COMMAND HELP.",
                                    std::string(argv[1]))));
  }
  Reply(c, std::move(r));
}

void RespServer::Impl::CmdReset(Client& c, Argv& /*argv*/) {
  c.reply_mode = ReplyMode::kOn;
  c.muted = false;
  c.proto = Proto::kResp2;
  c.name.clear();
  c.authed = options_.requirepass.empty();
  if (!c.subscribed()) {
    std::string r;
    RespWriter(&r).Simple("RESET");
    return Reply(c, std::move(r));
  }
  // Leave every family at the core; the last confirmation sends +RESET.
  uint64_t seq = PendingSlot(c);
  for (auto k : {wire::SubKind::kChannel, wire::SubKind::kPattern})
    SendSubscribe(&c, c.id, k, false, {}, seq, true, core_->pubsub_shard());
  for (uint16_t s : ShardChannelShards(c))
    SendSubscribe(&c, c.id, wire::SubKind::kShard, false, {}, seq, true, s);
  if (auto it = partial_.find({c.id, seq}); it != partial_.end()) {
    it->second.reset_after = true;
  } else {  // (nothing could be sent: the core is away, and with it the subscriptions)
    std::string r;
    RespWriter(&r).Simple("RESET");
    CompleteSlot(c.id, seq, std::move(r));
  }
}

}  // namespace goblin::gateway
