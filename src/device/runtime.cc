// Choosing the device runtime: CUDA or the CPU emulation (runtime.h).
#include "device/runtime.h"

#include "loom_build_config.h"

namespace loom::device {

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
