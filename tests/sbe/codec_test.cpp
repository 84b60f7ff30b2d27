// Round trips for every message of sbe/schema/goblin.xml, golden bytes for the header and for
// a group + var-data message, encoder misuse, and hostile input to the decoders.
#include <gtest/gtest.h>

#include <array>
#include <set>
#include <string>
#include <vector>

#include "goblin/sbe/wire_flags.h"
#include "goblin/wire/goblin_wire.h"

namespace goblin::wire {
namespace {

using Buf = std::array<uint8_t, 512>;
std::set<uint16_t> g_covered;

template <typename Dec>
Dec RoundTrip(const Buf& buf, size_t n) {
  EXPECT_GT(n, 0u);
  auto d = Dec::Decode({buf.data(), n});
  EXPECT_TRUE(d.has_value()) << (d ? "" : d.error().ToString());
  g_covered.insert(Dec::kTemplateId);
  EXPECT_EQ(d->encoded_length(), n);
  // Every strict prefix is rejected as truncated, never read past.
  for (size_t cut = 0; cut < n; ++cut) {
    std::vector<uint8_t> prefix(buf.begin(), buf.begin() + static_cast<long>(cut));
    EXPECT_FALSE(Dec::Decode(prefix).has_value()) << "prefix " << cut << " of " << n;
  }
  return *d;
}

void SessionCases() {
  Buf b;
  {
    HelloEncoder e(b.data(), b.size());
    e.set_protocol_version(1)
        .set_peer_kind(PeerKind::kGateway)
        .set_flags(3)
        .set_pid(4242)
        .set_max_message(4000)
        .set_client_name("goblin-gateway");
    auto d = RoundTrip<HelloDecoder>(b, e.Finish());
    EXPECT_EQ(d.protocol_version(), 1);
    EXPECT_EQ(d.peer_kind(), PeerKind::kGateway);
    EXPECT_EQ(d.flags(), 3);
    EXPECT_EQ(d.pid(), 4242u);
    EXPECT_EQ(d.max_message(), 4000u);
    EXPECT_EQ(d.client_name(), "goblin-gateway");
  }
  {
    WelcomeEncoder e(b.data(), b.size());
    e.set_protocol_version(1)
        .set_flags(0x8001)
        .set_server_pid(77)
        .set_client_id(1ull << 40)
        .set_ring_bytes(4096)
        .set_max_message(4000)
        .set_shard(2)
        .set_shard_count(3)
        .set_put_alignment(4 << 20)
        .set_am_id(17)
        .set_server_name("goblin-core")
        .set_shard_addresses("10.0.0.1:7000,10.0.0.1:7001,10.0.0.1:7002");
    const size_t n = e.Finish();
    auto d = RoundTrip<WelcomeDecoder>(b, n);
    EXPECT_EQ(d.put_alignment(), 4u << 20);
    EXPECT_EQ(d.am_id(), 17);
    // The same Welcome from a core of schema version 2 (no putAlignment in its block):
    // decoded, putAlignment reading as SBE's null value (UcxClient takes it as none).
    const uint16_t block = Load<uint16_t>(b.data());
    std::vector<uint8_t> v2(b.begin(), b.begin() + static_cast<long>(8 + block - 4));
    v2.insert(v2.end(), b.begin() + static_cast<long>(8 + block), b.begin() + static_cast<long>(n));
    Store<uint16_t>(v2.data(), static_cast<uint16_t>(block - 4));
    Store<uint16_t>(v2.data() + 6, 2);
    auto old = WelcomeDecoder::Decode(v2);
    ASSERT_TRUE(old) << old.error().message();
    EXPECT_EQ(old->put_alignment(), UINT32_MAX);
    EXPECT_EQ(old->am_id(), UINT16_MAX);  // (schema version 12; UcxClient takes it as none)
    EXPECT_EQ(old->shard_count(), 3);
    EXPECT_EQ(old->server_name(), "goblin-core");
    EXPECT_EQ(d.shard(), 2);
    EXPECT_EQ(d.shard_count(), 3);
    EXPECT_EQ(d.shard_addresses(), "10.0.0.1:7000,10.0.0.1:7001,10.0.0.1:7002");
    EXPECT_EQ(d.flags(), 0x8001);
    EXPECT_EQ(d.server_pid(), 77u);
    EXPECT_EQ(d.client_id(), 1ull << 40);
    EXPECT_EQ(d.ring_bytes(), 4096u);
    EXPECT_EQ(d.server_name(), "goblin-core");
  }
  {
    ErrorEncoder e(b.data(), b.size());
    e.set_correlation_id(9).set_code(ErrorCode::kMessageTooLarge).set_text("4096 > 4000");
    auto d = RoundTrip<ErrorDecoder>(b, e.Finish());
    EXPECT_EQ(d.correlation_id(), 9u);
    EXPECT_EQ(d.code(), ErrorCode::kMessageTooLarge);
    EXPECT_EQ(ToString(d.code()), "messageTooLarge");
    EXPECT_EQ(d.text(), "4096 > 4000");
  }
  {
    PingEncoder e(b.data(), b.size());
    e.set_correlation_id(1).set_send_nanos(2).set_payload("x");
    auto d = RoundTrip<PingDecoder>(b, e.Finish());
    EXPECT_EQ(d.send_nanos(), 2u);
    EXPECT_EQ(d.payload(), "x");
    PongEncoder p(b.data(), b.size());
    p.set_correlation_id(1).set_send_nanos(3);
    auto pd = RoundTrip<PongDecoder>(b, p.Finish());
    EXPECT_EQ(pd.send_nanos(), 3u);
    EXPECT_EQ(pd.payload(), "");  // never set: encoded empty
  }
}

void PubSubCases() {
  Buf b;
  {
    PublishEncoder e(b.data(), b.size());
    std::string payload(200, '\xff');
    e.set_correlation_id(5).set_sharded(1).set_channel("news.tech").set_payload(payload);
    auto d = RoundTrip<PublishDecoder>(b, e.Finish());
    EXPECT_EQ(d.sharded(), 1);
    EXPECT_EQ(d.channel(), "news.tech");
    EXPECT_EQ(d.payload(), payload);
    EXPECT_EQ(d.payload_bytes().size(), 200u);
  }
  {
    PublishAckEncoder e(b.data(), b.size());
    e.set_correlation_id(5).set_receivers(64);
    EXPECT_EQ(RoundTrip<PublishAckDecoder>(b, e.Finish()).receivers(), 64u);
  }
  {
    SubscribeEncoder e(b.data(), b.size());
    e.set_correlation_id(6)
        .set_kind(SubKind::kPattern)
        .set_action(SubAction::kUnsubscribe)
        .set_session_id(3);
    auto g = e.BeginNames();
    for (const char* n : {"a*", "", "b?c"}) g.Next().set_name(std::string_view(n));
    auto d = RoundTrip<SubscribeDecoder>(b, e.Finish());
    EXPECT_EQ(d.kind(), SubKind::kPattern);
    EXPECT_EQ(d.action(), SubAction::kUnsubscribe);
    std::vector<std::string> names;
    for (auto n : d.names()) names.emplace_back(n.name());
    EXPECT_EQ(names, (std::vector<std::string>{"a*", "", "b?c"}));
    EXPECT_EQ(d.names().size(), 3);
  }
  {
    SubscribeAckEncoder e(b.data(), b.size());
    e.set_correlation_id(6).set_kind(SubKind::kChannel).set_action(SubAction::kSubscribe);
    auto g = e.BeginConfirmations();
    g.Next().set_count(1).set_name(std::string_view("x"));
    g.Next().set_count(0).set_name_is_nil(1);
    auto d = RoundTrip<SubscribeAckDecoder>(b, e.Finish());
    std::vector<std::pair<uint32_t, std::string>> got;
    for (auto c : d.confirmations()) got.emplace_back(c.count(), std::string(c.name()));
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0], (std::pair<uint32_t, std::string>{1, "x"}));
    EXPECT_EQ(got[1], (std::pair<uint32_t, std::string>{0, ""}));
    EXPECT_EQ((*++d.confirmations().begin()).name_is_nil(), 1);
  }
  {
    MessageEncoder e(b.data(), b.size());
    e.set_kind(SubKind::kPattern)
        .set_session_id(8)
        .set_pattern("n*")
        .set_channel("news")
        .set_payload("p");
    auto d = RoundTrip<MessageDecoder>(b, e.Finish());
    EXPECT_EQ(d.pattern(), "n*");
    EXPECT_EQ(d.channel(), "news");
    EXPECT_EQ(d.payload(), "p");
  }
  {
    DeliveryEncoder e(b.data(), b.size());
    e.set_kind(SubKind::kChannel);
    auto g = e.BeginSessions();
    for (uint64_t s = 1; s <= 5; ++s) g.Next().set_session_id(s * 100);
    e.set_channel("c").set_payload("body");  // pattern skipped: encoded empty
    auto d = RoundTrip<DeliveryDecoder>(b, e.Finish());
    uint64_t sum = 0;
    for (auto s : d.sessions()) sum += s.session_id();
    EXPECT_EQ(sum, 1500u);
    EXPECT_EQ(d.pattern(), "");
    EXPECT_EQ(d.channel(), "c");
    EXPECT_EQ(d.payload(), "body");
  }
  {
    PubsubQueryEncoder e(b.data(), b.size());
    e.set_correlation_id(1).set_query(PubsubQueryKind::kNumsub);
    auto g = e.BeginArgs();
    g.Next().set_arg(std::string_view("a"));
    g.Next().set_arg(std::string_view("b"));
    auto d = RoundTrip<PubsubQueryDecoder>(b, e.Finish());
    EXPECT_EQ(d.query(), PubsubQueryKind::kNumsub);
    EXPECT_EQ(d.args().size(), 2);
  }
  {
    PubsubReplyEncoder e(b.data(), b.size());
    e.set_correlation_id(1).set_query(PubsubQueryKind::kNumpat).set_number(-7);
    auto g = e.BeginEntries();
    g.Next().set_count(3).set_name(std::string_view("ch"));
    auto d = RoundTrip<PubsubReplyDecoder>(b, e.Finish());
    EXPECT_EQ(d.number(), -7);
    auto it = d.entries().begin();
    EXPECT_EQ((*it).count(), 3);
    EXPECT_EQ((*it).name(), "ch");
  }
}

void ObjectCases() {
  Buf b;
  {
    ObjectGetEncoder e(b.data(), b.size());
    e.set_correlation_id(1).set_offset(10).set_length(UINT64_MAX).set_flags(2).set_key("/a/b?c");
    auto d = RoundTrip<ObjectGetDecoder>(b, e.Finish());
    EXPECT_EQ(d.offset(), 10u);
    EXPECT_EQ(d.length(), UINT64_MAX);
    EXPECT_EQ(d.flags(), 2u);
    EXPECT_EQ(d.key(), "/a/b?c");
  }
  {
    ObjectHeadEncoder e(b.data(), b.size());
    e.set_correlation_id(2).set_key("k");
    EXPECT_EQ(RoundTrip<ObjectHeadDecoder>(b, e.Finish()).key(), "k");
  }
  {
    ObjectInfoEncoder e(b.data(), b.size());
    e.set_correlation_id(3)
        .set_status(LookupStatus::kFilling)
        .set_object_size(5ull << 30)
        .set_generation(9)
        .set_created_nanos(11)
        .set_expires_nanos(12)
        .set_head_entry(UINT32_MAX - 3)
        .set_head_stamp(77)
        .set_head_offset(1ull << 33)
        .set_head_length(4 << 20)
        .set_first_bytes_end(1)
        .set_metadata("etag: x")
        .set_first_bytes(std::string_view("\x00\x01first", 7));
    auto d = RoundTrip<ObjectInfoDecoder>(b, e.Finish());
    EXPECT_EQ(d.status(), LookupStatus::kFilling);
    EXPECT_EQ(d.object_size(), 5ull << 30);
    EXPECT_EQ(d.generation(), 9u);
    EXPECT_EQ(d.created_nanos(), 11u);
    EXPECT_EQ(d.expires_nanos(), 12u);
    EXPECT_EQ(d.head_entry(), UINT32_MAX - 3);
    EXPECT_EQ(d.head_stamp(), 77u);
    EXPECT_EQ(d.head_offset(), 1ull << 33);
    EXPECT_EQ(d.head_length(), 4u << 20);
    EXPECT_EQ(d.metadata(), "etag: x");
    EXPECT_EQ(d.first_bytes_end(), 1);
    EXPECT_EQ(d.first_bytes(), std::string_view("\x00\x01first", 7));
  }
  {
    ObjectLentEncoder e(b.data(), b.size());
    e.set_correlation_id(4)
        .set_status(LookupStatus::kFilling)
        .set_object_size(5ull << 30)
        .set_generation(9)
        .set_created_nanos(11)
        .set_expires_nanos(12)
        .set_loan_id(0x1234567890ull)
        .set_pool(PoolKind::kIo)
        .set_pool_offset(3ull << 32)
        .set_length(UINT32_MAX - 1)
        .set_last(1)
        .set_metadata("etag: y");
    auto d = RoundTrip<ObjectLentDecoder>(b, e.Finish());
    EXPECT_EQ(d.correlation_id(), 4u);
    EXPECT_EQ(d.status(), LookupStatus::kFilling);
    EXPECT_EQ(d.object_size(), 5ull << 30);
    EXPECT_EQ(d.generation(), 9u);
    EXPECT_EQ(d.created_nanos(), 11u);
    EXPECT_EQ(d.expires_nanos(), 12u);
    EXPECT_EQ(d.loan_id(), 0x1234567890ull);
    EXPECT_EQ(d.pool(), PoolKind::kIo);
    EXPECT_EQ(d.pool_offset(), 3ull << 32);
    EXPECT_EQ(d.length(), UINT32_MAX - 1);
    EXPECT_EQ(d.last(), 1);
    EXPECT_EQ(d.metadata(), "etag: y");
  }
  {
    ObjectGetCancelEncoder e(b.data(), b.size());
    e.set_correlation_id(0xfeedull << 32).set_flags(kCancelTakeBackLoans);
    const size_t n = e.Finish();
    auto d = RoundTrip<ObjectGetCancelDecoder>(b, n);
    EXPECT_EQ(d.correlation_id(), 0xfeedull << 32);
    EXPECT_EQ(d.flags(), kCancelTakeBackLoans);
    // From a reader of schema version 10 (the correlation id only): flags read as SBE's
    // null value, which the core takes as none (the reader releases its loans itself).
    std::vector<uint8_t> v10(b.begin(), b.begin() + 16);
    Store<uint16_t>(v10.data(), 8);
    Store<uint16_t>(v10.data() + 6, 10);
    auto old = ObjectGetCancelDecoder::Decode(v10);
    ASSERT_TRUE(old) << old.error().message();
    EXPECT_EQ(old->correlation_id(), 0xfeedull << 32);
    EXPECT_EQ(old->flags(), UINT32_MAX);
  }
  {
    ObjectTouchEncoder e(b.data(), b.size());
    e.set_correlation_id(31).set_ttl_nanos(5'000'000'000).set_flags(0x11).set_key("k/t");
    auto d = RoundTrip<ObjectTouchDecoder>(b, e.Finish());
    EXPECT_EQ(d.correlation_id(), 31u);
    EXPECT_EQ(d.ttl_nanos(), 5'000'000'000u);
    EXPECT_EQ(d.flags(), 0x11u);
    EXPECT_EQ(d.key(), "k/t");
  }
  {
    ObjectRefreshEncoder e(b.data(), b.size());
    e.set_correlation_id(34).set_if_generation(9).set_ttl_nanos(7).set_key("k/r").set_metadata(
        "etag: \"x\"\r\n");
    auto d = RoundTrip<ObjectRefreshDecoder>(b, e.Finish());
    EXPECT_EQ(d.correlation_id(), 34u);
    EXPECT_EQ(d.if_generation(), 9u);
    EXPECT_EQ(d.ttl_nanos(), 7u);
    EXPECT_EQ(d.key(), "k/r");
    EXPECT_EQ(d.metadata(), "etag: \"x\"\r\n");
  }
  {
    TouchAckEncoder e(b.data(), b.size());
    e.set_correlation_id(32).set_found(1).set_generation(77).set_expires_nanos(1ull << 62);
    auto d = RoundTrip<TouchAckDecoder>(b, e.Finish());
    EXPECT_EQ(d.correlation_id(), 32u);
    EXPECT_EQ(d.found(), 1);
    EXPECT_EQ(d.generation(), 77u);
    EXPECT_EQ(d.expires_nanos(), 1ull << 62);
  }
  {
    ObjectDeleteEncoder e(b.data(), b.size());
    e.set_correlation_id(33).set_if_generation(1ull << 40).set_key("k/d");
    auto d = RoundTrip<ObjectDeleteDecoder>(b, e.Finish());
    EXPECT_EQ(d.correlation_id(), 33u);
    EXPECT_EQ(d.if_generation(), 1ull << 40);
    EXPECT_EQ(d.key(), "k/d");
  }
  {
    CoreConfigEncoder e(b.data(), b.size());
    e.set_correlation_id(36).set_set(1).set_name("notify-keyspace-events").set_value("KEA");
    auto d = RoundTrip<CoreConfigDecoder>(b, e.Finish());
    EXPECT_EQ(d.correlation_id(), 36u);
    EXPECT_EQ(d.set(), 1);
    EXPECT_EQ(d.name(), "notify-keyspace-events");
    EXPECT_EQ(d.value(), "KEA");
  }
  {
    CoreConfigReplyEncoder e(b.data(), b.size());
    e.set_correlation_id(37).set_value("AKE");
    auto d = RoundTrip<CoreConfigReplyDecoder>(b, e.Finish());
    EXPECT_EQ(d.correlation_id(), 37u);
    EXPECT_EQ(d.value(), "AKE");
  }
  {
    ObjectScanEncoder e(b.data(), b.size());
    e.set_correlation_id(34).set_cursor(0xabcdefull).set_count(10);
    auto d = RoundTrip<ObjectScanDecoder>(b, e.Finish());
    EXPECT_EQ(d.correlation_id(), 34u);
    EXPECT_EQ(d.cursor(), 0xabcdefull);
    EXPECT_EQ(d.count(), 10u);
  }
  {
    ScanReplyEncoder e(b.data(), b.size());
    e.set_correlation_id(35).set_next_cursor(7).set_objects(12345).set_expiring(3).set_ram_bytes(
        1 << 20);
    auto g = e.BeginKeys();
    g.Next().set_key("one");
    g.Next().set_key(std::string_view("t\0wo", 4));
    auto d = RoundTrip<ScanReplyDecoder>(b, e.Finish());
    EXPECT_EQ(d.correlation_id(), 35u);
    EXPECT_EQ(d.next_cursor(), 7u);
    EXPECT_EQ(d.objects(), 12345u);
    EXPECT_EQ(d.expiring(), 3u);
    EXPECT_EQ(d.ram_bytes(), 1u << 20);
    std::vector<std::string> keys;
    for (auto k : d.keys()) keys.emplace_back(k.key());
    EXPECT_EQ(keys, (std::vector<std::string>{"one", std::string("t\0wo", 4)}));
  }
  {
    ObjectDescribeEncoder e(b.data(), b.size());
    e.set_correlation_id(21).set_key("/big/obj");
    auto d = RoundTrip<ObjectDescribeDecoder>(b, e.Finish());
    EXPECT_EQ(d.correlation_id(), 21u);
    EXPECT_EQ(d.key(), "/big/obj");
  }
  {
    HeadDescriptorEncoder e(b.data(), b.size());
    e.set_correlation_id(22)
        .set_status(LookupStatus::kHit)
        .set_object_size(3ull << 30)
        .set_generation(41)
        .set_entry(UINT32_MAX - 1)
        .set_pool_offset(0x1234000)
        .set_head_length(1 << 20)
        .set_checksum(0xfeedfacecafebeefULL)
        .set_stamp(9);
    auto d = RoundTrip<HeadDescriptorDecoder>(b, e.Finish());
    EXPECT_EQ(d.stamp(), 9u);
    EXPECT_EQ(d.status(), LookupStatus::kHit);
    EXPECT_EQ(d.object_size(), 3ull << 30);
    EXPECT_EQ(d.generation(), 41u);
    EXPECT_EQ(d.entry(), UINT32_MAX - 1);
    EXPECT_EQ(d.pool_offset(), 0x1234000u);
    EXPECT_EQ(d.head_length(), 1u << 20);
    EXPECT_EQ(d.checksum(), 0xfeedfacecafebeefULL);
  }
  {
    LoanEncoder e(b.data(), b.size());
    e.set_correlation_id(4).set_loan_id(77).set_generation(2).set_object_size(1 << 20).set_last(1);
    auto g = e.BeginSegments();
    g.Next()
        .set_pool(PoolKind::kHead)
        .set_pool_offset(4096)
        .set_object_offset(0)
        .set_length(262144)
        .set_checksum(0xdeadbeef)
        .set_flags(kSegmentStable);
    g.Next()
        .set_pool(PoolKind::kIo)
        .set_pool_offset(1 << 21)
        .set_object_offset(262144)
        .set_length(786432)
        .set_checksum(1);
    e.set_inline_data("");
    auto d = RoundTrip<LoanDecoder>(b, e.Finish());
    EXPECT_EQ(d.loan_id(), 77u);
    EXPECT_EQ(d.last(), 1);
    uint64_t total = 0;
    for (auto s : d.segments()) total += s.length();
    EXPECT_EQ(total, 1u << 20);
    EXPECT_EQ((*d.segments().begin()).checksum(), 0xdeadbeefu);
    EXPECT_EQ((*d.segments().begin()).flags(), kSegmentStable);  // (schema version 1)
    EXPECT_EQ((*++d.segments().begin()).pool(), PoolKind::kIo);
    EXPECT_EQ((*++d.segments().begin()).flags(), 0);
  }
  {
    LoanReleaseEncoder e(b.data(), b.size());
    e.set_loan_id(77);
    EXPECT_EQ(RoundTrip<LoanReleaseDecoder>(b, e.Finish()).loan_id(), 77u);
  }
  {
    MapPoolsEncoder e(b.data(), b.size());
    e.set_correlation_id(12);
    EXPECT_EQ(RoundTrip<MapPoolsDecoder>(b, e.Finish()).correlation_id(), 12u);
    PoolMapEncoder m(b.data(), b.size());
    m.set_correlation_id(12);
    auto g = m.BeginPools();
    g.Next().set_pool(PoolKind::kHead).set_bytes(64ull << 30);
    g.Next().set_pool(PoolKind::kIo).set_bytes(128ull << 20);
    auto d = RoundTrip<PoolMapDecoder>(b, m.Finish());
    std::vector<std::pair<PoolKind, uint64_t>> got;
    for (auto p : d.pools()) got.emplace_back(p.pool(), p.bytes());
    EXPECT_EQ(got, (std::vector<std::pair<PoolKind, uint64_t>>{{PoolKind::kHead, 64ull << 30},
                                                               {PoolKind::kIo, 128ull << 20}}));
  }
  {
    MapPoolsInPlaceEncoder e(b.data(), b.size());
    e.set_correlation_id(14).set_boot_id("9b2a4f7e-0c61-4d7e-9a55-3f1b2c8d0e11");
    auto d = RoundTrip<MapPoolsInPlaceDecoder>(b, e.Finish());
    EXPECT_EQ(d.correlation_id(), 14u);
    EXPECT_EQ(d.boot_id(), "9b2a4f7e-0c61-4d7e-9a55-3f1b2c8d0e11");
    ProcessPoolsEncoder m(b.data(), b.size());
    m.set_correlation_id(15).set_pid(4242);
    auto g = m.BeginPools();
    g.Next()
        .set_pool(PoolKind::kHead)
        .set_fd(17)
        .set_bytes(1ull << 30)
        .set_device(23)
        .set_inode(1ull << 40);
    g.Next().set_pool(PoolKind::kIo).set_fd(-1).set_bytes(16 << 20).set_device(23).set_inode(9);
    auto p = RoundTrip<ProcessPoolsDecoder>(b, m.Finish());
    EXPECT_EQ(p.pid(), 4242u);
    std::vector<std::tuple<PoolKind, int32_t, uint64_t, uint64_t, uint64_t>> got;
    for (auto e : p.pools()) got.emplace_back(e.pool(), e.fd(), e.bytes(), e.device(), e.inode());
    EXPECT_EQ(got, (std::vector<std::tuple<PoolKind, int32_t, uint64_t, uint64_t, uint64_t>>{
                       {PoolKind::kHead, 17, 1ull << 30, 23, 1ull << 40},
                       {PoolKind::kIo, -1, 16 << 20, 23, 9}}));
  }
  {
    // A group whose entries end in var data (the packed rkeys), fields read after it.
    RemotePoolsEncoder m(b.data(), b.size());
    m.set_correlation_id(13);
    const std::vector<uint8_t> k1{1, 2, 3}, k2(300, 0xab);
    auto g = m.BeginPools();
    g.Next().set_pool(PoolKind::kHead).set_address(0x7f0000001000).set_bytes(1 << 20).set_rkey(k1);
    g.Next().set_pool(PoolKind::kIo).set_address(0x7f0000200000).set_bytes(4 << 20).set_rkey(k2);
    auto d = RoundTrip<RemotePoolsDecoder>(b, m.Finish());
    EXPECT_EQ(d.correlation_id(), 13u);
    std::vector<std::tuple<PoolKind, uint64_t, uint64_t, std::vector<uint8_t>>> got;
    for (auto p : d.pools()) {
      auto k = p.rkey_bytes();
      got.emplace_back(p.pool(), p.address(), p.bytes(), std::vector<uint8_t>(k.begin(), k.end()));
    }
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0],
              std::make_tuple(PoolKind::kHead, uint64_t{0x7f0000001000}, uint64_t{1 << 20}, k1));
    EXPECT_EQ(got[1],
              std::make_tuple(PoolKind::kIo, uint64_t{0x7f0000200000}, uint64_t{4 << 20}, k2));
  }
  {
    PutBeginEncoder e(b.data(), b.size());
    e.set_correlation_id(5)
        .set_expected_size(UINT64_MAX)
        .set_ttl_nanos(60)
        .set_flags(1)
        .set_if_generation(41)
        .set_key("obj")
        .set_metadata("m")
        .set_tags("red blue");
    auto d = RoundTrip<PutBeginDecoder>(b, e.Finish());
    EXPECT_EQ(d.tags(), "red blue");
    EXPECT_EQ(d.if_generation(), 41u);
    EXPECT_EQ(d.expected_size(), UINT64_MAX);
    EXPECT_EQ(d.ttl_nanos(), 60u);
    EXPECT_EQ(d.key(), "obj");
    EXPECT_EQ(d.metadata(), "m");
  }
  {
    FillLeaseEncoder e(b.data(), b.size());
    e.set_correlation_id(5).set_put_id(6).set_state(LeaseState::kInProgress).set_generation(7);
    auto d = RoundTrip<FillLeaseDecoder>(b, e.Finish());
    EXPECT_EQ(d.state(), LeaseState::kInProgress);
    EXPECT_EQ(d.put_id(), 6u);
  }
  {
    PutDataEncoder e(b.data(), b.size());
    std::array<uint8_t, 100> bytes{};
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i);
    e.set_put_id(6).set_offset(1000).set_bytes(std::span<const uint8_t>(bytes));
    auto d = RoundTrip<PutDataDecoder>(b, e.Finish());
    EXPECT_EQ(d.offset(), 1000u);
    ASSERT_EQ(d.bytes_bytes().size(), 100u);
    EXPECT_EQ(d.bytes_bytes()[99], 99);
  }
  {
    PutCommitEncoder e(b.data(), b.size());
    e.set_correlation_id(1).set_put_id(6).set_total_size(1100);
    EXPECT_EQ(RoundTrip<PutCommitDecoder>(b, e.Finish()).total_size(), 1100u);
    PutAbortEncoder a(b.data(), b.size());
    a.set_correlation_id(1).set_put_id(6);
    EXPECT_EQ(RoundTrip<PutAbortDecoder>(b, a.Finish()).put_id(), 6u);
  }
  {
    PutHeadEncoder e(b.data(), b.size());
    e.set_put_id(6).set_expected_size(5000).set_ttl_nanos(9).set_flags(1).set_metadata("etag: x");
    e.set_tags("t");
    auto d = RoundTrip<PutHeadDecoder>(b, e.Finish());
    EXPECT_EQ(d.tags(), "t");
    EXPECT_EQ(d.put_id(), 6u);
    EXPECT_EQ(d.expected_size(), 5000u);
    EXPECT_EQ(d.ttl_nanos(), 9u);
    EXPECT_EQ(d.flags(), 1u);
    EXPECT_EQ(d.metadata(), "etag: x");
  }
  {
    PutResultEncoder e(b.data(), b.size());
    e.set_correlation_id(1)
        .set_put_id(6)
        .set_code(ErrorCode::kResourceExhausted)
        .set_generation(3)
        .set_size(1100);
    auto d = RoundTrip<PutResultDecoder>(b, e.Finish());
    EXPECT_EQ(d.code(), ErrorCode::kResourceExhausted);
    EXPECT_EQ(d.size(), 1100u);
  }
  {
    ObjectDeleteEncoder e(b.data(), b.size());
    e.set_correlation_id(1).set_key("gone");
    EXPECT_EQ(RoundTrip<ObjectDeleteDecoder>(b, e.Finish()).key(), "gone");
    ObjectDataEncoder od(b.data(), b.size());
    od.set_correlation_id(3).set_offset(4096).set_last(1).set_bytes(std::string_view("tail"));
    auto odd = RoundTrip<ObjectDataDecoder>(b, od.Finish());
    EXPECT_EQ(odd.offset(), 4096u);
    EXPECT_EQ(odd.last(), 1);
    EXPECT_EQ(odd.bytes(), "tail");
    DeleteAckEncoder a(b.data(), b.size());
    a.set_correlation_id(1).set_deleted(1);
    EXPECT_EQ(RoundTrip<DeleteAckDecoder>(b, a.Finish()).deleted(), 1);
    ObjectPurgeEncoder pe(b.data(), b.size());
    pe.set_correlation_id(2).set_flags(3).set_prefix("host/videos/");
    auto pd = RoundTrip<ObjectPurgeDecoder>(b, pe.Finish());
    EXPECT_EQ(pd.prefix(), "host/videos/");
    EXPECT_EQ(pd.flags(), 3u);
    PurgeAckEncoder pa(b.data(), b.size());
    pa.set_correlation_id(2).set_deleted(17);
    EXPECT_EQ(RoundTrip<PurgeAckDecoder>(b, pa.Finish()).deleted(), 17u);
  }
}

TEST(Codec, Session) { SessionCases(); }
TEST(Codec, PubSub) { PubSubCases(); }
TEST(Codec, Objects) { ObjectCases(); }

// ctest runs each test case in its own process, so the coverage check runs all cases itself.
TEST(Codec, EveryTemplateHasARoundTripTest) {
  SessionCases();
  PubSubCases();
  ObjectCases();
  for (uint16_t id : kAllTemplateIds) {
    EXPECT_TRUE(g_covered.count(id)) << "no round-trip test for " << TemplateName(id);
  }
}

TEST(Golden, PingBytes) {
  Buf b;
  PingEncoder e(b.data(), b.size());
  e.set_correlation_id(1).set_send_nanos(0x0102030405060708ull).set_payload("hi");
  size_t n = e.Finish();
  std::vector<uint8_t> want = {0x10, 0x00, 0x04, 0x00, 0xc3,
                               0x1b, 0x0c, 0x00,  // blockLength 16, template 4, schema 7107, v12
                               0x01, 0,    0,    0,    0,
                               0,    0,    0,  // correlationId
                               0x08, 0x07, 0x06, 0x05, 0x04,
                               0x03, 0x02, 0x01,        // sendNanos
                               0x02, 0x00, 'h',  'i'};  // payload: uint16 length + bytes
  EXPECT_EQ(std::vector<uint8_t>(b.begin(), b.begin() + static_cast<long>(n)), want);
}

TEST(Golden, SubscribeGroupAndVarData) {
  Buf b;
  SubscribeEncoder e(b.data(), b.size());
  e.set_correlation_id(5).set_kind(SubKind::kPattern).set_session_id(9);
  auto g = e.BeginNames();
  g.Next().set_name(std::string_view("a*"));
  g.Next().set_name(std::string_view("b"));
  size_t n = e.Finish();
  std::vector<uint8_t> want = {
      0x12, 0x00, 0x0c, 0x00, 0xc3, 0x1b, 0x0c, 0x00,  // blockLength 18, template 12, v12
      0x05, 0,    0,    0,    0,    0,    0,    0,     // correlationId
      0x01, 0x00,                                      // kind=pattern, action=subscribe
      0x09, 0,    0,    0,    0,    0,    0,    0,     // sessionId
      0x00, 0x00, 0x02, 0x00,                          // group: blockLength 0, 2 entries
      0x02, 0,    0,    0,    'a',  '*',               // name (uint32 length)
      0x01, 0,    0,    0,    'b'};
  EXPECT_EQ(std::vector<uint8_t>(b.begin(), b.begin() + static_cast<long>(n)), want);
}

// ObjectLent is the answer of a get read in place; without metadata it must stay one
// inline send over UCX shared memory (posix/sysv am_short: 100 bytes, less UCP's 8-byte
// active message header), or its first byte pays for a bcopy descriptor (measured: ~0.2 us).
TEST(Sizes, AnObjectLentWithoutMetadataIsOneInlineSharedMemorySend) {
  Buf b;
  ObjectLentEncoder e(b.data(), b.size());
  e.set_correlation_id(UINT64_MAX).set_loan_id(UINT64_MAX).set_metadata("");
  EXPECT_LE(e.Finish(), 92u);
}

TEST(Encoder, FailsWhenTheBufferIsTooSmall) {
  Buf b;
  for (size_t cap = 0; cap < 28; ++cap) {
    PingEncoder e(b.data(), cap);
    e.set_correlation_id(1).set_payload("hi");  // needs 8 + 16 + 2 + 2 = 28
    EXPECT_EQ(e.Finish(), 0u) << cap;
    EXPECT_FALSE(e.ok());
  }
  PingEncoder e(b.data(), 28);
  e.set_correlation_id(1).set_payload("hi");
  EXPECT_EQ(e.Finish(), 28u);
}

TEST(Encoder, OutOfOrderSectionsFail) {
  Buf b;
  PublishEncoder e(b.data(), b.size());
  e.set_payload("p");
  e.set_channel("c");  // channel precedes payload in the schema
  EXPECT_EQ(e.Finish(), 0u);
}

TEST(Encoder, GroupEntryAfterLaterSectionFails) {
  Buf b;
  DeliveryEncoder e(b.data(), b.size());
  auto g = e.BeginSessions();
  g.Next().set_session_id(1);
  e.set_channel("c");
  g.Next();  // the group is closed: a later section was written
  EXPECT_EQ(e.Finish(), 0u);
}

TEST(Encoder, VarDataOverItsLengthTypeFails) {
  std::vector<uint8_t> big(70000 + 64);
  PingEncoder e(big.data(), big.size());
  e.set_payload(std::string(70000, 'x'));  // varString16 holds at most 65535 bytes
  EXPECT_EQ(e.Finish(), 0u);
}

TEST(Decoder, RejectsWrongHeaders) {
  Buf b;
  PingEncoder e(b.data(), b.size());
  size_t n = e.set_correlation_id(1).Finish();
  EXPECT_TRUE(PingDecoder::Decode({b.data(), n}));
  auto wrong_template = PongDecoder::Decode({b.data(), n});
  ASSERT_FALSE(wrong_template);
  EXPECT_NE(wrong_template.error().message().find("wrong template"), std::string::npos);
  Buf c = b;
  c[4] ^= 1;  // schema id
  EXPECT_FALSE(PingDecoder::Decode({c.data(), n}));
  c = b;
  c[0] = 15;  // block length 15 < 16 needed for version 0
  auto short_block = PingDecoder::Decode({c.data(), n});
  ASSERT_FALSE(short_block);
  EXPECT_NE(short_block.error().message().find("block length"), std::string::npos);
}

TEST(Decoder, HostileLengthsAreTruncationNotOverreads) {
  Buf b;
  SubscribeEncoder e(b.data(), b.size());
  auto g = e.BeginNames();
  g.Next().set_name(std::string_view("abc"));
  size_t n = e.Finish();
  ASSERT_GT(n, 0u);
  // Every 32-bit length field set to huge values: each must be rejected.
  for (size_t pos = 8; pos + 4 <= n; ++pos) {
    Buf c = b;
    Store<uint32_t>(c.data() + pos, 0xfffffff0u);
    std::vector<uint8_t> exact(c.begin(), c.begin() + static_cast<long>(n));
    auto d = SubscribeDecoder::Decode(exact);
    if (d) {
      for (auto x : d->names()) (void)x.name();  // if accepted, reading stays in bounds (ASan)
    }
  }
  // A group announcing 65535 entries in a short buffer.
  Buf c = b;
  Store<uint16_t>(c.data() + 8 + 18 + 2, 0xffff);
  EXPECT_FALSE(SubscribeDecoder::Decode({c.data(), n}));
}

}  // namespace
}  // namespace goblin::wire
