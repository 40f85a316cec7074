// The memory-ordering policy of the plan kernel on a GPU (worker_context.h lists what a policy
// supplies): a worker is one thread block. Words the protocol polls are read with
// ld.acquire.sys and written with st.release.sys (they may be a peer GPU's memory, or pinned
// host memory the host reads); FIFO data a peer rewrites is loaded past L1 (__ldcv), which is
// not coherent with other SMs and devices; a low-latency line is one 16-byte volatile store,
// each 8-byte half a data word beside its flag. Atomics touch device memory only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device/fifo_layout.h"

namespace loom::device {

struct CudaWorker {
  static constexpr uint32_t kChecksEvery = 1024;

  __device__ int thread() const { return static_cast<int>(threadIdx.x); }
  __device__ int threads() const { return static_cast<int>(blockDim.x); }
  __device__ void sync() const { __syncthreads(); }
  __device__ bool syncAny(bool mine) const { return __syncthreads_or(mine ? 1 : 0) != 0; }

  __device__ uint64_t acquire(const uint64_t* p) const {
    uint64_t v;
    asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
  }
  __device__ uint32_t acquire32(const uint32_t* p) const {
    uint32_t v;
    asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
  }
  // Called by one thread after sync(): the block's earlier writes are ordered before the
  // barrier, and the release (cumulative) publishes them with the word.
  __device__ void release(uint64_t* p, uint64_t v) const {
    asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  }
  __device__ void release32(uint32_t* p, uint32_t v) const {
    asm volatile("st.release.sys.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
  }
  // Words only this rank's kernel reads (step flags, launch state): device scope, whose
  // fence does not wait for the rank's writes to host memory to cross PCIe.
  __device__ uint64_t acquireLocal(const uint64_t* p) const {
    uint64_t v;
    asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
  }
  __device__ void releaseLocal(uint64_t* p, uint64_t v) const {
    asm volatile("st.release.gpu.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  }
  // fence() then publish() for each of several words: one system-scope fence orders the
  // block's earlier writes before all of them (a release store each would be a fence each).
  __device__ void fence() const { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
  // The same for what only this rank's kernel reads (the parts of a local step).
  __device__ void fenceLocal() const { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
  __device__ void publish(uint64_t* p, uint64_t v) const {
    asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  }
  __device__ uint32_t fetchAdd32(uint32_t* p, uint32_t v) const { return atomicAdd(p, v); }
  __device__ uint32_t cas32(uint32_t* p, uint32_t expected, uint32_t desired) const {
    return atomicCAS_system(p, expected, desired);
  }

  __device__ void storeLine(LLLine* line, uint32_t lo, uint32_t hi, uint32_t flag) const {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(line), "r"(lo), "r"(flag), "r"(hi),
                 "r"(flag)
                 : "memory");
  }
  __device__ bool loadLine(const LLLine* line, uint32_t flag, uint32_t* lo, uint32_t* hi) const {
    uint32_t d0, f0, d1, f1;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1)
                 : "l"(line)
                 : "memory");
    if (f0 != flag || f1 != flag) return false;
    *lo = d0;
    *hi = d1;
    return true;
  }

  template <class U>
  __device__ U load(const void* p) const {
    return *static_cast<const U*>(p);
  }
  template <class U>
  __device__ U loadFresh(const void* p) const {
    if constexpr (sizeof(U) == 16) {
      const uint4 v = __ldcv(static_cast<const uint4*>(p));
      U out;
      memcpy(&out, &v, sizeof out);
      return out;
    } else if constexpr (sizeof(U) == 8) {
      return static_cast<U>(__ldcv(static_cast<const unsigned long long*>(p)));
    } else if constexpr (sizeof(U) == 4) {
      return static_cast<U>(__ldcv(static_cast<const unsigned int*>(p)));
    } else if constexpr (sizeof(U) == 2) {
      return static_cast<U>(__ldcv(static_cast<const unsigned short*>(p)));
    } else {
      return static_cast<U>(__ldcv(static_cast<const unsigned char*>(p)));
    }
  }
  template <class U>
  __device__ void store(void* p, U v) const {
    *static_cast<U*>(p) = v;
  }

  // The device's global timer (ns), the same on every SM: wait deadlines and LOOM_DEVICE_TIMELINE.
  __device__ uint64_t now() const {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  }

  // Spin first (a peer on the same GPU answers within a microsecond), then back off so that
  // waiting blocks leave the memory system to the ones that work.
  __device__ void pause(uint32_t spins) const {
    if (spins > 256) __nanosleep(spins > 4096 ? 1000 : 100);
  }
};

}  // namespace loom::device
