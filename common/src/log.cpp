#include "goblin/common/log.h"

#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace goblin {
namespace log_internal {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

void Write(LogLevel level, std::string_view component, std::string_view message) {
  static constexpr char kLetters[] = {'T', 'D', 'I', 'W', 'E'};
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm utc{};
  gmtime_r(&ts.tv_sec, &utc);
  fmt::memory_buffer buf;
  fmt::format_to(std::back_inserter(buf), "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z {} {}: {}\n",
                 utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min,
                 utc.tm_sec, ts.tv_nsec / 1000, kLetters[static_cast<int>(level)], component,
                 message);
  const char* p = buf.data();
  size_t left = buf.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere to report a failing stderr
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace log_internal

Result<LogLevel> ParseLogLevel(std::string_view text) {
  if (text == "trace") return LogLevel::kTrace;
  if (text == "debug") return LogLevel::kDebug;
  if (text == "info") return LogLevel::kInfo;
  if (text == "warn" || text == "warning") return LogLevel::kWarn;
  if (text == "error") return LogLevel::kError;
  if (text == "off") return LogLevel::kOff;
  return Err(StatusCode::kInvalidArgument,
             "unknown log level '{}' (use trace, debug, info, warn, error, off)", text);
}

void SetLogLevel(LogLevel level) {
  log_internal::g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

LogLevel GetLogLevel() {
  return static_cast<LogLevel>(log_internal::g_level.load(std::memory_order_relaxed));
}

void InitLogFromEnv() {
  const char* env = std::getenv("GOBLIN_LOG");  // NOLINT(concurrency-mt-unsafe): startup only
  if (env == nullptr) return;
  if (auto level = ParseLogLevel(env)) {
    SetLogLevel(*level);
  } else {
    Log(LogLevel::kWarn, "log", "ignoring GOBLIN_LOG: {}", level.error().message());
  }
}

}  // namespace goblin
