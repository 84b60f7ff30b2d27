#include "goblin/admin/inspect.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "goblin/common/file.h"
#include "goblin/common/topology.h"

namespace goblin::admin {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const fs::path& p) { return ReadFile(p).value_or(""); }
std::string ReadLine(const fs::path& p) { return ReadFirstLine(p); }

int ReadInt(const fs::path& p, int fallback) {
  std::string s = ReadLine(p);
  try {
    return s.empty() ? fallback : std::stoi(s);
  } catch (...) {
    return fallback;
  }
}

std::vector<std::string> Tokens(std::string_view s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n')) ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t' && s[j] != '\n') ++j;
    if (j > i) out.emplace_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

bool IsPciAddress(const std::string& name) {
  static const std::regex re("^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\\.[0-7]$");
  return std::regex_match(name, re);
}

// The PCI function a device hangs off (walking up its sysfs path), or "" if none.
fs::path PciAncestor(const fs::path& device_link) {
  std::error_code ec;
  fs::path p = fs::canonical(device_link, ec);
  if (ec) return {};
  for (; !p.empty() && p != p.root_path(); p = p.parent_path()) {
    if (IsPciAddress(p.filename().string())) return p;
  }
  return {};
}

bool Subset(const std::vector<int>& cpus, const std::vector<int>& of) {
  return std::all_of(cpus.begin(), cpus.end(),
                     [&](int c) { return std::find(of.begin(), of.end(), c) != of.end(); });
}

std::string PagesText(const std::vector<std::pair<int, uint64_t>>& pages) {
  std::vector<std::string> parts;
  for (auto [n, c] : pages) parts.push_back(fmt::format("N{}={}", n, c));
  return parts.empty() ? "no pages" : fmt::format("{}", fmt::join(parts, " "));
}

}  // namespace

Result<std::vector<ThreadPlacement>> ReadThreads(const std::string& proc_pid) {
  std::vector<ThreadPlacement> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(proc_pid) / "task", ec)) {
    ThreadPlacement t;
    try {
      t.tid = std::stoi(e.path().filename().string());
    } catch (...) {
      continue;
    }
    t.name = ReadLine(e.path() / "comm");
    std::istringstream status(ReadAll(e.path() / "status"));
    for (std::string line; std::getline(status, line);) {
      if (line.starts_with("Cpus_allowed_list:")) {
        auto toks = Tokens(line.substr(18));
        if (!toks.empty()) {
          if (auto l = ParseCpuList(toks[0])) t.allowed_cpus = *l;
        }
      }
    }
    std::string stat = ReadAll(e.path() / "stat");
    size_t close = stat.rfind(')');
    if (close != std::string::npos) {
      auto f = Tokens(std::string_view(stat).substr(close + 1));  // f[0] is field 3
      if (f.size() > 36) t.last_cpu = std::atoi(f[36].c_str());   // field 39: processor
    }
    out.push_back(std::move(t));
  }
  if (ec) return Err(ErrnoStatus("reading " + proc_pid + "/task", ec.value()));
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.tid < b.tid; });
  return out;
}

MappingPlacement ParseNumaMapsLine(std::string_view line) {
  MappingPlacement m;
  auto t = Tokens(line);
  if (t.size() < 2) return m;
  m.policy = t[1];
  m.file = "[anon]";
  for (size_t i = 2; i < t.size(); ++i) {
    const std::string& k = t[i];
    if (k.starts_with("file=")) {
      std::string f = k.substr(5);
      // The kernel escapes blanks as \040 (and may continue the name in the next token).
      for (size_t p; (p = f.find("\\040")) != std::string::npos;) f.replace(p, 4, " ");
      m.file = f;
    } else if (k == "heap" || k == "stack") {
      m.file = "[" + k + "]";
    } else if (k == "huge") {
      m.huge = true;
    } else if (k.size() > 2 && k[0] == 'N' && std::isdigit(static_cast<unsigned char>(k[1]))) {
      size_t eq = k.find('=');
      if (eq == std::string::npos) continue;
      int node = std::atoi(k.substr(1, eq - 1).c_str());
      uint64_t pages = std::strtoull(k.c_str() + eq + 1, nullptr, 10);
      m.pages.emplace_back(node, pages);
      m.total_pages += pages;
    } else if (!k.empty() && k[0] == '(' && m.file != "[anon]") {
      m.file += " " + k;  // "(deleted)" after an escaped blank
    }
  }
  return m;
}

Result<std::vector<MappingPlacement>> ReadNumaMaps(const std::string& proc_pid) {
  std::ifstream f(proc_pid + "/numa_maps");
  if (!f) return Err(StatusCode::kUnavailable, "{}/numa_maps: not readable (no NUMA)", proc_pid);
  std::vector<MappingPlacement> out;
  for (std::string line; std::getline(f, line);) {
    MappingPlacement m = ParseNumaMapsLine(line);
    if (!m.policy.empty()) out.push_back(std::move(m));
  }
  return out;
}

std::vector<UringInstance> ReadIoUrings(const std::string& proc_pid) {
  std::vector<UringInstance> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(proc_pid) / "fd", ec)) {
    std::error_code lec;
    if (fs::read_symlink(e.path(), lec).string() != "anon_inode:[io_uring]") continue;
    UringInstance u;
    u.fd = std::atoi(e.path().filename().c_str());
    std::istringstream info(ReadAll(fs::path(proc_pid) / "fdinfo" / e.path().filename()));
    for (std::string line; std::getline(info, line);) {
      auto t = Tokens(line);
      if (t.size() < 2) continue;
      if (t[0] == "SqThread:") u.sq_thread_pid = std::atoi(t[1].c_str());
      if (t[0] == "SqThreadCpu:") u.sq_thread_cpu = std::atoi(t[1].c_str());
    }
    out.push_back(u);
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.fd < b.fd; });
  return out;
}

std::vector<DeviceInfo> ReadDevices(const std::string& sysfs_root) {
  std::vector<DeviceInfo> out;
  auto add = [&](const fs::path& entry, std::string kind, std::string detail) {
    fs::path dev = entry / "device";
    std::error_code ec;
    if (!fs::exists(dev, ec)) return;  // virtual: lo, bridges, loop, zram
    DeviceInfo d;
    d.name = entry.filename().string();
    d.kind = std::move(kind);
    d.detail = std::move(detail);
    fs::path pci = PciAncestor(dev);
    if (!pci.empty()) {
      d.pci_address = pci.filename().string();
      d.numa_node = ReadInt(pci / "numa_node", -1);
      for (const auto& irq : fs::directory_iterator(pci / "msi_irqs", ec)) {
        d.irqs.push_back(std::atoi(irq.path().filename().c_str()));
      }
      std::sort(d.irqs.begin(), d.irqs.end());
    } else {
      d.numa_node = ReadInt(dev / "numa_node", -1);
    }
    out.push_back(std::move(d));
  };
  std::error_code ec;
  fs::path root(sysfs_root);
  for (const auto& e : fs::directory_iterator(root / "class/infiniband", ec)) {
    std::string detail = fmt::format("port 1: {} {}", ReadLine(e.path() / "ports/1/link_layer"),
                                     ReadLine(e.path() / "ports/1/state"));
    add(e.path(), "infiniband", detail);
  }
  for (const auto& e : fs::directory_iterator(root / "class/net", ec)) {
    add(e.path(), "net",
        fmt::format("mtu {}, {}", ReadLine(e.path() / "mtu"), ReadLine(e.path() / "operstate")));
  }
  for (const auto& e : fs::directory_iterator(root / "class/nvme", ec)) {
    add(e.path(), "nvme", ReadLine(e.path() / "model"));
  }
  for (const auto& e : fs::directory_iterator(root / "block", ec)) {
    std::string name = e.path().filename().string();
    if (name.starts_with("nvme")) continue;  // listed as its controller
    uint64_t sectors = std::strtoull(ReadLine(e.path() / "size").c_str(), nullptr, 10);
    add(e.path(), "block", fmt::format("{} GiB", sectors * 512 / (1ull << 30)));
  }
  std::sort(out.begin(), out.end(),
            [](auto& a, auto& b) { return std::tie(a.kind, a.name) < std::tie(b.kind, b.name); });
  return out;
}

Result<std::vector<int>> IrqCpus(int irq, const std::string& proc_root) {
  for (const char* f : {"effective_affinity_list", "smp_affinity_list"}) {
    std::string line = ReadLine(fmt::format("{}/irq/{}/{}", proc_root, irq, f));
    if (!line.empty()) return ParseCpuList(line);
  }
  return Err(StatusCode::kNotFound, "irq {}: no affinity in {}/irq", irq, proc_root);
}

std::vector<AuditLine> RunAudit(const AuditInput& in) {
  std::vector<AuditLine> out;
  const bool node = in.node >= 0;
  const std::string cpus = FormatCpuList(in.node_cpus);
  auto line = [&](std::string name, CheckResult r, std::string evidence) {
    out.push_back({std::move(name), r, std::move(evidence)});
  };
  auto skip_no_node = [&](std::string name, std::string evidence) {
    line(std::move(name), CheckResult::kSkip,
         "no --numa node requested" + (evidence.empty() ? "" : "; " + evidence));
  };

  // Threads: allowed CPUs and the CPU each last ran on.
  auto threads = ReadThreads(in.proc_pid);
  if (!threads) {
    line("threads.allowed_cpus", CheckResult::kFail, threads.error().ToString());
  } else {
    std::vector<std::string> bad_allowed, bad_last, all;
    for (const auto& t : *threads) {
      std::string desc = fmt::format("{} {} allowed {} last {}", t.tid, t.name,
                                     FormatCpuList(t.allowed_cpus), t.last_cpu);
      all.push_back(desc);
      if (node && !Subset(t.allowed_cpus, in.node_cpus)) bad_allowed.push_back(desc);
      if (node && !Subset({t.last_cpu}, in.node_cpus)) bad_last.push_back(desc);
    }
    if (!node) {
      skip_no_node("threads.allowed_cpus", fmt::format("{}", fmt::join(all, "; ")));
      skip_no_node("threads.last_cpu", "");
    } else {
      line("threads.allowed_cpus", bad_allowed.empty() ? CheckResult::kPass : CheckResult::kFail,
           bad_allowed.empty() ? fmt::format("{} threads, all allowed only node {} CPUs {}",
                                             threads->size(), in.node, cpus)
                               : fmt::format("outside node {} CPUs {}: {}", in.node, cpus,
                                             fmt::join(bad_allowed, "; ")));
      line("threads.last_cpu", bad_last.empty() ? CheckResult::kPass : CheckResult::kFail,
           bad_last.empty()
               ? fmt::format("{} threads, all last ran on node {} CPUs {}", threads->size(),
                             in.node, cpus)
               : fmt::format("last ran outside node {}: {}", in.node, fmt::join(bad_last, "; ")));
    }
  }

  // The head pool.
  line("pool.hugetlb", in.pool_hugetlb ? CheckResult::kPass : CheckResult::kFail,
       in.pool_hugetlb ? "backed by HugeTLB 2 MiB pages"
                       : fmt::format("backed by {}: reserve 2 MiB HugeTLB pages on the node "
                                     "(nodeN/hugepages/hugepages-2048kB/nr_hugepages) and "
                                     "start with --hugepages on",
                                     in.pool_backing));
  line("pool.locked", in.pool_locked ? CheckResult::kPass : CheckResult::kFail,
       in.pool_locked ? "mlocked" : "not locked (RLIMIT_MEMLOCK too low?): pages may be swapped");
  {
    std::string ev = "pages by node (one sampled per block): " + PagesText(in.pool_page_nodes);
    if (!node) {
      skip_no_node("pool.pages_on_node", ev);
    } else {
      bool ok = !in.pool_page_nodes.empty() &&
                std::all_of(in.pool_page_nodes.begin(), in.pool_page_nodes.end(),
                            [&](auto& p) { return p.first == in.node || p.second == 0; });
      line("pool.pages_on_node", ok ? CheckResult::kPass : CheckResult::kFail, ev);
    }
  }

  // Memory policy and placement of the core's shared mappings.
  {
    auto maps = ReadNumaMaps(in.proc_pid);
    std::vector<std::string> ev;
    bool ok = true;
    if (!maps) {
      line("memory.policy", node ? CheckResult::kFail : CheckResult::kSkip, maps.error().message());
    } else {
      for (const std::string& name : in.memfds) {
        uint64_t total = 0, off_node = 0;
        std::set<std::string> policies;
        std::map<int, uint64_t> by_node;
        for (const auto& m : *maps) {
          if (m.file.find(name) == std::string::npos) continue;
          policies.insert(m.policy);
          for (auto [n, c] : m.pages) {
            by_node[n] += c;
            total += c;
            if (n != in.node) off_node += c;
          }
        }
        if (policies.empty()) {
          ev.push_back(name + ": not mapped");
          continue;
        }
        std::vector<std::pair<int, uint64_t>> pages(by_node.begin(), by_node.end());
        ev.push_back(fmt::format("{}: {} {}", name, fmt::join(policies, ","), PagesText(pages)));
        if (node && off_node > 0) ok = false;
      }
      if (!node) {
        skip_no_node("memory.policy", fmt::format("{}", fmt::join(ev, "; ")));
      } else {
        line("memory.policy", ok ? CheckResult::kPass : CheckResult::kFail,
             fmt::format("{}", fmt::join(ev, "; ")));
      }
    }
  }

  // io_uring instances: how many, and where their SQPOLL threads (if any) run.
  {
    auto rings = ReadIoUrings(in.proc_pid);
    std::vector<std::string> ev;
    bool ok = true;
    for (const auto& u : rings) {
      if (u.sq_thread_pid > 0) {
        ev.push_back(fmt::format("fd {}: SQPOLL thread {} on CPU {}", u.fd, u.sq_thread_pid,
                                 u.sq_thread_cpu));
        if (node && !Subset({u.sq_thread_cpu}, in.node_cpus)) ok = false;
      } else {
        ev.push_back(fmt::format("fd {}: no SQPOLL thread (submitted by the loop)", u.fd));
      }
    }
    std::string text = fmt::format("{} instance(s){}{}", rings.size(), rings.empty() ? "" : ": ",
                                   fmt::join(ev, "; "));
    if (!node) {
      skip_no_node("io_uring.placement", text);
    } else {
      line("io_uring.placement", ok ? CheckResult::kPass : CheckResult::kFail, text);
    }
  }

  // Devices: the HCAs and storage the core uses should sit on its node, their interrupts
  // delivered to its CPUs.
  {
    auto devices = ReadDevices(in.sysfs_root);
    std::vector<std::string> where, irq_bad, irq_ok;
    bool wrong_node = false;
    for (const auto& d : devices) {
      where.push_back(fmt::format("{} {} node {}", d.kind, d.name, d.numa_node));
      if (!node) continue;
      if ((d.kind == "infiniband" || d.kind == "nvme") && d.numa_node >= 0 &&
          d.numa_node != in.node) {
        wrong_node = true;
      }
      if (d.numa_node != in.node) continue;
      for (int irq : d.irqs) {
        auto c = IrqCpus(irq, in.proc_root);
        if (!c) continue;
        std::string desc = fmt::format("{} irq {} -> CPUs {}", d.name, irq, FormatCpuList(*c));
        (Subset(*c, in.node_cpus) ? irq_ok : irq_bad).push_back(desc);
      }
    }
    std::string where_text =
        where.empty() ? "no devices found" : fmt::format("{}", fmt::join(where, "; "));
    if (!node) {
      skip_no_node("devices.node", where_text);
      skip_no_node("irq.affinity", "");
    } else {
      line("devices.node", wrong_node ? CheckResult::kFail : CheckResult::kPass,
           (wrong_node ? "an HCA or NVMe controller is on another node: " : "") + where_text);
      if (irq_ok.empty() && irq_bad.empty()) {
        line("irq.affinity", CheckResult::kSkip,
             fmt::format("no device with interrupts reports node {}", in.node));
      } else {
        line("irq.affinity", irq_bad.empty() ? CheckResult::kPass : CheckResult::kFail,
             irq_bad.empty()
                 ? fmt::format("{} interrupts on node {} CPUs {}", irq_ok.size(), in.node, cpus)
                 : fmt::format(
                       "delivered outside node {} CPUs {}: {} (bench/pin_pci_irqs_to_numa.sh)",
                       in.node, cpus, fmt::join(irq_bad, "; ")));
      }
    }
  }
  return out;
}

}  // namespace goblin::admin
