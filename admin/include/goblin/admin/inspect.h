// What the kernel says about where goblin-core lives: its threads' allowed and last CPUs,
// the NUMA policy and page placement of its mappings (numa_maps), its io_uring instances,
// the machine's devices with their NUMA node and interrupts, and the placement audit built
// from them (the checks of bench/audit_process_numa.sh, callable live). Every reader takes
// the /proc or /sys root so tests can point it at a fake tree. Slow path: reads files.
// Threading: pure functions over the file system; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "goblin/common/status.h"

namespace goblin::admin {

struct ThreadPlacement {
  int tid = 0;
  std::string name;
  std::vector<int> allowed_cpus;
  int last_cpu = -1;
};
// Every thread of the process at `proc_pid` (e.g. "/proc/self").
Result<std::vector<ThreadPlacement>> ReadThreads(const std::string& proc_pid);

struct MappingPlacement {
  std::string file;    // the mapped file ("/memfd:goblin-head-pool (deleted)"), or "[anon]"
  std::string policy;  // "default", "bind:0", "prefer:1", "interleave:0-1"...
  std::vector<std::pair<int, uint64_t>> pages;  // {node, pages}
  uint64_t total_pages = 0;
  bool huge = false;  // HugeTLB pages
};
// One line of /proc/PID/numa_maps; nullopt-like empty `policy` for lines that do not parse.
MappingPlacement ParseNumaMapsLine(std::string_view line);
Result<std::vector<MappingPlacement>> ReadNumaMaps(const std::string& proc_pid);

struct UringInstance {
  int fd = -1;
  int sq_thread_pid = -1;  // SQPOLL thread (-1: none)
  int sq_thread_cpu = -1;
};
std::vector<UringInstance> ReadIoUrings(const std::string& proc_pid);

struct DeviceInfo {
  std::string name;  // mlx5_0, eth0, nvme0, sda
  std::string kind;  // "infiniband", "net", "nvme", "block"
  int numa_node = -1;
  std::string pci_address;  // "" when not a PCI device
  std::string detail;
  std::vector<int> irqs;  // MSI/MSI-X interrupts of its PCI function
};
// InfiniBand HCAs, network interfaces, NVMe controllers and disks that have a device (not
// loopback, bridges or other virtual interfaces).
std::vector<DeviceInfo> ReadDevices(const std::string& sysfs_root = "/sys");
// The CPUs interrupt `irq` is delivered to (effective affinity if the kernel reports it).
Result<std::vector<int>> IrqCpus(int irq, const std::string& proc_root = "/proc");

enum class CheckResult { kPass, kFail, kSkip };
struct AuditLine {
  std::string name;
  CheckResult result = CheckResult::kSkip;
  std::string evidence;
};
struct AuditInput {
  int node = -1;               // the node the core should live on (-1: none requested)
  std::vector<int> node_cpus;  // that node's CPUs
  std::string pool_backing;    // store::BackingName
  bool pool_hugetlb = false;
  bool pool_locked = false;
  std::vector<std::pair<int, uint64_t>> pool_page_nodes;
  std::vector<std::string> memfds;  // names of the core's shared mappings to check
  std::string proc_pid = "/proc/self";
  std::string proc_root = "/proc";
  std::string sysfs_root = "/sys";
};
std::vector<AuditLine> RunAudit(const AuditInput& in);

}  // namespace goblin::admin
