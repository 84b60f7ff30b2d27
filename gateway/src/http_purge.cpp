// PURGE on the HTTP front: one URL (ObjectDelete), every key under Host + path (X-Purge:
// prefix) or everything (X-Purge: all; ObjectPurge to every shard, the answers added up).
// X-Purge-Tag: T1 T2 (or Varnish's xkey-purge) purges every object tagged with any of them
// (tags come from the origin's Surrogate-Key and xkey fields; the core keeps an index of
// them and purges in slices of 1,000 per loop round: docs/benchmarks/cdn.md).
// X-Purge-Soft: 1 makes any of them a soft purge (Fastly's, Varnish's purge with grace):
// the objects are marked stale instead of deleted (kDeleteInvalidate, kPurgeSoft), so the
// next request revalidates them (a 304 keeps the bytes) or, in grace, is served the stale
// copy while one revalidation runs. Allowed from --purge-allow addresses or with the token.
#include <algorithm>

#include "goblin/sbe/wire_flags.h"
#include "http_server_impl.h"

namespace goblin::gateway {

void HttpServer::Impl::Purge(Conn& c) {
  Exchange& e = *c.ex;
  bool allowed = std::find(options_.purge_allow.begin(), options_.purge_allow.end(), c.peer) !=
                 options_.purge_allow.end();
  if (e.purge_token_ok) allowed = true;
  if (!allowed) return Respond(c, 403, "403 Forbidden: PURGE is not allowed from here\n");
  uint64_t corr = next_corr_++;
  const bool by_tag = !e.purge_tags.empty();
  const bool many = by_tag || e.purge_mode == "prefix" || e.purge_mode == "all";
  // A prefix purge takes the key up to the query and the headers in it (Host + path: every
  // variant under it); "all" empties the cache.
  std::string key = e.purge_mode == "all" ? std::string()
                    : e.purge_mode == "prefix"
                        ? e.key.substr(0, e.key.find_first_of(std::string_view("?\0", 2)))
                        : e.key;
  uint16_t sent_to = kEveryShard;  // (one key: its shard)
  if (many) {
    // Every shard holds some of the keys: each purges its own (for each tag), the answers
    // add up.
    const std::vector<std::string> one{key};
    const std::vector<std::string>& what = by_tag ? e.purge_tags : one;
    const uint32_t flags = (e.purge_soft ? wire::kPurgeSoft : 0) | (by_tag ? wire::kPurgeTag : 0);
    e.acks_due = core_->live_shard_count() * static_cast<uint32_t>(what.size());
    e.purged = 0;
    for (const std::string& prefix : what) {
      for (uint16_t shard = 0; shard < core_->shard_count(); ++shard) {
        if (core_->shard_lost(shard)) continue;
        auto r = core_->Send(
            [&](uint8_t* b, size_t cap) {
              return wire::ObjectPurgeEncoder(b, cap)
                  .set_correlation_id(corr)
                  .set_flags(flags)
                  .set_prefix(prefix)
                  .Finish();
            },
            prefix.size() + 64, shard);
        if (r != CoreLink::SendResult::kSent && r != CoreLink::SendResult::kQueued) {
          ++stats_.core_unavailable;
          // (shards already asked purge anyway; their late answers find no exchange)
          return Fail(c, 503,
                      r == CoreLink::SendResult::kBusy ? "goblin-core is overloaded"
                                                       : "goblin-core is unavailable");
        }
      }
    }
  } else {
    sent_to = core_->ShardFor(key);
    hot_.Erase(key);  // (the core withdraws its entry too; no need to look at it again)
    bool sent = SendRequest(
        c,
        [&](uint8_t* b, size_t cap) {
          return wire::ObjectDeleteEncoder(b, cap)
              .set_correlation_id(corr)
              .set_flags(e.purge_soft ? wire::kDeleteInvalidate : 0)
              .set_key(key)
              .Finish();
        },
        key.size() + 64, sent_to);
    if (!sent) return;
  }
  corr_[corr] = {CorrKind::kPurge, c.id, nullptr, sent_to};
  e.corr = corr;
}

}  // namespace goblin::gateway
