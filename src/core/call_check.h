// LOOM_CHECK=1: before the plans of a launch run, the ranks of each communicator in it
// exchange the collectives they are about to run there (one small allgather), so that a
// mismatch is loomInvalidUsage on every rank, naming the ranks and the field that differ,
// before any data moves. Without the check a mismatch is still caught, by the call headers
// between ranks that exchange data, but only there (the others see those ranks give up).
#pragma once

#include <vector>

#include "algorithms/plan.h"
#include "base/status.h"

namespace loom {

// Checks the plans that hold collectives, of communicators whose config has `check`;
// others (sends and receives alone, which involve only their peers) are skipped.
Status checkCalls(Plans& plans);

}  // namespace loom
