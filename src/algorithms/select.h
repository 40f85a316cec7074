// Which algorithm and protocol run a call: among those LOOM_ALGO and LOOM_PROTO allow, the
// one the cost model (cost_model.h) predicts fastest for the communicator's profile. Also
// parses LOOM_ALGO and LOOM_PROTO.
#pragma once

#include <array>
#include <mutex>
#include <optional>
#include <string>

#include "algorithms/algorithm.h"
#include "algorithms/cost_model.h"
#include "core/spin_lock.h"
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

// The protocols LOOM_PROTO allows: a bit per Protocol. "simple", "streaming", a list of
// them, or "^name" for all but one; unknown names and settings that allow none are
// loomInvalidArgument.
struct ProtocolSetting {
  uint32_t allowed = ~0u;
  bool allows(Protocol protocol) const { return (allowed & (1u << static_cast<unsigned>(protocol))) != 0; }
};
Status parseProtocolSetting(const std::string& value, ProtocolSetting* out);

// What the choice may depend on.
struct CallShape {
  CallInfo info;
  size_t bytes = 0;     // of the whole buffer one rank contributes or receives
  bool oneHost = true;  // every rank on this host, with the one-shot board
};

struct Choice {
  Algorithm algorithm;
  Protocol protocol;
  double predictedUs;
  const char* why;  // for the INFO log
};

// Ranks agree on the choice as long as they agree on the profile (the communicator makes
// them: communicator.cc) and on LOOM_ALGO.
Choice chooseAlgorithm(const CallShape& shape, const AlgorithmSetting& algorithms, const ProtocolSetting& protocols,
                       const CommProfile& profile);

// "ring 12.5 us, tree 14.0 us, rd 30.1 us (oneshot cannot run)": the candidates LOOM_ALGO
// allows with their predictions, fastest first, for the INFO log.
std::string describePredictions(const CallShape& shape, const AlgorithmSetting& algorithms,
                                const ProtocolSetting& protocols, const CommProfile& profile);

// Whether `algorithm` implements collective `kind`.
bool supports(CallInfo::Kind kind, Algorithm algorithm);

// A communicator's recent choices by call shape (collective, bytes, in place; everything else
// a choice depends on is fixed per communicator). Training loops and benchmarks repeat a few
// shapes, and evaluating the model for every candidate costs about 0.1 µs, a third of a
// one-shot allreduce. Thread-safe.
class ChoiceCache {
 public:
  // The cached choice for `shape`, or choose() remembered.
  template <typename Choose>
  Choice get(const CallShape& shape, Choose choose) {
    {
      std::lock_guard<SpinLock> lock(lock_);
      for (const Entry& e : entries_) {
        if (e.valid && e.kind == shape.info.kind && e.bytes == shape.bytes && e.inPlace == shape.info.inPlace) {
          return e.choice;
        }
      }
    }
    // Evaluated outside the lock; two threads that miss together store the same choice twice.
    const Choice choice = choose();
    std::lock_guard<SpinLock> lock(lock_);
    entries_[next_++ % entries_.size()] = {true, shape.info.kind, shape.bytes, shape.info.inPlace, choice};
    return choice;
  }

 private:
  struct Entry {
    bool valid = false;
    CallInfo::Kind kind = CallInfo::Kind::kSend;
    size_t bytes = 0;
    bool inPlace = false;
    Choice choice{};
  };
  SpinLock lock_;
  std::array<Entry, 8> entries_{};
  size_t next_ = 0;
};

}  // namespace loom
