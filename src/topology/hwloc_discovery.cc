// hwloc -> Graph. hwloc drops I/O objects unless asked, so the I/O filter keeps them all;
// NVLink comes from the "NVLinkBandwidth" distance matrix that hwloc's NVML backend writes
// (and the fixtures carry), port speeds from Loom's "LoomPortGbps" attribute or /sys.
#include <hwloc.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "topology/discover.h"
#include "topology/hwloc_discovery.h"
#include "topology/pci.h"

namespace loom::topo {

namespace {

class HwlocTopology {
 public:
  HwlocTopology() { hwloc_topology_init(&topology_); }
  ~HwlocTopology() { hwloc_topology_destroy(topology_); }
  HwlocTopology(const HwlocTopology&) = delete;
  HwlocTopology& operator=(const HwlocTopology&) = delete;

  // `xmlPath` empty: the live machine.
  Status load(const std::string& xmlPath) {
    hwloc_topology_set_io_types_filter(topology_, HWLOC_TYPE_FILTER_KEEP_ALL);
    // hwloc's Linux backend reads the PCI tree from sysfs itself; the libpciaccess plugin
    // finds the same devices but leaves allocations behind when hwloc unloads it. The
    // others start vendor runtimes (an OpenCL ICD loader, a CUDA context, an X display)
    // for devices already seen on the bus, which costs seconds at init.
    for (const char* component : {"pci", "opencl", "gl", "cuda", "rsmi", "levelzero"}) {
      hwloc_topology_set_components(topology_, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, component);
    }
    if (!xmlPath.empty() && hwloc_topology_set_xml(topology_, xmlPath.c_str()) != 0) {
      return error(loomInvalidArgument, "topology file %s: hwloc cannot read it as XML (%s)",
                   xmlPath.c_str(), std::strerror(errno));
    }
    if (hwloc_topology_load(topology_) != 0) {
      return error(loomSystemError, "hwloc could not load %s: %s",
                   xmlPath.empty() ? "this machine's topology" : xmlPath.c_str(), std::strerror(errno));
    }
    return Status::ok();
  }

  hwloc_topology_t get() const { return topology_; }

 private:
  hwloc_topology_t topology_ = nullptr;
};

std::string info(hwloc_obj_t obj, const char* name) {
  const char* value = obj ? hwloc_obj_get_info_by_name(obj, name) : nullptr;
  return value ? value : "";
}

double infoNumber(hwloc_obj_t obj, const char* name) {
  std::string text = info(obj, name);
  return text.empty() ? 0 : std::strtod(text.c_str(), nullptr);
}

bool isHostBridge(hwloc_obj_t obj) {
  return obj->type == HWLOC_OBJ_BRIDGE && obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
}

bool isPciBridge(hwloc_obj_t obj) {
  return obj->type == HWLOC_OBJ_BRIDGE && obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI;
}

std::string busId(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci) {
  return busIdString(pci.domain, pci.bus, pci.dev, pci.func);
}

// A bandwidth hwloc did not fill in (0) becomes the typical figure.
double orDefault(double gbps) { return gbps > 0 ? gbps : kDefaultPcieGbps; }

class Builder {
 public:
  Builder(hwloc_topology_t topology, Graph* graph, bool live)
      : topology_(topology), graph_(graph), live_(live) {}

  void build() {
    hwloc_obj_t machine = hwloc_get_root_obj(topology_);
    graph_->host = info(machine, "HostName");
    if (graph_->host.empty() && live_) {
      char name[256] = {};
      gethostname(name, sizeof(name) - 1);
      graph_->host = name;
    }
    addCpus();
    double smp = infoNumber(machine, "LoomSmpGBps");
    connectCpus(graph_, smp > 0 ? smp : kDefaultSmpGbps);
    // PCI trees hang below the non-I/O object (package, group, machine) they are local to,
    // usually from a host bridge, on some systems straight from a switch or device.
    for (hwloc_obj_type_t type : {HWLOC_OBJ_BRIDGE, HWLOC_OBJ_PCI_DEVICE}) {
      for (hwloc_obj_t obj = nullptr; (obj = hwloc_get_next_obj_by_type(topology_, type, obj));) {
        if (hwloc_obj_type_is_io(obj->parent->type)) continue;
        if (isHostBridge(obj)) {
          addHostBridge(obj);
        } else {
          addPciTree(obj, localCpu(obj));
        }
      }
    }
    numberGpus();
    addNvlinks();
  }

 private:
  void addCpus() {
    for (hwloc_obj_t numa = nullptr; (numa = hwloc_get_next_obj_by_type(topology_, HWLOC_OBJ_NUMANODE, numa));) {
      Node cpu;
      cpu.kind = NodeKind::kCpu;
      cpu.index = static_cast<int>(numa->os_index);
      cpu.name = "cpu" + std::to_string(numa->os_index);
      hwloc_obj_t package = hwloc_get_ancestor_obj_by_type(topology_, HWLOC_OBJ_PACKAGE, numa);
      cpu.socket = package ? static_cast<int>(package->os_index) : 0;
      cpu.model = info(package, "CPUModel");
      cpu.memoryBytes = numa->attr->numanode.local_memory;
      cpu.cores = hwloc_get_nbobjs_inside_cpuset_by_type(topology_, numa->cpuset, HWLOC_OBJ_CORE);
      for (int pu = hwloc_bitmap_first(numa->cpuset); pu >= 0; pu = hwloc_bitmap_next(numa->cpuset, pu)) {
        cpu.cpuList.push_back(pu);
      }
      // The last-level cache above the domain's first core.
      hwloc_obj_t pu = hwloc_get_obj_inside_cpuset_by_type(topology_, numa->cpuset, HWLOC_OBJ_PU, 0);
      for (hwloc_obj_t up = pu; up; up = up->parent) {
        if (hwloc_obj_type_is_dcache(up->type)) cpu.cacheBytes = std::max<size_t>(cpu.cacheBytes, up->attr->cache.size);
      }
      graph_->add(cpu);
    }
  }

  // The CPU node an I/O object is local to: the first NUMA domain of its non-I/O ancestor.
  int localCpu(hwloc_obj_t obj) {
    hwloc_obj_t anchor = hwloc_get_non_io_ancestor_obj(topology_, obj);
    int numa = anchor && anchor->nodeset ? hwloc_bitmap_first(anchor->nodeset) : -1;
    int cpu = graph_->cpuByNuma(numa);
    return cpu >= 0 ? cpu : graph_->all(NodeKind::kCpu).front();
  }

  void addHostBridge(hwloc_obj_t bridge) {
    int cpu = localCpu(bridge);
    Node node;
    node.kind = NodeKind::kHostBridge;
    node.name = "hostbridge " + busIdString(bridge->attr->bridge.downstream.pci.domain,
                                            bridge->attr->bridge.downstream.pci.secondary_bus, 0, 0).substr(0, 7);
    node.cpu = cpu;
    int id = graph_->add(node);
    // The root complex is as wide as the widest link below it.
    double widest = 0;
    for (hwloc_obj_t child = bridge->io_first_child; child; child = child->next_sibling) {
      widest = std::max(widest, addPciTree(child, id));
    }
    graph_->connect(cpu, id, LinkKind::kPcie, orDefault(widest), kPcieLatencyUs);
  }

  // Adds `obj` and what is below it under graph node `parent`; returns the bandwidth of the
  // link `obj` has towards its parent (0 when nothing of interest was added).
  double addPciTree(hwloc_obj_t obj, int parent) {
    int cpu = graph_->node(parent).kind == NodeKind::kCpu ? parent : graph_->node(parent).cpu;
    if (isPciBridge(obj)) {
      const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci = obj->attr->bridge.upstream.pci;
      // A switch shows as its upstream port with one bridge per downstream port, all of the
      // same part: the downstream ports are the switch itself.
      hwloc_obj_t up = obj->parent;
      bool downstreamPort = up && isPciBridge(up) && up->attr->bridge.upstream.pci.vendor_id == pci.vendor_id &&
                            up->attr->bridge.upstream.pci.device_id == pci.device_id;
      int id = parent;
      if (!downstreamPort) {
        Node node;
        node.kind = NodeKind::kPciSwitch;
        node.name = "switch " + busId(pci);
        node.busId = busId(pci);
        node.cpu = cpu;
        id = graph_->add(node);
      }
      bool any = false;
      for (hwloc_obj_t child = obj->io_first_child; child; child = child->next_sibling) {
        any = addPciTree(child, id) > 0 || any;
      }
      double gbps = orDefault(pci.linkspeed);
      if (!downstreamPort) graph_->connect(parent, id, LinkKind::kPcie, gbps, kPcieLatencyUs);
      return any ? gbps : 0;
    }
    if (obj->type != HWLOC_OBJ_PCI_DEVICE) return 0;
    const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci = obj->attr->pcidev;
    PciRole role = pciRole(pci.vendor_id, pci.class_id);
    if (role == PciRole::kOther) return 0;
    if (role == PciRole::kNvSwitch) {
      nvswitchDevices_.push_back(obj);
      return 0;
    }
    Node node;
    node.busId = busId(pci);
    node.cpu = cpu;
    node.model = info(obj, "PCIDevice");
    std::string netName, rdmaName;
    for (hwloc_obj_t os = obj->io_first_child; os; os = os->next_sibling) {
      if (os->type != HWLOC_OBJ_OS_DEVICE || !os->name) continue;
      switch (os->attr->osdev.type) {
        case HWLOC_OBJ_OSDEV_COPROC:
          if (std::strncmp(os->name, "cuda", 4) == 0) node.index = std::atoi(os->name + 4);
          if (!info(os, "GPUModel").empty()) node.model = info(os, "GPUModel");
          node.memoryBytes = static_cast<size_t>(infoNumber(os, "CUDAGlobalMemorySize")) * 1024;
          break;
        case HWLOC_OBJ_OSDEV_GPU:
          if (!info(os, "GPUModel").empty()) node.model = info(os, "GPUModel");
          break;
        case HWLOC_OBJ_OSDEV_OPENFABRICS: rdmaName = os->name; break;
        case HWLOC_OBJ_OSDEV_NETWORK: netName = os->name; break;
        default: break;
      }
    }
    if (role == PciRole::kGpu) {
      node.kind = NodeKind::kGpu;
    } else {
      node.kind = NodeKind::kNic;
      node.portGbps = infoNumber(obj, "LoomPortGbps");
      if (node.portGbps == 0 && live_) node.portGbps = livePortGbps(netName, rdmaName);
      if (!netName.empty()) node.model = netName;
      node.name = !rdmaName.empty() ? rdmaName : !netName.empty() ? netName : "nic " + node.busId;
    }
    int id = graph_->add(node);
    pciNodes_[obj] = id;
    double gbps = orDefault(pci.linkspeed);
    graph_->connect(parent, id, LinkKind::kPcie, gbps, kPcieLatencyUs);
    return gbps;
  }

  // GPUs without a CUDA OS device (hwloc built without its CUDA plugin) take ordinals in PCI
  // bus order, the order CUDA_DEVICE_ORDER=PCI_BUS_ID gives.
  void numberGpus() {
    std::vector<int> gpus = graph_->all(NodeKind::kGpu);
    std::sort(gpus.begin(), gpus.end(), [&](int a, int b) { return graph_->node(a).busId < graph_->node(b).busId; });
    bool known = std::all_of(gpus.begin(), gpus.end(), [&](int g) { return graph_->node(g).index >= 0; });
    for (size_t i = 0; i < gpus.size(); ++i) {
      Node& gpu = graph_->node(gpus[i]);
      if (!known) gpu.index = static_cast<int>(i);
      gpu.name = "gpu" + std::to_string(gpu.index);
    }
  }

  // The GPU node of a matrix object: a GPU OS device or its PCI device.
  int gpuOf(hwloc_obj_t obj) {
    if (obj->type == HWLOC_OBJ_OS_DEVICE) obj = obj->parent;
    auto found = pciNodes_.find(obj);
    return found == pciNodes_.end() || graph_->node(found->second).kind != NodeKind::kGpu ? -1 : found->second;
  }

  bool isNvswitch(hwloc_obj_t obj) {
    return std::find(nvswitchDevices_.begin(), nvswitchDevices_.end(), obj) != nvswitchDevices_.end();
  }

  void addNvlinks() {
    unsigned count = 1;
    hwloc_distances_s* matrix = nullptr;
    if (hwloc_distances_get_by_name(topology_, "NVLinkBandwidth", &count, &matrix, 0) != 0 || count == 0) return;
    unsigned n = matrix->nbobjs;
    std::map<int, double> toSwitch;  // GPU -> MB/s summed over all NVSwitches
    for (unsigned i = 0; i < n; ++i) {
      for (unsigned j = 0; j < n; ++j) {
        double mbps = static_cast<double>(matrix->values[i * n + j]);
        if (i == j || mbps <= 0) continue;
        int a = gpuOf(matrix->objs[i]);
        if (a < 0) continue;
        int b = gpuOf(matrix->objs[j]);
        if (b > a) {
          connectNvlink(a, b, mbps / 1000);
        } else if (b < 0 && isNvswitch(matrix->objs[j])) {
          toSwitch[a] += mbps;
        }
      }
    }
    hwloc_distances_release(topology_, matrix);
    for (const auto& [gpu, mbps] : toSwitch) connectNvlink(gpu, nvswitchNode(graph_), mbps / 1000);
  }

  void connectNvlink(int a, int b, double gbps) {
    int lanes = std::max(1, static_cast<int>(std::lround(gbps / kNvlinkLaneGbps)));
    graph_->connect(a, b, LinkKind::kNvlink, gbps, kNvlinkLatencyUs, lanes);
  }

  hwloc_topology_t topology_;
  Graph* graph_;
  bool live_;
  std::map<hwloc_obj_t, int> pciNodes_;
  std::vector<hwloc_obj_t> nvswitchDevices_;
};

}  // namespace

Status loadXml(const std::string& path, Graph* out) {
  HwlocTopology topology;
  LOOM_TRY(topology.load(path));
  *out = Graph();
  Builder(topology.get(), out, false).build();
  return Status::ok();
}

Status hwlocLive(Graph* out) {
  HwlocTopology topology;
  LOOM_TRY(topology.load(""));
  *out = Graph();
  Builder(topology.get(), out, true).build();
  return Status::ok();
}

Status dumpXml(const std::string& path) {
  HwlocTopology topology;
  LOOM_TRY(topology.load(""));
  if (hwloc_topology_export_xml(topology.get(), path.c_str(), 0) != 0) {
    return error(loomSystemError, "LOOM_TOPO_DUMP_FILE=%s: hwloc could not write it (%s)", path.c_str(),
                 std::strerror(errno));
  }
  return Status::ok();
}

}  // namespace loom::topo
