// The kernels of reduce_loops.h for one instruction set. meson.build compiles this file
// once per set, with -DLOOM_KERNELS_ISA=<portable|avx2|avx512> and that set's target flags;
// each build defines <isa>Kernels() (kernel_table.h).
#include "kernels/reduce_loops.h"

#define LOOM_KERNELS_CONCAT2(a, b) a##b
#define LOOM_KERNELS_CONCAT(a, b) LOOM_KERNELS_CONCAT2(a, b)

namespace loom::kernels {

const KernelTable& LOOM_KERNELS_CONCAT(LOOM_KERNELS_ISA, Kernels)() {
  static constexpr KernelTable kTable = LOOM_KERNELS_ISA::makeTable();
  return kTable;
}

}  // namespace loom::kernels
