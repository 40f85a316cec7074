// Measuring the shared-memory link and the one-shot board with two thread ranks
// (link_calibration.h).
#include "core/link_calibration.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "algorithms/calibration_cpus.h"
#include "base/env.h"
#include "bootstrap/bootstrap_root.h"
#include "core/communicator.h"
#include "loom/loom.h"
#include "transport/shm_transport.h"

namespace loom {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::array<size_t, 6> kExchangeBytes = {8, size_t{1} << 10, size_t{8} << 10, size_t{32} << 10,
                                                  size_t{128} << 10, size_t{256} << 10};
// Every figure is the best of this many rounds, each round measuring all of them in turn, so
// that a slow phase of a shared machine has to last the whole measurement to spoil one.
constexpr int kRounds = 5;
// How long a call or the communicator's creation waits before the measurement gives up.
constexpr long long kWaitMs = 10000;

// Calls timed per figure: about 8 MiB each way, 20 to 500 calls (the 8 B allreduce 500): a
// millisecond or so each, tens of milliseconds in all.
int callsFor(size_t bytes) {
  return static_cast<int>(std::clamp<size_t>((size_t{8} << 20) / (bytes + 4096), 20, 500));
}

// The exchange sizes the FIFO carries between threads (below LOOM_SHM_DIRECT_MIN_BYTES where
// LOOM_SHM_DIRECT lets threads read each other directly).
Status fifoSizes(std::vector<size_t>* out) {
  size_t directFrom = 0;
  LOOM_TRY(transport::ShmTransport::directReadMinBytes(true, -1, &directFrom));
  out->clear();
  for (size_t bytes : kExchangeBytes) {
    if (directFrom == 0 || bytes < directFrom) out->push_back(bytes);
  }
  if (out->size() < 3) {
    return error(loomInvalidUsage, "LOOM_SHM_DIRECT_MIN_BYTES=%zu has threads read each other directly from below "
                 "%zu bytes, where the FIFO's line is measured", directFrom, kExchangeBytes[3]);
  }
  return Status::ok();
}

// The calls of one rank: both ranks make the same ones, rank 0 times them.
class LinkRank {
 public:
  LinkRank(loomComm_t comm, int rank, size_t maxBytes)
      : comm_(comm), rank_(rank), out_(maxBytes / sizeof(float) + 1, 1.0f), in_(out_.size()) {}

  // µs of one exchange of `bytes` each way (rank 0's; 0 on rank 1).
  Status exchangeUs(size_t bytes, double* us) {
    return timed(callsFor(bytes), us, [&] {
      loomResult_t r = loomGroupStart();
      if (r == loomSuccess) r = loomSend(out_.data(), bytes, loomInt8, 1 - rank_, comm_, nullptr);
      if (r == loomSuccess) r = loomRecv(in_.data(), bytes, loomInt8, 1 - rank_, comm_, nullptr);
      // Ends the group whatever happened in it.
      const loomResult_t end = loomGroupEnd();
      return r == loomSuccess ? end : r;
    });
  }

  // µs of one 8 B float32 sum allreduce (rank 0's; 0 on rank 1).
  Status allReduceUs(double* us) {
    return timed(callsFor(8), us, [&] {
      return loomAllReduce(out_.data(), in_.data(), 2, loomFloat32, loomSum, comm_, nullptr);
    });
  }

 private:
  template <typename Call>
  Status timed(int calls, double* us, Call call) {
    for (int i = 0; i < 5; ++i) LOOM_TRY(check(call()));
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < calls; ++i) LOOM_TRY(check(call()));
    *us = rank_ == 0 ? std::chrono::duration<double, std::micro>(Clock::now() - start).count() / calls : 0;
    return Status::ok();
  }

  Status check(loomResult_t result) {
    if (result == loomSuccess) return Status::ok();
    return error(result, "machine calibration's thread rank %d: %s", rank_, loomGetLastError(comm_));
  }

  loomComm_t comm_;
  int rank_;
  std::vector<float> out_, in_;
};

// One thread rank: joins the communicator on `cpu`, measures, and leaves it; rank 0 keeps
// the best times in *out.
Status runRank(const UniqueId& id, int rank, int cpu, const CommConfig& config, const std::vector<size_t>& sizes,
               LinkFigures* out) {
  runOnCpu(cpu);
  loomComm_t comm = nullptr;
  LOOM_TRY(initRank(&comm, 2, id, rank, config));
  LinkRank calls(comm, rank, sizes.back());
  std::vector<double> best(sizes.size(), HUGE_VAL);
  double oneShot = HUGE_VAL;
  Status status = Status::ok();
  for (int round = 0; round < kRounds && status.isOk(); ++round) {
    for (size_t i = 0; i < sizes.size() && status.isOk(); ++i) {
      double us = 0;
      status = calls.exchangeUs(sizes[i], &us);
      best[i] = std::min(best[i], us);
    }
    double us = 0;
    if (status.isOk()) status = calls.allReduceUs(&us);
    oneShot = std::min(oneShot, us);
  }
  (void)loomCommDestroy(comm);
  LOOM_TRY(status);
  if (rank != 0) return Status::ok();
  out->exchangeUs.clear();
  for (size_t i = 0; i < sizes.size(); ++i) out->exchangeUs.emplace_back(sizes[i], best[i]);
  out->oneShotUs = oneShot;
  return Status::ok();
}

}  // namespace

Status linkCalibrationConfig(CommConfig* out) {
  CommConfig c;
  LOOM_TRY(builtInConfig(&c));
  c.name = "machine calibration";
  c.timeoutMs = c.initTimeoutMs = kWaitMs;
  LOOM_TRY(parseAlgorithmSetting("allreduce=oneshot", &c.algorithms));
  c.machineCalibration = false;
  *out = c;
  return Status::ok();
}

Status measureSharedMemoryLinks(LinkFigures* out) {
  const Clock::time_point begin = Clock::now();
  const std::vector<int> cpus = calibrationCpus(2);
  if (cpus.size() < 2) return error(loomSystemError, "this process may run on one CPU only");
  CommConfig config;
  LOOM_TRY(linkCalibrationConfig(&config));
  std::vector<size_t> sizes;
  LOOM_TRY(fifoSizes(&sizes));
  // A root of its own on loopback: the two ranks never leave this process.
  UniqueId id;
  LOOM_TRY(Secret::random(&id.secret));
  SocketAddress loopback;
  LOOM_TRY(SocketAddress::resolve("127.0.0.1", 0, &loopback));
  std::unique_ptr<BootstrapRoot> root;
  LOOM_TRY(BootstrapRoot::start(loopback, id.secret, &root));
  id.root = root->address();
  // Threads of their own, which they pin: the caller's thread keeps its CPUs.
  std::array<Status, 2> results = {Status::ok(), Status::ok()};
  LinkFigures figures;
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      results[static_cast<size_t>(rank)] =
          runRank(id, rank, cpus[static_cast<size_t>(rank)], config, sizes, rank == 0 ? &figures : nullptr);
    });
  }
  for (std::thread& rank : ranks) rank.join();
  for (const Status& result : results) LOOM_TRY(result.withContext("shared-memory links"));
  figures.seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  *out = figures;
  return Status::ok();
}

}  // namespace loom
