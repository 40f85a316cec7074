// The host executor: runs plans (see algorithms/plan.h) over the communicators' links on the
// calling thread, every step moved without blocking and all of them interleaved, with
// reductions done by the SIMD kernels as bytes arrive.
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/plan.h"
#include "base/status.h"

namespace loom {

// One run at a time per communicator (a host stream and the calling thread could both reach
// one): a RunHold holds the communicators' execution locks, taken in address order so that
// groups over several never deadlock, and their transports' run (Transport::beginRun) until it
// goes. execute() holds one itself; a caller that moves bytes on the links before a plan runs
// (core/quick_messages.h) holds one around both, so that no other run's bytes come between.
class RunHold {
 public:
  // comms: sorted by address without repeats, outliving the hold.
  RunHold(Communicator* const* comms, size_t count);
  ~RunHold();
  RunHold(const RunHold&) = delete;
  RunHold& operator=(const RunHold&) = delete;

 private:
  Communicator* const* comms_;
  size_t count_;
};

// Runs every plan to completion (one plan per communicator; a group over several
// communicators passes several, which then progress together). Returns the first error. A
// failure also puts each communicator whose plan had unfinished steps in its error state,
// since its links are no longer in step with its peers. A wait ends with loomTimeout when a
// plan makes no progress for its communicator's timeoutMs, and at once on loomCommAbort.
Status execute(Plans& plans);
// execute, within a RunHold of the plans' communicators.
Status executeHeld(Plans& plans);

}  // namespace loom
