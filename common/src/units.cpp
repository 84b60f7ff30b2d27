#include "goblin/common/units.h"

#include <array>
#include <cctype>
#include <limits>

namespace goblin {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
char Lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

// A non-negative decimal number "123" or "1.25" (at most 18 fraction digits).
struct Decimal {
  uint64_t whole = 0;
  uint64_t frac = 0;        // fraction digits as an integer
  uint64_t frac_scale = 1;  // 10^(number of fraction digits)
};

// Parses a decimal at text[pos...]; advances pos. Fails on no digits or overflow.
Result<Decimal> ParseDecimal(std::string_view text, size_t& pos, std::string_view what) {
  Decimal d;
  size_t start = pos;
  while (pos < text.size() && IsDigit(text[pos])) {
    uint64_t digit = static_cast<uint64_t>(text[pos] - '0');
    if (d.whole > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
      return Err(StatusCode::kOutOfRange, "{} '{}' is too large", what, text);
    }
    d.whole = d.whole * 10 + digit;
    ++pos;
  }
  bool had_whole = pos > start;
  bool had_frac = false;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    while (pos < text.size() && IsDigit(text[pos])) {
      if (d.frac_scale >= 1'000'000'000'000'000'000ULL) {
        return Err(StatusCode::kInvalidArgument, "{} '{}' has too many decimal places", what, text);
      }
      d.frac = d.frac * 10 + static_cast<uint64_t>(text[pos] - '0');
      d.frac_scale *= 10;
      had_frac = true;
      ++pos;
    }
  }
  if (!had_whole && !had_frac) {
    return Err(StatusCode::kInvalidArgument, "{} '{}' is not a number", what, text);
  }
  return d;
}

// whole*mult + frac*mult/scale, exact; fails on overflow or an inexact result.
Result<uint64_t> Scale(const Decimal& d, uint64_t mult, std::string_view text,
                       std::string_view what, std::string_view unit) {
  if (d.whole != 0 && mult > std::numeric_limits<uint64_t>::max() / d.whole) {
    return Err(StatusCode::kOutOfRange, "{} '{}' is too large", what, text);
  }
  uint64_t value = d.whole * mult;
  if (d.frac != 0) {
    unsigned __int128 f = static_cast<unsigned __int128>(d.frac) * mult;
    if (f % d.frac_scale != 0) {
      return Err(StatusCode::kInvalidArgument, "{} '{}' is not a whole number of {}", what, text,
                 unit);
    }
    unsigned __int128 add = f / d.frac_scale;
    if (add > std::numeric_limits<uint64_t>::max() - value) {
      return Err(StatusCode::kOutOfRange, "{} '{}' is too large", what, text);
    }
    value += static_cast<uint64_t>(add);
  }
  return value;
}

}  // namespace

Result<uint64_t> ParseSize(std::string_view text, SizeParseOptions options) {
  if (text.empty()) return Err(StatusCode::kInvalidArgument, "empty size");
  if (text.front() == '-') {
    return Err(StatusCode::kInvalidArgument, "size '{}' is negative", text);
  }
  size_t pos = 0;
  GOBLIN_ASSIGN_OR_RETURN(Decimal d, ParseDecimal(text, pos, "size"));
  std::string suffix;
  for (size_t i = pos; i < text.size(); ++i) suffix.push_back(Lower(text[i]));
  int shift = -1;
  static constexpr std::array<std::pair<char, int>, 5> kUnits{
      {{'k', 10}, {'m', 20}, {'g', 30}, {'t', 40}, {'p', 50}}};
  if (suffix.empty() || suffix == "b") {
    shift = 0;
  } else {
    for (auto [c, s] : kUnits) {
      if (suffix[0] != c) continue;
      std::string_view rest = std::string_view(suffix).substr(1);
      if (rest.empty() || rest == "b" || rest == "ib") shift = s;
    }
  }
  if (shift < 0) {
    return Err(StatusCode::kInvalidArgument,
               "size '{}' has an unknown unit '{}' (use K, M, G, T, P or plain bytes)", text,
               text.substr(pos));
  }
  GOBLIN_ASSIGN_OR_RETURN(uint64_t bytes, Scale(d, uint64_t{1} << shift, text, "size", "bytes"));
  if (bytes == 0 && !options.allow_zero) {
    return Err(StatusCode::kInvalidArgument, "size '{}' must be greater than zero", text);
  }
  return bytes;
}

std::string FormatSize(uint64_t bytes) {
  static constexpr std::array<std::pair<char, int>, 5> kUnits{
      {{'P', 50}, {'T', 40}, {'G', 30}, {'M', 20}, {'K', 10}}};
  if (bytes == 0) return "0";
  for (auto [c, s] : kUnits) {
    uint64_t unit = uint64_t{1} << s;
    if (bytes % unit == 0) return fmt::format("{}{}", bytes / unit, c);
  }
  return fmt::format("{}", bytes);
}

std::string HumanSize(uint64_t bytes) {
  static constexpr std::array<const char*, 6> kNames{"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes);
  size_t i = 0;
  while (v >= 1024.0 && i + 1 < kNames.size()) {
    v /= 1024.0;
    ++i;
  }
  std::string s = fmt::format("{:.2f}", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return fmt::format("{} {}", s, kNames[i]);
}

Result<std::chrono::nanoseconds> ParseDuration(std::string_view text,
                                               std::chrono::nanoseconds plain_unit) {
  using std::chrono::nanoseconds;
  if (text.empty()) return Err(StatusCode::kInvalidArgument, "empty duration");
  if (text.front() == '-') {
    return Err(StatusCode::kInvalidArgument, "duration '{}' is negative", text);
  }
  static constexpr int64_t kNs = 1, kUs = 1000, kMs = 1000 * kUs, kS = 1000 * kMs;
  static constexpr int64_t kMin = 60 * kS, kH = 60 * kMin, kD = 24 * kH;
  uint64_t total = 0;
  size_t pos = 0;
  bool first = true;
  while (pos < text.size()) {
    GOBLIN_ASSIGN_OR_RETURN(Decimal d, ParseDecimal(text, pos, "duration"));
    size_t ustart = pos;
    while (pos < text.size() && !IsDigit(text[pos]) && text[pos] != '.') ++pos;
    std::string_view unit = text.substr(ustart, pos - ustart);
    int64_t mult = 0;
    if (unit.empty()) {
      if (!first || pos != text.size()) {
        return Err(StatusCode::kInvalidArgument, "duration '{}' is missing a unit", text);
      }
      mult = plain_unit.count();
    } else if (unit == "ns") {
      mult = kNs;
    } else if (unit == "us" || unit == "\xc2\xb5s") {
      mult = kUs;
    } else if (unit == "ms") {
      mult = kMs;
    } else if (unit == "s") {
      mult = kS;
    } else if (unit == "m" || unit == "min") {
      mult = kMin;
    } else if (unit == "h") {
      mult = kH;
    } else if (unit == "d") {
      mult = kD;
    } else {
      return Err(StatusCode::kInvalidArgument,
                 "duration '{}' has an unknown unit '{}' (use ns, us, ms, s, m, h, d)", text, unit);
    }
    GOBLIN_ASSIGN_OR_RETURN(uint64_t ns,
                            Scale(d, static_cast<uint64_t>(mult), text, "duration", "nanoseconds"));
    if (ns > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - total) {
      return Err(StatusCode::kOutOfRange, "duration '{}' is too large", text);
    }
    total += ns;
    first = false;
  }
  return nanoseconds(static_cast<int64_t>(total));
}

std::string FormatDuration(std::chrono::nanoseconds d) {
  int64_t ns = d.count();
  if (ns == 0) return "0s";
  std::string out;
  if (ns < 0) {
    out = "-";
    ns = -ns;
  }
  static constexpr int64_t kUs = 1000, kMs = 1000 * kUs, kS = 1000 * kMs, kMin = 60 * kS,
                           kH = 60 * kMin;
  // Sub-second values: one unit with a decimal fraction ("1.5ms").
  if (ns < kS) {
    auto frac = [](int64_t v, int64_t unit, const char* name) {
      std::string s = fmt::format("{}", v / unit);
      if (int64_t r = v % unit; r != 0) {
        std::string f = fmt::format("{:0{}}", r, unit == kUs ? 3 : (unit == kMs ? 6 : 9));
        while (!f.empty() && f.back() == '0') f.pop_back();
        s += "." + f;
      }
      return s + name;
    };
    if (ns < kUs) return out + fmt::format("{}ns", ns);
    if (ns < kMs) return out + frac(ns, kUs, "us");
    return out + frac(ns, kMs, "ms");
  }
  if (int64_t h = ns / kH; h > 0) {
    out += fmt::format("{}h", h);
    ns %= kH;
  }
  if (int64_t m = ns / kMin; m > 0) {
    out += fmt::format("{}m", m);
    ns %= kMin;
  }
  if (ns > 0) {
    std::string s = fmt::format("{}", ns / kS);
    if (int64_t r = ns % kS; r != 0) {
      std::string f = fmt::format("{:09}", r);
      while (f.back() == '0') f.pop_back();
      s += "." + f;
    }
    out += s + "s";
  }
  return out;
}

}  // namespace goblin
