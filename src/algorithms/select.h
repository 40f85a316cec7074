// Which algorithm runs a call: the first that LOOM_ALGO allows in the order a size and
// rank-count rule prefers (until the tuner lands). Also parses LOOM_ALGO.
#pragma once

#include <array>
#include <optional>
#include <string>

#include "algorithms/algorithm.h"
#include "core/status.h"

namespace loom {

// The algorithms LOOM_ALGO allows per call kind (indexed by CallInfo::Kind): a bit per
// Algorithm; every algorithm when unset.
struct AlgorithmSetting {
  std::array<uint32_t, 16> allowed;
  AlgorithmSetting() { allowed.fill(~0u); }
  bool allows(CallInfo::Kind kind, Algorithm algorithm) const;
  // The one algorithm allowed for `kind` among those it supports, if exactly one.
  std::optional<Algorithm> forced(CallInfo::Kind kind) const;
};

// Comma-separated items, NCCL-like: "ring" or "ring,tree" allow only those (for every
// collective that has one of them), "^oneshot" allows all but that, "allreduce=tree" and
// "allreduce=^rd" apply to one collective. Unknown names, unknown collectives, algorithms a
// named collective lacks and settings that leave a collective nothing are loomInvalidArgument.
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
