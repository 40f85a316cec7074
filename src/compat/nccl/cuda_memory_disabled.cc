// The shim built without CUDA: no device, so every communicator is a host one and
// ncclMemAlloc gives host memory.
#include "compat/nccl/cuda_memory.h"

namespace loom::nccl {

int currentDevice() { return -1; }

Status allocate(void** ptr, size_t size) { return allocateHost(ptr, size); }

Status release(void* ptr) { return releaseHost(ptr); }

}  // namespace loom::nccl
