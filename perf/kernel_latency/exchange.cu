// The exchange kernel (exchange.h), with the plan kernel's device-scope flag accesses
// (src/device/cuda_worker.cuh) between two ranks on one GPU.
#include "exchange.h"

#include <cuda_runtime.h>

namespace loom::probe {
namespace {

__device__ uint64_t nowNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void exchange(ExchangeMemory m, int side) {
  if (threadIdx.x != 0) return;
  volatile uint32_t* stalled = m.stalled;
  if (*stalled != 0) return;
  uint64_t* own = m.words + side * 16;
  const uint64_t* other = m.words + (1 - side) * 16;
  // The launch's number: this side's kernels run one after another on its stream.
  const uint64_t n = ++own[8];
  asm volatile("st.release.gpu.u64 [%0], %1;" ::"l"(own), "l"(n) : "memory");
  const uint64_t giveUpAt = nowNs() + static_cast<uint64_t>(kExchangeGiveUpSeconds * 1e9);
  for (;;) {
    uint64_t seen;
    asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(seen) : "l"(other) : "memory");
    if (seen >= n) return;
    if (nowNs() > giveUpAt) {
      *stalled = 1;
      __threadfence_system();
      return;
    }
  }
}

}  // namespace

int launchExchange(const ExchangeMemory& memory, int side, void* stream) {
  exchange<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>(memory, side);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace loom::probe
