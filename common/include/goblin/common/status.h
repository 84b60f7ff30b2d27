// Status and Result<T>: Goblin's one error vocabulary (std::expected<T, Status>).
// Expected conditions (ring full, miss, in progress) are values in the caller's own types,
// never Status errors. Thread-safety: plain values; copy freely between threads.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace goblin {

enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,     // the caller's input is malformed (bad flag, bad size, bad message)
  kNotFound,            // a named thing does not exist
  kAlreadyExists,       // create of something that exists (e.g. a fill lease held by another)
  kOutOfRange,          // a value or offset beyond what is allowed
  kResourceExhausted,   // a configured bound was reached (pool full, disk full, limit)
  kFailedPrecondition,  // the system is not in a state to do this (unprepared tier dir)
  kUnavailable,         // the peer or service is gone or not reachable (retry may help)
  kTimeout,             // a deadline passed
  kIoError,             // a system call failed; the message carries errno text
  kCorruption,          // checksum mismatch, torn record, foreign data
  kPermissionDenied,
  kUnimplemented,
  kAborted,   // the operation was cancelled (shutdown, abort)
  kInternal,  // a bug: an invariant did not hold
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "invalid argument: bad size '12Q'"; "ok" for success.
  std::string ToString() const;

  // Prefixes the message with context: Status(...).WithContext("--memory").
  Status WithContext(std::string_view context) const&;
  Status WithContext(std::string_view context) &&;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename T>
using Result = std::expected<T, Status>;

// Builds an unexpected Status with a fmt-formatted message:
//   return Err(StatusCode::kInvalidArgument, "bad size '{}'", text);
template <typename... Args>
std::unexpected<Status> Err(StatusCode code, fmt::format_string<Args...> f, Args&&... args) {
  return std::unexpected<Status>(Status(code, fmt::format(f, std::forward<Args>(args)...)));
}
inline std::unexpected<Status> Err(Status s) { return std::unexpected<Status>(std::move(s)); }

// A Status for a failed system call: "open(/x): No such file or directory".
Status ErrnoStatus(std::string_view what, int err);
template <typename T = void>
std::unexpected<Status> ErrnoErr(std::string_view what, int err) {
  return std::unexpected<Status>(ErrnoStatus(what, err));
}

using VoidResult = Result<void>;
inline VoidResult OkResult() { return {}; }

}  // namespace goblin

// Propagates an error from an expression yielding Result<T>/VoidResult; evaluates to nothing.
#define GOBLIN_RETURN_IF_ERROR(expr)                                      \
  do {                                                                    \
    auto goblin_r_ = (expr);                                              \
    if (!goblin_r_) return std::unexpected(std::move(goblin_r_.error())); \
  } while (0)

// Same, prefixing the error with context (GCC 12's std::expected has no transform_error).
#define GOBLIN_RETURN_IF_ERROR_CTX(expr, context)                                   \
  do {                                                                              \
    auto goblin_r_ = (expr);                                                        \
    if (!goblin_r_) return std::unexpected(goblin_r_.error().WithContext(context)); \
  } while (0)

// Assigns the value of a Result<T> expression to `lhs`, or returns its error.
#define GOBLIN_CONCAT_INNER_(a, b) a##b
#define GOBLIN_CONCAT_(a, b) GOBLIN_CONCAT_INNER_(a, b)
#define GOBLIN_ASSIGN_OR_RETURN(lhs, expr) \
  GOBLIN_ASSIGN_OR_RETURN_IMPL_(GOBLIN_CONCAT_(goblin_r_, __LINE__), lhs, expr)
#define GOBLIN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr)       \
  auto tmp = (expr);                                        \
  if (!tmp) return std::unexpected(std::move(tmp.error())); \
  lhs = std::move(*tmp)

template <>
struct fmt::formatter<goblin::Status> : fmt::formatter<std::string> {
  auto format(const goblin::Status& s, format_context& ctx) const {
    return fmt::formatter<std::string>::format(s.ToString(), ctx);
  }
};
