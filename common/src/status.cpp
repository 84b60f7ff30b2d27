#include "goblin/common/status.h"

#include <cstring>

namespace goblin {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kAlreadyExists:
      return "already exists";
    case StatusCode::kOutOfRange:
      return "out of range";
    case StatusCode::kResourceExhausted:
      return "resource exhausted";
    case StatusCode::kFailedPrecondition:
      return "failed precondition";
    case StatusCode::kUnavailable:
      return "unavailable";
    case StatusCode::kTimeout:
      return "timeout";
    case StatusCode::kIoError:
      return "I/O error";
    case StatusCode::kCorruption:
      return "corruption";
    case StatusCode::kPermissionDenied:
      return "permission denied";
    case StatusCode::kUnimplemented:
      return "unimplemented";
    case StatusCode::kAborted:
      return "aborted";
    case StatusCode::kInternal:
      return "internal error";
  }
  return "unknown status";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string out(StatusCodeName(code_));
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

Status Status::WithContext(std::string_view context) const& {
  Status copy = *this;
  return std::move(copy).WithContext(context);
}

Status Status::WithContext(std::string_view context) && {
  if (ok()) return std::move(*this);
  message_ = fmt::format("{}: {}", context, message_);
  return std::move(*this);
}

Status ErrnoStatus(std::string_view what, int err) {
  char buf[128];
  const char* text = strerror_r(err, buf, sizeof buf);  // GNU variant returns the text
  StatusCode code = StatusCode::kIoError;
  switch (err) {
    case ENOENT:
      code = StatusCode::kNotFound;
      break;
    case EEXIST:
      code = StatusCode::kAlreadyExists;
      break;
    case EACCES:
    case EPERM:
      code = StatusCode::kPermissionDenied;
      break;
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      code = StatusCode::kResourceExhausted;
      break;
    case EINVAL:
      code = StatusCode::kInvalidArgument;
      break;
    case ETIMEDOUT:
      code = StatusCode::kTimeout;
      break;
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
    case ENOTCONN:
      code = StatusCode::kUnavailable;
      break;
    default:
      break;
  }
  return Status(code, fmt::format("{}: {}", what, text));
}

}  // namespace goblin
