// Host memory: what ncclMemAlloc gives where there is no device. loomMemAlloc's, so that a
// host communicator's ranks in several processes reach each other's buffers (the mapped
// allreduce, docs/ARCHITECTURE.md), as NCCL's registered buffers let its kernels do.
#include "compat/nccl/cuda_memory.h"
#include "core/registry.h"

namespace loom::nccl {

Status allocateHost(void** ptr, size_t size) {
  return Registry::instance().mappedAllocations().allocate(size, ptr);
}

Status releaseHost(void* ptr) { return Registry::instance().mappedAllocations().release(ptr); }

}  // namespace loom::nccl
