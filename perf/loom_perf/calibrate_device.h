// loom-perf --calibrate FILE --device cuda: measures a device communicator's constants (its
// plan kernel's hops, copy and reduction) on the job's ranks and writes them as the device.*
// keys of a tuning file (LOOM_TUNING_FILE; docs/TUNING.md). Under LOOM_DEVICE_EMULATION=1 it
// runs on the emulation, over host memory: the figures then describe CPU threads, and the run
// only shows that the calibration works.
#pragma once

#include <loom/loom.h>

#include <string>

namespace loomperf {

// Collective over `comm` (the job's host communicator, one rank per process, at least two on
// rank 0's host). Each rank's device communicators use `device`. Rank 0 writes `path` and
// prints what it measured; returns the exit status.
int calibrateDevice(loomComm_t comm, int device, bool emulated, const std::string& path);

}  // namespace loomperf
