// Layering the tuner's constants and saying where each came from (tuner_constants.h).
#include "core/tuner_constants.h"

#include <map>
#include <vector>

#include "algorithms/calibration_cache.h"
#include "algorithms/tuning_file.h"
#include "core/registry.h"

namespace loom {

Status layerTunerConstants(const TunerLayers& layers, CommProfile* inout, std::string* sources,
                           DataPathSizes* calibrated) {
  CommProfile profile = *inout;
  // Layer names in the order they apply, and the layer that last set each key.
  std::vector<std::string> names;
  std::map<std::string, size_t> setBy;
  auto record = [&](const std::string& name, const std::vector<std::string>& keys) {
    names.push_back(name);
    for (const std::string& key : keys) setBy[key] = names.size() - 1;
  };
  if (layers.calibrationThreads > 0) {
    MachineCalibration calibration;
    LOOM_TRY(Registry::instance().machineCalibration(layers.calibrationThreads, &calibration));
    std::vector<std::string> keys;
    DataPathSizes sizes;
    LOOM_TRY(applyTuningText(calibration.text, calibration.source, &profile, &keys, &sizes));
    record("machine calibration (" + calibration.source + ")", keys);
    if (calibrated != nullptr) *calibrated = sizes;
  }
  if (!layers.tuningFile.empty()) {
    std::vector<std::string> keys;
    LOOM_TRY(loadTuningFile(layers.tuningFile, &profile, &keys));
    record("LOOM_TUNING_FILE (" + layers.tuningFile + ")", keys);
  }
  if (layers.streamingMinBytes >= 0) {
    profile.streamingMinBytes = static_cast<size_t>(layers.streamingMinBytes);
    record("LOOM_STREAMING_MIN_BYTES", {"streaming.min_bytes"});
  }
  *inout = profile;
  if (sources == nullptr) return Status::ok();

  names.push_back("built in");
  std::vector<std::string> groups(names.size());
  for (const std::string& key : tuningKeys(profile)) {
    auto found = setBy.find(key);
    std::string& group = groups[found == setBy.end() ? names.size() - 1 : found->second];
    std::string line = tuningText(profile, {key});
    line.pop_back();  // its newline
    group += (group.empty() ? "" : ", ") + line;
  }
  sources->clear();
  for (size_t i = 0; i < names.size(); ++i) {
    if (groups[i].empty()) continue;
    *sources += (sources->empty() ? "" : "; ") + names[i] + ": " + groups[i];
  }
  return Status::ok();
}

}  // namespace loom
