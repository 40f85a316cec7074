// The probe kernels (probes.h). Stores and loads are written as the plan kernel's memory
// policy writes them (src/device/cuda_worker.cuh), so a probe costs what that piece costs there.
#include "probes.h"

#include <cuda_runtime.h>

#include "device/plan_format.h"
#include "device/plan_kernel.h"

namespace loom::probe {
namespace {

// As large as the plan kernel's parameter: a launch copies its parameter into the command.
struct PlanSizedParam {
  ProbeMemory memory;
  alignas(16) uint8_t pad[sizeof(device::LaunchArgs) - sizeof(ProbeMemory)];
};
static_assert(sizeof(PlanSizedParam) >= sizeof(device::LaunchArgs), "the parameter is the plan kernel's size");

__device__ void storeRelaxedSys(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ uint32_t loadAcquireSys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// A release store of 1 to `word`, then an acquire load of it, at system or device scope.
template <bool kSystem>
__device__ uint64_t releaseThenAcquire(uint64_t* word) {
  uint64_t v;
  if constexpr (kSystem) {
    asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(word), "l"(1ull) : "memory");
    asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(word) : "memory");
  } else {
    asm volatile("st.release.gpu.u64 [%0], %1;" ::"l"(word), "l"(1ull) : "memory");
    asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(word) : "memory");
  }
  return v;
}

__global__ void empty(ProbeMemory) {}

// Probe p as one kernel: thread 0 does the pieces up to p, as a worker's thread 0 does.
template <Probe p>
__global__ void __launch_bounds__(device::kPlanKernelThreads) planShaped(const __grid_constant__ PlanSizedParam param) {
  const ProbeMemory& m = param.memory;
  if constexpr (p >= Probe::kPrologue) {
    if (threadIdx.x == 0) {
      atomicAdd(m.deviceCounter, 1);
      storeRelaxedSys(&m.hostWords[0], 1);
    }
  }
  if constexpr (p >= Probe::kPollHost) {
    // The abort word, looked at once: a wait that finds its word at once never polls it.
    if (threadIdx.x == 0 && loadAcquireSys(m.hostAbort) != 0) storeRelaxedSys(&m.hostWords[3], 1);
  }
  if constexpr (p == Probe::kHandshakeSys || p == Probe::kHandshakeGpu) {
    if (threadIdx.x == 0 && releaseThenAcquire<p == Probe::kHandshakeSys>(m.deviceWord) == 0) {
      storeRelaxedSys(&m.hostWords[3], 1);
    }
  }
  if constexpr (p >= Probe::kEpilogueSys) {
    __syncthreads();
    if (threadIdx.x == 0) {
      if constexpr (p == Probe::kEpilogueGpu) {
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
      } else {
        asm volatile("fence.acq_rel.sys;" ::: "memory");
      }
      *m.deviceCounter = 0;
      storeRelaxedSys(&m.hostWords[1], 1);
      storeRelaxedSys(&m.hostWords[2], 1);
    }
  }
}

template <Probe p>
int launchPlanShaped(const ProbeMemory& memory, cudaStream_t stream) {
  PlanSizedParam param{};
  param.memory = memory;
  planShaped<p><<<1, device::kPlanKernelThreads, 0, stream>>>(param);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

const char* probeName(Probe p) {
  switch (p) {
    case Probe::kEmpty: return "empty <<<1,1>>>, 16-byte parameter";
    case Probe::kEmptyPlanShape: return "empty <<<1,512>>>, plan-kernel-sized parameter";
    case Probe::kPrologue: return "+ device atomic, store to host memory (launch start)";
    case Probe::kEpilogueSys: return "+ system fence, stores to host memory (launch end)";
    case Probe::kEpilogueGpu: return "  the same with a device-scope fence";
    case Probe::kPollHost: return "+ acquire load of a host word (abort poll)";
    case Probe::kHandshakeSys: return "+ release/acquire of a device word, system scope";
    case Probe::kHandshakeGpu: return "  the same at device scope";
  }
  return "?";
}

int launchProbe(Probe p, const ProbeMemory& memory, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  switch (p) {
    case Probe::kEmpty:
      empty<<<1, 1, 0, s>>>(memory);
      return static_cast<int>(cudaGetLastError());
    case Probe::kEmptyPlanShape: return launchPlanShaped<Probe::kEmptyPlanShape>(memory, s);
    case Probe::kPrologue: return launchPlanShaped<Probe::kPrologue>(memory, s);
    case Probe::kEpilogueSys: return launchPlanShaped<Probe::kEpilogueSys>(memory, s);
    case Probe::kEpilogueGpu: return launchPlanShaped<Probe::kEpilogueGpu>(memory, s);
    case Probe::kPollHost: return launchPlanShaped<Probe::kPollHost>(memory, s);
    case Probe::kHandshakeSys: return launchPlanShaped<Probe::kHandshakeSys>(memory, s);
    case Probe::kHandshakeGpu: return launchPlanShaped<Probe::kHandshakeGpu>(memory, s);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace loom::probe
