#include "goblin/common/file.h"

#include <fstream>
#include <sstream>

namespace goblin {

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Err(StatusCode::kNotFound, "cannot read {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string HostBootId() { return ReadFirstLine("/proc/sys/kernel/random/boot_id"); }

Result<std::string> ReadSecretFile(const std::string& path, std::string_view what) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) {
    return Err(StatusCode::kInvalidArgument, "{} {}: unreadable", what, path);
  }
  size_t first = line.find_first_not_of(" \t\r");
  size_t last = line.find_last_not_of(" \t\r");
  if (first == std::string::npos) {
    return Err(StatusCode::kInvalidArgument, "{} {}: no secret on its first line", what, path);
  }
  return line.substr(first, last - first + 1);
}

}  // namespace goblin
