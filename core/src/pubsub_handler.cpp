// CoreService's pub/sub requests: SBE Subscribe / Publish / PubsubQuery on the ring plane,
// served by pubsub::Engine. See core_service.h for the protocol.
#include <algorithm>

#include "goblin/common/clock.h"
#include "goblin/common/log.h"
#include "goblin/core/core_service.h"
#include "goblin/wire/goblin_wire.h"

namespace goblin::core {
namespace {

constexpr std::string_view kLog = "pubsub";

pubsub::Kind KindOf(wire::SubKind k) {
  switch (k) {
    case wire::SubKind::kPattern:
      return pubsub::Kind::kPattern;
    case wire::SubKind::kShard:
      return pubsub::Kind::kShard;
    default:
      return pubsub::Kind::kChannel;
  }
}

wire::SubKind WireKind(pubsub::Kind k) {
  switch (k) {
    case pubsub::Kind::kPattern:
      return wire::SubKind::kPattern;
    case pubsub::Kind::kShard:
      return wire::SubKind::kShard;
    default:
      return wire::SubKind::kChannel;
  }
}

}  // namespace

pubsub::SubscriberId CoreService::SubscriberOf(reactor::Session& session, uint64_t session_id,
                                               bool create) {
  auto& mine = sub_ids_[session.id()];
  if (auto it = mine.find(session_id); it != mine.end()) return it->second;
  if (!create) return 0;
  pubsub::SubscriberId id = next_subscriber_++;
  mine.emplace(session_id, id);
  subscribers_.emplace(id, Subscriber{&session, session_id});
  return id;
}

void CoreService::DropSubscribers(reactor::Session& session) {
  auto it = sub_ids_.find(session.id());
  if (it != sub_ids_.end()) {
    for (auto& [session_id, sub] : it->second) {
      pubsub_.Remove(sub);
      subscribers_.erase(sub);
    }
    sub_ids_.erase(it);
  }
  fan_out_.erase(session.id());
}

void CoreService::SendPubsub(reactor::Session& session, size_t n) {
  switch (session.Send({out_.data(), n})) {
    case reactor::SendOutcome::kSent:
    case reactor::SendOutcome::kQueued:
      return;
    case reactor::SendOutcome::kTooLarge:
      GOBLIN_LOG_WARN(kLog,
                      "a {}-byte pub/sub message does not fit client {} ({})'s ring; "
                      "dropping it",
                      n, session.id(), session.name());
      break;
    case reactor::SendOutcome::kOverLimit:
      GOBLIN_LOG_WARN(kLog,
                      "client {} ({}, pid {}) fell behind its output limits ({} queued); "
                      "dropping it",
                      session.id(), session.name(), session.pid(), session.queued_bytes());
      break;
  }
  ++counters_.slow_subscribers_dropped;
  session.Close();
}

uint64_t CoreService::PublishMessage(std::string_view channel, std::string_view payload,
                                     bool sharded) {
  return pubsub_.Publish(
      channel, sharded,
      [&](pubsub::Kind kind, std::string_view pattern, std::span<const pubsub::SubscriberId> subs) {
        for (pubsub::SubscriberId s : subs) {
          auto it = subscribers_.find(s);
          if (it == subscribers_.end()) continue;
          FanOut& f = fan_out_[it->second.session->id()];
          if (f.session_ids.empty()) touched_.push_back(&f);
          f.session = it->second.session;
          f.session_ids.push_back(it->second.session_id);
        }
        // One Delivery per receiving ring session (chunked by its ring's message size).
        for (FanOut* f : touched_) {
          reactor::Session& rs = *f->session;
          size_t room = std::min<size_t>(rs.max_message(), out_.size());
          size_t fixed = 8 + 1 + 4 + 12 + pattern.size() + channel.size() + payload.size();
          size_t per = room > fixed ? (room - fixed) / 8 : 0;
          if (per == 0) {
            GOBLIN_LOG_WARN(kLog, "a {}-byte message on '{}' does not fit client {}'s ring",
                            payload.size(), channel, rs.id());
            rs.Close();
            f->session_ids.clear();
            continue;
          }
          for (size_t at = 0; at < f->session_ids.size() && !rs.closing(); at += per) {
            wire::DeliveryEncoder e(out_.data(), room);
            e.set_kind(WireKind(kind));
            auto g = e.BeginSessions();
            size_t end = std::min(f->session_ids.size(), at + per);
            for (size_t j = at; j < end; ++j) g.Next().set_session_id(f->session_ids[j]);
            e.set_pattern(pattern).set_channel(channel).set_payload(payload);
            SendPubsub(rs, e.Finish());
            ++counters_.deliveries_sent;
          }
          f->session_ids.clear();
        }
        touched_.clear();
      });
}

void CoreService::HandlePubsub(reactor::Session& session, uint16_t template_id,
                               std::span<const uint8_t> msg, uint16_t block_length,
                               uint16_t version) {
  auto bad = [&](std::string_view what, sbe::DecodeError e) { SendMalformed(session, what, e); };
  const size_t max = std::min<size_t>(session.max_message(), out_.size());
  switch (template_id) {
    case wire::SubscribeDecoder::kTemplateId: {
      wire::SubscribeDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("Subscribe", e);
      pubsub::Kind kind = KindOf(d.kind());
      bool subscribe = d.action() == wire::SubAction::kSubscribe;
      pubsub::SubscriberId sub = SubscriberOf(session, d.session_id(), subscribe);
      // Confirmations in request order (Redis replies once per argument, duplicates too).
      struct Confirm {
        std::string name;
        bool nil;
        uint32_t count;
      };
      std::vector<Confirm> confirms;
      std::vector<std::string> names;
      for (auto n : d.names()) names.emplace_back(n.name());
      const bool all = !subscribe && names.empty();  // answered by an unknown number of names
      if (all && sub != 0) names = pubsub_.Names(sub, kind);
      for (const std::string& n : names) {
        auto c = subscribe  ? pubsub_.Subscribe(sub, kind, n)
                 : sub != 0 ? pubsub_.Unsubscribe(sub, kind, n)
                            : pubsub::Engine::Change{};
        confirms.push_back({n, false, c.count});
      }
      if (confirms.empty()) {  // unsubscribe-all while subscribed to nothing of that kind
        confirms.push_back({"", true, sub != 0 ? pubsub_.Count(sub, kind) : 0});
      }
      // Forget a subscriber with nothing left.
      if (sub != 0 && pubsub_.Count(sub, pubsub::Kind::kChannel) == 0 &&
          pubsub_.Count(sub, pubsub::Kind::kShard) == 0) {
        subscribers_.erase(sub);
        sub_ids_[session.id()].erase(d.session_id());
      }
      // As many SubscribeAcks as the ring's message size needs.
      size_t i = 0;
      while (i < confirms.size()) {
        wire::SubscribeAckEncoder a(out_.data(), max);
        a.set_correlation_id(d.correlation_id())
            .set_kind(d.kind())
            .set_action(d.action())
            .set_session_id(d.session_id());
        auto g = a.BeginConfirmations();
        size_t used = 8 + 25 + 4, first = i;
        while (i < confirms.size()) {
          size_t need = 5 + 4 + confirms[i].name.size();
          if (used + need > max && i > first) break;
          g.Next()
              .set_count(confirms[i].count)
              .set_name_is_nil(confirms[i].nil ? 1 : 0)
              .set_name(confirms[i].name);
          used += need;
          ++i;
        }
        size_t n = a.Finish();
        if (n == 0) {
          SendError(session, d.correlation_id(),
                    static_cast<uint16_t>(wire::ErrorCode::kInvalidArgument),
                    "a subscription name does not fit this client's ring");
          return;
        }
        SendPubsub(session, n);
      }
      if (all) {  // an empty SubscribeAck ends an unsubscribe-all answer
        wire::SubscribeAckEncoder a(out_.data(), max);
        a.set_correlation_id(d.correlation_id())
            .set_kind(d.kind())
            .set_action(d.action())
            .set_session_id(d.session_id());
        SendPubsub(session, a.Finish());
      }
      return;
    }
    case wire::PublishDecoder::kTemplateId: {
      wire::PublishDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("Publish", e);
      ++counters_.publishes;
      const uint64_t t0 = MonotonicNanos();
      std::string_view channel = d.channel(), payload = d.payload();
      const uint64_t receivers = PublishMessage(channel, payload, d.sharded() != 0);
      histograms_.publish.Record(MonotonicNanos() - t0);
      wire::PublishAckEncoder a(out_.data(), max);
      a.set_correlation_id(d.correlation_id()).set_receivers(receivers);
      Send(session, a.Finish());
      return;
    }
    case wire::PubsubQueryDecoder::kTemplateId: {
      wire::PubsubQueryDecoder d;
      if (auto e = d.WrapBody(msg, block_length, version); e != sbe::DecodeError::kNone)
        return bad("PubsubQuery", e);
      std::vector<std::string> args;
      for (auto a : d.args()) args.emplace_back(a.arg());
      std::vector<std::pair<std::string, int64_t>> entries;
      int64_t number = 0;
      switch (d.query()) {
        case wire::PubsubQueryKind::kChannels:
        case wire::PubsubQueryKind::kShardchannels: {
          bool shard = d.query() == wire::PubsubQueryKind::kShardchannels;
          for (auto& c : pubsub_.Channels(args.empty() ? "" : args[0], shard, !args.empty()))
            entries.emplace_back(std::move(c), 0);
          number = static_cast<int64_t>(entries.size());
          break;
        }
        case wire::PubsubQueryKind::kNumsub:
        case wire::PubsubQueryKind::kShardnumsub: {
          bool shard = d.query() == wire::PubsubQueryKind::kShardnumsub;
          for (auto& a : args) {
            int64_t n = static_cast<int64_t>(pubsub_.NumSub(a, shard));
            entries.emplace_back(std::move(a), n);
          }
          number = static_cast<int64_t>(entries.size());
          break;
        }
        case wire::PubsubQueryKind::kNumpat:
          number = static_cast<int64_t>(pubsub_.NumPat());
          break;
        default:
          SendError(session, d.correlation_id(),
                    static_cast<uint16_t>(wire::ErrorCode::kInvalidArgument),
                    "unknown PUBSUB query");
          return;
      }
      size_t i = 0;
      do {
        wire::PubsubReplyEncoder r(out_.data(), max);
        r.set_correlation_id(d.correlation_id()).set_query(d.query()).set_number(number);
        auto g = r.BeginEntries();
        size_t used = 8 + 17 + 4, first = i;
        while (i < entries.size()) {
          size_t need = 8 + 4 + entries[i].first.size();
          if (used + need > max && i > first) break;
          g.Next().set_count(entries[i].second).set_name(entries[i].first);
          used += need;
          ++i;
        }
        size_t n = r.Finish();
        if (n == 0) {
          SendError(session, d.correlation_id(),
                    static_cast<uint16_t>(wire::ErrorCode::kInvalidArgument),
                    "a channel name does not fit this client's ring");
          return;
        }
        SendPubsub(session, n);
      } while (i < entries.size());
      return;
    }
    default:
      return;
  }
}

}  // namespace goblin::core
