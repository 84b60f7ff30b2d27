#include "goblin/common/topology.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace goblin {
namespace {

namespace fs = std::filesystem;

TEST(CpuList, ParseAndFormat) {
  EXPECT_EQ(ParseCpuList("0-3,8,10-11").value(), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(ParseCpuList("5\n").value(), (std::vector<int>{5}));
  EXPECT_EQ(ParseCpuList("").value(), std::vector<int>{});
  EXPECT_EQ(ParseCpuList("3,1,1-2").value(), (std::vector<int>{1, 2, 3}));
  EXPECT_FALSE(ParseCpuList("3-1"));
  EXPECT_FALSE(ParseCpuList("a"));
  EXPECT_FALSE(ParseCpuList("1-"));
  EXPECT_FALSE(ParseCpuList("1-2-3"));
  EXPECT_FALSE(ParseCpuList("-1"));
  std::vector<int> cpus{0, 1, 2, 3, 8, 10, 11};
  EXPECT_EQ(FormatCpuList(cpus), "0-3,8,10-11");
  EXPECT_EQ(FormatCpuList(std::vector<int>{}), "");
}

// On this machine: the probe sees every online CPU, each on exactly one node, and the
// nodes' CPUs add up to the online set.
TEST(Topology, ProbesThisMachine) {
  auto topo = ProbeTopology();
  ASSERT_TRUE(topo) << topo.error().ToString();
  EXPECT_FALSE(topo->nodes.empty());
  EXPECT_EQ(static_cast<long>(topo->online_cpus.size()), sysconf(_SC_NPROCESSORS_ONLN));
  size_t total = 0;
  for (const auto& n : topo->nodes) {
    total += n.cpus.size();
    EXPECT_GT(n.mem_total_bytes, 0u) << "node " << n.id;
    EXPECT_LE(n.mem_free_bytes, n.mem_total_bytes);
    EXPECT_LE(n.hugepages_2m_free, n.hugepages_2m_total);
  }
  EXPECT_EQ(total, topo->online_cpus.size());
  for (int c : topo->online_cpus) EXPECT_GE(topo->NodeOfCpu(c), 0) << "cpu " << c;
  EXPECT_EQ(topo->NodeOfCpu(100000), -1);
  EXPECT_FALSE(topo->allowed_cpus.empty());
  EXPECT_NE(topo->Node(topo->nodes[0].id), nullptr);
  EXPECT_EQ(topo->Node(9999), nullptr);
  EXPECT_NE(topo->Describe().find("node"), std::string::npos);
}

// A fake two-node sysfs tree: the probe reads cpus, memory, hugepages and distances.
TEST(Topology, ReadsATwoNodeTree) {
  fs::path root = fs::temp_directory_path() / ("goblin-topo-" + std::to_string(getpid()));
  fs::remove_all(root);
  auto write = [&](const fs::path& rel, const std::string& text) {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text;
  };
  write("devices/system/cpu/online", "0-3\n");
  write("devices/system/node/node0/cpulist", "0-1\n");
  write("devices/system/node/node1/cpulist", "2-3\n");
  write("devices/system/node/node0/meminfo",
        "Node 0 MemTotal:       1024 kB\nNode 0 MemFree:        512 kB\n");
  write("devices/system/node/node1/meminfo",
        "Node 1 MemTotal:       2048 kB\nNode 1 MemFree:        1024 kB\n");
  write("devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages", "32768\n");
  write("devices/system/node/node1/hugepages/hugepages-2048kB/free_hugepages", "100\n");
  write("devices/system/node/node0/distance", "10 21\n");
  write("devices/system/node/node1/distance", "21 10\n");
  write("devices/system/node/online", "0-1\n");  // not a node directory: ignored

  auto topo = ProbeTopology(root.string());
  fs::remove_all(root);
  ASSERT_TRUE(topo) << topo.error().ToString();
  ASSERT_TRUE(topo->numa_available);
  ASSERT_EQ(topo->nodes.size(), 2u);
  EXPECT_EQ(topo->nodes[1].id, 1);
  EXPECT_EQ(topo->nodes[1].cpus, (std::vector<int>{2, 3}));
  EXPECT_EQ(topo->nodes[1].mem_total_bytes, 2048u * 1024);
  EXPECT_EQ(topo->nodes[0].mem_free_bytes, 512u * 1024);
  EXPECT_EQ(topo->nodes[1].hugepages_2m_total, 32768u);
  EXPECT_EQ(topo->nodes[1].hugepages_2m_free, 100u);
  EXPECT_EQ(topo->nodes[0].hugepages_2m_total, 0u);
  EXPECT_EQ(topo->nodes[0].distances, (std::vector<int>{10, 21}));
  EXPECT_EQ(topo->NodeOfCpu(3), 1);
  EXPECT_EQ(topo->online_cpus.size(), 4u);
}

TEST(Topology, PinsTheCallingThread) {
  auto before = CurrentThreadAffinity();
  ASSERT_TRUE(before);
  ASSERT_FALSE(before->empty());
  int cpu = before->front();
  ASSERT_TRUE(PinCurrentThread(std::vector<int>{cpu}));
  EXPECT_EQ(CurrentThreadAffinity().value(), std::vector<int>{cpu});
  ASSERT_TRUE(PinCurrentThread(*before));
  EXPECT_EQ(CurrentThreadAffinity().value(), *before);
  EXPECT_FALSE(PinCurrentThread(std::vector<int>{}));
  EXPECT_FALSE(PinCurrentThread(std::vector<int>{-1}));
}

}  // namespace
}  // namespace goblin
