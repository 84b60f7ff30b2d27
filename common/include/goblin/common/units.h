// Size and duration parsing and formatting, exactly as Goblin's command lines write them
// ("256K", "32M", "64G", "4kb", "1.5G", plain bytes; "500ms", "2s", "1m30s", plain seconds).
// Pure functions; thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "goblin/common/status.h"

namespace goblin {

struct SizeParseOptions {
  bool allow_zero = false;  // "0" is an error unless the caller says zero means something
};

// Binary suffixes, case-insensitive, optional trailing "b"/"B" or "iB": K, M, G, T, P
// (= 2^10 .. 2^50). "4kb" == "4K" == "4KiB" == "4096". A decimal fraction is accepted when
// the result is a whole number of bytes ("1.5G"). Errors: empty, garbage, negative,
// overflow of uint64, zero (unless allowed), a fraction that is not a whole byte count.
Result<uint64_t> ParseSize(std::string_view text, SizeParseOptions options = {});

// The shortest exact form that ParseSize reads back: 33554432 -> "32M", 1000 -> "1000".
std::string FormatSize(uint64_t bytes);

// For people, approximate: 1610612736 -> "1.5 GiB", 1000 -> "1000 B".
std::string HumanSize(uint64_t bytes);

// Units ns, us (or µs), ms, s, m, h, d; a sequence of number+unit terms ("1m30s"), decimal
// fractions ("1.5s"); a plain number is in `plain_unit` (seconds unless told otherwise).
// Errors: empty, garbage, negative, unknown unit, overflow of int64 nanoseconds.
Result<std::chrono::nanoseconds> ParseDuration(
    std::string_view text, std::chrono::nanoseconds plain_unit = std::chrono::seconds(1));

// Exact and readable: 90s -> "1m30s", 1500us -> "1.5ms", 0 -> "0s".
std::string FormatDuration(std::chrono::nanoseconds d);

}  // namespace goblin
