// CPU and NUMA topology of this machine, read from the kernel (sysfs, libnuma), with a
// single-node fallback where the kernel has no NUMA support. Probing is a slow-path call
// (reads files); the returned Topology is a plain value. Thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "goblin/common/status.h"

namespace goblin {

struct NumaNode {
  int id = 0;
  std::vector<int> cpus;         // online CPUs of this node
  uint64_t mem_total_bytes = 0;  // from nodeN/meminfo (or /proc/meminfo without NUMA)
  uint64_t mem_free_bytes = 0;
  uint64_t hugepages_2m_total = 0;  // HugeTLB 2 MiB pages reserved on this node
  uint64_t hugepages_2m_free = 0;
  std::vector<int> distances;  // SLIT distances to every node, in node order
};

struct Topology {
  bool numa_available = false;  // kernel NUMA support and libnuma present
  std::vector<NumaNode> nodes;  // ascending ids; at least one
  std::vector<int> online_cpus;
  std::vector<int> allowed_cpus;  // this process's affinity mask at probe time

  const NumaNode* Node(int id) const;
  // -1 when the CPU is not online.
  int NodeOfCpu(int cpu) const;
  // One line per node, for logs and --help-like output.
  std::string Describe() const;
};

// Reads the topology from the running kernel. `sysfs_root` lets tests point at a fake tree.
Result<Topology> ProbeTopology(std::string_view sysfs_root = "/sys");

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}. Errors on garbage and reversed ranges.
Result<std::vector<int>> ParseCpuList(std::string_view text);
std::string FormatCpuList(std::span<const int> cpus);

// Binds the memory policy of [addr, addr + len) to NUMA node `node` before its pages are first
// touched: strict (MPOL_BIND, pages never leave the node) or preferred (MPOL_PREFERRED).
// node < 0, or a kernel without NUMA: nothing to do.
VoidResult BindMemoryToNode(void* addr, size_t len, int node, bool strict);

// Sets the calling thread's affinity to exactly these CPUs.
VoidResult PinCurrentThread(std::span<const int> cpus);
// The calling thread's current affinity.
Result<std::vector<int>> CurrentThreadAffinity();

}  // namespace goblin
