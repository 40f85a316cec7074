// The plan kernel's CUDA source and its launcher (plan_kernel.h).
#include "device/plan_kernel.h"

#include <cuda_runtime.h>

#include "device/cuda_worker.cuh"
#include "device/interpreter.h"

namespace loom::device {
namespace {

// __grid_constant__: the worker reads the plan in place in the parameter (no copy per thread).
__global__ void __launch_bounds__(kPlanKernelThreads) planKernel(const __grid_constant__ LaunchArgs args) {
  CudaWorker worker;
  runWorker(args, blockIdx.x, worker);
}

}  // namespace

int launchPlanKernel(const LaunchArgs& args, void* stream) {
  planKernel<<<args.workers, kPlanKernelThreads, 0, static_cast<cudaStream_t>(stream)>>>(args);
  return static_cast<int>(cudaGetLastError());
}

int loadPlanKernel(int* blocksPerMultiprocessor, int* architecture) {
  cudaFuncAttributes attributes;
  cudaError_t e = cudaFuncGetAttributes(&attributes, planKernel);
  if (e != cudaSuccess) return static_cast<int>(e);
  *architecture = attributes.binaryVersion;
  return static_cast<int>(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocksPerMultiprocessor, planKernel, kPlanKernelThreads, 0));
}

}  // namespace loom::device
