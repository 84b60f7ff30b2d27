// RespServer: pub/sub. (P|S)(UN)SUBSCRIBE, (S)PUBLISH and PUBSUB are requests to a core's
// pub/sub engine, each client a core session; a client's commands after a (un)subscribe wait
// for its confirmations, so subscribed-mode checks are exact. Channels and patterns are on
// the pub/sub shard (with several cores, the first core's by name: every gateway of the
// fabric uses it, so PUBLISH reaches every subscriber; when it moves, their subscribers are
// closed, as a Redis server's are when it goes away); shard channels on their owner core's first
// shard (Redis Cluster's SSUBSCRIBE/SPUBLISH: one command's channels must have one owner, else
// CROSSSLOT; when a core joins and takes a channel, its subscribers get "sunsubscribe").
// One Delivery from a core carries every receiver behind this gateway; its RESP2 and RESP3
// forms are built once.
#include <fmt/format.h>

#include <unordered_set>

#include "goblin/common/log.h"
#include "resp_server_impl.h"

namespace goblin::gateway {

using namespace resp_detail;

namespace {
std::string_view KindName(wire::SubKind k, bool subscribe) {
  switch (k) {
    case wire::SubKind::kPattern:
      return subscribe ? "psubscribe" : "punsubscribe";
    case wire::SubKind::kShard:
      return subscribe ? "ssubscribe" : "sunsubscribe";
    default:
      return subscribe ? "subscribe" : "unsubscribe";
  }
}
}  // namespace

void RespServer::Impl::CmdSubscribe(Client& c, Argv& argv) {
  const std::string name = Lower(argv[0]);
  const bool subscribe = name.find("unsubscribe") == std::string::npos;
  const wire::SubKind kind = name[0] == 'p' ? wire::SubKind::kPattern
                             : name == "ssubscribe" || name == "sunsubscribe"
                                 ? wire::SubKind::kShard
                                 : wire::SubKind::kChannel;
  std::span<const std::string_view> names(argv.data() + 1, argv.size() - 1);
  if (kind != wire::SubKind::kShard) {
    SendSubscribe(&c, c.id, kind, subscribe, names, PendingSlot(c), false, core_->pubsub_shard());
    return;
  }
  // Shard channels live on their owner core; as in Redis Cluster, one command's channels
  // must have one owner.
  if (names.empty()) {  // SUNSUBSCRIBE: from every core that has some
    std::vector<uint16_t> shards = ShardChannelShards(c);
    if (shards.empty()) shards.push_back(core_->pubsub_shard());  // (its answer: nil, 0)
    uint64_t seq = PendingSlot(c);
    for (uint16_t s : shards) SendSubscribe(&c, c.id, kind, subscribe, names, seq, false, s);
    return;
  }
  const uint16_t shard = core_->PubsubShardFor(names[0]);
  for (std::string_view n : names.subspan(1)) {
    if (core_->PubsubShardFor(n) != shard) {
      return Reply(c, Err("CROSSSLOT Keys in request don't hash to the same slot"));
    }
  }
  SendSubscribe(&c, c.id, kind, subscribe, names, PendingSlot(c), false, shard);
}

std::vector<uint16_t> RespServer::Impl::ShardChannelShards(const Client& c) {
  std::vector<uint16_t> out;
  for (const auto& [name, shard] : c.shard_channels) {
    if (std::find(out.begin(), out.end(), shard) == out.end()) out.push_back(shard);
  }
  return out;
}

void RespServer::Impl::AddPart(Pending& p, uint64_t client, uint64_t seq) {
  p.has_slot = true;
  p.client = client;
  p.seq = seq;
  ++partial_[{client, seq}].open;
}

void RespServer::Impl::FailSlot(uint64_t client, uint64_t seq, std::string error) {
  partial_.erase({client, seq});
  CompleteSlot(client, seq, std::move(error));
}

void RespServer::Impl::SendSubscribe(Client* c, uint64_t session, wire::SubKind kind,
                                     bool subscribe, std::span<const std::string_view> names,
                                     uint64_t seq, bool silent, uint16_t shard, bool notify) {
  // As many Subscribe messages as the ring's message size needs; the client's reply is the
  // confirmations of all of them, in order.
  const size_t max = core_->max_message() - 64;
  if (!core_->up()) {
    if (c != nullptr && !silent) FailSlot(session, seq, Err("ERR goblin-core is unavailable"));
    return;
  }
  size_t i = 0;
  do {
    size_t first = i, bytes = 0;
    while (i < names.size() && (i == first || bytes + 4 + names[i].size() <= max)) {
      bytes += 4 + names[i].size();
      ++i;
    }
    const uint64_t corr = next_corr_++;
    std::span<const std::string_view> part = names.subspan(first, i - first);
    Sent sent = SendToCore(
        [&](uint8_t* b, size_t cap) {
          wire::SubscribeEncoder e(b, cap);
          e.set_correlation_id(corr)
              .set_kind(kind)
              .set_action(subscribe ? wire::SubAction::kSubscribe : wire::SubAction::kUnsubscribe)
              .set_session_id(session);
          auto g = e.BeginNames();
          for (std::string_view n : part) g.Next().set_name(n);
          return e.Finish();
        },
        bytes + 64, shard);
    if (sent != Sent::kOk) {
      if (c != nullptr && !silent) {
        FailSlot(
            session, seq,
            Err(sent == Sent::kDown ? "ERR goblin-core is unavailable"
                                    : "ERR a channel name is too large for goblin-core's ring"));
      }
      return;
    }
    Pending p;
    p.client = session;
    p.shard = shard;
    p.notify = notify;
    p.kind = silent ? ReqKind::kSilent : ReqKind::kSubscribe;
    p.sub_kind = kind;
    p.subscribe = subscribe;
    p.all = names.empty();
    p.expect = i - first;
    if (c != nullptr) {
      AddPart(p, session, seq);
      p.blocks = true;
      ++c->blocked;
    }
    pending_.emplace(corr, std::move(p));
  } while (i < names.size());
}

RespServer::Impl::Sent RespServer::Impl::SendToCore(FunctionRef<size_t(uint8_t*, size_t)> encode,
                                                    size_t max_bytes, uint16_t shard) {
  // Never dropped once parsed: ProcessInput stops reading clients while the queue is over its
  // limit, so it exceeds the limit by at most the commands already in hand.
  switch (core_->SendAlways(encode, max_bytes, shard)) {
    case CoreLink::SendResult::kSent:
    case CoreLink::SendResult::kQueued:
    case CoreLink::SendResult::kBusy:
      return Sent::kOk;
    case CoreLink::SendResult::kTooLarge:
      return Sent::kTooLarge;
    case CoreLink::SendResult::kDown:
      return Sent::kDown;
  }
  return Sent::kDown;
}

void RespServer::Impl::CmdPublish(Client& c, Argv& argv) {
  // PUBLISH: the pub/sub core every gateway uses reaches every subscriber; SPUBLISH: the
  // channel's owner.
  const bool sharded = IEquals(argv[0], "spublish");
  std::string_view channel = argv[1], payload = argv[2];
  const uint16_t shard = sharded ? core_->PubsubShardFor(channel) : core_->pubsub_shard();
  uint64_t seq = PendingSlot(c);
  uint64_t corr = next_corr_++;
  Sent sent = SendToCore(
      [&](uint8_t* b, size_t cap) {
        return wire::PublishEncoder(b, cap)
            .set_correlation_id(corr)
            .set_sharded(sharded ? 1 : 0)
            .set_channel(channel)
            .set_payload(payload)
            .Finish();
      },
      channel.size() + payload.size() + 64, shard);
  if (sent == Sent::kDown) return CompleteSlot(c.id, seq, Err("ERR goblin-core is unavailable"));
  if (sent != Sent::kOk) {
    return CompleteSlot(c.id, seq,
                        Err(fmt::format("ERR a {}-byte message is larger than goblin-core's ring "
                                        "carries ({} bytes)",
                                        payload.size(), core_->max_message() - 64)));
  }
  Pending p;
  p.kind = ReqKind::kPublish;
  p.shard = shard;
  AddPart(p, c.id, seq);
  pending_.emplace(corr, std::move(p));
}

void RespServer::Impl::CmdPubsub(Client& c, Argv& argv) {
  std::string sub = Lower(argv[1]);
  if (sub == "help") {
    static constexpr const char* kHelp[] = {
        "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CHANNELS [<pattern>]",
        "    Return the currently active channels matching a <pattern> (default: '*').",
        "NUMPAT",
        "    Return number of subscriptions to patterns.",
        "NUMSUB [<channel> ...]",
        "    Return the number of subscribers for the specified channels, excluding",
        "    pattern subscriptions(default: no channels).",
        "SHARDCHANNELS [<pattern>]",
        ("    Return the currently active shard level channels matching a <pattern> (default: "
         "'*')."),  // (one line of Redis's help, split: parenthesized, not a missing comma)
        "SHARDNUMSUB [<shardchannel> ...]",
        "    Return the number of subscribers for the specified shard level channel(s)",
        "HELP",
        "    Prints this help."};
    std::string r;
    RespWriter w(&r);
    w.Array(std::size(kHelp));
    for (const char* line : kHelp) w.Simple(line);
    return Reply(c, std::move(r));
  }
  wire::PubsubQueryKind q;
  if (sub == "channels" || sub == "shardchannels") {
    if (argv.size() > 3) {
      return Reply(c, Err(fmt::format("ERR unknown subcommand or wrong number of arguments for "
                                      "'{}'. Try PUBSUB HELP.",
                                      std::string(argv[1]))));
    }
    q = sub == "channels" ? wire::PubsubQueryKind::kChannels
                          : wire::PubsubQueryKind::kShardchannels;
  } else if (sub == "numsub" || sub == "shardnumsub") {
    q = sub == "numsub" ? wire::PubsubQueryKind::kNumsub : wire::PubsubQueryKind::kShardnumsub;
  } else {
    q = wire::PubsubQueryKind::kNumpat;
  }
  // Shard channels: every core's (each has its own channels), merged; the others: the
  // pub/sub core's.
  const bool shard_query =
      q == wire::PubsubQueryKind::kShardchannels || q == wire::PubsubQueryKind::kShardnumsub;
  const std::vector<uint16_t> shards =
      shard_query ? core_->PubsubShards() : std::vector<uint16_t>{core_->pubsub_shard()};
  uint64_t seq = PendingSlot(c);
  size_t bytes = 64;
  for (size_t i = 2; i < argv.size(); ++i) bytes += argv[i].size() + 4;
  for (uint16_t shard : shards) {
    const uint64_t corr = next_corr_++;
    Sent sent = SendToCore(
        [&](uint8_t* b, size_t cap) {
          wire::PubsubQueryEncoder e(b, cap);
          e.set_correlation_id(corr).set_query(q);
          auto g = e.BeginArgs();
          for (size_t i = 2; i < argv.size(); ++i) g.Next().set_arg(argv[i]);
          return e.Finish();
        },
        bytes, shard);
    if (sent != Sent::kOk) {
      return FailSlot(c.id, seq,
                      Err(sent == Sent::kDown ? "ERR goblin-core is unavailable"
                                              : "ERR PUBSUB arguments too large"));
    }
    Pending p;
    p.kind = ReqKind::kQuery;
    p.query = q;
    p.shard = shard;
    AddPart(p, c.id, seq);
    pending_.emplace(corr, std::move(p));
  }
}

namespace {
// A PUBSUB answer of one core into the slot's: channel lists are joined (a channel that moved
// between cores is named once), counts added up by position (each core answers every name).
void MergeQuery(PubsubAssembly& a, wire::PubsubQueryKind q, int64_t number,
                std::vector<std::pair<std::string, int64_t>>&& entries) {
  const bool first = !a.query;
  a.query = true;
  a.q = q;
  a.number += number;
  if (first || a.entries.empty()) {
    a.entries = std::move(entries);
    return;
  }
  if (q == wire::PubsubQueryKind::kChannels || q == wire::PubsubQueryKind::kShardchannels) {
    for (auto& e : entries) {
      if (std::none_of(a.entries.begin(), a.entries.end(),
                       [&](const auto& x) { return x.first == e.first; })) {
        a.entries.push_back(std::move(e));
      }
    }
    return;
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i < a.entries.size() && a.entries[i].first == entries[i].first) {
      a.entries[i].second += entries[i].second;
    } else {
      a.entries.push_back(std::move(entries[i]));
    }
  }
}

std::string QueryReply(const PubsubAssembly& a) {
  std::string r;
  RespWriter w(&r);
  if (a.q == wire::PubsubQueryKind::kNumpat) {
    w.Integer(a.number);
  } else if (a.q == wire::PubsubQueryKind::kChannels ||
             a.q == wire::PubsubQueryKind::kShardchannels) {
    w.Array(a.entries.size());
    for (const auto& [name, count] : a.entries) w.Bulk(name);
  } else {
    w.Array(2 * a.entries.size());  // a flat array in RESP3 too, like Redis 7.0
    for (const auto& [name, count] : a.entries) {
      w.Bulk(name);
      w.Integer(count);
    }
  }
  return r;
}
}  // namespace

void RespServer::Impl::FinishPart(Pending& fin) {
  auto it = partial_.find({fin.client, fin.seq});
  if (it == partial_.end()) return;  // (another part failed: the slot has its error)
  Assembly& a = it->second;
  if (fin.kind == ReqKind::kQuery && !fin.reply.starts_with('-')) {
    MergeQuery(a, fin.query, fin.number, std::move(fin.entries));
  } else if (fin.kind != ReqKind::kSilent) {
    a.reply += fin.reply;
  }
  if (--a.open > 0) return;
  std::string bytes;
  if (a.reset_after) {
    RespWriter(&bytes).Simple("RESET");
  } else if (a.query && a.reply.empty()) {
    bytes = QueryReply(a);
  } else {
    bytes = std::move(a.reply);
  }
  partial_.erase(it);
  CompleteSlot(fin.client, fin.seq, std::move(bytes));
}

bool RespServer::Impl::OnPubsubMessage(uint16_t template_id, uint64_t corr,
                                       std::span<const uint8_t> m) {
  auto it = pending_.find(corr);
  if (it == pending_.end()) return false;
  Pending& p = it->second;
  auto cit = clients_.find(p.client);
  Client* c = cit == clients_.end() || cit->second->closed ? nullptr : cit->second.get();
  Proto proto = c != nullptr ? c->proto : Proto::kResp2;
  bool done = false;
  if (template_id == wire::ErrorDecoder::kTemplateId) {
    auto e = wire::ErrorDecoder::Decode(m);
    p.reply = Err(fmt::format("ERR goblin-core: {}", e ? std::string(e->text()) : "error"));
    done = true;
  } else if (template_id == wire::SubscribeAckDecoder::kTemplateId) {
    auto a = wire::SubscribeAckDecoder::Decode(m);
    if (!a) return true;
    size_t n = 0;
    const bool push = p.notify && c != nullptr && c->reply_mode != ReplyMode::kOff;
    std::string pushed;
    // Straight into the slot's reply: confirmations from several cores interleave, and their
    // counts (over every core) only read right in the order they were taken in.
    std::string* out = &p.reply;
    if (push) {
      out = &pushed;
    } else if (auto as = p.has_slot ? partial_.find({p.client, p.seq}) : partial_.end();
               as != partial_.end()) {
      out = &as->second.reply;
    }
    RespWriter w(out);
    for (auto conf : a->confirmations()) {
      ++n;
      int64_t count = conf.count();
      if (c != nullptr) {
        if (p.sub_kind == wire::SubKind::kShard) {
          // (the client's count over every core: its channels as confirmed)
          if (!conf.name_is_nil()) {
            std::string name(conf.name());
            if (p.subscribe) {
              c->shard_channels.insert_or_assign(std::move(name), p.shard);
            } else if (auto ch = c->shard_channels.find(name);
                       ch != c->shard_channels.end() && ch->second == p.shard) {
              c->shard_channels.erase(ch);
            }
          }
          count = c->shard_count();
        } else {
          // (the count is channels + patterns, as Redis's: a pattern's change is the delta)
          if (p.sub_kind == wire::SubKind::kPattern) {
            c->psub_count = static_cast<uint32_t>(
                std::max<int64_t>(0, int64_t{c->psub_count} + conf.count() - c->sub_count));
          }
          c->sub_count = conf.count();
        }
      }
      if (p.kind == ReqKind::kSilent && !push) continue;
      w.Push(proto, 3);
      w.Bulk(KindName(p.sub_kind, p.subscribe));
      if (conf.name_is_nil()) {
        w.Null(proto);
      } else {
        w.Bulk(conf.name());
      }
      w.Integer(count);
    }
    if (!pushed.empty()) {
      c->out += pushed;
      CheckOutputLimits(*c);
      if (!c->closed) dirty_.push_back(c);
    }
    p.got += n;
    done = p.all ? n == 0 : p.got >= p.expect;
  } else if (template_id == wire::PublishAckDecoder::kTemplateId) {
    auto a = wire::PublishAckDecoder::Decode(m);
    if (!a) return true;
    RespWriter(&p.reply).Integer(static_cast<int64_t>(a->receivers()));
    done = true;
  } else if (template_id == wire::PubsubReplyDecoder::kTemplateId) {
    auto r = wire::PubsubReplyDecoder::Decode(m);
    if (!r) return true;
    p.number = r->number();
    for (auto e : r->entries()) p.entries.emplace_back(std::string(e.name()), e.count());
    done = p.query == wire::PubsubQueryKind::kNumpat ||
           p.entries.size() >= static_cast<size_t>(p.number);
  } else {
    return true;
  }
  if (!done) return true;
  Pending fin = std::move(p);
  pending_.erase(it);
  if (fin.blocks && c != nullptr && c->blocked > 0) --c->blocked;
  if (fin.has_slot) FinishPart(fin);
  if (c != nullptr && c->blocked == 0 && !c->closed) ProcessInput(*c);  // commands that waited
  return true;
}

void RespServer::Impl::OnCoresJoined() {
  // Redis Cluster, when a slot leaves a node: its shard channels' subscribers are
  // unsubscribed and told ("sunsubscribe" pushes); they subscribe again, now at the owner.
  std::vector<std::pair<uint16_t, std::vector<std::string_view>>> moved;
  for (auto& [id, c] : clients_) {
    if (c->closed || c->shard_channels.empty()) continue;
    moved.clear();
    for (const auto& [name, shard] : c->shard_channels) {
      if (core_->PubsubShardFor(name) == shard) continue;
      auto g = std::find_if(moved.begin(), moved.end(), [&](auto& x) { return x.first == shard; });
      if (g == moved.end()) g = moved.insert(moved.end(), {shard, {}});
      g->second.push_back(name);
    }
    for (auto& [shard, names] : moved) {
      SendSubscribe(nullptr, c->id, wire::SubKind::kShard, false, names, 0, true, shard, true);
    }
  }
}

void RespServer::Impl::OnCoreLost(uint16_t first, uint16_t count) {
  ++stats_.cores_lost;
  auto lost = [&](uint16_t shard) {
    return shard >= first && static_cast<uint32_t>(shard) < first + count;
  };
  // Requests waiting for the lost core, in the order they were sent.
  std::vector<uint64_t> corrs;
  for (const auto& [corr, p] : pending_) {
    if (lost(p.shard)) corrs.push_back(corr);
  }
  std::sort(corrs.begin(), corrs.end());
  std::vector<uint64_t> unblocked;
  for (uint64_t corr : corrs) {
    auto it = pending_.find(corr);
    if (it == pending_.end()) continue;
    Pending fin = std::move(it->second);
    pending_.erase(it);
    auto cit = clients_.find(fin.client);
    Client* c = cit == clients_.end() || cit->second->closed ? nullptr : cit->second.get();
    if (fin.blocks && c != nullptr && c->blocked > 0 && --c->blocked == 0) {
      unblocked.push_back(c->id);
    }
    if (!fin.has_slot || fin.kind == ReqKind::kSilent) continue;
    if (fin.kind == ReqKind::kQuery) {
      // PUBSUB SHARDCHANNELS / SHARDNUMSUB: the lost core has no channels any more.
      fin.reply.clear();
      fin.number = 0;
      fin.entries.clear();
      FinishPart(fin);
    } else {
      FailSlot(fin.client, fin.seq, Err("ERR goblin-core is unavailable"));
    }
  }
  // Shard channels at the lost core: their subscribers are unsubscribed and told.
  for (auto& [id, c] : clients_) {
    if (c->closed || c->shard_channels.empty()) continue;
    std::vector<std::string> gone;
    for (const auto& [name, shard] : c->shard_channels) {
      if (lost(shard)) gone.push_back(name);
    }
    if (gone.empty()) continue;
    std::sort(gone.begin(), gone.end());
    RespWriter w(&c->out);
    for (const std::string& name : gone) {
      c->shard_channels.erase(name);
      if (c->reply_mode == ReplyMode::kOff) continue;
      w.Push(c->proto, 3);
      w.Bulk("sunsubscribe");
      w.Bulk(name);
      w.Integer(c->shard_count());
    }
    CheckOutputLimits(*c);
    if (!c->closed) dirty_.push_back(c.get());
  }
  objects_->OnCoreLost(first, count);
  for (uint64_t id : unblocked) {  // (commands that waited for a failed one)
    if (Client* c = FindClient(id); c != nullptr && c->blocked == 0) ProcessInput(*c);
  }
}

void RespServer::Impl::OnPubsubMoved(uint16_t old_shard) {
  // Publishers now publish at another core: the channel and pattern subscriptions at the old
  // one would silently stop receiving. Their clients are closed, as a Redis server's are when
  // it goes away (a client subscribes again: at the new pub/sub core); clients with only
  // shard channels, and everyone else, keep their connections. The old core (if still there)
  // forgets them: an unsubscribe-all there, behind any subscribe still in flight to it.
  ++stats_.pubsub_moves;
  std::unordered_set<uint64_t> moving;
  for (const auto& [corr, p] : pending_) {
    if (p.shard == old_shard && p.kind == ReqKind::kSubscribe &&
        p.sub_kind != wire::SubKind::kShard) {
      moving.insert(p.client);
    }
  }
  for (auto& [id, c] : clients_) {
    if (!c->closed && c->sub_count > 0) moving.insert(id);
  }
  for (uint64_t id : moving) {
    Client* c = FindClient(id);
    if (c == nullptr) continue;
    for (auto k : {wire::SubKind::kChannel, wire::SubKind::kPattern})
      SendSubscribe(nullptr, c->id, k, false, {}, 0, true, old_shard);
    c->sub_count = c->psub_count = 0;
    Close(*c, "");
  }
  GOBLIN_LOG_WARN(kLog, "the pub/sub core moved (a core left or joined): {} subscriber{} closed",
                  moving.size(), moving.size() == 1 ? "" : "s");
}

void RespServer::Impl::OnDelivery(const wire::DeliveryDecoder& d) {
  // RESP2 and RESP3 forms, each built once on first use (member buffers: no allocation
  // per delivery once they have grown).
  std::string* formatted = delivery_fmt_;
  formatted[0].clear();
  formatted[1].clear();
  auto kind = d.kind();
  std::string_view pattern = d.pattern(), channel = d.channel(), payload = d.payload();
  for (auto s : d.sessions()) {
    auto it = clients_.find(s.session_id());
    if (it == clients_.end() || it->second->closed) continue;
    Client& c = *it->second;
    if (c.reply_mode == ReplyMode::kOff) continue;  // (Redis 7.0: CLIENT REPLY OFF mutes pushes)
    std::string& f = formatted[c.proto == Proto::kResp3 ? 1 : 0];
    if (f.empty()) {
      RespWriter w(&f);
      if (kind == wire::SubKind::kPattern) {
        w.Push(c.proto, 4);
        w.Bulk("pmessage");
        w.Bulk(pattern);
      } else {
        w.Push(c.proto, 3);
        w.Bulk(kind == wire::SubKind::kShard ? "smessage" : "message");
      }
      w.Bulk(channel);
      w.Bulk(payload);
    }
    c.out += f;
    ++stats_.messages_out;
    CheckOutputLimits(c);
    if (!c.closed) dirty_.push_back(&c);
  }
}

}  // namespace goblin::gateway
