// Choosing the calibration's CPUs (calibration_cpus.h).
#include "algorithms/calibration_cpus.h"

#include <sched.h>
#include <unistd.h>

#include <thread>

namespace loom {

bool runOnCpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

std::vector<int> calibrationCpus(size_t count) {
  std::vector<int> candidates;
  cpu_set_t own;
  CPU_ZERO(&own);
  if (sched_getaffinity(0, sizeof own, &own) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &own)) candidates.push_back(cpu);
    }
  }
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  for (int cpu = 0; cpu < online && cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &own)) candidates.push_back(cpu);
  }
  // Each tried on a thread of its own: the caller's binding stays as it was.
  std::vector<int> cpus;
  for (size_t i = 0; i < candidates.size() && cpus.size() < count; ++i) {
    bool allowed = false;
    std::thread probe([&] { allowed = runOnCpu(candidates[i]); });
    probe.join();
    if (allowed) cpus.push_back(candidates[i]);
  }
  return cpus;
}

}  // namespace loom
