// The machine calibration's shared-memory link and one-shot board (machine_calibration.h):
// two ranks that are threads of this process, on two CPUs, measure them as `loom-perf
// --calibrate` does between processes (on the Intel Xeon VM the two lines agreed within
// 0.1-0.7 µs at 8 B to 256 KiB: docs/RESULTS.md), and time each collective on the board and
// through the FIFO at the sizes where the tuner chooses between them. Their two communicators
// take the built-in data path whatever this process's LOOM_* variables say (the result is
// cached for the machine, not for one job's settings), and no machine calibration of their own.
#pragma once

#include "algorithms/machine_calibration.h"
#include "base/status.h"
#include "core/communicator.h"

namespace loom {

// The thread ranks' configs: the built-in one whatever this process's environment says
// (builtInConfig: shared memory, built-in sizes, no tuning file or mismatch checks), with
// every collective on the one-shot board (`board`) or none, no machine calibration of its own
// (the registry's lock is held while it measures), and 10 s waits.
Status linkCalibrationConfig(bool board, CommConfig* out);

// Each exchange size (8 B to 256 KiB, both ways at once in one grouped call, as a ring step)
// through the FIFO, an 8 B float32 allreduce on the one-shot board, and each collective of
// kBoardTimedKinds at each of kBoardTimedBytes on the board and through the FIFO (out of
// place, float32, root 0), the best of 5 rounds in turn, each the slower rank's time. Sizes
// from which LOOM_SHM_DIRECT_MIN_BYTES lets threads read each other directly are left out of
// the exchanges (fewer than three left: an error). loomSystemError where two CPUs or the
// communicators cannot be had, the calls' own error where one fails (each waits 10 s at most).
Status measureSharedMemoryLinks(LinkFigures* out);

}  // namespace loom
