// loom-perf --calibrate FILE: measures the cost model's constants on the job's ranks and
// writes them as a tuning file (LOOM_TUNING_FILE; docs/TUNING.md).
#pragma once

#include <loom/loom.h>

#include <string>

namespace loomperf {

// Collective over `comm` (one rank per process, at least two). Rank 0 writes `path` and
// prints what it measured; returns the exit status.
int calibrate(loomComm_t comm, const std::string& path);

}  // namespace loomperf
