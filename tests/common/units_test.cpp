#include "goblin/common/units.h"

#include <gtest/gtest.h>

namespace goblin {
namespace {

using std::chrono::nanoseconds;
using namespace std::chrono_literals;

TEST(ParseSize, SeedSpellings) {
  EXPECT_EQ(ParseSize("256K").value(), 256u << 10);
  EXPECT_EQ(ParseSize("32M").value(), 32u << 20);
  EXPECT_EQ(ParseSize("64G").value(), 64ull << 30);
  EXPECT_EQ(ParseSize("4kb").value(), 4096u);
  EXPECT_EQ(ParseSize("4KB").value(), 4096u);
  EXPECT_EQ(ParseSize("4KiB").value(), 4096u);
  EXPECT_EQ(ParseSize("4k").value(), 4096u);
  EXPECT_EQ(ParseSize("2800G").value(), 2800ull << 30);
  EXPECT_EQ(ParseSize("2M").value(), 2u << 20);
  EXPECT_EQ(ParseSize("1T").value(), 1ull << 40);
  EXPECT_EQ(ParseSize("3P").value(), 3ull << 50);
}

TEST(ParseSize, PlainBytes) {
  EXPECT_EQ(ParseSize("1").value(), 1u);
  EXPECT_EQ(ParseSize("4096").value(), 4096u);
  EXPECT_EQ(ParseSize("512b").value(), 512u);
  EXPECT_EQ(ParseSize("18446744073709551615").value(), UINT64_MAX);
}

TEST(ParseSize, Fractions) {
  EXPECT_EQ(ParseSize("1.5G").value(), 3ull << 29);
  EXPECT_EQ(ParseSize("0.5K").value(), 512u);
  EXPECT_EQ(ParseSize(".5M").value(), 512u << 10);
  auto r = ParseSize("0.3K");  // 307.2 bytes
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.error().message().find("whole number"), std::string::npos);
  EXPECT_FALSE(ParseSize("1.5"));  // 1.5 bytes
}

TEST(ParseSize, Garbage) {
  for (const char* bad : {"", "K", "abc", "12Q", "12 M", " 12M", "12M ", "1..5G", "1.2.3", "0x10",
                          "12MM", "12mbi", "G12", "+5", "5e3", "1,5G", "."}) {
    auto r = ParseSize(bad);
    EXPECT_FALSE(r) << "'" << bad << "' parsed as " << (r ? *r : 0);
    if (!r) {
      EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
}

TEST(ParseSize, NegativeIsAnError) {
  auto r = ParseSize("-1M");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("negative"), std::string::npos);
}

TEST(ParseSize, Overflow) {
  for (const char* big :
       {"18446744073709551616", "16384P", "99999999999999999999999", "17179869184G"}) {
    auto r = ParseSize(big);
    ASSERT_FALSE(r) << big;
    EXPECT_EQ(r.error().code(), StatusCode::kOutOfRange) << big;
  }
  EXPECT_EQ(ParseSize("16383P").value(), 16383ull << 50);
}

TEST(ParseSize, ZeroOnlyWhenAllowed) {
  auto r = ParseSize("0");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("greater than zero"), std::string::npos);
  EXPECT_FALSE(ParseSize("0K"));
  EXPECT_EQ(ParseSize("0", {.allow_zero = true}).value(), 0u);
  EXPECT_EQ(ParseSize("0M", {.allow_zero = true}).value(), 0u);
}

TEST(FormatSize, RoundTrips) {
  EXPECT_EQ(FormatSize(32u << 20), "32M");
  EXPECT_EQ(FormatSize(256u << 10), "256K");
  EXPECT_EQ(FormatSize(1000), "1000");
  EXPECT_EQ(FormatSize(0), "0");
  EXPECT_EQ(FormatSize(3ull << 29), "1536M");
  for (uint64_t v : {1ull, 4095ull, 4096ull, 1ull << 40, 123456789ull, 64ull << 30}) {
    EXPECT_EQ(ParseSize(FormatSize(v)).value(), v) << v;
  }
}

TEST(HumanSize, Readable) {
  EXPECT_EQ(HumanSize(1000), "1000 B");
  EXPECT_EQ(HumanSize(3ull << 29), "1.5 GiB");
  EXPECT_EQ(HumanSize(64ull << 30), "64 GiB");
}

TEST(ParseDuration, Units) {
  EXPECT_EQ(ParseDuration("100ns").value(), 100ns);
  EXPECT_EQ(ParseDuration("250us").value(), 250us);
  EXPECT_EQ(ParseDuration("250\xc2\xb5s").value(), 250us);
  EXPECT_EQ(ParseDuration("500ms").value(), 500ms);
  EXPECT_EQ(ParseDuration("2s").value(), 2s);
  EXPECT_EQ(ParseDuration("1m").value(), 60s);
  EXPECT_EQ(ParseDuration("1h").value(), 3600s);
  EXPECT_EQ(ParseDuration("7d").value(), 7 * 24h);
  EXPECT_EQ(ParseDuration("1m30s").value(), 90s);
  EXPECT_EQ(ParseDuration("1h2m3s4ms").value(), 1h + 2min + 3s + 4ms);
  EXPECT_EQ(ParseDuration("1.5s").value(), 1500ms);
  EXPECT_EQ(ParseDuration("0").value(), 0s);
}

TEST(ParseDuration, PlainNumberUsesPlainUnit) {
  EXPECT_EQ(ParseDuration("30").value(), 30s);
  EXPECT_EQ(ParseDuration("30", std::chrono::milliseconds(1)).value(), 30ms);
  EXPECT_EQ(ParseDuration("0.25").value(), 250ms);
}

TEST(ParseDuration, Errors) {
  for (const char* bad :
       {"", "s", "1x", "1sec", "1 s", "-1s", "1s2", "abc", "1.5.5s", "1s-", "ms"}) {
    EXPECT_FALSE(ParseDuration(bad)) << "'" << bad << "'";
  }
  EXPECT_FALSE(ParseDuration("1.5ns"));  // not a whole number of nanoseconds
  auto r = ParseDuration("300000d");     // > 292 years
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), StatusCode::kOutOfRange);
}

TEST(FormatDuration, Readable) {
  EXPECT_EQ(FormatDuration(0s), "0s");
  EXPECT_EQ(FormatDuration(90s), "1m30s");
  EXPECT_EQ(FormatDuration(1500us), "1.5ms");
  EXPECT_EQ(FormatDuration(345890ns), "345.89us");
  EXPECT_EQ(FormatDuration(3600s + 1ms), "1h0.001s");
  EXPECT_EQ(FormatDuration(7ns), "7ns");
  for (nanoseconds d :
       {nanoseconds(1), nanoseconds(1001), nanoseconds(1234567890), nanoseconds(3723000000000)}) {
    EXPECT_EQ(ParseDuration(FormatDuration(d)).value(), d) << FormatDuration(d);
  }
}

}  // namespace
}  // namespace goblin
