// /sys -> Graph, for builds without hwloc (or when hwloc fails): NUMA domains and their
// cores, and the PCI path of every GPU and NIC, read from where the kernel links each device
// (devices/pci0000:17/0000:17:01.0/0000:18:00.0: host bridge, bridges, device). NVLink is
// not visible here.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "topology/discover.h"
#include "topology/pci.h"

namespace loom::topo {

namespace fs = std::filesystem;

namespace {

std::string readLine(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

unsigned readHex(const fs::path& file) {
  std::string text = readLine(file);
  return text.empty() ? 0 : static_cast<unsigned>(std::stoul(text, nullptr, 16));
}

// "0-3,8,10-11" -> 0 1 2 3 8 10 11
std::vector<int> parseCpuList(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    if (item.empty()) continue;
    size_t dash = item.find('-');
    int first = std::stoi(item.substr(0, dash));
    int last = dash == std::string::npos ? first : std::stoi(item.substr(dash + 1));
    for (int c = first; c <= last; ++c) cpus.push_back(c);
  }
  return cpus;
}

// "32768K" -> bytes
size_t parseSize(const std::string& text) {
  if (text.empty()) return 0;
  size_t value = std::stoull(text);
  switch (text.back()) {
    case 'K': return value << 10;
    case 'M': return value << 20;
    case 'G': return value << 30;
    default: return value;
  }
}

std::vector<fs::path> sortedEntries(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string firstEntryName(const fs::path& dir) {
  std::vector<fs::path> entries = sortedEntries(dir, "");
  return entries.empty() ? "" : entries.front().filename().string();
}

// A PCIe link's GB/s from current_link_speed ("16.0 GT/s PCIe") and current_link_width.
double linkGbps(const fs::path& device) {
  std::string speed = readLine(device / "current_link_speed");
  std::string width = readLine(device / "current_link_width");
  if (speed.empty() || width.empty()) return 0;
  try {
    return pcieGbps(std::stod(speed), std::stoi(width));
  } catch (const std::exception&) {
    return 0;  // "Unknown" on virtual devices
  }
}

class SysfsBuilder {
 public:
  SysfsBuilder(const fs::path& root, Graph* graph) : root_(root), graph_(graph) {}

  Status build() {
    addCpus();
    if (graph_->all(NodeKind::kCpu).empty()) {
      return error(loomSystemError, "topology: %s shows no CPUs (is /sys mounted?)", root_.c_str());
    }
    connectCpus(graph_, kDefaultSmpGbps);
    for (const fs::path& device : sortedEntries(root_ / "bus/pci/devices", "")) addDevice(device);
    for (const auto& [bridge, widest] : hostBridgeWidth_) {
      graph_->connect(graph_->node(bridge).cpu, bridge, LinkKind::kPcie, widest > 0 ? widest : kDefaultPcieGbps,
                      kPcieLatencyUs);
    }
    std::vector<int> gpus = graph_->all(NodeKind::kGpu);  // in bus order: the ordinals
    for (size_t i = 0; i < gpus.size(); ++i) {
      graph_->node(gpus[i]).index = static_cast<int>(i);
      graph_->node(gpus[i]).name = "gpu" + std::to_string(i);
    }
    return Status::ok();
  }

 private:
  fs::path cpuDir(int cpu) const { return root_ / "devices/system/cpu" / ("cpu" + std::to_string(cpu)); }

  void addCpus() {
    std::vector<fs::path> numaDirs = sortedEntries(root_ / "devices/system/node", "node");
    numaDirs.erase(std::remove_if(numaDirs.begin(), numaDirs.end(),
                                  [](const fs::path& p) { return !std::isdigit(p.filename().string()[4]); }),
                   numaDirs.end());
    if (numaDirs.empty()) {
      addCpu(0, parseCpuList(readLine(root_ / "devices/system/cpu/online")), 0);
      return;
    }
    for (const fs::path& dir : numaDirs) {
      int numa = std::stoi(dir.filename().string().substr(4));
      std::vector<int> cpus = parseCpuList(readLine(dir / "cpulist"));
      // addCpu skips a memory-only domain (CXL, HBM): it runs no rank.
      size_t memory = 0;
      std::ifstream meminfo(dir / "meminfo");
      for (std::string line; std::getline(meminfo, line);) {
        size_t at = line.find("MemTotal:");
        if (at != std::string::npos) memory = std::stoull(line.substr(at + 9)) << 10;
      }
      addCpu(numa, cpus, memory);
    }
  }

  void addCpu(int numa, const std::vector<int>& cpus, size_t memory) {
    if (cpus.empty()) return;
    Node node;
    node.kind = NodeKind::kCpu;
    node.index = numa;
    node.name = "cpu" + std::to_string(numa);
    node.memoryBytes = memory;
    node.cpuList = cpus;
    std::set<std::pair<std::string, std::string>> cores;
    for (int c : cpus) {
      cores.insert({readLine(cpuDir(c) / "topology/physical_package_id"), readLine(cpuDir(c) / "topology/core_id")});
    }
    node.cores = static_cast<int>(cores.size());
    std::string package = readLine(cpuDir(cpus.front()) / "topology/physical_package_id");
    node.socket = package.empty() ? 0 : std::stoi(package);
    for (const fs::path& cache : sortedEntries(cpuDir(cpus.front()) / "cache", "index")) {
      if (readLine(cache / "type") == "Instruction") continue;
      node.cacheBytes = std::max(node.cacheBytes, parseSize(readLine(cache / "size")));
    }
    graph_->add(node);
  }

  int localCpu(const fs::path& device) {
    std::string numa = readLine(device / "numa_node");
    int cpu = numa.empty() ? -1 : graph_->cpuByNuma(std::stoi(numa));
    return cpu >= 0 ? cpu : graph_->all(NodeKind::kCpu).front();
  }

  void addDevice(const fs::path& link) {
    unsigned classId = readHex(link / "class") >> 8;
    PciRole role = pciRole(readHex(link / "vendor"), classId);
    if (role != PciRole::kGpu && role != PciRole::kNic) return;
    std::error_code ec;
    fs::path real = fs::canonical(link, ec);
    if (ec) return;
    // The components from the host bridge ("pci0000:17") down to the device.
    std::vector<std::string> chain;
    for (const fs::path& part : real) {
      std::string name = part.string();
      if (name.rfind("pci", 0) == 0 && name.find(':') != std::string::npos) chain.clear();
      chain.push_back(name);
    }
    if (chain.empty() || chain.front().rfind("pci", 0) != 0) return;
    int cpu = localCpu(link);
    int parent = hostBridge(chain.front(), cpu);
    int bridgeNode = parent;
    double firstGbps = 0;
    fs::path devices = root_ / "bus/pci/devices";
    for (size_t i = 1; i + 1 < chain.size(); ++i) {
      std::string key = readLine(devices / chain[i] / "vendor") + readLine(devices / chain[i] / "device");
      // Downstream ports of a switch are the switch: one node per run of the same part.
      bool downstreamPort = i > 1 && key == readLine(devices / chain[i - 1] / "vendor") +
                                                  readLine(devices / chain[i - 1] / "device");
      double gbps = linkGbps(devices / chain[i]);
      if (i == 1) firstGbps = gbps;
      if (downstreamPort) continue;
      auto found = switches_.find(chain[i]);
      if (found == switches_.end()) {
        Node node;
        node.kind = NodeKind::kPciSwitch;
        node.name = "switch " + chain[i];
        node.busId = chain[i];
        node.cpu = cpu;
        int id = graph_->add(node);
        graph_->connect(bridgeNode, id, LinkKind::kPcie, gbps > 0 ? gbps : kDefaultPcieGbps, kPcieLatencyUs);
        found = switches_.emplace(chain[i], id).first;
      }
      bridgeNode = found->second;
    }
    Node node;
    node.busId = chain.back();
    node.cpu = cpu;
    node.model = readLine(link / "vendor") + ":" + readLine(link / "device");
    if (role == PciRole::kGpu) {
      node.kind = NodeKind::kGpu;
    } else {
      node.kind = NodeKind::kNic;
      std::string netName = firstEntryName(link / "net");
      std::string rdmaName = firstEntryName(link / "infiniband");
      // A copied tree (tests) describes another machine, which ibverbs cannot see.
      node.portGbps = root_ == "/sys" ? livePortGbps(netName, rdmaName) : sysfsPortGbps(root_.string(), netName, rdmaName);
      node.name = !rdmaName.empty() ? rdmaName : !netName.empty() ? netName : "nic " + node.busId;
      if (!netName.empty()) node.model = netName;
    }
    double gbps = linkGbps(link);
    if (gbps <= 0) gbps = kDefaultPcieGbps;
    graph_->connect(bridgeNode, graph_->add(node), LinkKind::kPcie, gbps, kPcieLatencyUs);
    double& widest = hostBridgeWidth_[parent];
    widest = std::max({widest, gbps, firstGbps});
  }

  int hostBridge(const std::string& name, int cpu) {
    auto found = hostBridges_.find(name);
    if (found != hostBridges_.end()) return found->second;
    Node node;
    node.kind = NodeKind::kHostBridge;
    node.name = "hostbridge " + name.substr(3);
    node.cpu = cpu;
    int id = graph_->add(node);
    hostBridges_[name] = id;
    hostBridgeWidth_[id] = 0;
    return id;
  }

  fs::path root_;
  Graph* graph_;
  std::map<std::string, int> hostBridges_;
  std::map<int, double> hostBridgeWidth_;
  std::map<std::string, int> switches_;
};

}  // namespace

Status discoverSysfs(const std::string& root, Graph* out) {
  *out = Graph();
  return SysfsBuilder(root, out).build();
}

}  // namespace loom::topo
