// What the shim asks of CUDA: the current device and NCCL's memory calls. Built without
// CUDA (cuda_memory_disabled.cc), there is no device and the memory is host memory.
#pragma once

#include <cstddef>

#include "base/status.h"

namespace loom::nccl {

// The device a new communicator takes, as NCCL takes it: the current CUDA device, or -1
// (host memory) where CUDA finds none. Leaves no sticky CUDA error behind.
int currentDevice();

// ncclMemAlloc / ncclMemFree: device memory where a device exists, else host memory from
// loomMemAlloc.
Status allocate(void** ptr, size_t size);
Status release(void* ptr);

// Host memory from loomMemAlloc, page-aligned and rounded up to whole pages (host_memory.cc);
// releaseHost frees it (loomInvalidArgument for any other pointer).
Status allocateHost(void** ptr, size_t size);
Status releaseHost(void* ptr);

}  // namespace loom::nccl
