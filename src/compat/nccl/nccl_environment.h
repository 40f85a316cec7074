// NCCL's environment variables that have a Loom equivalent, translated once per process
// before Loom reads its own (docs/COMPAT_NCCL.md lists them).
#pragma once

namespace loom::nccl {

// Sets each LOOM_* variable from its NCCL_* counterpart when the NCCL one is set and the
// Loom one is not (a LOOM_* value the user set wins), and logs at INFO what it took, what it
// left to the LOOM_* value, and, in one line, the NCCL_* variables it ignores. Runs once per
// process, at the first NCCL call; later calls return at once.
void applyNcclEnvironment();

}  // namespace loom::nccl
