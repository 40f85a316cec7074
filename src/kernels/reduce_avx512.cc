// The kernels of reduce_loops.h, compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl
// -mf16c (meson.build).
#define LOOM_KERNELS_ISA avx512
#include "kernels/reduce_loops.h"

namespace loom::kernels {

const KernelTable& avx512Kernels() {
  static constexpr KernelTable kTable = avx512::makeTable();
  return kTable;
}

}  // namespace loom::kernels
