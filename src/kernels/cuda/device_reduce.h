// Elementwise reductions and copies on device memory, enqueued on a CUDA stream: the
// arithmetic under every device collective. A plain C++ interface (no CUDA headers), so code
// built by the host compiler includes it as it includes the host kernels (kernels/reduce.h).
//
// Bits. Every call gives exactly the bytes the host kernels give for the same inputs: IEEE
// arithmetic never contracted into FMAs, every NaN result written as the canonical quiet NaN,
// float max/min NaN if either input is, max(+0, -0) = +0 and min(+0, -0) = -0, float16 and
// bfloat16 computed in float32 and rounded once to nearest-even, integer sum and prod
// wrapping, integer division truncating toward zero.
//
// Memory. Pointers are device pointers (or managed/mapped memory the device can access); any
// byte address works for every type. dst may be exactly equal to an input (in place); it must
// not otherwise overlap one. The fast path (16-byte loads and stores) needs all pointers of a
// call at the same address mod 16, at a whole element; otherwise the call runs element by
// element (byte by byte for pointers misaligned for the element size).
//
// Calls. Each call only enqueues work on `stream` (a cudaStream_t; null is the legacy default
// stream) of the current device and returns without waiting; it returns the launch's
// cudaError_t as an int (0: success). count == 0 (bytes == 0) enqueues nothing and returns 0.
// An out-of-range type or op returns cudaErrorInvalidValue. Safe to call from any thread.
#pragma once

#include <cstddef>

#include "loom/loom.h"

namespace loom::cuda {

// dst[i] = a[i] op b[i] for i < count (loomAvg sums). With divisor > 0 the result is then
// divided by divisor, giving exactly what host reduce() followed by scale(divisor) gives (for
// float16/bfloat16: the sum rounded to the type, then divided in float32 and rounded again).
// dst2, when not null, gets the same values: one read of each input, two writes (the fused
// recvReduceCopy step). dst may equal a or b; dst2 must overlap nothing.
int reduce(void* dst, void* dst2, const void* a, const void* b, size_t count, loomDataType_t type, loomRedOp_t op,
           int divisor, void* stream);

// dst[i] = src[i] / divisor, divisor >= 1: the end of an average, as host scale(). dst may
// equal src.
int scale(void* dst, const void* src, size_t count, loomDataType_t type, int divisor, void* stream);

// dst = src for `bytes` bytes, with a kernel rather than a copy engine. dst == src does nothing.
int copy(void* dst, const void* src, size_t bytes, void* stream);

// dst = src converted, as host kernels::convert: float32 <-> float16 / bfloat16 / float8, or equal
// types (a copy). Any other pair returns cudaErrorInvalidValue.
int convert(void* dst, loomDataType_t dstType, const void* src, loomDataType_t srcType, size_t count,
            void* stream);

// Loads every kernel above into the current device's context now, returning the first
// cudaError_t (0: all loaded). With lazy loading (CUDA_MODULE_LOADING=LAZY, the default on
// Linux since CUDA 12.2) a kernel is loaded at its first launch, and a load may wait for the
// whole device to go idle: a first launch while a stream is held by a device communicator's
// job, which that launch is needed to finish, would never return. Call before any such job.
int loadKernels();

// The architectures the kernels were compiled for, e.g. "sm_80,sm_90,compute_90", for logs.
const char* architectures();

}  // namespace loom::cuda
