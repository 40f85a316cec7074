// The plan kernel (plan_kernel.cu): one thread block per worker, each running the plan
// interpreter (interpreter.h). A plain C++ interface, so the CUDA runtime (cuda_runtime.cc) is
// compiled by the host compiler.
#pragma once

#include "device/plan_format.h"

namespace loom::device {

// Threads per worker.
constexpr int kPlanKernelThreads = 512;

// Enqueues the kernel with args.workers blocks on `stream` (a cudaStream_t); the launch's
// cudaError_t.
int launchPlanKernel(const LaunchArgs& args, void* stream);

// Loads the kernel into the current device's context now (a kernel loaded lazily at its first
// launch may wait for the device to go idle, which a peer's waiting kernel prevents), and says
// how many of its blocks one multiprocessor holds at once and which architecture the build
// loaded for this device is (major * 10 + minor: 80 for sm_80); the cudaError_t.
int loadPlanKernel(int* blocksPerMultiprocessor, int* architecture);

}  // namespace loom::device
