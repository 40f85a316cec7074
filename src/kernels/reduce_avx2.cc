// The kernels of reduce_loops.h, compiled with -mavx2 -mf16c (meson.build).
#define LOOM_KERNELS_ISA avx2
#include "kernels/reduce_loops.h"

namespace loom::kernels {

const KernelTable& avx2Kernels() {
  static constexpr KernelTable kTable = avx2::makeTable();
  return kTable;
}

}  // namespace loom::kernels
