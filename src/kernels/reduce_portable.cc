// The kernels of reduce_loops.h, compiled with the project's baseline target flags.
#define LOOM_KERNELS_ISA portable
#include "kernels/reduce_loops.h"

namespace loom::kernels {

const KernelTable& portableKernels() {
  static constexpr KernelTable kTable = portable::makeTable();
  return kTable;
}

}  // namespace loom::kernels
