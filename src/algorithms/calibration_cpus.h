// The CPUs the machine calibration's threads run on (machine_calibration.h), one each, as the
// ranks of a host run during a collective.
#pragma once

#include <cstddef>
#include <vector>

namespace loom {

// Up to `count` CPUs a thread of this process may run on: this process's own first, then
// others the system allows. A rank that its launcher bound to one core (mpirun --bind-to
// core, loom-perf --pin) still measures ranks on separate cores, as they run; the measurement
// lasts a fraction of a second, once per machine. Fewer where the system has fewer.
std::vector<int> calibrationCpus(size_t count);

// Puts the calling thread on `cpu` alone; false where the system does not let it run there.
bool runOnCpu(int cpu);

}  // namespace loom
