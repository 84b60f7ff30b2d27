// Framing of SBE messages on byte streams (unix sockets, TCP): a 4-byte little-endian length
// prefix, then the message (header included). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>

#include "goblin/sbe/runtime.h"

namespace goblin::sbe {

inline constexpr size_t kFrameHeaderSize = 4;

inline void WriteFrameHeader(uint8_t* p, uint32_t message_length) {
  Store<uint32_t>(p, message_length);
}

struct FrameSplit {
  enum class Kind : uint8_t {
    kFrame,     // `message` is one whole message; drop `consumed` bytes from the stream
    kNeedMore,  // not enough bytes yet; `consumed` says how many the frame needs in total
    kTooLarge,  // the prefix announces more than the limit: the stream is unusable
    kTooSmall,  // the prefix announces less than a message header: the stream is unusable
  };
  Kind kind;
  std::span<const uint8_t> message;
  size_t consumed = 0;
};

// Splits the first frame off the front of `stream`.
inline FrameSplit SplitFrame(std::span<const uint8_t> stream, uint32_t max_message) {
  if (stream.size() < kFrameHeaderSize) return {FrameSplit::Kind::kNeedMore, {}, kFrameHeaderSize};
  uint32_t len = Load<uint32_t>(stream.data());
  if (len > max_message) return {FrameSplit::Kind::kTooLarge, {}, 0};
  if (len < MessageHeader::kSize) return {FrameSplit::Kind::kTooSmall, {}, 0};
  size_t total = kFrameHeaderSize + static_cast<size_t>(len);
  if (stream.size() < total) return {FrameSplit::Kind::kNeedMore, {}, total};
  return {FrameSplit::Kind::kFrame, stream.subspan(kFrameHeaderSize, len), total};
}

}  // namespace goblin::sbe
