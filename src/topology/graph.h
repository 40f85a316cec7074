// One host's hardware as a graph: the CPUs (one node per NUMA domain), the PCI tree (host
// bridges and switches), GPUs, NICs and NVSwitches, joined by links that carry a bandwidth
// and a latency. Discovery (discover.h) builds it from hwloc, from an hwloc XML file or from
// /sys; rings and the tuner read it through paths between nodes.
//
//   cpu0 ===smp=== cpu1            cpu: a NUMA domain (its cores and memory)
//    |              |              | : PCIe, = : the CPUs' interconnect, ~ : NVLink
//   hostbridge0    hostbridge1
//    |              |
//   switch0        switch1
//    |     \        |     \        .
//   gpu0   nic0    gpu1   nic1
//     ~~~~~ nvswitch ~~~~~
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace loom::topo {

enum class NodeKind : uint8_t { kCpu, kHostBridge, kPciSwitch, kGpu, kNic, kNvSwitch };
enum class LinkKind : uint8_t { kSmp, kPcie, kNvlink };

struct Node {
  NodeKind kind = NodeKind::kCpu;
  std::string name;       // "cpu0", "gpu3", "mlx5_0", "switch 0000:17", "nvswitch0"
  int index = -1;         // cpu: NUMA node number; gpu: CUDA ordinal; else -1
  int socket = -1;        // cpu: package number
  int cpu = -1;           // every node: the cpu node (graph index) it is local to
  std::string busId;      // PCI devices: "0000:18:00.0"
  std::string model;      // GPU or CPU model, NIC device name ("ib0")
  double portGbps = 0;    // NIC: port speed in Gbit/s (0 unknown)
  size_t memoryBytes = 0; // cpu: local memory; gpu: device memory
  size_t cacheBytes = 0;  // cpu: last-level cache of one of its cores
  int cores = 0;          // cpu: physical cores
  std::vector<int> cpuList;  // cpu: its logical CPUs (OS numbers), for thread binding
};

struct Link {
  int a = -1, b = -1;
  LinkKind kind = LinkKind::kPcie;
  double gbps = 0;        // GB/s each way
  double latencyUs = 0;
  int lanes = 1;          // NVLink: links between the two ends
};

// nvidia-smi topo -m's vocabulary, from closest to farthest.
enum class PathType : uint8_t {
  kSelf,     // the same node
  kNvlink,   // NVLink, directly or through NVSwitches ("NV#")
  kPix,      // through at most one PCIe switch
  kPxb,      // through several PCIe switches, not the host bridge
  kPhb,      // through one host bridge
  kNode,     // through several host bridges of one NUMA domain
  kSys,      // across NUMA domains (the CPUs' interconnect)
};
const char* pathTypeName(PathType type);  // "X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS"

struct Path {
  PathType type = PathType::kSelf;
  double gbps = 0;        // the narrowest link on the way (infinite for kSelf: 0 means none)
  double latencyUs = 0;   // summed over the links
  int hops = 0;
  int nvlinks = 0;        // kNvlink: lanes of the narrowest NVLink hop
};

class Graph {
 public:
  std::string host;  // host name the graph describes

  int add(Node node);
  void connect(int a, int b, LinkKind kind, double gbps, double latencyUs, int lanes = 1);

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Link>& links() const { return links_; }
  const Node& node(int i) const { return nodes_[static_cast<size_t>(i)]; }
  Node& node(int i) { return nodes_[static_cast<size_t>(i)]; }
  // Graph indices of the nodes of a kind, in the order they were added.
  std::vector<int> all(NodeKind kind) const;
  int gpuByOrdinal(int ordinal) const;   // -1 if none
  int gpuByBusId(const std::string& busId) const;
  int cpuByNuma(int numa) const;

  // The widest path from a to b (greatest narrowest link; fewer hops on ties). NVLink is
  // preferred where it exists, as the hardware routes peer traffic over it.
  Path path(int a, int b) const;

  // Whether GPU a can read GPU b's memory directly (PCIe or NVLink peer-to-peer). Every pair
  // can unless discovery said otherwise (NVML's peer-to-peer status, nvml_probe.h).
  bool peerAccess(int a, int b) const;
  void denyPeerAccess(int a, int b);

 private:
  std::vector<Node> nodes_;
  std::vector<Link> links_;
  std::vector<std::pair<int, int>> noPeerAccess_;  // (lower, higher) graph indices
};

// Typical figures where discovery reads none (GB/s, µs); see docs/TOPOLOGY.md.
constexpr double kDefaultSmpGbps = 40;
constexpr double kDefaultPcieGbps = 24;       // gen4 x16 after protocol overhead
constexpr double kSmpLatencyUs = 0.2;
constexpr double kPcieLatencyUs = 1.0;
constexpr double kNvlinkLatencyUs = 0.7;
constexpr double kNvlinkLaneGbps = 25;        // NVLink 4, one link, each way

}  // namespace loom::topo
