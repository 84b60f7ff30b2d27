// Schema evolution: a version-1 encoder read by a version-0 decoder and the reverse. The two
// schemas (schema/evo_v0.xml, evo_v1.xml) share schema id 9000 and template ids.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "goblin/wire/evo_v0.h"
#include "goblin/wire/evo_v1.h"

namespace {

using Buf = std::array<uint8_t, 512>;

TEST(Evolution, NewEncoderOldDecoder) {
  Buf b;
  goblin::evo::v1::OrderEncoder e(b.data(), b.size());
  e.set_order_id(42)
      .set_qty(7)
      .set_limit(-5)
      .set_side(goblin::evo::v1::Side::kSell)
      .set_where({.x = 3, .y = -4})
      .set_tag("blue");
  auto legs = e.BeginLegs();
  legs.Next().set_price(100).set_venue(9).set_note(std::string_view("first"));
  legs.Next().set_price(-200).set_venue(8).set_note(std::string_view("second"));
  e.set_symbol("GOBL").set_comment("added in v1");
  size_t n = e.Finish();
  ASSERT_GT(n, 0u);

  auto d = goblin::evo::v0::OrderDecoder::Decode({b.data(), n});
  ASSERT_TRUE(d) << d.error().ToString();
  EXPECT_EQ(d->acting_version(), 1);
  EXPECT_EQ(d->order_id(), 42u);
  EXPECT_EQ(d->qty(), 7u);
  std::vector<std::pair<int64_t, std::string>> got;
  for (auto l : d->legs()) got.emplace_back(l.price(), std::string(l.note()));
  ASSERT_EQ(got.size(), 2u);  // larger entry blocks (venue) are skipped by blockLength
  EXPECT_EQ(got[0], (std::pair<int64_t, std::string>{100, "first"}));
  EXPECT_EQ(got[1], (std::pair<int64_t, std::string>{-200, "second"}));
  EXPECT_EQ(d->symbol(), "GOBL");
  EXPECT_LT(d->encoded_length(), n);  // the trailing v1 comment is not understood
}

TEST(Evolution, OldEncoderNewDecoder) {
  Buf b;
  goblin::evo::v0::OrderEncoder e(b.data(), b.size());
  e.set_order_id(1).set_qty(2);
  e.BeginLegs().Next().set_price(3).set_note(std::string_view("n"));
  e.set_symbol("S");
  size_t n = e.Finish();
  ASSERT_GT(n, 0u);

  auto d = goblin::evo::v1::OrderDecoder::Decode({b.data(), n});
  ASSERT_TRUE(d) << d.error().ToString();
  EXPECT_EQ(d->acting_version(), 0);
  EXPECT_EQ(d->order_id(), 1u);
  EXPECT_EQ(d->qty(), 2u);
  EXPECT_EQ(d->limit(), INT32_MIN);  // null value of fields newer than the sender
  EXPECT_EQ(d->side(), goblin::evo::v1::Side::kNullValue);
  EXPECT_EQ(d->where(), (goblin::evo::v1::Point{}));
  EXPECT_EQ(d->tag(), "");
  auto leg = *d->legs().begin();
  EXPECT_EQ(leg.price(), 3);
  EXPECT_EQ(leg.venue(), UINT16_MAX);
  EXPECT_EQ(leg.note(), "n");
  EXPECT_EQ(d->symbol(), "S");
  EXPECT_EQ(d->comment(), "");  // data newer than the sender: absent
  EXPECT_EQ(d->encoded_length(), n);
}

TEST(Evolution, SameVersionRoundTripOfEveryFieldKind) {
  Buf b;
  goblin::evo::v1::OrderEncoder e(b.data(), b.size());
  e.set_where({.x = -1, .y = 2}).set_tag("12345678").set_side(goblin::evo::v1::Side::kBuy);
  size_t n = e.Finish();
  auto d = goblin::evo::v1::OrderDecoder::Decode({b.data(), n});
  ASSERT_TRUE(d);
  EXPECT_EQ(d->where().x, -1);
  EXPECT_EQ(d->where().y, 2);
  EXPECT_EQ(d->tag(), "12345678");  // a full array has no NUL
  EXPECT_EQ(d->side(), goblin::evo::v1::Side::kBuy);
  EXPECT_EQ(d->legs().size(), 0);
  goblin::evo::v1::OrderEncoder too_long(b.data(), b.size());
  too_long.set_tag("123456789");
  EXPECT_EQ(too_long.Finish(), 0u);
}

TEST(Evolution, OlderVersionWithShortBlockIsRejectedWhenItClaimsANewerVersion) {
  Buf b;
  goblin::evo::v0::OrderEncoder e(b.data(), b.size());
  size_t n = e.set_order_id(1).Finish();
  // Claim version 1 while sending the 12-byte v0 block: the v1 fields cannot be there.
  b[6] = 1;
  auto d = goblin::evo::v1::OrderDecoder::Decode({b.data(), n});
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message().find("block length"), std::string::npos);
}

TEST(Nesting, NestedGroupsRoundTripAndSkippedSectionsAreEmpty) {
  Buf b;
  goblin::evo::v1::NestEncoder e(b.data(), b.size());
  e.set_a(1);
  auto outer = e.BeginOuter();
  outer.Next().set_o(10);
  {
    auto inner = outer.BeginInner();
    inner.Next().set_i(1).set_leaf(std::string_view("x"));
    inner.Next().set_i(2);  // leaf skipped
  }
  outer.set_tail(std::string_view("t1"));
  outer.Next().set_o(20);  // inner and tail skipped
  e.set_end("E");
  size_t n = e.Finish();
  ASSERT_GT(n, 0u);
  auto d = goblin::evo::v1::NestDecoder::Decode({b.data(), n});
  ASSERT_TRUE(d) << d.error().ToString();
  std::string trace;
  for (auto o : d->outer()) {
    trace += "o" + std::to_string(o.o()) + "[";
    for (auto i : o.inner()) trace += std::to_string(i.i()) + ":" + std::string(i.leaf()) + ",";
    trace += "]" + std::string(o.tail()) + ";";
  }
  EXPECT_EQ(trace, "o10[1:x,2:,]t1;o20[];");
  EXPECT_EQ(d->end(), "E");
  EXPECT_EQ(d->encoded_length(), n);
}

}  // namespace
