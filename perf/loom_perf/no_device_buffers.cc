// device_buffers.h in a Loom built without CUDA: there is no device, and nothing can make a
// DeviceRank (main() stops at cudaDeviceCount() == 0 before any is made).
#include "device_buffers.h"

#include "fatal.h"

namespace loomperf {

int cudaDeviceCount(std::string* why) {
  *why = "this Loom was built without CUDA (meson found no CUDA toolkit); use --device host";
  return 0;
}

std::string deviceDescription(int) { return "device none"; }

DeviceRank::DeviceRank(int device, size_t) : device_(device) { fatal("this Loom was built without CUDA"); }
DeviceRank::~DeviceRank() = default;
void DeviceRank::copyIn(void*, const void*, size_t) {}
void DeviceRank::copyOut(void*, const void*, size_t) {}
std::string DeviceRank::synchronize() { return "this Loom was built without CUDA"; }
void DeviceRank::beginCapture() {}
void DeviceRank::endCapture() {}
void DeviceRank::launchGraph() {}
void DeviceRank::dropGraph() {}

}  // namespace loomperf
