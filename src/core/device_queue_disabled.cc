// Builds without CUDA: resolveConfig refuses device communicators before one is made, so
// this only keeps the promise of device_queue.h.
#include "core/device_queue.h"

#include "core/communicator.h"

namespace loom {

Status DeviceQueue::create(Communicator* comm, std::unique_ptr<DeviceQueue>* out) {
  out->reset();
  return error(loomInvalidUsage,
               "config.device=%d asks for a device communicator, but this Loom was built without CUDA "
               "(meson feature 'cuda'); use device=-1 for host memory",
               comm->device());
}

}  // namespace loom
