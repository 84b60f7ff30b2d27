#include "goblin/cluster/member.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace goblin::cluster {

std::string NormalizePrefix(std::string_view prefix) {
  while (prefix.ends_with('/')) prefix.remove_suffix(1);
  if (prefix.empty()) return "/goblin";
  return prefix.starts_with('/') ? std::string(prefix) : "/" + std::string(prefix);
}

std::string MembersPrefix(std::string_view prefix) { return NormalizePrefix(prefix) + "/cores/"; }

std::string MemberKey(std::string_view prefix, std::string_view name) {
  return MembersPrefix(prefix) + std::string(name);
}

std::string EncodeMember(const Member& m) {
  nlohmann::ordered_json j;
  j["address"] = m.address;
  j["shards"] = m.shards;
  j["capacity"] = m.capacity;
  j["zone"] = m.zone;
  j["pid"] = m.pid;
  j["version"] = m.version;
  j["started_unix_ms"] = m.started_unix_ms;
  if (!m.host.empty()) j["host"] = m.host;
  if (!m.ring.empty()) j["ring"] = m.ring;
  return j.dump();
}

Result<Member> DecodeMember(std::string_view name, std::string_view json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Err(StatusCode::kCorruption, "member '{}': not a JSON object", name);
  }
  Member m;
  m.name = std::string(name);
  auto str = [&](const char* k) {
    auto it = j.find(k);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto num = [&](const char* k) -> uint64_t {
    auto it = j.find(k);
    return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
  };
  m.address = str("address");
  m.zone = str("zone");
  m.version = str("version");
  m.host = str("host");
  m.ring = str("ring");
  m.shards = static_cast<uint32_t>(std::clamp<uint64_t>(num("shards"), 1, 65535));
  m.capacity = num("capacity");
  m.pid = static_cast<uint32_t>(num("pid"));
  m.started_unix_ms = num("started_unix_ms");
  if (m.address.empty()) return Err(StatusCode::kCorruption, "member '{}': no address", name);
  return m;
}

std::string ThisHostName() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) return {};
  return host;
}

std::string LocalRingPath(const Member& m) {
  if (m.ring.empty() || m.host.empty() || m.host != ThisHostName()) return {};
  struct stat st {};
  if (stat(m.ring.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return {};
  return m.ring;
}

double MemberWeight(const Member& m) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return std::max(1.0, static_cast<double>(m.capacity) / kGiB);
}

}  // namespace goblin::cluster
