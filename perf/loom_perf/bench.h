// One thread's part of a loom-perf run: nccl-tests' sweep (every type, op, root and size,
// out of place then in place) over the ranks this thread drives, in step with every other
// rank of the job.
#pragma once

#include <loom/loom.h>

#include <string>
#include <vector>

#include "options.h"
#include "report.h"

namespace loomperf {

struct ThreadRanks {
  std::vector<loomComm_t> comms;  // one per rank, -g of them, all driven by this thread
  // loom-perf's own calls (barriers, times, #wrong, the header) on host memory: with --device
  // cuda, host communicators over the same ranks; on host, the same as comms.
  std::vector<loomComm_t> control;
  std::vector<int> devices;       // --device cuda: each rank's CUDA device; empty on host
  std::vector<int> ranks;         // their ranks in the job
  int nranks = 0;                 // ranks in the job
};

// One line per rank of the job, in rank order, on the thread holding rank 0 (empty on the
// others): pid, host and cpus (or the CUDA device), as nccl-tests lists its devices.
std::vector<std::string> describeRanks(const ThreadRanks& t);

// Runs the sweep for `algorithm` (a label only: the communicators were made with it).
// `report` is non-null on the thread holding rank 0. Returns the #wrong total, the same on
// every rank.
long long runSweep(const Options& o, const ThreadRanks& t, const std::string& algorithm,
                   Report* report);

}  // namespace loomperf
