#include "goblin/common/topology.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <sstream>

#include "goblin/common/config.h"
#include "goblin/common/file.h"
#if GOBLIN_HAVE_NUMA
#include <numa.h>
#endif

namespace goblin {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

uint64_t ReadUint(const std::string& path) {
  auto text = ReadFile(path);
  if (!text) return 0;
  std::string_view t = Trim(*text);
  uint64_t v = 0;
  std::from_chars(t.data(), t.data() + t.size(), v);
  return v;
}

// "Node 0 MemTotal:  4679076 kB" (node meminfo) or "MemTotal:  4679076 kB" (/proc/meminfo).
uint64_t MeminfoField(const std::string& text, std::string_view field) {
  size_t pos = text.find(field);
  if (pos == std::string::npos) return 0;
  pos += field.size();
  while (pos < text.size() && (text[pos] == ' ' || text[pos] == ':')) ++pos;
  uint64_t kb = 0;
  std::from_chars(text.data() + pos, text.data() + text.size(), kb);
  return kb * 1024;
}

std::vector<int> ListNodeIds(const std::string& node_dir) {
  std::vector<int> ids;
  DIR* d = opendir(node_dir.c_str());
  if (d == nullptr) return ids;
  while (dirent* e = readdir(d)) {
    std::string_view name = e->d_name;
    if (name.size() > 4 && name.substr(0, 4) == "node") {
      int id = 0;
      auto [p, ec] = std::from_chars(name.data() + 4, name.data() + name.size(), id);
      if (ec == std::errc() && p == name.data() + name.size()) ids.push_back(id);
    }
  }
  closedir(d);
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

const NumaNode* Topology::Node(int id) const {
  for (const auto& n : nodes) {
    if (n.id == id) return &n;
  }
  return nullptr;
}

int Topology::NodeOfCpu(int cpu) const {
  for (const auto& n : nodes) {
    if (std::find(n.cpus.begin(), n.cpus.end(), cpu) != n.cpus.end()) return n.id;
  }
  return -1;
}

std::string Topology::Describe() const {
  std::string out =
      fmt::format("numa={} online_cpus={} allowed_cpus={}", numa_available ? "yes" : "no",
                  FormatCpuList(online_cpus), FormatCpuList(allowed_cpus));
  for (const auto& n : nodes) {
    out += fmt::format("; node{}: cpus={} mem={}MiB free={}MiB hugepages_2m={}/{}", n.id,
                       FormatCpuList(n.cpus), n.mem_total_bytes >> 20, n.mem_free_bytes >> 20,
                       n.hugepages_2m_free, n.hugepages_2m_total);
  }
  return out;
}

Result<std::vector<int>> ParseCpuList(std::string_view text) {
  std::vector<int> cpus;
  text = Trim(text);
  if (text.empty()) return cpus;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view part = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    int lo = 0, hi = 0;
    auto [p1, e1] = std::from_chars(part.data(), part.data() + part.size(), lo);
    if (e1 != std::errc() || lo < 0) {
      return Err(StatusCode::kInvalidArgument, "bad CPU list element '{}'", part);
    }
    hi = lo;
    if (p1 != part.data() + part.size()) {
      if (*p1 != '-') return Err(StatusCode::kInvalidArgument, "bad CPU list element '{}'", part);
      auto [p2, e2] = std::from_chars(p1 + 1, part.data() + part.size(), hi);
      if (e2 != std::errc() || p2 != part.data() + part.size()) {
        return Err(StatusCode::kInvalidArgument, "bad CPU list element '{}'", part);
      }
      if (hi < lo) return Err(StatusCode::kInvalidArgument, "reversed CPU range '{}'", part);
    }
    if (hi > 65535) return Err(StatusCode::kOutOfRange, "CPU number '{}' too large", part);
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string FormatCpuList(std::span<const int> cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

Result<std::vector<int>> CurrentThreadAffinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (int rc = pthread_getaffinity_np(pthread_self(), sizeof set, &set); rc != 0) {
    return ErrnoErr("pthread_getaffinity_np", rc);
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

VoidResult PinCurrentThread(std::span<const int> cpus) {
  if (cpus.empty()) return Err(StatusCode::kInvalidArgument, "empty CPU set");
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c < 0 || c >= CPU_SETSIZE) return Err(StatusCode::kOutOfRange, "CPU {} out of range", c);
    CPU_SET(c, &set);
  }
  if (int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set); rc != 0) {
    return Err(ErrnoStatus(fmt::format("pin to CPUs {}", FormatCpuList(cpus)), rc));
  }
  return {};
}

Result<Topology> ProbeTopology(std::string_view sysfs_root) {
  Topology topo;
  const std::string root(sysfs_root);
  if (auto online = ReadFile(root + "/devices/system/cpu/online")) {
    GOBLIN_ASSIGN_OR_RETURN(topo.online_cpus, ParseCpuList(*online));
  }
  if (topo.online_cpus.empty()) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (int c = 0; c < n; ++c) topo.online_cpus.push_back(c);
  }
  if (auto allowed = CurrentThreadAffinity()) topo.allowed_cpus = std::move(*allowed);

  bool kernel_numa = false;
#if GOBLIN_HAVE_NUMA
  kernel_numa = sysfs_root == "/sys" ? numa_available() >= 0 : true;
#else
  kernel_numa = sysfs_root != "/sys";  // fake trees in tests describe NUMA through sysfs
#endif
  const std::string node_dir = root + "/devices/system/node";
  std::vector<int> ids = kernel_numa ? ListNodeIds(node_dir) : std::vector<int>{};
  topo.numa_available = kernel_numa && !ids.empty();

  if (!topo.numa_available) {
    NumaNode n;
    n.id = 0;
    n.cpus = topo.online_cpus;
    if (auto mi = ReadFile("/proc/meminfo")) {
      n.mem_total_bytes = MeminfoField(*mi, "MemTotal");
      n.mem_free_bytes = MeminfoField(*mi, "MemFree");
    }
    n.hugepages_2m_total = ReadUint(root + "/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages");
    n.hugepages_2m_free = ReadUint(root + "/kernel/mm/hugepages/hugepages-2048kB/free_hugepages");
    n.distances = {10};
    topo.nodes.push_back(std::move(n));
    return topo;
  }

  for (int id : ids) {
    NumaNode n;
    n.id = id;
    const std::string dir = fmt::format("{}/node{}", node_dir, id);
    if (auto cl = ReadFile(dir + "/cpulist")) {
      GOBLIN_ASSIGN_OR_RETURN(n.cpus, ParseCpuList(*cl));
    }
    if (auto mi = ReadFile(dir + "/meminfo")) {
      n.mem_total_bytes = MeminfoField(*mi, "MemTotal");
      n.mem_free_bytes = MeminfoField(*mi, "MemFree");
    }
    n.hugepages_2m_total = ReadUint(dir + "/hugepages/hugepages-2048kB/nr_hugepages");
    n.hugepages_2m_free = ReadUint(dir + "/hugepages/hugepages-2048kB/free_hugepages");
    if (auto dist = ReadFile(dir + "/distance")) {
      std::istringstream ds(*dist);
      int v;
      while (ds >> v) n.distances.push_back(v);
    }
    topo.nodes.push_back(std::move(n));
  }
  return topo;
}

VoidResult BindMemoryToNode(void* addr, size_t len, int node, bool strict) {
  if (node < 0) return {};
  constexpr int kMpolPreferred = 1, kMpolBind = 2;  // <linux/mempolicy.h>
  constexpr unsigned kMpolMfStrict = 1;
  unsigned long mask[16] = {};
  if (node >= static_cast<int>(sizeof(mask) * 8)) {
    return Err(StatusCode::kInvalidArgument, "NUMA node {} is beyond what we bind", node);
  }
  mask[node / 64] |= 1ul << (node % 64);
  long rc = syscall(SYS_mbind, addr, len, strict ? kMpolBind : kMpolPreferred, mask,
                    sizeof(mask) * 8, strict ? kMpolMfStrict : 0u);
  if (rc != 0 && errno != ENOSYS) {
    return Err(ErrnoStatus(fmt::format("mbind(node {})", node), errno));
  }
  return {};
}

}  // namespace goblin
