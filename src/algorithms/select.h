// Which algorithm runs a call: LOOM_ALGO when it names one the call can use, otherwise a
// size and rank-count rule (until the tuner lands). Also parses LOOM_ALGO.
#pragma once

#include <array>
#include <optional>
#include <string>

#include "algorithms/algorithm.h"
#include "core/status.h"

namespace loom {

// Forced algorithm per call kind (indexed by CallInfo::Kind), from LOOM_ALGO.
struct AlgorithmSetting {
  std::array<std::optional<Algorithm>, 16> forced;
};

// "ring" (every collective that has a ring), or "allreduce=tree,broadcast=ring". Unknown
// names, unknown collectives and algorithms a named collective lacks are loomInvalidArgument.
Status parseAlgorithmSetting(const std::string& value, AlgorithmSetting* out);

// What the choice may depend on.
struct CallShape {
  CallInfo info;
  size_t bytes = 0;     // of the whole buffer one rank contributes or receives
  int nranks = 1;
  bool oneHost = true;  // every rank on this host, with shared memory on
};

struct Choice {
  Algorithm algorithm;
  const char* why;  // for the INFO log
};

Choice chooseAlgorithm(const CallShape& shape, const AlgorithmSetting& setting);

// Whether `algorithm` implements collective `kind`.
bool supports(CallInfo::Kind kind, Algorithm algorithm);

}  // namespace loom
