// The one dispatch table: every (type, op) kernel of one instruction-set path. Each path's
// translation unit fills one from the same templates; reduce.cc picks one at first use.
#pragma once

#include <cstddef>

#include "loom/loom.h"

namespace loom::kernels {

struct KernelTable {
  using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t count);
  using ReduceNFn = void (*)(void* dst, const void* const* srcs, int nsrcs, size_t count);
  using ScaleFn = void (*)(void* dst, const void* src, size_t count, int divisor);
  using MultiplyFn = void (*)(void* dst, const void* src, size_t count, const void* scalar);
  using ConvertFn = void (*)(void* dst, const void* src, size_t count);
  using CopyFn = void (*)(void* dst, const void* src, size_t bytes);
  using ReduceToFn = void (*)(void* const* dsts, int ndsts, const void* const* srcs, int nsrcs, size_t count,
                              bool streaming);

  ReduceFn reduce[loomNumTypes][loomNumOps];  // loomAvg's entries are the sum kernels
  ReduceNFn reduceN[loomNumTypes][loomNumOps];
  ScaleFn scale[loomNumTypes];
  MultiplyFn multiply[loomNumTypes];
  ConvertFn fromFloat32[loomNumTypes];  // the 16- and 8-bit floats only (others null)
  ConvertFn toFloat32[loomNumTypes];    // the 16- and 8-bit floats only
  CopyFn copyStreaming;                 // without the closing fence
  // reduceNTo's vector loop: whole vectors of kStreamBytes (the stream width), outputs
  // equally aligned; null for the 16- and 8-bit floats (those go through reduceN a tile at a time).
  ReduceToFn reduceTo[loomNumTypes][loomNumOps];
  size_t streamBytes;
};

// One per translation unit. The vector ones exist only where meson built them
// (LOOM_KERNELS_HAVE_AVX2 / _AVX512), and may run only where the CPU has the instructions.
// Each defined by one build of reduce_isa.cc.
const KernelTable& portableKernels();
const KernelTable& avx2Kernels();
const KernelTable& avx512Kernels();

}  // namespace loom::kernels
