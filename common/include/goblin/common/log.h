// Process-wide logger: one formatted line per call, written to stderr with a single write(2)
// so lines from different threads never interleave. Thread-safe. Not for the per-message
// fast path: log state changes and errors, and count everything else.
#pragma once

#include <atomic>
#include <string_view>

#include <fmt/format.h>

#include "goblin/common/status.h"

namespace goblin {

enum class LogLevel : int { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };

// "trace", "debug", "info", "warn", "error", "off".
Result<LogLevel> ParseLogLevel(std::string_view text);

namespace log_internal {
extern std::atomic<int> g_level;
void Write(LogLevel level, std::string_view component, std::string_view message);
}  // namespace log_internal

// Default: info, or the GOBLIN_LOG environment variable read at first use of SetLogLevel
// or InitLogFromEnv().
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
void InitLogFromEnv();

inline bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= log_internal::g_level.load(std::memory_order_relaxed);
}

template <typename... Args>
void Log(LogLevel level, std::string_view component, fmt::format_string<Args...> f,
         Args&&... args) {
  if (!LogEnabled(level)) return;
  fmt::memory_buffer buf;
  fmt::format_to(std::back_inserter(buf), f, std::forward<Args>(args)...);
  log_internal::Write(level, component, std::string_view(buf.data(), buf.size()));
}

}  // namespace goblin

#define GOBLIN_LOG_DEBUG(component, ...) \
  ::goblin::Log(::goblin::LogLevel::kDebug, component, __VA_ARGS__)
#define GOBLIN_LOG_INFO(component, ...) \
  ::goblin::Log(::goblin::LogLevel::kInfo, component, __VA_ARGS__)
#define GOBLIN_LOG_WARN(component, ...) \
  ::goblin::Log(::goblin::LogLevel::kWarn, component, __VA_ARGS__)
#define GOBLIN_LOG_ERROR(component, ...) \
  ::goblin::Log(::goblin::LogLevel::kError, component, __VA_ARGS__)
