#include "goblin/sbe/framing.h"

#include <gtest/gtest.h>

#include <vector>

#include "goblin/wire/goblin_wire.h"

namespace goblin::sbe {
namespace {

TEST(Framing, SplitsWholeFramesAndAsksForMore) {
  std::vector<uint8_t> stream;
  for (uint64_t id = 1; id <= 3; ++id) {
    uint8_t msg[64];
    wire::PingEncoder e(msg, sizeof msg);
    size_t n = e.set_correlation_id(id).Finish();
    uint8_t hdr[kFrameHeaderSize];
    WriteFrameHeader(hdr, static_cast<uint32_t>(n));
    stream.insert(stream.end(), hdr, hdr + kFrameHeaderSize);
    stream.insert(stream.end(), msg, msg + n);
  }
  std::span<const uint8_t> rest(stream);
  for (uint64_t id = 1; id <= 3; ++id) {
    // Every prefix shorter than the frame asks for more.
    for (size_t cut = 0; cut < 4 + 26; ++cut) {
      EXPECT_EQ(SplitFrame(rest.first(std::min(cut, rest.size())), 4096).kind,
                FrameSplit::Kind::kNeedMore);
    }
    FrameSplit f = SplitFrame(rest, 4096);
    ASSERT_EQ(f.kind, FrameSplit::Kind::kFrame);
    auto d = wire::PingDecoder::Decode(f.message);
    ASSERT_TRUE(d);
    EXPECT_EQ(d->correlation_id(), id);
    rest = rest.subspan(f.consumed);
  }
  EXPECT_TRUE(rest.empty());
}

TEST(Framing, RejectsAbsurdLengths) {
  uint8_t big[4];
  WriteFrameHeader(big, 1u << 30);
  EXPECT_EQ(SplitFrame(big, 1 << 20).kind, FrameSplit::Kind::kTooLarge);
  uint8_t small[4];
  WriteFrameHeader(small, 3);
  EXPECT_EQ(SplitFrame(small, 1 << 20).kind, FrameSplit::Kind::kTooSmall);
}

}  // namespace
}  // namespace goblin::sbe
