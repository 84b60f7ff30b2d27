// RespServer: the store as a whole. DBSIZE and FLUSHALL ask every shard; INFO shows this
// gateway's clients and counters beside the store's totals (objects, expiring objects, RAM
// holding object bytes, expired and evicted objects); CONFIG GET/SET the settings that apply
// to a goblin-gateway RESP front (the rest of Redis's are not listed: nothing here obeys them).
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <optional>

#include "goblin/common/clock.h"
#include "goblin/pubsub/glob.h"
#include "http_util.h"
#include "resp_server_impl.h"

namespace goblin::gateway {

using namespace resp_detail;

namespace {

std::string Human(uint64_t bytes) {  // Redis's bytesToHuman
  const double b = static_cast<double>(bytes);
  if (bytes < 1024) return fmt::format("{}B", bytes);
  if (bytes < (1ull << 20)) return fmt::format("{:.2f}K", b / 1024);
  if (bytes < (1ull << 30)) return fmt::format("{:.2f}M", b / (1 << 20));
  if (bytes < (1ull << 40)) return fmt::format("{:.2f}G", b / (1ull << 30));
  return fmt::format("{:.2f}T", b / (1ull << 40));
}

uint64_t SelfRss() {
  std::ifstream f("/proc/self/statm");
  uint64_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

void RespServer::Impl::ShardTotals(std::function<void(Result<CoreObjects::ScanPage>)> done) {
  struct State {
    CoreObjects::ScanPage sum;
    size_t left = 0;
    std::optional<Status> failed;
    std::function<void(Result<CoreObjects::ScanPage>)> done;
  };
  auto st = std::make_shared<State>();
  st->left = core_->live_shard_count();
  st->done = std::move(done);
  for (uint16_t s = 0; s < core_->shard_count(); ++s) {
    if (core_->shard_lost(s)) continue;
    objects_->Scan(s, 0, 0, [st](Result<CoreObjects::ScanPage> p) {
      if (!p) {
        if (!st->failed) st->failed = p.error();
      } else {
        st->sum.objects += p->objects;
        st->sum.expiring += p->expiring;
        st->sum.ram_bytes += p->ram_bytes;
        st->sum.ram_limit += p->ram_limit;
        st->sum.expired += p->expired;
        st->sum.evicted += p->evicted;
      }
      if (--st->left > 0) return;
      if (st->failed) return st->done(std::unexpected(*st->failed));
      st->done(std::move(st->sum));
    });
  }
}

void RespServer::Impl::CmdDbsize(Client& c, Argv& /*argv*/) {
  const uint64_t seq = BlockFor(c);
  ShardTotals([this, id = c.id, seq](Result<CoreObjects::ScanPage> t) {
    if (!t) return Unblock(id, seq, CoreError(t.error()));
    std::string r;
    RespWriter(&r).Integer(static_cast<int64_t>(t->objects));
    Unblock(id, seq, std::move(r));
  });
}

void RespServer::Impl::CmdFlushAll(Client& c, Argv& argv) {
  if (argv.size() > 2 ||
      (argv.size() == 2 && !IEquals(argv[1], "sync") && !IEquals(argv[1], "async"))) {
    return Reply(c, Err("ERR syntax error"));
  }
  // (ASYNC or not: the core deletes the index entries at once and frees space behind them)
  struct State {
    size_t left = 0;
    std::optional<Status> failed;
  };
  auto st = std::make_shared<State>();
  st->left = core_->live_shard_count();
  const uint64_t seq = BlockFor(c);
  for (uint16_t s = 0; s < core_->shard_count(); ++s) {
    if (core_->shard_lost(s)) continue;
    objects_->Purge(s, [this, id = c.id, seq, st](Result<uint64_t> n) {
      if (!n && !st->failed) st->failed = n.error();
      if (--st->left > 0) return;
      if (st->failed) return Unblock(id, seq, CoreError(*st->failed));
      std::string r;
      RespWriter(&r).Simple("OK");
      Unblock(id, seq, std::move(r));
    });
  }
}

void RespServer::Impl::CmdTime(Client& c, Argv& /*argv*/) {
  const uint64_t now_us = detail::NowUnixNanos() / 1000;
  std::string r;
  RespWriter w(&r);
  w.Array(2);
  w.Bulk(std::to_string(now_us / 1'000'000));
  w.Bulk(std::to_string(now_us % 1'000'000));
  Reply(c, std::move(r));
}

std::string RespServer::Impl::InfoText(std::string_view sections,
                                       const CoreObjects::ScanPage& t) const {
  // `sections`: space-separated lower-case names ("" or "default" or "all": every one).
  auto wanted = [&](std::string_view name) {
    if (sections.empty()) return true;
    size_t pos = 0;
    while (pos <= sections.size()) {
      size_t end = sections.find(' ', pos);
      if (end == std::string_view::npos) end = sections.size();
      std::string_view s = sections.substr(pos, end - pos);
      if (s == name || s == "default" || s == "all" || s == "everything") return true;
      pos = end + 1;
    }
    return false;
  };
  std::string out;
  auto section = [&](std::string_view title) {
    if (!out.empty()) out += "\r\n";
    out += fmt::format("# {}\r\n", title);
  };
  auto line = [&](std::string_view k, const auto& v) { out += fmt::format("{}:{}\r\n", k, v); };
  const uint64_t now = MonotonicNanos();
  const uint64_t uptime = (now - started_ns_) / 1'000'000'000;
  if (wanted("server")) {
    section("Server");
    utsname u{};
    uname(&u);
    line("redis_version", kRedisVersion);
    line("redis_mode", "standalone");
    line("os", fmt::format("{} {} {}", u.sysname, u.release, u.machine));
    line("arch_bits", sizeof(void*) * 8);
    line("multiplexing_api", "epoll");
    line("process_id", getpid());
    line("tcp_port", port_);
    line("server_time_usec", detail::NowUnixNanos() / 1000);
    line("uptime_in_seconds", uptime);
    line("uptime_in_days", uptime / 86400);
    line("executable", "goblin-gateway");
    line("config_file", "");
    line("goblin_server", "goblin-gateway");
    line("goblin_core_shards", core_->shard_count());
    line("goblin_cores_lost", stats_.cores_lost);
    line("goblin_pubsub_moves", stats_.pubsub_moves);
    line("goblin_core_connected", core_->up() ? 1 : 0);
  }
  if (wanted("clients")) {
    section("Clients");
    size_t connected = 0, pubsub = 0, waiting = 0;
    for (auto& [id, c] : clients_) {
      if (c->closed) continue;
      ++connected;
      pubsub += c->subscribed() ? 1 : 0;
      waiting += c->waiting ? 1 : 0;
    }
    line("connected_clients", connected);
    line("cluster_connections", 0);
    line("maxclients", options_.max_clients);
    line("blocked_clients", 0);
    line("tracking_clients", 0);
    line("pubsub_clients", pubsub);
    line("goblin_clients_waiting_for_core", waiting);
  }
  if (wanted("memory")) {
    section("Memory");
    // The store's RAM holding object bytes (heads, tails in its pool); the gateway's own
    // memory apart.
    line("used_memory", t.ram_bytes);
    line("used_memory_human", Human(t.ram_bytes));
    line("used_memory_dataset", t.ram_bytes);
    line("maxmemory", t.ram_limit);
    line("maxmemory_human", Human(t.ram_limit));
    line("goblin_gateway_rss", SelfRss());
    line("goblin_gateway_rss_human", Human(SelfRss()));
  }
  if (wanted("persistence")) {
    section("Persistence");
    line("loading", 0);
    line("rdb_changes_since_last_save", 0);
    line("aof_enabled", 0);
    line("goblin_durable_writes", 1);  // (every acknowledged write is journaled and synced)
  }
  if (wanted("stats")) {
    section("Stats");
    line("total_connections_received", stats_.accepted);
    line("total_commands_processed", stats_.commands);
    line("total_net_input_bytes", total_net_in_);
    line("total_net_output_bytes", total_net_out_);
    line("rejected_connections", stats_.rejected);
    line("expired_keys", t.expired);
    line("evicted_keys", t.evicted);
    line("keyspace_hits", keyspace_hits_);
    line("keyspace_misses", keyspace_misses_);
    line("total_error_replies", stats_.protocol_errors);
    line("client_output_limit_disconnections", stats_.dropped_for_output_limit);
  }
  if (wanted("replication")) {
    section("Replication");
    line("role", "master");
    line("connected_slaves", 0);
  }
  if (wanted("cpu")) {
    section("CPU");
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    line("used_cpu_sys",
         fmt::format("{}.{:06}", ru.ru_stime.tv_sec, static_cast<long>(ru.ru_stime.tv_usec)));
    line("used_cpu_user",
         fmt::format("{}.{:06}", ru.ru_utime.tv_sec, static_cast<long>(ru.ru_utime.tv_usec)));
  }
  if (wanted("keyspace")) {
    section("Keyspace");
    if (t.objects > 0) {
      line("db0", fmt::format("keys={},expires={},avg_ttl=0", t.objects, t.expiring));
    }
  }
  return out;
}

void RespServer::Impl::CmdInfo(Client& c, Argv& argv) {
  std::string sections;
  for (size_t i = 1; i < argv.size(); ++i) {
    if (!sections.empty()) sections += ' ';
    sections += Lower(argv[i]);
  }
  const uint64_t seq = BlockFor(c);
  ShardTotals([this, id = c.id, seq, sections = std::move(sections),
               proto = c.proto](Result<CoreObjects::ScanPage> t) {
    // (without the core: what this gateway knows, the store's totals as 0)
    const std::string text = InfoText(sections, t ? *t : CoreObjects::ScanPage{});
    std::string r;
    RespWriter(&r).Verbatim(proto, text);
    Unblock(id, seq, std::move(r));
  });
}

void RespServer::Impl::CmdConfig(Client& c, Argv& argv) {
  const std::string sub = Lower(argv[1]);
  std::string r;
  RespWriter w(&r);
  // The settings that apply here, with their current values.
  const auto limit = fmt::format("normal 0 0 0 slave 268435456 67108864 60 pubsub {} {} {}",
                                 options_.output_hard_limit, options_.output_soft_limit,
                                 options_.output_soft_time.count() / 1'000'000'000);
  const std::vector<std::pair<std::string, std::string>> params = {
      {"maxclients", std::to_string(options_.max_clients)},
      {"requirepass", options_.requirepass},
      {"port", std::to_string(port_)},
      {"bind", options_.listen_address},
      {"unixsocket", options_.unix_path},
      {"databases", "1"},
      {"proto-max-bulk-len", std::to_string(options_.max_value_bytes)},
      {"client-output-buffer-limit", limit},
      {"save", ""},
      {"appendonly", "no"},
  };
  constexpr std::string_view kNotify = "notify-keyspace-events";  // (the core's: all fronts')
  if (sub == "get") {
    std::vector<std::pair<std::string, std::string>> hits;
    bool notify = false;
    for (size_t i = 2; i < argv.size(); ++i) {
      pubsub::Glob glob(Lower(argv[i]));
      for (const auto& p : params) {
        if (glob.Match(p.first) && std::find(hits.begin(), hits.end(), p) == hits.end())
          hits.push_back(p);
      }
      notify = notify || glob.Match(kNotify);
    }
    auto reply = [proto = c.proto](const std::vector<std::pair<std::string, std::string>>& h) {
      std::string out;
      RespWriter rw(&out);
      rw.Map(proto, h.size());
      for (const auto& [k, v] : h) {
        rw.Bulk(k);
        rw.Bulk(v);
      }
      return out;
    };
    if (!notify) return Reply(c, reply(hits));
    const uint64_t seq = BlockFor(c);
    objects_->Config(false, kNotify, "",
                     [this, id = c.id, seq, hits, reply, kNotify](Result<std::string> v) mutable {
                       if (!v) return Unblock(id, seq, CoreError(v.error()));
                       hits.emplace_back(std::string(kNotify), std::move(*v));
                       Unblock(id, seq, reply(hits));
                     });
    return;
  }
  if (sub == "set") {
    if (argv.size() % 2 != 0) {
      return Reply(c, Err("ERR wrong number of arguments for 'config|set' command"));
    }
    // All or nothing: every pair is checked before any applies (the core's last).
    RespServerOptions next = options_;
    std::optional<std::string> notify;
    for (size_t i = 2; i + 1 < argv.size(); i += 2) {
      const std::string name = Lower(argv[i]);
      const std::string_view value = argv[i + 1];
      auto failed = [&](std::string_view why) {
        return Reply(c, Err(fmt::format("ERR CONFIG SET failed (possibly related to argument "
                                        "'{}') - {}",
                                        name, why)));
      };
      int64_t n = 0;
      if (name == "maxclients") {
        if (!ParseInt(value, &n) || n < 1) return failed("argument must be a positive integer");
        next.max_clients = static_cast<size_t>(n);
      } else if (name == "requirepass") {
        next.requirepass = std::string(value);
      } else if (name == kNotify) {
        if (value.find_first_not_of("Ag$lshzxeKEtmdn") != std::string_view::npos) {
          return failed("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.");
        }
        notify = std::string(value);
      } else if (name == "client-output-buffer-limit") {
        // "<class> <hard> <soft> <seconds>"...: the pubsub class applies (normal clients have
        // no limit here; there are no replicas)
        std::vector<std::string> words;
        for (size_t p = 0; p < value.size();) {
          size_t e = value.find(' ', p);
          if (e == std::string_view::npos) e = value.size();
          if (e > p) words.emplace_back(value.substr(p, e - p));
          p = e + 1;
        }
        if (words.empty() || words.size() % 4 != 0)
          return failed(
              "Wrong number of arguments in "
              "buffer limit configuration.");
        for (size_t k = 0; k < words.size(); k += 4) {
          const std::string cls = Lower(words[k]);
          int64_t hard = 0, soft = 0, secs = 0;
          if (cls != "normal" && cls != "slave" && cls != "replica" && cls != "pubsub") {
            return failed("Invalid client class specified in buffer limit configuration.");
          }
          if (!ParseInt(words[k + 1], &hard) || !ParseInt(words[k + 2], &soft) ||
              !ParseInt(words[k + 3], &secs) || hard < 0 || soft < 0 || secs < 0) {
            return failed(
                "Error in hard, soft or soft_seconds setting in buffer limit "
                "configuration.");
          }
          if (cls == "pubsub") {
            next.output_hard_limit = static_cast<size_t>(hard);
            next.output_soft_limit = static_cast<size_t>(soft);
            next.output_soft_time = std::chrono::seconds(secs);
          }
        }
      } else if (name == "port" || name == "bind" || name == "unixsocket" || name == "databases" ||
                 name == "proto-max-bulk-len") {
        return failed("can't set immutable config");
      } else if (name == "save" || name == "appendonly") {
        return failed(
            "goblin-gateway does not persist a dataset of its own (every write is "
            "durable in goblin-core)");
      } else {
        return Reply(c, Err(fmt::format("ERR Unknown option or number of arguments for CONFIG "
                                        "SET - '{}'",
                                        std::string(argv[i]))));
      }
    }
    if (!notify) {
      options_ = std::move(next);
      w.Simple("OK");
      return Reply(c, std::move(r));
    }
    const uint64_t seq = BlockFor(c);
    objects_->Config(true, kNotify, *notify,
                     [this, id = c.id, seq, next = std::move(next)](Result<std::string> v) mutable {
                       if (!v) return Unblock(id, seq, CoreError(v.error()));
                       options_ = std::move(next);
                       std::string ok;
                       RespWriter(&ok).Simple("OK");
                       Unblock(id, seq, std::move(ok));
                     });
    return;
  }
  if (sub == "resetstat") {
    stats_ = RespStats{};
    keyspace_hits_ = keyspace_misses_ = 0;
    total_net_in_ = total_net_out_ = 0;
    w.Simple("OK");
    return Reply(c, std::move(r));
  }
  static constexpr const char* kHelp[] = {
      "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
      "GET <pattern>",
      "    Return parameters matching the glob-like <pattern> and their values.",
      "SET <directive> <value>",
      "    Set the configuration <directive> to <value>.",
      "RESETSTAT",
      "    Reset statistics reported by the INFO command.",
      "HELP",
      "    Prints this help."};
  w.Array(std::size(kHelp));
  for (const char* l : kHelp) w.Simple(l);
  Reply(c, std::move(r));
}

}  // namespace goblin::gateway
