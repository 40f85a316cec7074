// Choosing the device runtime: CUDA or the CPU emulation (runtime.h).
#include "device/runtime.h"

#include <unistd.h>

#include "loom_build_config.h"

namespace loom::device {

SharedHandle ownSharedHandle(size_t bytes, int device, bool hostMemory) {
  SharedHandle handle;
  handle.pid = static_cast<int32_t>(::getpid());
  handle.bytes = static_cast<uint32_t>(bytes);
  handle.device = device;
  handle.hostMemory = hostMemory ? 1 : 0;
  return handle;
}

Status makeRuntime(int device, bool emulated, SlotPool& emulatedBlocks, Handover& handover,
                   std::unique_ptr<DeviceRuntime>* out) {
  if (emulated) return makeEmulatedRuntime(emulatedBlocks, handover, out);
  LOOM_TRY(checkDeviceExists(device));
#if LOOM_HAVE_CUDA
  return makeCudaRuntime(device, handover, out);
#else
  return Status::ok();  // unreachable: checkDeviceExists refuses
#endif
}

#if !LOOM_HAVE_CUDA
Status checkDeviceExists(int device) {
  return error(loomInvalidUsage,
               "config.device=%d asks for a device communicator, but this Loom was built without CUDA (meson "
               "feature 'cuda'); use device=-1 for host memory, or LOOM_DEVICE_EMULATION=1 to run the device "
               "path on CPU threads",
               device);
}
#endif

}  // namespace loom::device
