// The machine calibration (machine_calibration.h) measured once per machine and kept: a
// communicator's rank 0 asks at creation; the first ask on a machine measures (a few tenths
// of a second) and writes the result as a tuning file under $XDG_CACHE_HOME/loom/, keyed by
// CPU model, L2 and L3 sizes, CPU count, ranks copying at once, Loom's version and build;
// later asks read it (tens of microseconds). The file is a tuning file: LOOM_TUNING_FILE can
// load it too.
#pragma once

#include <cstddef>
#include <string>

#include "algorithms/machine_calibration.h"
#include "base/status.h"

namespace loom {

// What a calibration gives a communicator: tuning-file lines, and where they came from.
struct MachineCalibration {
  std::string text;    // tuning-file lines (tuning_file.h) of machineCalibrationKeys()
  std::string source;  // "<cache file> (measured now in 0.31 s)", "<cache file>", or
                       // "measured now in 0.31 s, not cached: <why>"
};

// Whether this build runs under a sanitizer, whose copies run at a fraction of the machine's
// speed.
bool sanitizedBuild();

// How many threads the calibration for `ranksOnHost` ranks copies with: one per rank, at
// most one per CPU (ranks beyond the CPUs take turns, they do not add copying); 0 (no
// calibration) in a sanitized build.
int calibrationThreadsFor(int ranksOnHost);

// The cache's key for `threads` copying at once on this machine with this build of Loom.
std::string machineCalibrationKey(int threads);

// $XDG_CACHE_HOME/loom, else $HOME/.cache/loom (a relative XDG_CACHE_HOME is ignored, as
// the XDG base directory rule says); "" when neither is set.
std::string machineCalibrationDir();

// The calibration for `threads` under `cacheDir` ("": no cache): its file when the file is
// there and was written for this key, otherwise measured (copies up to `maxCopyBytes` per
// thread; with 2 threads or more the links by `measureLinks` where given) and written there
// (atomically: a rename; a directory that cannot be written costs the cache, not the
// calibration). A file that cannot be read as a tuning file, or lacks the link keys asked
// for, is measured over and replaced (with a warning where it is broken). Where the links
// could not be measured the rest is returned, their keys are left out and nothing is
// written: the next process measures again.
Status loadOrMeasureMachineCalibration(int threads, const std::string& cacheDir, MachineCalibration* out,
                                       size_t maxCopyBytes = kCalibrationMaxCopyBytes,
                                       const LinkMeasurer& measureLinks = nullptr);

}  // namespace loom
