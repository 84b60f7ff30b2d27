// The memcache text protocol's parsing half (gateway/include/goblin/gateway/memcache.h):
// memcached's tokenizing, arities, numbers and noreply rules. (Its replies next to
// memcached's own: tests/system/memcache_differential_test.cpp.)
#include "goblin/gateway/memcache.h"

#include <gtest/gtest.h>

namespace goblin::gateway::memcache {
namespace {

Parsed P(std::string_view line, Request* r) { return ParseLine(line, r); }

TEST(MemcacheParse, LinesEndAtNewlineWithOneCarriageReturnStripped) {
  std::string_view line;
  size_t next = 0;
  EXPECT_EQ(NextLine("get a\r\nget b\n", 0, &line, &next), LineStatus::kLine);
  EXPECT_EQ(line, "get a");
  EXPECT_EQ(NextLine("get a\r\nget b\n", next, &line, &next), LineStatus::kLine);
  EXPECT_EQ(line, "get b");
  EXPECT_EQ(NextLine("\r\n", 0, &line, &next), LineStatus::kLine);
  EXPECT_EQ(line, "\r");  // (memcached strips the \r only from lines of two bytes or more)
  EXPECT_EQ(NextLine("set k 0 0 5", 0, &line, &next), LineStatus::kNeedMore);
  EXPECT_EQ(NextLine(std::string(3000, 'x'), 0, &line, &next), LineStatus::kClose);
  EXPECT_EQ(NextLine("get " + std::string(3000, 'k'), 0, &line, &next), LineStatus::kNeedMore);
}

TEST(MemcacheParse, StorageCommands) {
  Request r;
  ASSERT_EQ(P("set k 5 100 10", &r).kind, Parsed::Kind::kRequest);
  EXPECT_EQ(r.cmd, Cmd::kSet);
  EXPECT_EQ(r.key, "k");
  EXPECT_EQ(r.flags, 5u);
  EXPECT_EQ(r.exptime, 100);
  EXPECT_EQ(r.bytes, 10u);
  EXPECT_FALSE(r.noreply);
  ASSERT_EQ(P("cas  k  0 0 3   77 noreply", &r).kind, Parsed::Kind::kRequest);  // (runs of spaces)
  EXPECT_EQ(r.cas, 77u);
  EXPECT_TRUE(r.noreply);
  EXPECT_EQ(P("set k 0 0", &r).reply, "ERROR\r\n");
  EXPECT_EQ(P("set k 0 0 -1", &r).reply, "CLIENT_ERROR bad command line format\r\n");
  EXPECT_EQ(P("set k 0 0 -1 noreply", &r).reply, "");  // silenced
  EXPECT_EQ(P("set " + std::string(251, 'k') + " 0 0 1", &r).reply,
            "CLIENT_ERROR bad command line format\r\n");
  ASSERT_EQ(P("set " + std::string(250, 'k') + " 0 0 1", &r).kind, Parsed::Kind::kRequest);
  // memcached's numbers: flags keep their low 32 bits, a length its low 32 (as int32).
  ASSERT_EQ(P("set k 4294967297 0 4294967301", &r).kind, Parsed::Kind::kRequest);
  EXPECT_EQ(r.flags, 1u);
  EXPECT_EQ(r.bytes, 5u);
  EXPECT_EQ(P("set k -1 0 1", &r).reply, "CLIENT_ERROR bad command line format\r\n");
}

TEST(MemcacheParse, OtherCommands) {
  Request r;
  ASSERT_EQ(P("gets a b c", &r).kind, Parsed::Kind::kRequest);
  EXPECT_EQ(r.keys, (std::vector<std::string_view>{"a", "b", "c"}));
  std::string many = "get";
  for (int i = 0; i < 40; ++i) many += " k" + std::to_string(i);
  ASSERT_EQ(P(many, &r).kind, Parsed::Kind::kRequest);
  EXPECT_EQ(r.keys.size(), 40u);  // (past memcached's 24 tokens: the rest is tokenized again)
  EXPECT_EQ(P("get", &r).reply, "ERROR\r\n");
  ASSERT_EQ(P("gat 10", &r).kind, Parsed::Kind::kRequest);
  EXPECT_TRUE(r.keys.empty());
  EXPECT_EQ(P("gat x k", &r).reply, "CLIENT_ERROR invalid exptime argument\r\n");
  ASSERT_EQ(P("gat 5 a " + std::string(300, 'L'), &r).kind, Parsed::Kind::kRequest);
  EXPECT_EQ(r.fail_reply, "CLIENT_ERROR bad command line format\r\n");
  EXPECT_EQ(r.keys.size(), 1u);
  // a get's keys before an over-long one are looked up too (a read of each: mg h)
  const std::string long_get = "get a b " + std::string(300, 'L') + " c";
  ASSERT_EQ(P(long_get, &r).kind, Parsed::Kind::kRequest);
  EXPECT_EQ(r.fail_reply, "CLIENT_ERROR bad command line format\r\n");
  EXPECT_EQ(r.keys, (std::vector<std::string_view>{"a", "b"}));
  EXPECT_EQ(P("incr k abc", &r).reply, "CLIENT_ERROR invalid numeric delta argument\r\n");
  EXPECT_EQ(P("delete k 5", &r).reply,
            "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n");
  ASSERT_EQ(P("delete k 0", &r).kind, Parsed::Kind::kRequest);
  ASSERT_EQ(P("flush_all noreply", &r).kind, Parsed::Kind::kRequest);
  EXPECT_FALSE(r.has_delay);
  ASSERT_EQ(P("flush_all 30", &r).kind, Parsed::Kind::kRequest);
  EXPECT_TRUE(r.has_delay);
  EXPECT_EQ(r.exptime, 30);
  EXPECT_EQ(P("GET k", &r).reply, "ERROR\r\n");  // (commands are case-sensitive)
  EXPECT_EQ(P("x", &r).reply, "ERROR\r\n");
}

TEST(MemcacheParse, MetaCommands) {
  Request r;
  ASSERT_EQ(P("mg k v s O12 q T30", &r).kind, Parsed::Kind::kRequest);
  EXPECT_EQ(r.cmd, Cmd::kMetaGet);
  EXPECT_TRUE(r.meta.value);
  EXPECT_TRUE(r.meta.quiet);
  EXPECT_TRUE(r.meta.has_ttl);
  EXPECT_EQ(r.meta.ttl, 30);
  EXPECT_EQ(r.meta.count, 5u);
  EXPECT_EQ(r.meta.tokens[2], "O12");
  ASSERT_EQ(P("ms k 5 F7 MA C99", &r).kind, Parsed::Kind::kRequest);
  EXPECT_EQ(r.bytes, 5u);
  EXPECT_EQ(r.meta.client_flags, 7u);
  EXPECT_EQ(r.meta.mode, 'A');
  EXPECT_EQ(r.meta.cas, 99u);
  EXPECT_EQ(P("mg k v v", &r).reply, "CLIENT_ERROR duplicate flag\r\n");
  EXPECT_EQ(P("mg k x", &r).reply, "CLIENT_ERROR invalid flag\r\n");
  EXPECT_EQ(P("md k x", &r).reply, "CLIENT_ERROR invalid or duplicate flag\r\n");
  // A bad value is noted and the rest read: the last text noted is the answer; F has none.
  EXPECT_EQ(P("ms k 1 Tx Fy", &r).reply, "CLIENT_ERROR bad token in command line format\r\n");
  EXPECT_EQ(P("ms k 1 Fy", &r).reply, "CLIENT_ERROR bad command line format\r\n");
  // An ms refused after its length: its data block is to be dropped.
  auto p = P("ms k 3 Mx", &r);
  EXPECT_EQ(p.reply, "CLIENT_ERROR invalid mode for ms M token\r\n");
  EXPECT_TRUE(p.swallow);
  EXPECT_EQ(r.bytes, 3u);
  p = P("ms k x", &r);
  EXPECT_EQ(p.reply, "CLIENT_ERROR bad command line format\r\n");
  EXPECT_FALSE(p.swallow);  // (no length: the block is read as commands)
  EXPECT_EQ(P("mg", &r).reply, "ERROR\r\n");
  EXPECT_EQ(P("me", &r).reply, "CLIENT_ERROR bad command line format\r\n");
  // leases and stale items: R (recache), N (vivify), I (invalidate), h, l, u; P and L taken
  ASSERT_EQ(P("mg k R30 N60 h l u P L", &r).kind, Parsed::Kind::kRequest);
  EXPECT_TRUE(r.meta.recache && r.meta.vivify && r.meta.no_bump);
  EXPECT_EQ(r.meta.recache_ttl, 30);
  EXPECT_EQ(r.meta.vivify_ttl, 60);
  EXPECT_EQ(P("mg k Rx", &r).reply, "CLIENT_ERROR bad token in command line format\r\n");
  ASSERT_EQ(P("md k I T30 h", &r).kind, Parsed::Kind::kRequest);  // (h: taken, no effect)
  EXPECT_TRUE(r.meta.invalidate && r.meta.has_ttl);
  EXPECT_EQ(P("md k I T", &r).reply, "CLIENT_ERROR invalid or duplicate flag\r\n");
  EXPECT_EQ(P("md k C12 q", &r).reply, "");  // (conditional deletes are served)
  EXPECT_TRUE(r.meta.has_cas);
  EXPECT_EQ(r.meta.cas, 12u);
}

TEST(MemcacheParse, NumbersAndHelpers) {
  uint64_t v = 0;
  EXPECT_TRUE(ParseStoredNumber(" 12 ", &v));
  EXPECT_EQ(v, 12u);
  EXPECT_TRUE(ParseStoredNumber("12 34", &v));
  EXPECT_FALSE(ParseStoredNumber("1x", &v));
  EXPECT_FALSE(ParseStoredNumber("-5", &v));
  EXPECT_FALSE(ParseStoredNumber("", &v));
  EXPECT_TRUE(ParseStoredNumber("18446744073709551615", &v));
  EXPECT_EQ(v, UINT64_MAX);
  EXPECT_EQ(DeltaResult(9, 2), "9 ");
  EXPECT_EQ(DeltaResult(100, 2), "100");
  EXPECT_EQ(ExptimeToTtlNanos(0, 1000), 0u);
  EXPECT_EQ(ExptimeToTtlNanos(-1, 1000), 1u);
  EXPECT_EQ(ExptimeToTtlNanos(10, 1000), 10'000'000'000u);
  EXPECT_EQ(ExptimeToTtlNanos(3'000'000'000, 2'999'999'990), 10'000'000'000u);
  EXPECT_EQ(ExptimeToTtlNanos(3'000'000'000, 3'000'000'001), 1u);
  EXPECT_EQ(FlagsFromMetadata("Content-Type: x\r\nX-Memcache-Flags: 42\r\n"), 42u);
  EXPECT_EQ(FlagsFromMetadata("ETag: \"a\"\r\n"), 0u);
  EXPECT_EQ(FlagsFromMetadata(MetadataForFlags(4294967295u)), 4294967295u);
  EXPECT_EQ(MetadataForFlags(0), "");
}

TEST(MemcacheBase64, DecodesAndEncodesAsMemcachedDoes) {
  std::string out;
  ASSERT_TRUE(Base64Decode("AGJpbv9rZXk=", &out));
  EXPECT_EQ(out, std::string("\0bin\xffkey", 8));
  EXPECT_EQ(Base64Encode(out), "AGJpbv9rZXk=");
  ASSERT_TRUE(Base64Decode("YWJj", &out));
  EXPECT_EQ(out, "abc");
  ASSERT_TRUE(Base64Decode("YW=j", &out));  // ('=' inside: the block ends it, as memcached)
  EXPECT_EQ(Base64Encode(out), "YWA=");
  ASSERT_TRUE(Base64Decode("a!bcd", &out));  // (characters outside the alphabet are skipped)
  EXPECT_EQ(out.size(), 3u);
  for (std::string_view bad : {"", "abc", "YWJj=", "!!!!", "a!bc", "YW Jj==="}) {
    EXPECT_FALSE(Base64Decode(bad, &out)) << bad;
  }
  for (std::string_view s : {"", "a", "ab", "abc", "abcd", "\xff\xfe\xfd\xfc\xfb"}) {
    if (s.empty()) {
      EXPECT_EQ(Base64Encode(s), "");
      continue;
    }
    ASSERT_TRUE(Base64Decode(Base64Encode(s), &out));
    EXPECT_EQ(out, s);
  }
  EXPECT_TRUE(KeyIsBinary(MetadataFor(5, true)));
  EXPECT_FALSE(KeyIsBinary(MetadataFor(5, false)));
  EXPECT_EQ(FlagsFromMetadata(MetadataFor(5, true)), 5u);
}

}  // namespace
}  // namespace goblin::gateway::memcache
