// Builds without CUDA: a device communicator cannot exist, but say so if asked.
#include "ddp/stream_ops.h"

namespace loom::ddp {

Status makeCudaOps(int device, loomStream_t, std::unique_ptr<StreamOps>*) {
  return error(loomInvalidUsage, "device %d: this Loom was built without CUDA", device);
}

}  // namespace loom::ddp
