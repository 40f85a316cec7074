// NVLink and peer-to-peer access on the live machine, from NVML (libnvidia-ml.so.1, loaded at run time so Loom runs
// where no NVIDIA driver is installed). Debian's hwloc has no NVML backend, so without this
// a live graph would know NVLink only from a LOOM_TOPO_FILE.
//
// NVML reports, for each GPU and each of its NVLink ports, whether the port is up and what is
// at its other end: another GPU (by PCI bus id) or an NVSwitch. The ports to one peer add up
// to one graph link whose lanes are the ports and whose bandwidth is ports x lane speed; the
// lane speed follows the GPU's generation, as NVML has no field for it that every driver fills.
#pragma once

#include <memory>
#include <string>

#include "topology/graph.h"

namespace loom::topo {

// What the graph needs from NVML, as an interface so that tests can stand in for machines
// they do not have.
class NvmlSource {
 public:
  // NVLink ports a GPU can have (NVML_NVLINK_MAX_LINKS of current drivers).
  static constexpr int kMaxPorts = 18;

  virtual ~NvmlSource() = default;
  virtual int gpuCount() = 0;
  // "0000:18:00.0" (busIdString's form); "" when NVML cannot say.
  virtual std::string busId(int gpu) = 0;
  // CUDA compute capability major (9 for Hopper); 0 when NVML cannot say.
  virtual int computeMajor(int gpu) = 0;
  // Whether port `port` of `gpu` is up; if so, its far end: a GPU's bus id, or *toSwitch.
  virtual bool remote(int gpu, int port, std::string* busId, bool* toSwitch) = 0;
  // Whether NVML knows if GPU a can read GPU b's memory directly; if so, *readable says.
  virtual bool peerRead(int a, int b, bool* readable) = 0;
};

// NVML, initialised; closed and unloaded when the source is destroyed. nullptr with *why
// set when the library is missing or NVML cannot start (no driver, no device).
std::unique_ptr<NvmlSource> openNvml(std::string* why);

// GB/s each way of one NVLink port of a GPU of compute capability `major`: NVLink 1 on
// Pascal (6) 20, NVLink 2-4 on Volta to Hopper (7-9) 25, NVLink 5 on Blackwell (10 and
// later) 50; 0 for GPUs without NVLink ports of a known speed.
double nvlinkPortGbps(int computeMajor);

// Adds to `graph` the NVLinks `source` reports between the graph's GPUs (matched by bus id)
// and from them to the NVSwitch node (nvswitchNode()), one link per pair with its port
// count as lanes, and denies peer access between the GPUs NVML says cannot read each
// other. Ports to a device the graph does not have are left out; a graph that has NVLinks
// already (hwloc's NVML backend) keeps them and gets none. Returns the number of links
// added.
int applyNvml(NvmlSource& source, Graph* graph);

}  // namespace loom::topo
