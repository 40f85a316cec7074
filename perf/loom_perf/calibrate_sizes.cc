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
#include "plot/svg_plot.h"

namespace loomperf {
namespace {

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

// Timed calls per measurement: a few milliseconds' worth, at least 3.
int itersFor(size_t bytes) { return static_cast<int>(std::clamp<size_t>((size_t{64} << 20) / bytes, 3, 50)); }

// One setting to time a communicator with: `size`'s variable at `value`, or (size null)
// every size built in.
struct Trial {
  const Candidates* size;
  long long value;
  std::vector<double> best;  // per call size, µs: the fastest round
};

std::string valueText(long long value) {
  return value == 0 ? "0" : loomplot::sizeLabel(static_cast<double>(value));
}

// The value of `c` whose calls are fastest against `builtIns`' (every size built in), the
// built-in value unless another is clearlyFaster; rank 0 prints every value's times.
long long choose(const Candidates& c, const std::vector<Trial>& trials, const Trial& builtIns,
                 const std::vector<size_t>& calls, int rank) {
  const long long defaultValue = builtIn(c.variable);
  long long chosen = defaultValue;
  double chosenRatio = 1.0;
  for (long long value : c.values) {
    const Trial* trial = &builtIns;
    for (const Trial& t : trials) {
      if (t.size == &c && t.value == value) trial = &t;
    }
    double ratio = 0;
    for (size_t j = 0; j < calls.size(); ++j) ratio += trial->best[j] / builtIns.best[j];
    ratio /= static_cast<double>(calls.size());
    if (rank == 0) {
      std::string times;
      for (size_t j = 0; j < calls.size(); ++j) {
        times += (j ? ", " : "") + loomplot::sizeLabel(static_cast<double>(calls[j])) + " " +
                 std::to_string(static_cast<long long>(trial->best[j])) + " us";
      }
      std::printf("#   %s %s: %.3f of the built-in's time (%s)\n", c.key, valueText(value).c_str(), ratio,
                  times.c_str());
    }
    if (ratio < chosenRatio && clearlyFaster(ratio)) {
      chosen = value;
      chosenRatio = ratio;
    }
  }
  if (rank == 0) {
    std::printf("#   %s = %lld (%s)\n", c.key, chosen,
                chosen == defaultValue ? "built in: no other value was 3% faster" : "fastest");
  }
  return chosen;
}

}  // namespace

loom::DataPathSizes calibrateSizes(loomComm_t comm, const SizesJob& job) {
  // Calls inside the cache, at its edge and past it, where the pipeline's pieces matter.
  const size_t pastCache = job.pastCache > 0 ? job.pastCache : size_t{64} << 20;
  const std::vector<size_t> calls = {std::max<size_t>(64 << 10, pastCache / 32), pastCache / 4, pastCache};
  const Candidates chunk{"chunk.bytes", "LOOM_CHUNK_SIZE", {128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20}};
  const Candidates fifo{"shm.fifo_bytes", "LOOM_SHM_FIFO_BYTES", {256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20}};
  const Candidates sendBuffer{"socket.sndbuf", "LOOM_SOCKET_SNDBUF", {0, 128 << 10, 256 << 10, 512 << 10, 1 << 20}};
  std::vector<const Candidates*> measured = {&chunk};
  if (job.sharedMemory) {
    measured.push_back(&fifo);
  } else if (job.rank == 0) {
    std::printf("#   shm.fifo_bytes: no shared memory between these ranks, not measured\n");
  }
  if (job.sockets) {
    measured.push_back(&sendBuffer);
  } else if (job.rank == 0) {
    std::printf("#   socket.sndbuf: no Loom sockets between these ranks, not measured\n");
  }
  // One trial with every size built in, and one per other candidate value, each varying one
  // size from there. All of them take turns in every round, each round starting at another:
  // a slow phase of the machine falls on all alike instead of on one size's candidates.
  std::vector<Trial> trials = {{nullptr, 0, std::vector<double>(calls.size(), HUGE_VAL)}};
  for (const Candidates* c : measured) {
    for (long long value : c->values) {
      if (value != builtIn(c->variable)) trials.push_back({c, value, std::vector<double>(calls.size(), HUGE_VAL)});
    }
  }
  for (int round = 0; round < job.rounds; ++round) {
    for (size_t k = 0; k < trials.size(); ++k) {
      Trial& trial = trials[(k + static_cast<size_t>(round)) % trials.size()];
      Settings settings;
      if (trial.size != nullptr) settings.emplace_back(trial.size->variable, std::to_string(trial.value));
      ScopedComm candidate(comm, job.rank, job.nranks, settings);
      for (size_t j = 0; j < calls.size(); ++j) {
        trial.best[j] = std::min(trial.best[j], allReduceUs(candidate.get(), calls[j], itersFor(calls[j])));
      }
    }
  }
  loom::DataPathSizes sizes;
  sizes.chunkBytes = choose(chunk, trials, trials[0], calls, job.rank);
  if (job.sharedMemory) sizes.shmFifoBytes = choose(fifo, trials, trials[0], calls, job.rank);
  if (job.sockets) sizes.socketSendBuffer = choose(sendBuffer, trials, trials[0], calls, job.rank);
  return sizes;
}

}  // namespace loomperf
