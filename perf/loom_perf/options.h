// loom-perf's command line: nccl-tests' flags, with their letters and defaults, and Loom's own
// (long options only). `loom-perf --help` prints the list.
#pragma once

#include <loom/loom.h>

#include <cstddef>
#include <string>
#include <vector>

namespace loomperf {

enum class Collective { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll, kSendRecv };

// How the ranks' times become the one printed (nccl-tests' -a).
enum class Average { kRank0 = 0, kMean = 1, kMin = 2, kMax = 3 };

// In --algo, the sweep that leaves the choice to Loom's tuner (LOOM_ALGO as the user set it).
inline constexpr const char* kTunedAlgorithm = "tuned";

struct Options {
  Collective collective = Collective::kAllReduce;
  std::string program;  // shown in the header: "loom-perf allreduce" or the alias it ran as

  // nccl-tests' flags.
  size_t minBytes = size_t{32} << 20;  // -b
  size_t maxBytes = size_t{32} << 20;  // -e
  size_t stepBytes = size_t{1} << 20;  // -i, used when -f is 1
  size_t stepFactor = 1;               // -f
  int iters = 20;                      // -n
  int warmupIters = 1;                 // -w
  int aggIters = 1;                    // -m: calls per iteration, in one group
  int runCycles = 1;                   // -N: sweeps (0: until interrupted)
  int check = 1;                       // -c: checked calls per size and mode (0: none)
  std::vector<loomRedOp_t> ops{loomSum};         // -o, "all" for every op
  std::vector<loomDataType_t> types{loomFloat32};  // -d, "all" for every type
  int root = 0;                        // -r, -1: every rank in turn
  Average average = Average::kMean;    // -a
  bool blocking = false;               // -z: wait for each call before the next
  // -y: NULL stream, the call runs in the calling thread (default on host; -y 0 gives each rank
  // a host stream, a progress thread that runs the calls as a CUDA stream would). Ignored with
  // --device cuda, where each rank has a non-blocking CUDA stream (-y 1 is refused there).
  bool nullStream = true;
  int threads = 1;                     // -t: threads per process
  int ranksPerThread = 1;              // -g: ranks (GPUs with --device cuda) per thread
  int timeoutSeconds = 0;              // -T: deadline of every wait (0: Loom's default)
  int graphLaunches = 0;               // -G: capture -n calls in a CUDA graph, launch it N times
  std::string jsonPath;                // -J / --json
  bool registerBuffers = false;        // -R 1, 2: loomCommRegister the send and receive buffers
  bool loomMemory = false;             // -R 2: host buffers from loomMemAlloc

  // Loom's own.
  bool cuda = false;                   // --device cuda|host: buffers in device memory
  std::vector<std::string> algorithms;  // --algo a,b: one sweep each (empty: Loom's choice)
  double minTime = 0;                  // --min-time: lengthen a timed loop to this many seconds
  bool pin = false;                    // --pin: each rank's thread on its own cpu
  std::string csvPath;                 // --csv
  std::string plotPath;                // --plot (.svg)
  bool testCorrupt = false;            // --test-corrupt: a fault switch for loom-perf's own tests
  std::string calibratePath;           // --calibrate FILE: write a tuning file, no sweep
};

// Fills *out from argv. Returns -1 when the run should go on; otherwise the exit status
// (0 after --help, 2 after a message on stderr saying what was wrong).
int parseOptions(int argc, char** argv, Options* out);

// Message sizes in bytes, nccl-tests' way: from -b, times -f (or plus -i) while <= -e.
std::vector<size_t> sweepSizes(const Options& o);

const char* collectiveName(Collective c);  // "allreduce"

}  // namespace loomperf
