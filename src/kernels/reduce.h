// Elementwise reductions and copies on host memory: the arithmetic under every host
// collective. Each call runs on the calling thread, blocks until done, and keeps no state
// apart from which instruction set is in use (chosen once; see Isa below).
//
// Determinism. The output bytes depend only on the input bytes: not on the instruction set,
// not on alignment or offset, and not on which input is named first (every op is commutative
// bit for bit). That is what lets allreduce give bitwise identical results on every rank.
// To get there:
// - floats use IEEE arithmetic in the default rounding mode, never contracted into FMAs;
// - any NaN result is written as the canonical quiet NaN (+qNaN: 0x7E00 for float16, 0x7FC0
//   for bfloat16, 0x7FC00000, 0x7FF8000000000000, 0x7F for both float8 formats), whatever the
//   NaN payloads of the inputs;
// - max/min of floats is NaN if either input is NaN, and max(+0, -0) = +0, min(+0, -0) = -0;
// - float16, bfloat16 and float8 are widened to float32, computed there and rounded back once,
//   to nearest-even (overflow gives ±inf for float16 and bfloat16 and saturates float8 to its
//   largest finite value, as NCCL does; tiny results give denormals);
// - integer sum and prod wrap around (two's complement); scale() truncates toward zero.
//
// Memory. Pointers need no particular alignment (any byte address works for every type).
// dst may be exactly equal to an input (in place); it must not otherwise overlap one.
//
// type and op must be valid enum values (the public API checks them and answers
// loomInvalidArgument); out-of-range values do nothing here.
#pragma once

#include <cstddef>
#include <vector>

#include "loom/loom.h"

namespace loom::kernels {

// dst[i] = a[i] op b[i] for i < count. loomAvg sums: the caller divides once at the end with
// scale(), so that avg over n ranks is (x0 + ... + xn-1) / n with a single rounding.
void reduce(void* dst, const void* a, const void* b, size_t count, loomDataType_t type,
            loomRedOp_t op);

// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[nsrcs-1][i], folded left to right, reading
// each input once (for reducing straight from several peers' buffers). nsrcs >= 1; with one
// input it copies. Integers and float32/float64 give exactly what folding reduce() gives.
// float16/bfloat16/float8 accumulate all inputs in float32 and round once, so for nsrcs > 2 the
// result is at least as accurate as folding reduce() and may differ from it in the last bit:
// ranks that must agree have to use the same form.
void reduceN(void* dst, const void* const* srcs, int nsrcs, size_t count, loomDataType_t type,
             loomRedOp_t op);

// reduceN's result, divided by `divisor` as scale() divides (1: not divided), written into
// every one of ndsts outputs: non-temporally where `streaming` (no fence: storeFence after the
// last). Each result vector goes into every output as it is computed (a 1 KiB tile at a time
// for the 16- and 8-bit floats, a divisor, or outputs aligned differently), so the inputs are read
// and the outputs written at once: reducing a 32 KiB piece and then copying it out ran at half
// the speed to memory on the AMD EPYC VM (one core's reads and writes do not overlap across
// the two phases). An output may be exactly equal to an input; otherwise none may overlap an
// input or another.
void reduceNTo(void* const* dsts, int ndsts, const void* const* srcs, int nsrcs, size_t count, loomDataType_t type,
               loomRedOp_t op, int divisor, bool streaming);
// dst[i] = src[i] / divisor: the end of an average. divisor >= 1. Integers truncate toward
// zero (C division); float32/float64 divide in their own precision; the 16- and 8-bit floats
// divide in float32 and round once. dst may equal src.
void scale(void* dst, const void* src, size_t count, loomDataType_t type, int divisor);

// dst[i] = scalar * src[i] (`scalar`: one element of `type`), multiplied as reduce()'s
// loomProd multiplies: the premultiplication of loomRedOpCreatePreMulSum. dst may equal src.
void multiply(void* dst, const void* src, size_t count, loomDataType_t type, const void* scalar);

// dst = src converted from srcType to dstType, for float32 <-> float16 / bfloat16 / float8 (rounding
// to nearest-even, NaN to the canonical NaN, as everywhere here) and for equal types (a
// copy). Returns false, doing nothing, for any other pair. dst must not overlap src unless
// the types are equal and dst == src.
bool convert(void* dst, loomDataType_t dstType, const void* src, loomDataType_t srcType,
             size_t count);

// memcpy that also accepts dst == src (does nothing then).
void copy(void* dst, const void* src, size_t bytes);

// copy() with non-temporal stores: dst is written to memory without first being read into
// the cache, which saves a third of the memory traffic of a large copy whose destination
// will not be read again soon. Ends with a store fence, so the bytes are visible to other
// threads once it returns. dst must not overlap src.
void copyStreaming(void* dst, const void* src, size_t bytes);
// Orders every earlier store (non-temporal ones too) before every later one.
void storeFence();

// The instruction-set paths. Every path is compiled from the same templates (reduce_loops.h)
// with different target flags, and gives the same bits.
enum class Isa {
  kPortable,  // plain C++ for the baseline target (the compiler may still vectorise, e.g. SSE2)
  kAvx2,      // AVX2 + F16C
  kAvx512,    // AVX-512 F/BW/DQ/VL + F16C
};

// Name of the path in use ("portable", "avx2", "avx512"), for logs and benchmarks.
const char* isaName();
const char* isaName(Isa isa);

// Paths compiled in and supported by this CPU, portable first. The default is the last.
std::vector<Isa> availableIsas();

// Makes every later call use isa (process-wide; not for concurrent use with kernels running).
// Returns false, changing nothing, if isa is not available. Tests and benchmarks only.
bool forceIsaForTesting(Isa isa);

}  // namespace loom::kernels
