// Plain or non-temporal stores for large writes, chosen by timing both where Loom runs. Two
// writers use it:
// - a shared-memory FIFO's writer (LOOM_SHM_FIFO_STORES): plain stores leave the lines in its
//   cache for the reader to fetch, non-temporal ones send them to memory. Plain stores are
//   twice as fast where the two cores share a cache; non-temporal ones 2-5x where the cores
//   reach each other's caches slowly (two CCDs or sockets, or a VM's slow phase; docs/
//   RESULTS.md). A plain copy has to take every line back from the reader's cache, so it
//   slows down with the distance, where a non-temporal copy does not.
// - a call on the streaming protocol writing what it reduces into the caller's buffer
//   (LOOM_REDUCTION_STORES): non-temporal stores save the read of each destination line,
//   plain ones cost that read but no trip past the cache. Which is faster depends on the
//   machine and its phase (docs/RESULTS.md: plain reductions 1.25x faster inside a 2-rank
//   allreduce on the AMD EPYC VM, where a lone core's streamed reduction is the faster one).
//   A writer's own timing misses what plain stores cost later, when the dirty lines go back
//   to memory: for plain copies out of a FIFO it said 10-15 % faster where whole calls ran
//   10-20 % slower, so those stay non-temporal, unmeasured.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "base/env.h"
#include "base/status.h"

namespace loom::transport {

enum class Stores { kCached, kStreaming, kAuto };
// The settings' word for it: cached, streaming, auto.
const char* storesName(Stores stores);
// Reads environment variable `variable` (one of the words above, its default when unset).
Status readStoresSetting(const char* variable, Stores* out, env::From from = env::From::kEnvironment);

class StoreChooser {
 public:
  // Writes smaller than this are plain whatever the setting: their reader waits for them,
  // and a trip through memory would cost it latency.
  static constexpr size_t kStreamingMinBytes = 4096;
  // Writes from this size are timed when sampled: long enough for two clock reads not to
  // count.
  static constexpr size_t kSampledMinBytes = 16384;
  // One sampled write in this many of the timed-size ones.
  static constexpr uint32_t kSampleEvery = 32;
  // One sample in this many times the kind of stores not in use, the rest the kind in use:
  // where the other kind is the slow one (plain stores into a FIFO in the slow phase, 20x
  // slower), each of its samples costs the time of many writes.
  static constexpr uint32_t kOtherEvery = 8;
  // Each kind's speed is the median of its last samples: a copy cut by an interrupt or a
  // preemption does not decide.
  static constexpr int kWindow = 5;

  struct Rules {
    Stores setting;
    // Plain stores are kept while their writes run at least this share of the non-temporal
    // ones' speed...
    double plainShare;
    // ...with this hysteresis (1: none): the kind in use is left only once the other writes
    // this many times faster than the share says, so that near-equal medians do not flap.
    double margin;
    // What auto uses before both kinds were timed.
    bool startStreaming;
  };
  // A FIFO writer: plain stores unless they run below a quarter of the non-temporal ones.
  // Measured inside Loom's allreduce on the AMD EPYC VM (docs/RESULTS.md): the median plain
  // copy at 0.85-0.9 of the non-temporal one where the cores share a cache, its slowest tenth
  // at 0.5; 0.05 in the slow phase, its fastest tenth at 0.2. The reader's side, which a
  // writer's timing does not see, favours plain stores by more than the writer's copies show.
  static Rules fifoRules(Stores setting) { return {setting, 0.25, 1.0, false}; }
  // A reduction's results in the caller's buffer: whichever kind writes a tenth faster,
  // non-temporal first (the streaming protocol's own). Without the margin, medians within a
  // few percent of each other turned the choice every few calls on the AMD EPYC VM.
  static Rules reductionRules(Stores setting) { return {setting, 1.0, 1.1, true}; }

  explicit StoreChooser(Rules rules) : rules_(rules) {}

  // Whether a write of `bytes` uses non-temporal stores, and whether it is timed: then it
  // starts now, and ended() takes its time once it is done.
  struct Choice {
    bool streaming = false;
    bool timed = false;
    std::chrono::steady_clock::time_point start{};
  };
  Choice next(size_t bytes);
  // A timed write (Choice::timed) that has just ended; true when it changed the choice.
  bool ended(const Choice& choice, size_t bytes);
  // A timed write's duration; true when it changed the choice.
  bool record(const Choice& choice, size_t bytes, uint64_t nanoseconds);
  // What auto chose so far (the setting itself otherwise).
  bool streaming() const { return streaming_; }
  // The recent speed of one kind's timed writes, GB/s (0: none timed yet).
  double recentGbps(bool streaming) const;

 private:
  Rules rules_;
  bool streaming_ = rules_.setting == Stores::kAuto ? rules_.startStreaming : rules_.setting == Stores::kStreaming;
  uint32_t sized_ = 0;    // writes of kSampledMinBytes or more
  uint32_t samples_ = 0;  // sampled so far
  // The last samples of plain [0] and non-temporal [1] writes, bytes per ns, in a ring.
  double samplesOf_[2][kWindow] = {};
  int count_[2] = {0, 0};  // samples taken of each kind
};

}  // namespace loom::transport
