// The cross-rank check that every rank registered the same tensors (torch DDP's
// verify_param_shape_across_processes): a hash first, the full list only when hashes differ.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "ddp/bucket_assignment.h"
#include "loom/loom.h"

namespace loom::ddp {

// Collective. loomInvalidUsage when the lists differ, naming the first differing tensor
// (`names`, in this rank's words), the ranks and what each has.
Status checkSameShapes(loomComm_t comm, const std::vector<TensorShape>& shapes, const std::vector<std::string>& names);

}  // namespace loom::ddp
