// Runtime support for the generated SBE flyweights (sbe/tools/sbe_gen.py): little-endian
// loads/stores, the table that describes each block's sections, the bounds-checked walk
// that validates a whole message before any accessor runs, and the encoder state that
// keeps groups and var data in schema order. Header-only; no allocation; no exceptions.
// Thread-safety: an encoder or decoder belongs to one thread; the tables are constants.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>

namespace goblin::sbe {

static_assert(std::endian::native == std::endian::little,
              "Goblin's SBE schemas are little-endian and the generated code stores natively");

template <typename T>
inline T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
inline void Store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

// The standard 8-byte SBE message header.
struct MessageHeader {
  static constexpr size_t kSize = 8;
  uint16_t block_length = 0;
  uint16_t template_id = 0;
  uint16_t schema_id = 0;
  uint16_t version = 0;

  static bool Read(std::span<const uint8_t> buf, MessageHeader* out) {
    if (buf.size() < kSize) return false;
    out->block_length = Load<uint16_t>(buf.data());
    out->template_id = Load<uint16_t>(buf.data() + 2);
    out->schema_id = Load<uint16_t>(buf.data() + 4);
    out->version = Load<uint16_t>(buf.data() + 6);
    return true;
  }
  void Write(uint8_t* p) const {
    Store(p, block_length);
    Store(p + 2, template_id);
    Store(p + 4, schema_id);
    Store(p + 6, version);
  }
};

// Group header (groupSizeEncoding): blockLength uint16, numInGroup uint16.
inline constexpr size_t kGroupHeaderSize = 4;

enum class SectionKind : uint8_t { kGroup, kData8, kData16, kData32 };

inline constexpr size_t DataLengthSize(SectionKind k) {
  return k == SectionKind::kData8 ? 1 : k == SectionKind::kData16 ? 2 : 4;
}

struct BlockDesc;

struct SectionDesc {
  SectionKind kind;
  uint16_t since_version;
  const BlockDesc* entry;  // groups: the entry block; data: nullptr
};

// End offset of one fixed field within a block and the version that added it.
struct FieldExtent {
  uint16_t since_version;
  uint16_t end;
};

struct BlockDesc {
  uint16_t block_length;  // the encoder's (this schema version's) block length
  const FieldExtent* fields;
  uint8_t num_fields;
  const SectionDesc* sections;
  uint8_t num_sections;

  // Smallest block a peer speaking `version` may send: every field it knows must fit.
  constexpr uint16_t MinBlockLength(uint16_t version) const {
    uint16_t m = 0;
    for (uint8_t i = 0; i < num_fields; ++i) {
      if (fields[i].since_version <= version && fields[i].end > m) m = fields[i].end;
    }
    return m;
  }
};

inline constexpr int kMaxNesting = 8;
inline constexpr uint16_t kMaxSections = 16;

enum class DecodeError : uint8_t {
  kNone = 0,
  kTruncated,      // the buffer ends before the message does
  kWrongSchema,    // schema id differs
  kWrongTemplate,  // template id differs from the decoder's
  kShortBlock,     // blockLength smaller than the fields of the acting version need
  kTooDeep,        // nesting beyond kMaxNesting
};

std::string_view DecodeErrorName(DecodeError e);

// Steps over the var-data section at `pos` (its length prefix and bytes), checking both
// against `size`: the offset after it, or SIZE_MAX with *err set.
inline size_t SkipData(SectionKind kind, const uint8_t* buf, size_t size, size_t pos,
                       DecodeError* err) {
  const size_t ls = DataLengthSize(kind);
  if (size - pos < ls) {
    *err = DecodeError::kTruncated;
    return SIZE_MAX;
  }
  const uint64_t len = ls == 1   ? Load<uint8_t>(buf + pos)
                       : ls == 2 ? Load<uint16_t>(buf + pos)
                                 : Load<uint32_t>(buf + pos);
  pos += ls;
  if (size - pos < len) {
    *err = DecodeError::kTruncated;
    return SIZE_MAX;
  }
  return pos + static_cast<size_t>(len);
}

// Walks the sections of a block whose fixed part ends at `pos`, checking every length
// against `size`. Records the offset of each known, present section in `offsets` (if not
// null; absent ones get SIZE_MAX). Returns the end offset or SIZE_MAX with *err set.
inline size_t WalkSections(const BlockDesc& desc, const uint8_t* buf, size_t size, size_t pos,
                           uint16_t version, size_t* offsets, int depth, DecodeError* err) {
  if (depth > kMaxNesting) {
    *err = DecodeError::kTooDeep;
    return SIZE_MAX;
  }
  for (uint8_t s = 0; s < desc.num_sections; ++s) {
    const SectionDesc& sec = desc.sections[s];
    if (sec.since_version > version) {
      if (offsets) offsets[s] = SIZE_MAX;
      continue;
    }
    if (offsets) offsets[s] = pos;
    if (sec.kind == SectionKind::kGroup) {
      if (pos > size || size - pos < kGroupHeaderSize) {
        *err = DecodeError::kTruncated;
        return SIZE_MAX;
      }
      uint16_t bl = Load<uint16_t>(buf + pos);
      uint16_t n = Load<uint16_t>(buf + pos + 2);
      pos += kGroupHeaderSize;
      if (bl < sec.entry->MinBlockLength(version)) {
        *err = DecodeError::kShortBlock;
        return SIZE_MAX;
      }
      for (uint16_t i = 0; i < n; ++i) {
        if (size - pos < bl) {
          *err = DecodeError::kTruncated;
          return SIZE_MAX;
        }
        pos += bl;
        pos = WalkSections(*sec.entry, buf, size, pos, version, nullptr, depth + 1, err);
        if (pos == SIZE_MAX) return SIZE_MAX;
      }
    } else {
      pos = SkipData(sec.kind, buf, size, pos, err);
      if (pos == SIZE_MAX) return SIZE_MAX;
    }
  }
  return pos;
}

// WalkSections for a block whose sections are all var data (no groups): no recursion, so it
// inlines into a decoder's WrapBody (the generator picks it for such blocks).
inline size_t WalkDataSections(const BlockDesc& desc, const uint8_t* buf, size_t size, size_t pos,
                               uint16_t version, size_t* offsets, DecodeError* err) {
  for (uint8_t s = 0; s < desc.num_sections; ++s) {
    const SectionDesc& sec = desc.sections[s];
    if (sec.since_version > version) {
      offsets[s] = SIZE_MAX;
      continue;
    }
    offsets[s] = pos;
    pos = SkipData(sec.kind, buf, size, pos, err);
    if (pos == SIZE_MAX) return SIZE_MAX;
  }
  return pos;
}

// Reads a var-data section at `pos` (already validated by WalkSections).
inline std::string_view ReadData(const uint8_t* buf, size_t pos, SectionKind kind) {
  if (pos == SIZE_MAX) return {};
  size_t ls = DataLengthSize(kind);
  size_t len = ls == 1   ? Load<uint8_t>(buf + pos)
               : ls == 2 ? Load<uint16_t>(buf + pos)
                         : Load<uint32_t>(buf + pos);
  return {reinterpret_cast<const char*>(buf + pos + ls), len};
}

// Shared state of one message being encoded: the buffer, the write position, and a stack
// of open blocks (the message body, then group entries) so that sections are written in
// schema order and skipped ones are filled with empty encodings. Any misuse (overflow,
// out-of-order section, too many group entries) sets failed and every later write is a
// no-op; Finish() reports it.
class EncoderState {
 public:
  EncoderState(uint8_t* buf, size_t capacity) : buf_(buf), cap_(capacity) {}

  bool ok() const { return !failed_; }
  size_t position() const { return pos_; }
  uint8_t* buffer() const { return buf_; }

  // Reserves `n` bytes at the write position; nullptr (and failed) when they do not fit.
  uint8_t* Reserve(size_t n) {
    if (failed_ || cap_ - pos_ < n || pos_ > cap_) {
      failed_ = true;
      return nullptr;
    }
    uint8_t* p = buf_ + pos_;
    pos_ += n;
    return p;
  }

  // Opens a block at nesting `depth` (0 = message body) whose fixed part was just reserved.
  void OpenBlock(int depth, const BlockDesc* desc) {
    if (failed_) return;
    CloseTo(depth);
    if (depth >= kMaxNesting) {
      failed_ = true;
      return;
    }
    stack_[depth] = {desc, 0};
    depth_ = depth + 1;
  }

  // Positions the writer at section `index` of the block at `depth`, closing deeper blocks
  // and writing empty encodings for sections skipped in between. False on misuse.
  bool EnterSection(int depth, uint8_t index) {
    if (failed_) return false;
    if (depth >= depth_) {
      failed_ = true;  // the block is not open (already closed by a later section)
      return false;
    }
    CloseTo(depth + 1);
    Open& b = stack_[depth];
    if (index < b.next_section) {
      failed_ = true;  // out of order
      return false;
    }
    while (b.next_section < index) WriteEmpty(b.desc->sections[b.next_section++]);
    b.next_section = static_cast<uint8_t>(index + 1);
    return !failed_;
  }

  bool IsOpen(int depth) const { return !failed_ && depth < depth_; }

  // True when section `index` of the block at `depth` is the one being written: the block
  // is open and no later section of it has been entered.
  bool AtSection(int depth, uint8_t index) const {
    return !failed_ && depth < depth_ && stack_[depth].next_section == index + 1;
  }

  // Closes blocks at nesting >= depth (used when a group starts its next entry).
  void CloseBlocksFrom(int depth) {
    if (!failed_) CloseTo(depth);
  }

  void Fail() { failed_ = true; }

  // Closes every open block (filling trailing sections); returns the encoded length or 0.
  size_t Finish() {
    CloseTo(0);
    return failed_ ? 0 : pos_;
  }

 private:
  struct Open {
    const BlockDesc* desc;
    uint8_t next_section;
  };

  void WriteEmpty(const SectionDesc& sec) {
    if (sec.kind == SectionKind::kGroup) {
      uint8_t* p = Reserve(kGroupHeaderSize);
      if (p == nullptr) return;
      Store<uint16_t>(p, sec.entry->block_length);
      Store<uint16_t>(p + 2, 0);
    } else {
      size_t ls = DataLengthSize(sec.kind);
      uint8_t* p = Reserve(ls);
      if (p != nullptr) std::memset(p, 0, ls);
    }
  }

  // Closes blocks at nesting >= depth, innermost first.
  void CloseTo(int depth) {
    while (depth_ > depth) {
      Open& b = stack_[depth_ - 1];
      while (b.next_section < b.desc->num_sections) WriteEmpty(b.desc->sections[b.next_section++]);
      --depth_;
    }
  }

  uint8_t* buf_;
  size_t cap_;
  size_t pos_ = 0;
  bool failed_ = false;
  int depth_ = 0;
  // (not zeroed: an entry is written by OpenBlock before any read, which stays below depth_;
  // zeroing all of it was a `rep stos` of 128 bytes: a quarter of the samples perf found in
  // the core's encoding of an ObjectLent)
  Open stack_[kMaxNesting];
};

// Writes a var-data section (length + bytes) at the encoder's position.
inline void WriteData(EncoderState& st, SectionKind kind, const void* data, size_t len) {
  size_t ls = DataLengthSize(kind);
  uint64_t max = ls == 1 ? 0xffu : ls == 2 ? 0xffffu : 0x40000000u;  // SBE caps u32 at 2^30
  if (len > max) {
    st.Fail();
    return;
  }
  uint8_t* p = st.Reserve(ls + len);
  if (p == nullptr) return;
  if (ls == 1) {
    Store<uint8_t>(p, static_cast<uint8_t>(len));
  } else if (ls == 2) {
    Store<uint16_t>(p, static_cast<uint16_t>(len));
  } else {
    Store<uint32_t>(p, static_cast<uint32_t>(len));
  }
  if (len) std::memcpy(p + ls, data, len);
}

inline std::string_view DecodeErrorName(DecodeError e) {
  switch (e) {
    case DecodeError::kNone:
      return "none";
    case DecodeError::kTruncated:
      return "truncated message";
    case DecodeError::kWrongSchema:
      return "wrong schema id";
    case DecodeError::kWrongTemplate:
      return "wrong template id";
    case DecodeError::kShortBlock:
      return "block length too short for the acting version";
    case DecodeError::kTooDeep:
      return "groups nested too deeply";
  }
  return "unknown decode error";
}

// Trims a fixed-length char array at its first NUL.
inline std::string_view FixedString(const uint8_t* p, size_t n) {
  const void* z = std::memchr(p, 0, n);
  return {reinterpret_cast<const char*>(p),
          z ? static_cast<size_t>(static_cast<const uint8_t*>(z) - p) : n};
}

}  // namespace goblin::sbe
