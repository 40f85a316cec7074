#include "kernels/cuda/stream_flag.h"

#include <cuda_runtime.h>

namespace loom::cuda {
namespace {

__global__ void waitAndReset(volatile uint32_t* flag) {
  while (*flag != 1) __nanosleep(200);
  *flag = 0;
  __threadfence_system();
}

}  // namespace

int waitAndResetFlag(uint32_t* flag, void* stream) {
  waitAndReset<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(flag);
  return static_cast<int>(cudaGetLastError());
}

int loadFlagKernel() {
  cudaFuncAttributes attributes;
  return static_cast<int>(cudaFuncGetAttributes(&attributes, waitAndReset));
}

}  // namespace loom::cuda
