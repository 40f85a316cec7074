// Which algorithm and protocol run a call: among those LOOM_ALGO and LOOM_PROTO allow, the
// one the cost model (cost_model.h) predicts fastest for the communicator's profile, except
// between the one-shot board and the FIFO where the machine calibration timed the two
// (CommProfile::oneShotTimedMax). Also parses LOOM_ALGO and LOOM_PROTO.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "algorithms/algorithm.h"
#include "algorithms/cost_model.h"
#include "base/spin_lock.h"
#include "base/status.h"

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

// The protocols LOOM_PROTO allows: a bit per Protocol. "simple", "streaming", "ll", a list of
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
  // Every rank on this host, with the one-shot board open to this call (not to an allreduce
  // that goes to the mapped allreduce first: core/collective.cc).
  bool oneHost = true;
  // The ranks agree that every one of them calls in place (the mapped allreduce's first board
  // round tells them: core/mapped_allreduce.h); without that, in place is this rank's own.
  bool everyRankInPlace = false;
};

struct Choice {
  Algorithm algorithm;
  Protocol protocol;
  double predictedUs;
  const char* why;  // for the INFO log
};

// Ranks agree on the algorithm as long as they agree on the profile (the communicator makes
// them: communicator.cc), on LOOM_ALGO and on everyRankInPlace, whichever of them call in
// place; the protocol is each rank's own.
Choice chooseAlgorithm(const CallShape& shape, const AlgorithmSetting& algorithms, const ProtocolSetting& protocols,
                       const CommProfile& profile);

// "ring 12.5 us, tree 14.0 us, rd 30.1 us (oneshot cannot run)": the candidates LOOM_ALGO
// allows with their predictions, fastest first, for the INFO log.
std::string describePredictions(const CallShape& shape, const AlgorithmSetting& algorithms,
                                const ProtocolSetting& protocols, const CommProfile& profile);

// The collective's name as LOOM_ALGO writes it ("allreduce", "reducescatter", ...; "" for
// point-to-point and the barrier).
const char* collectiveName(CallInfo::Kind kind);

// Whether `algorithm` implements collective `kind`.
bool supports(CallInfo::Kind kind, Algorithm algorithm);

// A communicator's recent choices by call shape (collective, bytes, in place, every rank in
// place; everything else a choice depends on is fixed per communicator). Training loops and
// benchmarks repeat a few shapes, and evaluating the model for every candidate costs about
// 0.1 µs, a third of a one-shot allreduce. Thread-safe. A hit takes no lock (a locked instruction is ~5 ns of a
// 150 ns allreduce): the entries are a seqlock, which misses rewrite one at a time.
class ChoiceCache {
 public:
  // The cached choice for a call like `call` (its collective and in-place flag) of `bytes`
  // (CallShape::bytes) and `everyRankInPlace` (CallShape's), or choose() remembered.
  template <typename Choose>
  Choice get(const CallInfo& call, size_t bytes, bool everyRankInPlace, Choose choose) {
    const uint64_t key = keyOf(call, bytes, everyRankInPlace);
    Choice found;
    if (key != 0 && find(key, &found)) return found;
    // Evaluated outside the lock; two threads that miss together store the same choice twice.
    const Choice choice = choose();
    if (key != 0) remember(key, choice);
    return choice;
  }

 private:
  // Valid bit, bytes, collective and the in-place flags in one word; 0 (not cached) for a
  // size too big to fit, which no machine can allocate.
  static uint64_t keyOf(const CallInfo& call, size_t bytes, bool everyRankInPlace);
  bool find(uint64_t key, Choice* out) const;
  void remember(uint64_t key, const Choice& choice);

  // Every field atomic: a reader may race a writer, and throws away what it read then.
  struct Entry {
    std::atomic<uint64_t> key{0};
    std::atomic<uint32_t> method{0};  // algorithm << 8 | protocol
    std::atomic<double> predictedUs{0};
    std::atomic<const char*> why{nullptr};
  };
  std::atomic<uint64_t> version_{0};  // odd while a writer changes an entry
  SpinLock writer_;
  std::array<Entry, 8> entries_{};
  size_t next_ = 0;  // under writer_
};

}  // namespace loom
