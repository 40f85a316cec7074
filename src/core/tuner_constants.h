// The tuner's constants for a host communicator, in layers: built in (cost_model.cc), then
// the machine calibration (calibration_cache.h), then LOOM_TUNING_FILE, then
// LOOM_STREAMING_MIN_BYTES; each layer replaces only the keys it holds. Rank 0 builds them
// (Communicator::agreeOnProfile); loom-topo --predict shows the same.
#pragma once

#include <string>

#include "algorithms/cost_model.h"
#include "algorithms/tuning_file.h"
#include "base/status.h"

namespace loom {

struct TunerLayers {
  int calibrationThreads = 0;      // ranks copying at once; 0: no machine calibration
  std::string tuningFile;          // "": none
  long long streamingMinBytes = -1;  // LOOM_STREAMING_MIN_BYTES; -1: unset
};

// Applies the layers over *inout, which holds the built-in values. *sources (when not null)
// gets one line naming each layer that set something, with its keys and values, and the
// keys left built in, e.g. "machine calibration (/root/.cache/loom/machine-...txt):
// copy.gbps = 21, ...; LOOM_TUNING_FILE (t.txt): intra.gbps = 9; built in: intra.latency_us
// = 1.5, ...". A tuning file that cannot be read is the error returned; *inout is then
// untouched.
// *calibrated (when not null) gets the data-path sizes the machine calibration measured
// (shm.direct_min_bytes; -1 where it did not).
Status layerTunerConstants(const TunerLayers& layers, CommProfile* inout, std::string* sources,
                           DataPathSizes* calibrated = nullptr);

}  // namespace loom
