// loom-perf: Loom's collectives measured and checked the way nccl-tests measures NCCL's, with
// its flags and its table, so that figures compare line for line. See `loom-perf --help` and
// docs/PERF.md.
//
// Ranks: the processes a launcher started (loomrun, mpirun, srun, torchrun; one process
// without one) x -t threads each x -g ranks per thread. Rank p*t*g + i*g + j is process p's
// thread i's j-th rank. The processes find each other through loomCommInitFromEnv; the ranks
// then form a communicator of their own from a unique id rank 0 broadcasts, one per --algo.
//
// --device cuda: the measured communicators are device communicators (config.device), on
// nccl-tests' device of each rank; loom-perf's own calls (barriers, times, #wrong, the header)
// go over a second, host communicator of the same ranks, as nccl-tests uses MPI for them.
#include <pthread.h>
#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench.h"
#include "bootstrap/launch_env.h"
#include "base/env.h"
#include "calibrate.h"
#include "calibrate_device.h"
#include "device_buffers.h"
#include "fatal.h"
#include "options.h"
#include "report.h"

namespace loomperf {
namespace {

struct CommDeleter {
  void operator()(loomComm* c) const { loomCommDestroy(c); }
};
using OwnedComm = std::unique_ptr<loomComm, CommDeleter>;

struct Job {
  int processes = 1;
  int process = 0;
  int localProcess = 0;  // this process among those of its host
  OwnedComm processComm;  // null with one process
};

// Pins the calling thread to the k-th cpu it may use (modulo their number).
void pinToCpu(int k) {
  cpu_set_t allowed, one;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  const int ncpu = CPU_COUNT(&allowed);
  for (int c = 0, seen = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &allowed) || seen++ != k % ncpu) continue;
    CPU_ZERO(&one);
    CPU_SET(c, &one);
    if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) != 0)
      std::fprintf(stderr, "loom-perf: --pin: cannot pin to cpu %d\n", c);
    return;
  }
}

loomConfig_t configFor(const Options& o) {
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  if (o.timeoutSeconds > 0) config.timeoutMs = o.timeoutSeconds * 1000;
  return config;
}

Job joinJob(const Options& o) {
  Job job;
  loom::LaunchRank launch;
  bool found = false;
  loom::Status s = loom::readLaunchRank(&launch, &found);
  if (!s.isOk()) fatal("%s", s.message().c_str());
  if (!found) return job;
  job.processes = launch.worldSize;
  job.process = launch.rank;
  job.localProcess = launch.localRank >= 0 ? launch.localRank : launch.rank;
  // The main thread sits on the process's first cpu, so Loom's threads for this
  // communicator start there too.
  if (o.pin) pinToCpu(job.localProcess * o.threads * o.ranksPerThread);
  if (job.processes > 1) {
    loomConfig_t config = configFor(o);
    loomComm_t comm = nullptr;
    require(loomCommInitFromEnv(&comm, &config), nullptr, "loomCommInitFromEnv");
    job.processComm.reset(comm);
  }
  return job;
}

loomUniqueId shareUniqueId(const Job& job) {
  loomUniqueId id{};
  if (job.process == 0) require(loomGetUniqueId(&id), nullptr, "loomGetUniqueId");
  if (job.processComm) {
    require(loomBroadcast(&id, &id, sizeof id, loomInt8, 0, job.processComm.get(), nullptr),
            job.processComm.get(), "loomBroadcast of the unique id");
  }
  return id;
}

// LOOM_ALGO as the user set it, restored between --algo runs.
struct AlgorithmEnv {
  std::optional<std::string> original;
  AlgorithmEnv() {
    if (const char* v = std::getenv("LOOM_ALGO")) original = v;
  }
  // Only while no communicator of this process is being created or used (Loom reads its
  // environment when a communicator is created).
  void select(Collective c, const std::string& algorithm) const {
    if (!algorithm.empty() && algorithm != kTunedAlgorithm) {
      setenv("LOOM_ALGO", (std::string(collectiveName(c)) + "=" + algorithm).c_str(), 1);
    } else if (original) {
      setenv("LOOM_ALGO", original->c_str(), 1);
    } else {
      unsetenv("LOOM_ALGO");
    }
  }
};

// The unique ids of one sweep's communicators: the measured one, and with --device cuda the
// host one for loom-perf's own calls.
struct SweepIds {
  loomUniqueId measured;
  loomUniqueId control;
};

// One thread of the job: makes its -g communicators, runs the sweep, destroys them.
void runThread(const Options& o, const Job& job, int thread, const SweepIds& ids, int cudaDevices,
               const std::string& algorithm, bool first, Report* report, long long* wrong) {
  const int perProcess = o.threads * o.ranksPerThread;
  const int nranks = job.processes * perProcess;
  if (o.pin) pinToCpu(job.localProcess * perProcess + thread * o.ranksPerThread);
  ThreadRanks t;
  t.nranks = nranks;
  for (int j = 0; j < o.ranksPerThread; ++j) {
    t.ranks.push_back(job.process * perProcess + thread * o.ranksPerThread + j);
    // nccl-tests' rule: the local process's ranks take the devices in turn, wrapping around,
    // so several ranks may share one GPU.
    if (o.cuda) t.devices.push_back((job.localProcess * perProcess + thread * o.ranksPerThread + j) % cudaDevices);
  }
  t.comms.resize(t.ranks.size());
  t.control.resize(t.ranks.size());
  // loomCommInitRank blocks until every rank has joined, so each of this thread's ranks
  // joins from a thread of its own (every rank makes its communicators in the same order).
  const loomConfig_t config = configFor(o);
  std::vector<std::thread> joiners;
  for (size_t j = 0; j < t.ranks.size(); ++j) {
    joiners.emplace_back([&, j] {
      loomConfig_t c = config;
      if (o.cuda) c.device = t.devices[j];
      require(loomCommInitRankConfig(&t.comms[j], nranks, ids.measured, t.ranks[j], &c), nullptr,
              "loomCommInitRankConfig");
      if (!o.cuda) {
        t.control[j] = t.comms[j];
        return;
      }
      loomConfig_t host = config;
      require(loomCommInitRankConfig(&t.control[j], nranks, ids.control, t.ranks[j], &host), nullptr,
              "loomCommInitRankConfig (loom-perf's own host communicator)");
    });
  }
  for (std::thread& j : joiners) j.join();
  std::vector<OwnedComm> owned;
  for (loomComm_t c : t.comms) owned.emplace_back(c);
  if (o.cuda)
    for (loomComm_t c : t.control) owned.emplace_back(c);

  const bool holdsRankZero = t.ranks.front() == 0;
  const std::vector<std::string> lines = describeRanks(t);
  if (holdsRankZero) {
    if (first) report->printHeader(lines);
    report->beginTable(algorithm);
  }
  *wrong = runSweep(o, t, algorithm, holdsRankZero ? report : nullptr);
}

}  // namespace
}  // namespace loomperf

int main(int argc, char** argv) {
  using namespace loomperf;
  Options o;
  const int status = parseOptions(argc, argv, &o);
  if (status >= 0) return status;
  int cudaDevices = 0;
  // The emulation's device communicators need no CUDA device; only the calibration uses them
  // here (a sweep's buffers are cudaMalloc'd).
  const bool emulatedCalibration =
      o.cuda && !o.calibratePath.empty() && loom::env::getOrDefault("LOOM_DEVICE_EMULATION") == "1";
  if (o.cuda && !emulatedCalibration) {
    // Ranks as threads of this process share the GPU's hardware queues, two streams each
    // (docs/ARCHITECTURE.md, "Thread ranks on one GPU"); CUDA reads this at its first use.
    if (o.threads * o.ranksPerThread > 1) ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    std::string why;
    cudaDevices = cudaDeviceCount(&why);
    if (cudaDevices == 0) {
      std::fprintf(stderr, "loom-perf: --device cuda: %s\n", why.c_str());
      return 2;
    }
  }
  Job job = joinJob(o);
  if (!o.calibratePath.empty()) {
    if (!job.processComm) fatal("%s", "--calibrate needs two or more processes (loomrun -n 2 loom-perf --calibrate FILE)");
    if (!o.cuda) return calibrate(job.processComm.get(), o.calibratePath);
    // nccl-tests' rule, as for a sweep's ranks.
    const int device = emulatedCalibration ? 0 : job.localProcess % cudaDevices;
    return calibrateDevice(job.processComm.get(), device, emulatedCalibration, o.calibratePath);
  }
  const int nranks = job.processes * o.threads * o.ranksPerThread;
  Report report(o, nranks);
  const AlgorithmEnv algorithmEnv;
  std::vector<std::string> algorithms = o.algorithms;
  if (algorithms.empty()) algorithms.push_back("");

  long long wrong = 0;
  for (size_t a = 0; a < algorithms.size(); ++a) {
    algorithmEnv.select(o.collective, algorithms[a]);
    SweepIds ids;
    ids.measured = shareUniqueId(job);
    if (o.cuda) ids.control = shareUniqueId(job);
    std::vector<long long> wrongOf(static_cast<size_t>(o.threads));
    std::vector<std::thread> threads;
    for (int t = 0; t < o.threads; ++t) {
      threads.emplace_back(runThread, std::cref(o), std::cref(job), t, std::cref(ids), cudaDevices, std::cref(algorithms[a]),
                           a == 0, job.process == 0 && t == 0 ? &report : nullptr, &wrongOf[t]);
    }
    for (std::thread& t : threads) t.join();
    wrong += wrongOf[0];
  }
  if (job.process == 0) report.finish();
  // Nobody exits before rank 0 has printed everything: launchers such as loomrun stop the
  // whole job when one rank exits with a failure.
  if (job.processComm)
    require(loomBarrier(job.processComm.get(), nullptr), job.processComm.get(), "loomBarrier at exit");
  return wrong > 0 ? 1 : 0;
}
