// Revalidation of the HTTP front (RFC 9111 4.3): a stored object carries the end of its
// freshness in its metadata (policy::kFreshUntil); the core keeps it --keep longer when it
// has a validator. A hit on a version past its freshness becomes a miss that carries that
// version (Revalidate): the fill asks the origin with If-None-Match / If-Modified-Since. A
// 200 fills a new version as any miss (readers of the old one finish on it); a 304
// refreshes the stored version in place (OnNotModified: ObjectRefresh, new headers and
// TTL under a new generation, no byte rewritten) and everyone waiting for the key looks
// it up again and is served from the core. One revalidation per key at a time, as one
// fill: the reservation in the core makes every other request for the key, in any worker
// or gateway, wait for it.
#include "goblin/common/log.h"
#include "goblin/gateway/cache_policy.h"
#include "goblin/sbe/wire_flags.h"
#include "http_server_impl.h"

namespace goblin::gateway {
namespace {
constexpr std::string_view kLog = "http";
}  // namespace

std::string HttpServer::Impl::OriginLines(const std::string& key_lines,
                                          std::string_view reval_meta) {
  return reval_meta.empty() ? key_lines : key_lines + policy::ConditionalLines(reval_meta);
}

std::string HttpServer::Impl::StoredMeta(std::string_view passthrough,
                                         const policy::Storability& v) {
  const uint64_t fresh_until_ms =
      detail::NowUnixNanos() / 1'000'000 + static_cast<uint64_t>(v.ttl_seconds) * 1000;
  std::string meta;
  meta.reserve(passthrough.size() + 48);
  meta.append(passthrough);
  fmt::format_to(std::back_inserter(meta), "{}: {}\r\n", policy::kFreshUntil, fresh_until_ms);
  return meta;
}

void HttpServer::Impl::Revalidate(Conn& c, uint64_t generation, std::string_view meta) {
  Exchange& ex = *c.ex;
  ++ex.revalidations;
  ex.reval_generation = generation;
  ex.reval_meta.assign(meta);  // (the core's message goes away)
  // A plain GET asked for the body too: the core stops sending it, and loans already on
  // their way find no exchange and go straight back (OnCoreMessage).
  // (an ObjectHead's id was forgotten when its answer came: OnExchangeReply)
  CancelCoreGet(c);
  ex.corr = 0;
  ex.follow = false;
  ++stats_.revalidations;
  Miss(c);
}

void HttpServer::Impl::DropStale(const Fill& f) {
  const uint64_t corr = next_corr_++;  // (its answer is not waited for)
  core_->SendAlways(
      [&](uint8_t* b, size_t cap) {
        return wire::ObjectDeleteEncoder(b, cap)
            .set_correlation_id(corr)
            .set_if_generation(f.reval_generation)
            .set_key(f.key)
            .Finish();
      },
      f.key.size() + 64, f.shard);
}

void HttpServer::Impl::RevalidateInBackground(Exchange& ex, uint64_t generation,
                                              std::string_view meta) {
  // (one fill per key here; across workers and gateways the core's reservation decides)
  if (fills_.count(ex.key) != 0 || OpenFault() == OriginFault::kSick) return;
  ex.reval_generation = generation;
  ex.reval_meta.assign(meta);
  if (Reserve(ex, /*leader=*/0) != nullptr) {
    ++stats_.revalidations;
    ++stats_.background_revalidations;
  }
  ex.reval_generation = 0;  // (this exchange serves the stale copy; it waits for nothing)
}

bool HttpServer::Impl::ServeStaleOnError(Conn& c) {
  Exchange& ex = *c.ex;
  if (ex.head_sent || ex.if_error_until_ms == 0 ||
      detail::NowUnixNanos() / 1'000'000 >= ex.if_error_until_ms)
    return false;
  ++stats_.stale_if_error;
  ex.stale = true;
  ex.revalidations = 1;  // (what the core has is served)
  ex.relookups = 1;      // (gone meanwhile: a plain miss)
  ex.reval_generation = 0;
  ex.if_error_until_ms = 0;
  LookUp(c);
  return true;
}

void HttpServer::Impl::AwaitCommit(Conn& c) {
  Exchange& ex = *c.ex;
  ex.await_commit = true;
  CancelCoreGet(c);  // (as Revalidate: the loans of the body on their way go back)
  ex.corr = 0;
  LookAgain(c);
}

void HttpServer::Impl::LookAgain(Conn& c) {
  Exchange& ex = *c.ex;
  ++ex.relookups;
  ex.follow = false;
  LookUp(c);
}

void HttpServer::Impl::OnNotModified(Fill& f, const http::Response& r) {
  ++stats_.not_modified;
  const std::string merged = policy::MergeNotModified(f.reval_meta, r, &detail::EndToEnd);
  // The refreshed head is judged as the stored response would be with these headers.
  http::Response as_stored;
  as_stored.status = 200;
  http::ForEachHeaderLine(merged, [&](std::string_view n, std::string_view v) {
    as_stored.headers.push_back({n, v});
  });
  const policy::Storability v = policy::Decide(as_stored, options_.default_ttl.count(),
                                               static_cast<int64_t>(detail::NowSeconds()),
                                               options_.keep.count(), options_.grace.count());
  const uint64_t corr = next_corr_++;  // (its answer is not waited for: nobody registers it)
  if (v.store) {
    const std::string meta = StoredMeta(merged, v);
    const uint64_t ttl_ns =
        static_cast<uint64_t>(v.ttl_seconds + v.keep_seconds) * 1'000'000'000ULL;
    core_->SendAlways(
        [&](uint8_t* b, size_t cap) {
          return wire::ObjectRefreshEncoder(b, cap)
              .set_correlation_id(corr)
              .set_if_generation(f.reval_generation)
              .set_ttl_nanos(ttl_ns)
              .set_key(f.key)
              .set_metadata(meta)
              .Finish();
        },
        f.key.size() + meta.size() + 64, f.shard);
  } else {
    // Not storable any more (no-store or private in the 304): the stale version goes.
    GOBLIN_LOG_INFO(kLog, "'{}' revalidated but no longer stored: {}", f.key, v.why_not);
    DropStale(f);
  }
  // Nothing new is filled: a reservation ends unstored (the core's followers read a miss
  // and look again, after the refresh: one shard, one ordered ring), and everyone here
  // waiting for the key looks it up again.
  std::vector<uint64_t> readers = std::move(f.waiters);
  f.waiters.clear();
  if (f.leader != 0) readers.insert(readers.begin(), f.leader);
  f.leader = 0;
  Unstore(f);
  for (uint64_t id : readers) {
    Conn* c = Find(id);
    if (c == nullptr || !c->ex) continue;
    c->ex->revalidated = v.store;
    c->ex->reval_generation = 0;
    c->ex->relookups = 1;  // (a miss now goes to the origin)
    LookUp(*c);
  }
  // The 304 has no body: the origin side ends next (OnFillOriginDone ends the fill).
}

}  // namespace goblin::gateway
