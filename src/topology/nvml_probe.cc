// NVLink and peer-to-peer access read from NVML at run time (nvml_probe.h).
#include "topology/nvml_probe.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <map>
#include <utility>
#include <vector>

#include "topology/pci.h"

namespace loom::topo {
namespace {

// The subset of nvml.h that Loom calls, declared here because the CUDA toolkit does not
// ship the header; these types and entry points are NVML's stable ABI.
using NvmlReturn = int;  // nvmlReturn_t; NVML_SUCCESS is 0
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlPciInfo {     // nvmlPciInfo_t, as the _v3 / _v2 entry points fill it
  char busIdLegacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pciDeviceId;
  unsigned pciSubSystemId;
  char busId[32];
};
constexpr int kNvmlFeatureEnabled = 1;    // nvmlEnableState_t
constexpr int kNvmlRemoteIsSwitch = 2;    // nvmlIntNvLinkDeviceType_t: NVML_NVLINK_DEVICE_TYPE_SWITCH
constexpr int kNvmlP2pRead = 0;           // nvmlGpuP2PCapsIndex_t: NVML_P2P_CAPS_INDEX_READ
constexpr int kNvmlP2pOk = 0;             // nvmlGpuP2PStatus_t: NVML_P2P_STATUS_OK

struct NvmlLibraryCloser {
  void operator()(void* handle) const { dlclose(handle); }
};
using NvmlLibrary = std::unique_ptr<void, NvmlLibraryCloser>;

class Nvml final : public NvmlSource {
 public:
  // The library opened and NVML initialised, or nullptr and *why.
  static std::unique_ptr<Nvml> open(std::string* why) {
    NvmlLibrary library(dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL));
    if (!library) {
      const char* reason = dlerror();
      *why = std::string("NVML not loaded: ") + (reason ? reason : "libnvidia-ml.so.1 not found");
      return nullptr;
    }
    auto nvml = std::make_unique<Nvml>(std::move(library));
    if (!nvml->init_ || !nvml->shutdown_ || !nvml->count_ || !nvml->handle_ || !nvml->pci_ || !nvml->state_ ||
        !nvml->remotePci_) {
      *why = "NVML lacks the NVLink queries (a driver older than R450?)";
      return nullptr;
    }
    if (NvmlReturn rc = nvml->init_(); rc != 0) {
      *why = "NVML did not start: " + nvml->errorText(rc);
      return nullptr;
    }
    nvml->initialised_ = true;
    unsigned count = 0;
    if (NvmlReturn rc = nvml->count_(&count); rc != 0) {
      *why = "NVML could not count GPUs: " + nvml->errorText(rc);
      return nullptr;
    }
    for (unsigned i = 0; i < count; ++i) {
      NvmlDevice device = nullptr;
      if (nvml->handle_(i, &device) == 0) nvml->devices_.push_back(device);
    }
    for (NvmlDevice device : nvml->devices_) nvml->busIds_.push_back(nvml->pciBusId(device));
    return nvml;
  }

  ~Nvml() override {
    if (initialised_) shutdown_();
  }

  int gpuCount() override { return static_cast<int>(devices_.size()); }
  std::string busId(int gpu) override { return busIds_[static_cast<size_t>(gpu)]; }

  int computeMajor(int gpu) override {
    int major = 0, minor = 0;
    if (!capability_ || capability_(devices_[static_cast<size_t>(gpu)], &major, &minor) != 0) return 0;
    return major;
  }

  bool remote(int gpu, int port, std::string* busId, bool* toSwitch) override {
    NvmlDevice device = devices_[static_cast<size_t>(gpu)];
    const unsigned link = static_cast<unsigned>(port);
    int state = 0;
    if (state_(device, link, &state) != 0 || state != kNvmlFeatureEnabled) return false;
    NvmlPciInfo pci{};
    if (remotePci_(device, link, &pci) != 0) return false;
    *busId = busIdString(pci.domain, pci.bus, pci.device, 0);
    int type = 0;
    if (remoteType_ && remoteType_(device, link, &type) == 0) {
      *toSwitch = type == kNvmlRemoteIsSwitch;
    } else {
      // Drivers without the query: NVSwitches are the far ends that are not GPUs.
      *toSwitch = std::find(busIds_.begin(), busIds_.end(), *busId) == busIds_.end();
    }
    return true;
  }

  bool peerRead(int a, int b, bool* readable) override {
    int status = 0;
    if (!p2p_ || p2p_(devices_[static_cast<size_t>(a)], devices_[static_cast<size_t>(b)], kNvmlP2pRead, &status) != 0) {
      return false;
    }
    *readable = status == kNvmlP2pOk;
    return true;
  }

  // Looks the entry points up; open() checks them and starts NVML.
  explicit Nvml(NvmlLibrary library) : library_(std::move(library)) {
    load(&init_, "nvmlInit_v2");
    load(&shutdown_, "nvmlShutdown");
    load(&errorString_, "nvmlErrorString");
    load(&count_, "nvmlDeviceGetCount_v2");
    load(&handle_, "nvmlDeviceGetHandleByIndex_v2");
    load(&pci_, "nvmlDeviceGetPciInfo_v3");
    load(&capability_, "nvmlDeviceGetCudaComputeCapability");
    load(&state_, "nvmlDeviceGetNvLinkState");
    load(&remotePci_, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    load(&remoteType_, "nvmlDeviceGetNvLinkRemoteDeviceType");
    load(&p2p_, "nvmlDeviceGetP2PStatus");
  }

 private:
  template <typename Function>
  void load(Function** entry, const char* symbol) {
    *entry = reinterpret_cast<Function*>(dlsym(library_.get(), symbol));
  }

  std::string errorText(NvmlReturn rc) const {
    const char* text = errorString_ ? errorString_(rc) : nullptr;
    return text ? text : "NVML error " + std::to_string(rc);
  }

  std::string pciBusId(NvmlDevice device) const {
    NvmlPciInfo pci{};
    if (pci_(device, &pci) != 0) return "";
    return busIdString(pci.domain, pci.bus, pci.device, 0);
  }

  NvmlLibrary library_;
  bool initialised_ = false;
  std::vector<NvmlDevice> devices_;
  std::vector<std::string> busIds_;
  NvmlReturn (*init_)() = nullptr;
  NvmlReturn (*shutdown_)() = nullptr;
  const char* (*errorString_)(NvmlReturn) = nullptr;
  NvmlReturn (*count_)(unsigned*) = nullptr;
  NvmlReturn (*handle_)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*pci_)(NvmlDevice, NvmlPciInfo*) = nullptr;
  NvmlReturn (*capability_)(NvmlDevice, int*, int*) = nullptr;
  NvmlReturn (*state_)(NvmlDevice, unsigned, int*) = nullptr;
  NvmlReturn (*remotePci_)(NvmlDevice, unsigned, NvmlPciInfo*) = nullptr;
  NvmlReturn (*remoteType_)(NvmlDevice, unsigned, int*) = nullptr;
  NvmlReturn (*p2p_)(NvmlDevice, NvmlDevice, int, int*) = nullptr;
};

}  // namespace

std::unique_ptr<NvmlSource> openNvml(std::string* why) { return Nvml::open(why); }

double nvlinkPortGbps(int computeMajor) {
  if (computeMajor >= 10) return 50;
  if (computeMajor >= 7) return 25;
  if (computeMajor == 6) return 20;
  return 0;
}

int applyNvml(NvmlSource& source, Graph* graph) {
  const std::vector<Link>& existing = graph->links();
  const bool linksKnown =
      std::any_of(existing.begin(), existing.end(), [](const Link& l) { return l.kind == LinkKind::kNvlink; });
  // Ports per pair of ends as each end reports them (NVML reports a GPU-GPU port from both;
  // the larger count wins should they disagree), and each GPU's port speed.
  std::map<std::pair<int, int>, std::array<int, 2>> ports;
  std::map<int, double> portGbps;
  int nvswitch = -1;
  for (int i = 0; i < source.gpuCount(); ++i) {
    const int gpu = graph->gpuByBusId(source.busId(i));
    if (gpu < 0) continue;
    portGbps[gpu] = nvlinkPortGbps(source.computeMajor(i));
    for (int port = 0; port < NvmlSource::kMaxPorts; ++port) {
      std::string far;
      bool toSwitch = false;
      if (!source.remote(i, port, &far, &toSwitch)) continue;
      if (toSwitch) {
        if (nvswitch < 0) nvswitch = nvswitchNode(graph);
        ++ports[{gpu, nvswitch}][0];
        continue;
      }
      const int peer = graph->gpuByBusId(far);
      if (peer < 0 || peer == gpu) continue;
      ++ports[{std::min(gpu, peer), std::max(gpu, peer)}][gpu > peer ? 1 : 0];
    }
  }
  for (int i = 0; i < source.gpuCount(); ++i) {
    for (int j = i + 1; j < source.gpuCount(); ++j) {
      const int a = graph->gpuByBusId(source.busId(i)), b = graph->gpuByBusId(source.busId(j));
      bool readable = true;
      if (a >= 0 && b >= 0 && source.peerRead(i, j, &readable) && !readable) graph->denyPeerAccess(a, b);
    }
  }
  if (linksKnown) return 0;
  int added = 0;
  for (const auto& [ends, counts] : ports) {
    // A GPU whose generation NVML could not tell takes its peer's port speed.
    const double gbps = std::max(portGbps[ends.first], portGbps.count(ends.second) ? portGbps[ends.second] : 0.0);
    const int lanes = std::max(counts[0], counts[1]);
    if (gbps <= 0) continue;
    graph->connect(ends.first, ends.second, LinkKind::kNvlink, lanes * gbps, kNvlinkLatencyUs, lanes);
    ++added;
  }
  return added;
}

}  // namespace loom::topo
