// The shim's CUDA calls, with the CUDA runtime.
#include "compat/nccl/cuda_memory.h"

#include <cuda_runtime.h>

namespace loom::nccl {

int currentDevice() {
  int count = 0;
  int device = -1;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 || cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return device;
}

Status allocate(void** ptr, size_t size) {
  if (currentDevice() < 0) return allocateHost(ptr, size);
  const cudaError_t err = cudaMalloc(ptr, size);
  if (err == cudaSuccess) return Status::ok();
  cudaGetLastError();
  return error(loomUnhandledCudaError, "cudaMalloc(%zu): %s", size, cudaGetErrorString(err));
}

Status release(void* ptr) {
  if (currentDevice() < 0) return releaseHost(ptr);
  const cudaError_t err = cudaFree(ptr);
  if (err == cudaSuccess) return Status::ok();
  cudaGetLastError();
  return error(loomUnhandledCudaError, "cudaFree(%p): %s", ptr, cudaGetErrorString(err));
}

}  // namespace loom::nccl
