// The host constants of the cost model, measured on the machine Loom runs on instead of taken
// from the one where its defaults were tuned (docs/TUNING.md, "Machine calibration");
// calibration_cache.h measures once per machine and keeps the result.
//
// What is measured, in this process:
//   copy.gbps, reduce.gbps  one core's memcpy and float32 sum of 128 KiB arrays (in its L2)
//   streaming.min_bytes     `threads` threads copy back and forth between their own two
//                           buffers at once, 512 KiB to 64 MiB each, with plain and with
//                           non-temporal stores: the size from which calls are past the
//                           cache (pastCacheBytes). Each thread's copy of S bytes touches 2S,
//                           as an out-of-place call of S bytes does on each rank, and reads
//                           what the copy before it wrote, as a collective reads what arrived.
//   streaming.gbps          mem.gbps (built in) times how much faster non-temporal stores
//                           copied at the largest size.
//   shm.direct_min_bytes    with 2 threads or more: from which size processes read each
//                           other's large sends straight from the sender's memory rather than
//                           through the FIFO (direct_read_calibration.h; 0: never).
//   intra.latency_us,       with 2 threads or more, where the caller can measure links
//   intra.gbps,             (LinkMeasurer: core/link_calibration.h): two ranks that are threads
//   oneshot.latency_us      of this process exchange 8 B to 256 KiB through the shared-memory
//                           FIFO (the line fitted to it) and run 8 B allreduces on the one-shot
//                           board (less the model's copy and fold), as `loom-perf --calibrate`
//                           measures between processes.
//   oneshot.max_bytes.*     the same two ranks time each collective at 1 to 32 KiB on the board
//                           and through the FIFO, calls in a row (boardTimedMax).
// The rest (network links, mem.gbps) needs ranks of the job: `loom-perf --calibrate`
// measures them (and writes the keys above but oneshot.max_bytes.* too) for
// LOOM_TUNING_FILE, which overrides the calibration key by key.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/direct_read_calibration.h"
#include "algorithms/tuning_file.h"
#include "base/status.h"

namespace loom {

// What two ranks on two CPUs of this machine measured of their shared-memory link and the
// one-shot board: best µs of an exchange of each size both ways at once, of an 8 B
// allreduce, and of each collective at each of kBoardTimedBytes on the board and through the
// FIFO (calls in a row, as a loop of them runs: the slower rank's time).
struct LinkFigures {
  std::vector<std::pair<size_t, double>> exchangeUs;  // bytes each way, µs; ascending
  double oneShotUs = 0;
  struct BoardTiming {
    CallInfo::Kind kind;
    std::vector<size_t> bytes;  // the call's size as the tuner counts it (CallShape::bytes); ascending
    std::vector<double> boardUs, fifoUs;
  };
  std::vector<BoardTiming> board;
  double seconds = 0;  // what measuring took, the communicators' creation included
};

// The collectives and sizes the board is timed against the FIFO at: the sizes the tuner's
// choice between them moved over on the two VMs (1 to 32 KiB, the board's slot).
constexpr CallInfo::Kind kBoardTimedKinds[] = {CallInfo::Kind::kAllReduce, CallInfo::Kind::kBroadcast,
                                              CallInfo::Kind::kReduce,    CallInfo::Kind::kAllGather,
                                              CallInfo::Kind::kReduceScatter, CallInfo::Kind::kAllToAll};
constexpr size_t kBoardTimedBytes[] = {1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10};

// oneshot.max_bytes.<collective> from one timing: the largest size at which the board was at
// least as fast as the FIFO, or half the smallest size where it was slower at every size (the
// board keeps only calls below every size timed). A loss below a win is taken for noise: the
// board is several times faster at a few bytes, and where it loses for good, at the large
// sizes, by a margin no round's noise closes (on the Intel Xeon VM 1.2-1.4x at 16-32 KiB).
size_t boardTimedMax(const LinkFigures::BoardTiming& timing);

// Measures LinkFigures; an error leaves the link keys built in (the measurement needs
// communicators, which live above this layer).
using LinkMeasurer = std::function<Status(LinkFigures*)>;

struct MachineFigures {
  int threads = 1;
  double copyGbps = 0;
  double reduceGbps = 0;
  size_t streamingMinBytes = 0;  // pastCacheBytes(copies)
  double streamingSpeedup = 0;   // plain-store time over non-temporal time at maxBytes
  size_t maxBytes = 0;           // the largest copy measured per thread
  // Each size measured: GB/s per thread with plain stores and with non-temporal ones.
  struct Copy {
    size_t bytes;
    double plainGbps, streamingGbps;
  };
  std::vector<Copy> copies;
  // With 2 threads or more, direct reads against the FIFO (direct.minBytes), or why not.
  bool directMeasured = false;
  DirectReadFigures direct;
  std::string directNote;
  // With 2 threads or more and a LinkMeasurer: the links and the board, or why not.
  bool linksMeasured = false;
  LinkFigures links;
  LinkCost intra;  // the line fitted to links.exchangeUs
  std::string linksNote;
  double seconds = 0;            // what measuring took
};

// Copies per thread go up to this size (less with many threads: all of them hold 256 MiB
// of buffers at most).
constexpr size_t kCalibrationMaxCopyBytes = size_t{64} << 20;

// Measures with `threads` threads (1 or more; pinned one per CPU this process may use when
// it may use that many), copying up to `maxCopyBytes` (512 KiB or more) per thread; with 2
// threads or more the links too where `measureLinks` is given.
Status measureMachine(int threads, size_t maxCopyBytes, MachineFigures* out,
                      const LinkMeasurer& measureLinks = nullptr);

// From which copy size calls are past the cache (0: none): the smallest size from which, at
// every larger size too, plain copies run at memory speed (no more than 1.5x the largest
// size's, where the fastest size ran at least twice that: a cache to leave), or non-temporal
// stores win (at least 3 % faster). Whether a call past the cache then stores non-temporally
// is decided while calls run (LOOM_REDUCTION_STORES, LOOM_SHM_FIFO_STORES): a lone copy's
// verdict differs from a collective's on both machines met (docs/RESULTS.md).
size_t pastCacheBytes(const std::vector<MachineFigures::Copy>& copies);

// The calibration's keys (tuning_file.h), the link keys with them where `links`, and their
// values for `figures`, over `base` (whose mem.gbps scales streaming.gbps; the link keys stay
// base's where figures.linksMeasured is false); with 2 threads or more also the data-path
// size shm.direct_min_bytes (machineCalibrationSizes).
std::vector<std::string> machineCalibrationKeys(bool links = false);
CommProfile applyMachineFigures(const MachineFigures& figures, const CommProfile& base);
DataPathSizes machineCalibrationSizes(const MachineFigures& figures);

}  // namespace loom
