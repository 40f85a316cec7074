// loom-perf --calibrate's data-path sizes (the tuning file's chunk.bytes, shm.fifo_bytes and
// socket.sndbuf): each chosen by timing the tuner's allreduce on communicators created with
// every candidate value, as a user's job would run with it.
#pragma once

#include <loom/loom.h>

#include <cstddef>

#include "algorithms/tuning_file.h"

namespace loomperf {

// What decides which sizes a job can measure.
struct SizesJob {
  int rank = 0;
  int nranks = 0;
  bool sharedMemory = false;  // shared memory joins some pair of ranks
  bool sockets = false;       // Loom's sockets (not UCX) join some pair of ranks
  size_t pastCache = 0;       // calls of this size no longer fit the cache (0: none measured)
  int rounds = 1;             // each time is the fastest of this many rounds
};

// Collective over `comm`. Rank 0 prints every candidate's times; every rank returns the
// chosen sizes, -1 where the job cannot measure one (the output says why).
loom::DataPathSizes calibrateSizes(loomComm_t comm, const SizesJob& job);

}  // namespace loomperf
