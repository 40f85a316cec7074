// The host executor: runs plans (see algorithms/plan.h) over the communicators' links on the
// calling thread, every step moved without blocking and all of them interleaved, with
// reductions done by the SIMD kernels as bytes arrive.
#pragma once

#include <vector>

#include "algorithms/plan.h"
#include "base/status.h"

namespace loom {

// Runs every plan to completion (one plan per communicator; a group over several
// communicators passes several, which then progress together). Returns the first error. A
// failure also puts each communicator whose plan had unfinished steps in its error state,
// since its links are no longer in step with its peers. A wait ends with loomTimeout when a
// plan makes no progress for its communicator's timeoutMs, and at once on loomCommAbort.
Status execute(Plans& plans);

}  // namespace loom
