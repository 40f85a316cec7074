// Choosing the data-path sizes by measurement (calibrate_sizes.h).
#include "calibrate_sizes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/env.h"
#include "calibrate_comm.h"
#include "fatal.h"

namespace loomperf {
namespace {

// A size stays built in unless another value's calls take this much less time on average: on
// the shared machines we measure on, the best of a few rounds still moves by a few percent.
constexpr double kMargin = 0.03;

struct Candidates {
  const char* key;       // the tuning file's
  const char* variable;  // what a communicator is created with
  std::vector<long long> values;  // the built-in value among them
};

long long builtIn(const char* variable) {
  for (const loom::env::Variable& v : loom::env::variables()) {
    if (std::strcmp(v.name, variable) == 0) return std::atoll(v.defaultValue);
  }
  fatal("--calibrate: %s is not a Loom variable", variable);
}

std::string bytesText(size_t bytes) {
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

// Timed calls per measurement: a few milliseconds' worth, at least 3.
int itersFor(size_t bytes) { return static_cast<int>(std::clamp<size_t>((size_t{64} << 20) / bytes, 3, 50)); }

// The candidate whose calls are fastest against the built-in value's, on communicators
// created under `fixed` plus the candidate. Every round creates each candidate's communicator
// once, starting at a different candidate, so a slow phase of the machine falls on all alike.
long long choose(loomComm_t comm, const SizesJob& job, const Candidates& c, const Settings& fixed,
                 const std::vector<size_t>& calls) {
  const long long defaultValue = builtIn(c.variable);
  const size_t n = c.values.size();
  const size_t defaultIndex =
      static_cast<size_t>(std::find(c.values.begin(), c.values.end(), defaultValue) - c.values.begin());
  if (defaultIndex == n) fatal("--calibrate: %s's built-in %lld is not among its candidates", c.key, defaultValue);
  std::vector<std::vector<double>> best(n, std::vector<double>(calls.size(), HUGE_VAL));
  for (int round = 0; round < job.rounds; ++round) {
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (k + static_cast<size_t>(round)) % n;
      Settings settings = fixed;
      settings.emplace_back(c.variable, std::to_string(c.values[i]));
      ScopedComm candidate(comm, job.rank, job.nranks, settings);
      for (size_t j = 0; j < calls.size(); ++j) {
        best[i][j] = std::min(best[i][j], allReduceUs(candidate.get(), calls[j], itersFor(calls[j])));
      }
    }
  }
  size_t chosen = defaultIndex;
  double chosenRatio = 1.0;
  for (size_t i = 0; i < n; ++i) {
    double ratio = 0;
    for (size_t j = 0; j < calls.size(); ++j) ratio += best[i][j] / best[defaultIndex][j];
    ratio /= static_cast<double>(calls.size());
    if (job.rank == 0) {
      std::string times;
      for (size_t j = 0; j < calls.size(); ++j) {
        times += (j ? ", " : "") + bytesText(calls[j]) + " " + std::to_string(static_cast<long long>(best[i][j])) + " us";
      }
      std::printf("#   %s %s: %.3f of the built-in's time (%s)\n", c.key,
                  c.values[i] == 0 ? "0" : bytesText(static_cast<size_t>(c.values[i])).c_str(), ratio, times.c_str());
    }
    if (ratio < chosenRatio && ratio < 1.0 - kMargin) {
      chosen = i;
      chosenRatio = ratio;
    }
  }
  if (job.rank == 0) {
    std::printf("#   %s = %lld (%s)\n", c.key, c.values[chosen],
                chosen == defaultIndex ? "built in: no other value was 3% faster" : "fastest");
  }
  return c.values[chosen];
}

}  // namespace

loom::DataPathSizes calibrateSizes(loomComm_t comm, const SizesJob& job) {
  // Calls inside the cache, at its edge and past it, where the pipeline's pieces matter.
  const size_t pastCache = job.pastCache > 0 ? job.pastCache : size_t{64} << 20;
  const std::vector<size_t> calls = {std::max<size_t>(64 << 10, pastCache / 32), pastCache / 4, pastCache};
  loom::DataPathSizes sizes;
  sizes.chunkBytes = choose(comm, job, {"chunk.bytes", "LOOM_CHUNK_SIZE", {128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20}},
                            {}, calls);
  const Settings chunk = {{"LOOM_CHUNK_SIZE", std::to_string(sizes.chunkBytes)}};
  if (job.sharedMemory) {
    sizes.shmFifoBytes = choose(comm, job,
                                {"shm.fifo_bytes", "LOOM_SHM_FIFO_BYTES", {256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20}},
                                chunk, calls);
  } else if (job.rank == 0) {
    std::printf("#   shm.fifo_bytes: no shared memory between these ranks, not measured\n");
  }
  if (job.sockets) {
    sizes.socketSendBuffer = choose(comm, job,
                                    {"socket.sndbuf", "LOOM_SOCKET_SNDBUF", {0, 128 << 10, 256 << 10, 512 << 10, 1 << 20}},
                                    chunk, calls);
  } else if (job.rank == 0) {
    std::printf("#   socket.sndbuf: no Loom sockets between these ranks, not measured\n");
  }
  return sizes;
}

}  // namespace loomperf
