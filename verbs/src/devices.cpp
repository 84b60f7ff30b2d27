#include "goblin/verbs/devices.h"

#include "goblin/common/file.h"

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <cstring>

#include <fmt/format.h>

namespace goblin::verbs {
namespace {

std::string PortState(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT";
    case IBV_PORT_ARMED:
      return "ARMED";
    case IBV_PORT_ACTIVE_DEFER:
      return "ACTIVE_DEFER";
    default:
      return "NOP";
  }
}

uint32_t MtuBytes(ibv_mtu m) {
  switch (m) {
    case IBV_MTU_256:
      return 256;
    case IBV_MTU_512:
      return 512;
    case IBV_MTU_1024:
      return 1024;
    case IBV_MTU_2048:
      return 2048;
    case IBV_MTU_4096:
      return 4096;
  }
  return 0;
}

std::string FormatGid(const ibv_gid& g) {
  std::string out;
  for (int i = 0; i < 16; i += 2) {
    if (!out.empty()) out += ':';
    out += fmt::format("{:02x}{:02x}", g.raw[i], g.raw[i + 1]);
  }
  return out;
}

std::string FormatGuid(uint64_t be_guid) {
  uint64_t v = be64toh(be_guid);
  return fmt::format("{:04x}:{:04x}:{:04x}:{:04x}", (v >> 48) & 0xffff, (v >> 32) & 0xffff,
                     (v >> 16) & 0xffff, v & 0xffff);
}

}  // namespace

Result<std::vector<VerbsDevice>> ListVerbsDevices(const std::string& sysfs) {
  std::vector<VerbsDevice> out;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return out;  // no RDMA in this kernel (ENOSYS): nothing to list
  for (int i = 0; i < n; ++i) {
    VerbsDevice d;
    d.name = ibv_get_device_name(list[i]);
    d.node_guid = FormatGuid(ibv_get_device_guid(list[i]));
    d.transport = list[i]->transport_type == IBV_TRANSPORT_IWARP ? "iWARP" : "InfiniBand";
    std::string numa = ReadFirstLine(sysfs + "/class/infiniband/" + d.name + "/device/numa_node");
    if (!numa.empty()) d.numa_node = std::atoi(numa.c_str());
    ibv_context* ctx = ibv_open_device(list[i]);
    if (ctx != nullptr) {
      ibv_device_attr attr{};
      if (ibv_query_device(ctx, &attr) == 0) {
        for (uint32_t p = 1; p <= attr.phys_port_cnt; ++p) {
          ibv_port_attr pa{};
          if (ibv_query_port(ctx, static_cast<uint8_t>(p), &pa) != 0) continue;
          VerbsPort port;
          port.number = p;
          port.state = PortState(pa.state);
          port.link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
          port.active_mtu = MtuBytes(pa.active_mtu);
          port.lid = pa.lid;
          port.rate =
              ReadFirstLine(fmt::format("{}/class/infiniband/{}/ports/{}/rate", sysfs, d.name, p));
          for (int g = 0; g < pa.gid_tbl_len && port.gids.size() < 16; ++g) {
            ibv_gid gid{};
            if (ibv_query_gid(ctx, static_cast<uint8_t>(p), g, &gid) != 0) continue;
            bool zero = true;
            for (uint8_t b : gid.raw) zero &= b == 0;
            if (!zero) port.gids.push_back(FormatGid(gid));
          }
          d.ports.push_back(std::move(port));
        }
      }
      ibv_close_device(ctx);
    }
    out.push_back(std::move(d));
  }
  ibv_free_device_list(list);
  return out;
}

std::string UcxNetDevicesFor(const std::vector<VerbsDevice>& devices, int numa_node) {
  std::string out;
  for (const auto& d : devices) {
    if (numa_node >= 0 && d.numa_node >= 0 && d.numa_node != numa_node) continue;
    for (const auto& p : d.ports) {
      if (p.state != "ACTIVE") continue;
      if (!out.empty()) out += ',';
      out += fmt::format("{}:{}", d.name, p.number);
    }
  }
  return out;
}

std::string DescribeDevices(const std::vector<VerbsDevice>& devices) {
  if (devices.empty()) return "no RDMA devices";
  std::string out;
  for (const auto& d : devices) {
    for (const auto& p : d.ports) {
      if (!out.empty()) out += "; ";
      out += fmt::format("{}:{} {} {} mtu {}{}{} node {}", d.name, p.number, p.state, p.link_layer,
                         p.active_mtu, p.rate.empty() ? "" : " ", p.rate,
                         d.numa_node >= 0 ? std::to_string(d.numa_node) : std::string("?"));
    }
    if (d.ports.empty())
      out += fmt::format("{}{} (no ports readable)", out.empty() ? "" : "; ", d.name);
  }
  return out;
}

}  // namespace goblin::verbs
