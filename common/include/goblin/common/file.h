// Small reads of whole text files: sysfs/procfs attributes, secrets kept in files. Slow path
// (opens and reads the file every call).
// Threading: pure functions; thread-safe.
#pragma once

#include <string>

#include "goblin/common/status.h"

namespace goblin {

// The whole file; NotFound when it cannot be opened.
Result<std::string> ReadFile(const std::string& path);
// Its first line without the newline; "" when the file cannot be read (a missing sysfs
// attribute reads as empty).
std::string ReadFirstLine(const std::string& path);
// A secret (token, password) kept in a file: its first line, blanks trimmed. InvalidArgument
// naming `what` when the file is unreadable or the line is empty.
Result<std::string> ReadSecretFile(const std::string& path, std::string_view what);
// This boot of this host's kernel (/proc/sys/kernel/random/boot_id): two processes that read
// the same value run on one host; "" when unreadable.
std::string HostBootId();

}  // namespace goblin
