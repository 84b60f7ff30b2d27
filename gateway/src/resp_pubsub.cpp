// RespServer: pub/sub. (P|S)(UN)SUBSCRIBE, (S)PUBLISH and PUBSUB are requests to the core's
// pub/sub engine (shard 0), each client a core session; a client's commands after a
// (un)subscribe wait for its confirmations, so subscribed-mode checks are exact. One
// Delivery from the core carries every receiver behind this gateway; its RESP2 and RESP3
// forms are built once.
#include <fmt/format.h>

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
  uint64_t seq = PendingSlot(c);
  std::span<const std::string_view> names(argv.data() + 1, argv.size() - 1);
  SendSubscribe(&c, c.id, kind, subscribe, names, seq, false);
}

uint64_t RespServer::Impl::SendSubscribe(Client* c, uint64_t session, wire::SubKind kind,
                                         bool subscribe, std::span<const std::string_view> names,
                                         uint64_t seq, bool silent) {
  // As many Subscribe messages as the ring's message size needs; the client's reply is the
  // confirmations of all of them, in order.
  const size_t max = core_->max_message() - 64;
  if (!core_->up()) {
    if (c != nullptr && !silent) CompleteSlot(session, seq, Err("ERR goblin-core is unavailable"));
    return 0;
  }
  size_t i = 0;
  uint64_t corr = 0;
  do {
    size_t first = i, bytes = 0;
    while (i < names.size() && (i == first || bytes + 4 + names[i].size() <= max)) {
      bytes += 4 + names[i].size();
      ++i;
    }
    corr = next_corr_++;
    Pending p;
    p.client = session;
    p.seq = seq;
    p.kind = silent ? ReqKind::kSilent : ReqKind::kSubscribe;
    p.sub_kind = kind;
    p.subscribe = subscribe;
    p.all = names.empty();
    p.expect = i - first;
    p.final_part = i == names.size();
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
        bytes + 64);
    if (sent != Sent::kOk) {
      if (c != nullptr && !silent) {
        CompleteSlot(
            session, seq,
            Err(sent == Sent::kDown ? "ERR goblin-core is unavailable"
                                    : "ERR a channel name is too large for goblin-core's ring"));
      }
      return 0;
    }
    if (c != nullptr) ++c->blocked;
    pending_.emplace(corr, std::move(p));
  } while (i < names.size());
  return corr;
}

RespServer::Impl::Sent RespServer::Impl::SendToCore(FunctionRef<size_t(uint8_t*, size_t)> encode,
                                                    size_t max_bytes) {
  // Never dropped once parsed: ProcessInput stops reading clients while the queue is over its
  // limit, so it exceeds the limit by at most the commands already in hand.
  switch (core_->SendAlways(encode, max_bytes)) {
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
  const bool sharded = IEquals(argv[0], "spublish");
  uint64_t seq = PendingSlot(c);
  uint64_t corr = next_corr_++;
  std::string_view channel = argv[1], payload = argv[2];
  Sent sent = SendToCore(
      [&](uint8_t* b, size_t cap) {
        return wire::PublishEncoder(b, cap)
            .set_correlation_id(corr)
            .set_sharded(sharded ? 1 : 0)
            .set_channel(channel)
            .set_payload(payload)
            .Finish();
      },
      channel.size() + payload.size() + 64);
  if (sent == Sent::kDown) return CompleteSlot(c.id, seq, Err("ERR goblin-core is unavailable"));
  if (sent != Sent::kOk) {
    return CompleteSlot(c.id, seq,
                        Err(fmt::format("ERR a {}-byte message is larger than goblin-core's ring "
                                        "carries ({} bytes)",
                                        payload.size(), core_->max_message() - 64)));
  }
  Pending p;
  p.client = c.id;
  p.seq = seq;
  p.kind = ReqKind::kPublish;
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
        "    Return the currently active shard level channels matching a <pattern> (default: "
        "'*').",
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
  uint64_t seq = PendingSlot(c);
  uint64_t corr = next_corr_++;
  size_t bytes = 64;
  for (size_t i = 2; i < argv.size(); ++i) bytes += argv[i].size() + 4;
  Sent sent = SendToCore(
      [&](uint8_t* b, size_t cap) {
        wire::PubsubQueryEncoder e(b, cap);
        e.set_correlation_id(corr).set_query(q);
        auto g = e.BeginArgs();
        for (size_t i = 2; i < argv.size(); ++i) g.Next().set_arg(argv[i]);
        return e.Finish();
      },
      bytes);
  if (sent == Sent::kDown) return CompleteSlot(c.id, seq, Err("ERR goblin-core is unavailable"));
  if (sent != Sent::kOk) return CompleteSlot(c.id, seq, Err("ERR PUBSUB arguments too large"));
  Pending p;
  p.client = c.id;
  p.seq = seq;
  p.kind = ReqKind::kQuery;
  p.query = q;
  pending_.emplace(corr, std::move(p));
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
    p.final_part = true;
    done = true;
  } else if (template_id == wire::SubscribeAckDecoder::kTemplateId) {
    auto a = wire::SubscribeAckDecoder::Decode(m);
    if (!a) return true;
    size_t n = 0;
    RespWriter w(&p.reply);
    for (auto conf : a->confirmations()) {
      ++n;
      if (c != nullptr) {
        if (p.sub_kind == wire::SubKind::kShard) {
          c->shard_count = conf.count();
        } else {
          // (the count is channels + patterns, as Redis's: a pattern's change is the delta)
          if (p.sub_kind == wire::SubKind::kPattern) {
            c->psub_count = static_cast<uint32_t>(
                std::max<int64_t>(0, int64_t{c->psub_count} + conf.count() - c->sub_count));
          }
          c->sub_count = conf.count();
        }
      }
      if (p.kind == ReqKind::kSilent) continue;
      w.Push(proto, 3);
      w.Bulk(KindName(p.sub_kind, p.subscribe));
      if (conf.name_is_nil()) {
        w.Null(proto);
      } else {
        w.Bulk(conf.name());
      }
      w.Integer(conf.count());
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
    if (done) {
      RespWriter w(&p.reply);
      if (p.query == wire::PubsubQueryKind::kNumpat) {
        w.Integer(p.number);
      } else if (p.query == wire::PubsubQueryKind::kChannels ||
                 p.query == wire::PubsubQueryKind::kShardchannels) {
        w.Array(p.entries.size());
        for (auto& [name, count] : p.entries) w.Bulk(name);
      } else {
        w.Array(2 * p.entries.size());  // a flat array in RESP3 too, like Redis 7.0
        for (auto& [name, count] : p.entries) {
          w.Bulk(name);
          w.Integer(count);
        }
      }
    }
  } else {
    return true;
  }
  if (!done) return true;
  Pending fin = std::move(p);
  pending_.erase(it);
  if (fin.kind == ReqKind::kSubscribe || fin.kind == ReqKind::kSilent) {
    if (c != nullptr && c->blocked > 0) --c->blocked;
  }
  if (c != nullptr) {
    std::string& acc = partial_[{fin.client, fin.seq}];
    acc += fin.reply;
    if (fin.final_part || fin.kind == ReqKind::kPublish || fin.kind == ReqKind::kQuery) {
      std::string bytes = std::move(acc);
      partial_.erase({fin.client, fin.seq});
      if (fin.kind == ReqKind::kSilent) {
        if (fin.reset_after) {
          bytes.clear();
          RespWriter(&bytes).Simple("RESET");
          CompleteSlot(fin.client, fin.seq, std::move(bytes));
        }
      } else {
        CompleteSlot(fin.client, fin.seq, std::move(bytes));
      }
    }
    if (c->blocked == 0 && !c->closed) ProcessInput(*c);  // commands that waited
  } else {
    partial_.erase({fin.client, fin.seq});
  }
  return true;
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
