#include "goblin/admin/inspect.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/scratch.h"

namespace goblin::admin {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

TEST(Inspect, ParsesNumaMapsLines) {
  auto m = ParseNumaMapsLine(
      "7f3a00000000 bind:1 file=/memfd:goblin-head-pool\\040(deleted) dirty=512 N1=500 N0=12 "
      "kernelpagesize_kB=4");
  EXPECT_EQ(m.policy, "bind:1");
  EXPECT_EQ(m.file, "/memfd:goblin-head-pool (deleted)");
  ASSERT_EQ(m.pages.size(), 2u);
  EXPECT_EQ(m.pages[0], (std::pair<int, uint64_t>{1, 500}));
  EXPECT_EQ(m.total_pages, 512u);
  EXPECT_FALSE(m.huge);
  auto h = ParseNumaMapsLine("7f00 prefer:0 file=/memfd:goblin-head-pool huge dirty=8 N0=8");
  EXPECT_TRUE(h.huge);
  EXPECT_EQ(ParseNumaMapsLine("55d0 default heap anon=3 N0=3").file, "[heap]");
  EXPECT_TRUE(ParseNumaMapsLine("garbage").policy.empty());
}

TEST(Inspect, ReadsThisProcessThreadsAndRings) {
  auto t = ReadThreads("/proc/self");
  ASSERT_TRUE(t) << t.error().ToString();
  ASSERT_FALSE(t->empty());
  EXPECT_EQ(t->front().tid, getpid());
  EXPECT_FALSE(t->front().allowed_cpus.empty());
  EXPECT_GE(t->front().last_cpu, 0);
  EXPECT_TRUE(ReadIoUrings("/proc/self").empty());
}

// A fake machine: two nodes, an HCA on node 1 whose interrupts go to node 0's CPUs, a NIC
// and an NVMe controller on node 0.
class FakeMachine : public testing::Test {
 protected:
  void SetUp() override {
    root_ = test::ScratchDir("inspect", /*create=*/true);
    sys_ = root_ / "sys";
    proc_ = root_ / "proc";
    Pci("0000:81:00.0", 1, {90, 91});
    Pci("0000:01:00.0", 0, {40});
    Pci("0000:02:00.0", 0, {50});
    Link(sys_ / "class/infiniband/mlx5_0/device", "0000:81:00.0");
    Write(sys_ / "class/infiniband/mlx5_0/ports/1/link_layer", "InfiniBand\n");
    Write(sys_ / "class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
    Link(sys_ / "class/net/ib0/device", "0000:81:00.0");
    Link(sys_ / "class/net/eth0/device", "0000:01:00.0");
    Write(sys_ / "class/net/eth0/mtu", "9000\n");
    fs::create_directories(sys_ / "class/net/lo");  // no device: virtual, skipped
    Link(sys_ / "class/nvme/nvme0/device", "0000:02:00.0");
    Write(sys_ / "class/nvme/nvme0/model", "Fast NVMe\n");
    for (int irq : {90, 91})
      Write(proc_ / "irq" / std::to_string(irq) / "effective_affinity_list", "0\n");
    Write(proc_ / "irq/40/smp_affinity_list", "0-1\n");
    Write(proc_ / "irq/50/effective_affinity_list", "4\n");
    // The process: one thread on node 0 CPUs, one allowed everywhere.
    Thread(100, "goblin-core", "0-1", 1);
    Thread(101, "grpc", "0-7", 6);
    Write(proc_ / "pid/numa_maps",
          "7f00 bind:0 file=/memfd:goblin-head-pool\\040(deleted) N0=100\n"
          "7f10 default file=/memfd:goblin-io-buffers\\040(deleted) N0=10 N1=5\n");
    fs::create_directories(proc_ / "pid/fd");
  }
  void TearDown() override { fs::remove_all(root_); }
  void Pci(const std::string& addr, int node, std::vector<int> irqs) {
    fs::path d = sys_ / "devices/pci0000:00" / addr;
    Write(d / "numa_node", std::to_string(node) + "\n");
    for (int i : irqs) Write(d / "msi_irqs" / std::to_string(i), "msix\n");
  }
  void Link(const fs::path& link, const std::string& addr) {
    fs::create_directories(link.parent_path());
    fs::create_directory_symlink(sys_ / "devices/pci0000:00" / addr, link);
  }
  void Thread(int tid, const std::string& name, const std::string& cpus, int last) {
    fs::path t = proc_ / "pid/task" / std::to_string(tid);
    Write(t / "comm", name + "\n");
    Write(t / "status", "Name:\t" + name + "\nCpus_allowed_list:\t" + cpus + "\n");
    std::string stat = std::to_string(tid) + " (" + name + " x) S";
    for (int f = 4; f <= 38; ++f) stat += " 0";
    stat += " " + std::to_string(last) + " 0 0\n";
    Write(t / "stat", stat);
  }
  AuditInput Input(int node, std::vector<int> cpus) {
    AuditInput in;
    in.node = node;
    in.node_cpus = std::move(cpus);
    in.pool_backing = "HugeTLB 2 MiB pages";
    in.pool_hugetlb = true;
    in.pool_locked = true;
    in.pool_page_nodes = {{node < 0 ? 0 : node, 64}};
    in.memfds = {"goblin-head-pool", "goblin-io-buffers"};
    in.proc_pid = (proc_ / "pid").string();
    in.proc_root = proc_.string();
    in.sysfs_root = sys_.string();
    return in;
  }
  static std::map<std::string, AuditLine> ByName(const std::vector<AuditLine>& lines) {
    std::map<std::string, AuditLine> m;
    for (const auto& l : lines) m[l.name] = l;
    return m;
  }
  fs::path root_, sys_, proc_;
};

TEST_F(FakeMachine, DevicesCarryTheirNodeAndInterrupts) {
  auto devs = ReadDevices(sys_.string());
  std::map<std::string, DeviceInfo> by;
  for (const auto& d : devs) by[d.name] = d;
  ASSERT_EQ(by.size(), 4u);  // mlx5_0, ib0, eth0, nvme0 (not lo)
  EXPECT_EQ(by["mlx5_0"].kind, "infiniband");
  EXPECT_EQ(by["mlx5_0"].numa_node, 1);
  EXPECT_EQ(by["mlx5_0"].pci_address, "0000:81:00.0");
  EXPECT_EQ(by["mlx5_0"].irqs, (std::vector<int>{90, 91}));
  EXPECT_NE(by["mlx5_0"].detail.find("ACTIVE"), std::string::npos);
  EXPECT_EQ(by["eth0"].numa_node, 0);
  EXPECT_EQ(by["nvme0"].detail, "Fast NVMe");
  EXPECT_EQ(IrqCpus(40, proc_.string()).value(), (std::vector<int>{0, 1}));
  EXPECT_FALSE(IrqCpus(77, proc_.string()));
}

TEST_F(FakeMachine, AuditFailsWhatIsOffTheNodeWithEvidence) {
  auto m = ByName(RunAudit(Input(0, {0, 1, 2, 3})));
  EXPECT_EQ(m["threads.allowed_cpus"].result, CheckResult::kFail);
  EXPECT_NE(m["threads.allowed_cpus"].evidence.find("101 grpc allowed 0-7"), std::string::npos)
      << m["threads.allowed_cpus"].evidence;
  EXPECT_EQ(m["threads.last_cpu"].result, CheckResult::kFail);  // CPU 6
  EXPECT_EQ(m["pool.hugetlb"].result, CheckResult::kPass);
  EXPECT_EQ(m["pool.pages_on_node"].result, CheckResult::kPass);
  EXPECT_EQ(m["memory.policy"].result, CheckResult::kFail);  // io buffers: 5 pages on N1
  EXPECT_NE(m["memory.policy"].evidence.find("goblin-head-pool: bind:0 N0=100"), std::string::npos)
      << m["memory.policy"].evidence;
  EXPECT_EQ(m["devices.node"].result, CheckResult::kFail);  // the HCA is on node 1
  EXPECT_EQ(m["irq.affinity"].result, CheckResult::kFail);  // nvme0's irq 50 -> CPU 4
  EXPECT_NE(m["irq.affinity"].evidence.find("nvme0 irq 50 -> CPUs 4"), std::string::npos);
  EXPECT_EQ(m["io_uring.placement"].result, CheckResult::kPass);

  // On node 1 with the HCA: its interrupts go to node 0's CPU 0 -> FAIL.
  auto n1 = ByName(RunAudit(Input(1, {4, 5, 6, 7})));
  EXPECT_EQ(n1["irq.affinity"].result, CheckResult::kFail);
  EXPECT_EQ(n1["devices.node"].result, CheckResult::kFail);  // nvme0 is on node 0
}

TEST_F(FakeMachine, WithoutANodeTheNodeChecksSkipAndThePoolStillCounts) {
  auto in = Input(-1, {});
  in.pool_hugetlb = false;
  in.pool_backing = "transparent huge pages";
  auto m = ByName(RunAudit(in));
  for (const char* n : {"threads.allowed_cpus", "pool.pages_on_node", "memory.policy",
                        "io_uring.placement", "devices.node", "irq.affinity"}) {
    EXPECT_EQ(m[n].result, CheckResult::kSkip) << n;
  }
  EXPECT_EQ(m["pool.hugetlb"].result, CheckResult::kFail);
  EXPECT_NE(m["pool.hugetlb"].evidence.find("transparent huge pages"), std::string::npos);
}

}  // namespace
}  // namespace goblin::admin
