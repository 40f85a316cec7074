// What the hwloc and /sys discoveries share: which PCI devices Loom cares about, PCIe link
// bandwidth, NIC port speed from ibverbs and /sys, and the CPUs' all-to-all interconnect.
#pragma once

#include <string>

#include "topology/graph.h"

namespace loom::topo {

enum class PciRole : uint8_t { kOther, kGpu, kNic, kNvSwitch };

// By PCI vendor and class (0x0302: "3D controller"); only NVIDIA GPUs, which CUDA can drive.
PciRole pciRole(unsigned vendor, unsigned classId);

// GB/s each way of a PCIe link, after line encoding (8b/10b up to 5 GT/s, 128b/130b above),
// as hwloc reports it: 16 GT/s x16 -> 31.5.
double pcieGbps(double gigaTransfersPerSecond, int width);

// "0000:18:00.0"
std::string busIdString(unsigned domain, unsigned bus, unsigned device, unsigned function);

// Port speed in Gbit/s of the network device `netName` (/sys/class/net/NAME/speed) or of the
// first port of the RDMA device `rdmaName` (/sys/class/infiniband/NAME/ports/1/rate); 0 when
// neither says (a link that is down reports no speed).
double sysfsPortGbps(const std::string& sysRoot, const std::string& netName, const std::string& rdmaName);

// The same on the machine this runs on, asking ibverbs (ibverbs_ports.h) first for an RDMA
// device and /sys where it has no answer.
double livePortGbps(const std::string& netName, const std::string& rdmaName);

// Joins every pair of CPU nodes with an SMP link of `gbps` (the CPUs' interconnect).
void connectCpus(Graph* graph, double gbps);

// The node every NVSwitch of the host is merged into (created on first use): ring and tree
// search only need to know that all GPUs attached to it reach each other at their own
// NVLink bandwidth.
int nvswitchNode(Graph* graph);

}  // namespace loom::topo
