// Holds a CUDA stream until a host thread says so: the device side of a job on a user's
// stream (core/device_queue.h). A kernel of one thread polls a flag in pinned host memory,
// so the stream waits without any CUDA-visible dependency on the work that will release it
// (which runs on other streams, possibly behind the same hardware queue as this one: a
// stream memory wait at the head of that queue would stall that work too, a running kernel
// does not).
#pragma once

#include <cstdint>

namespace loom::cuda {

// Enqueues on `stream` (a cudaStream_t): wait until *flag == 1, then set it to 0. `flag` is
// the device address of pinned, mapped host memory. Returns the launch's cudaError_t.
int waitAndResetFlag(uint32_t* flag, void* stream);

// Loads the waiting kernel into the current device's context (see loadKernels in
// device_reduce.h for why); returns the cudaError_t.
int loadFlagKernel();

}  // namespace loom::cuda
