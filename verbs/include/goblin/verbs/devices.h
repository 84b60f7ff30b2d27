// The verbs device inventory: every RDMA device libibverbs sees (InfiniBand HCAs, RoCE NICs,
// Soft-RoCE), its ports (state, link layer, MTU, rate, LID, GIDs) and the NUMA node its PCI
// function sits on (sysfs). goblin-core logs it at start and uses it to choose
// UCX_NET_DEVICES on its --numa node when the operator did not; the admin API reports it.
// Threading: none (plain functions; each call opens and closes the devices it queries).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "goblin/common/status.h"

namespace goblin::verbs {

struct VerbsPort {
  uint32_t number = 0;
  std::string state;        // "ACTIVE", "DOWN", "INIT", ...
  std::string link_layer;   // "InfiniBand" or "Ethernet" (RoCE)
  uint32_t active_mtu = 0;  // bytes
  std::string rate;         // sysfs, e.g. "100 Gb/sec (4X EDR)"
  uint32_t lid = 0;
  std::vector<std::string> gids;  // the non-zero entries of the GID table
};

struct VerbsDevice {
  std::string name;       // "mlx5_0", "rxe0"
  std::string node_guid;  // "0c42:a103:0065:7e4a"
  std::string transport;  // "InfiniBand", "iWARP", ...
  int numa_node = -1;     // -1: unknown or a one-node machine
  std::vector<VerbsPort> ports;
};

// Every device libibverbs lists (none, not an error, when the kernel has no RDMA support).
// `sysfs` is the root the NUMA node and port rate are read from.
Result<std::vector<VerbsDevice>> ListVerbsDevices(const std::string& sysfs = "/sys");

// "dev:port,dev:port" for the ACTIVE ports of devices on `numa_node` (all nodes if it is
// -1, and devices of unknown node count everywhere); empty when there is none.
std::string UcxNetDevicesFor(const std::vector<VerbsDevice>& devices, int numa_node);

// One line per port for logs: "mlx5_0:1 ACTIVE InfiniBand mtu 4096 100 Gb/sec node 0".
std::string DescribeDevices(const std::vector<VerbsDevice>& devices);

}  // namespace goblin::verbs
