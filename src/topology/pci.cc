// PCI devices, PCIe and NIC bandwidths, as both discoveries read them (pci.h).
#include "topology/pci.h"

#include <cstdio>
#include <fstream>

#include "topology/ibverbs_ports.h"

namespace loom::topo {

PciRole pciRole(unsigned vendor, unsigned classId) {
  constexpr unsigned kNvidia = 0x10de;
  unsigned base = classId >> 8;
  if (base == 0x02) return PciRole::kNic;  // any network controller: Ethernet, InfiniBand, Wi-Fi
  if (vendor != kNvidia) return PciRole::kOther;
  if (classId == 0x0300 || classId == 0x0302) return PciRole::kGpu;
  if (classId == 0x0680) return PciRole::kNvSwitch;
  return PciRole::kOther;
}

double pcieGbps(double gigaTransfersPerSecond, int width) {
  double encoding = gigaTransfersPerSecond > 5.1 ? 128.0 / 130.0 : 0.8;
  return gigaTransfersPerSecond * encoding * width / 8.0;
}

std::string busIdString(unsigned domain, unsigned bus, unsigned device, unsigned function) {
  char text[32];
  std::snprintf(text, sizeof(text), "%04x:%02x:%02x.%x", domain & 0xffffu, bus & 0xffu,
                device & 0x1fu, function & 0x7u);
  return text;
}

double sysfsPortGbps(const std::string& sysRoot, const std::string& netName, const std::string& rdmaName) {
  if (!rdmaName.empty()) {
    // "400 Gb/sec (4X NDR)"
    std::ifstream rate(sysRoot + "/class/infiniband/" + rdmaName + "/ports/1/rate");
    double gbps = 0;
    if (rate >> gbps && gbps > 0) return gbps;
  }
  if (!netName.empty()) {
    // Mbit/s; -1 when the link is down
    std::ifstream speed(sysRoot + "/class/net/" + netName + "/speed");
    long long mbps = 0;
    if (speed >> mbps && mbps > 0) return static_cast<double>(mbps) / 1000.0;
  }
  return 0;
}

void connectCpus(Graph* graph, double gbps) {
  std::vector<int> cpus = graph->all(NodeKind::kCpu);
  for (size_t i = 0; i < cpus.size(); ++i) {
    for (size_t j = i + 1; j < cpus.size(); ++j) {
      graph->connect(cpus[i], cpus[j], LinkKind::kSmp, gbps, kSmpLatencyUs);
    }
  }
}

double livePortGbps(const std::string& netName, const std::string& rdmaName) {
  const double gbps = rdmaName.empty() ? 0 : ibverbsPortGbps(rdmaName);
  return gbps > 0 ? gbps : sysfsPortGbps("/sys", netName, rdmaName);
}

int nvswitchNode(Graph* graph) {
  std::vector<int> existing = graph->all(NodeKind::kNvSwitch);
  if (!existing.empty()) return existing.front();
  Node nvswitch;
  nvswitch.kind = NodeKind::kNvSwitch;
  nvswitch.name = "nvswitch";
  return graph->add(nvswitch);
}

}  // namespace loom::topo
