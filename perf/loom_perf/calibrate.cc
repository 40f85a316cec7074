// Calibration measures what each constant of the cost model stands for, as directly as the
// public API allows:
//   intra / inter link   rank 0 and a rank on its host / on another host send each other
//                        8 B to 256 KiB in one grouped call, both directions at once, as a
//                        ring step does (a ping-pong of separate send and receive calls
//                        would add a call's overhead, about 1 µs, to every hop; through the
//                        FIFO: where LOOM_SHM_DIRECT lets the ranks read each other, sends
//                        from LOOM_SHM_DIRECT_MIN_BYTES, 512 KiB, are read straight from the
//                        sender), time fitted to a line
//   direct reads         the same exchange at 2, 4 and 8 x LOOM_SHM_DIRECT_MIN_BYTES, on
//                        communicators where processes read each other's sends straight
//                        from the sender (LOOM_SHM_DIRECT=all) and where they do not (none):
//                        where the direct ones take 3 % less time, shm.direct_min_bytes
//                        turns them on from that size and direct.gbps is their line's
//                        bandwidth; else shm.direct_min_bytes = 0 (the FIFO, as built in)
//   reduce, copy,        the machine calibration rank 0 took at the communicator's creation
//   streaming threshold  (calibration_cache.h): the kernels on 1 MiB arrays, and copies by
//                        as many threads as rank 0's host has ranks, 512 KiB to 64 MiB
//   one-shot latency     an 8 B allreduce, less the copy and fold the model adds
//   mem, streaming       a ring allreduce past the cache with each protocol forced; the
//                        bandwidth that makes the model predict the measured time
//   chunk, FIFO and      the tuner's allreduce in and past the cache on communicators
//   socket buffer sizes  made with each candidate value (calibrate_sizes.h)
// Every constant the job cannot measure (inter with one host, one-shot across hosts) keeps
// its built-in value, and the output says so.
#include "calibrate.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/calibration_cache.h"
#include "algorithms/cost_model.h"
#include "algorithms/tuning_file.h"
#include "base/env.h"
#include "core/registry.h"
#include "calibrate_comm.h"
#include "calibrate_sizes.h"
#include "fatal.h"
#include "transport/shm_transport.h"

namespace loomperf {
namespace {

using Clock = std::chrono::steady_clock;
using loom::CallInfo;
using loom::CommProfile;

// A shared virtual machine runs 2-4x slower for a minute at a time when its neighbours are
// busy: every time is the fastest of this many rounds (see calibrate).
constexpr int kRounds = 5;

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// µs of one exchange of `bytes` each way between ranks a and b (a times it; the others wait
// at the barrier).
double exchangeUs(loomComm_t comm, int rank, int a, int b, size_t bytes) {
  std::vector<char> out(bytes, 1), in(bytes);
  const int iters = static_cast<int>(std::min<size_t>(2000, std::max<size_t>(20, (size_t{64} << 20) / (bytes + 4096))));
  const int peer = rank == a ? b : a;
  double us = 0;
  auto exchange = [&] {
    require(loomGroupStart(), comm, "loomGroupStart");
    require(loomSend(out.data(), bytes, loomInt8, peer, comm, nullptr), comm, "loomSend");
    require(loomRecv(in.data(), bytes, loomInt8, peer, comm, nullptr), comm, "loomRecv");
    require(loomGroupEnd(), comm, "loomGroupEnd");
  };
  if (rank == a || rank == b) {
    for (int i = 0; i < 5; ++i) exchange();
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < iters; ++i) exchange();
    us = secondsSince(start) * 1e6 / iters;
  }
  require(loomBarrier(comm, nullptr), comm, "loomBarrier");
  return us;
}

// Exchange sizes of a link's line; each point's time is the fastest of the rounds.
using LinkPoints = std::vector<std::pair<size_t, double>>;

LinkPoints linkPoints() {
  LinkPoints points;
  for (size_t bytes : {size_t{8}, size_t{1} << 10, size_t{8} << 10, size_t{32} << 10, size_t{128} << 10,
                       size_t{256} << 10}) {
    points.emplace_back(bytes, HUGE_VAL);
  }
  return points;
}

// Exchanges large enough to be read directly where that is on.
LinkPoints directPoints(size_t minBytes) {
  LinkPoints points;
  for (size_t times : {2, 4, 8}) points.emplace_back(times * minBytes, HUGE_VAL);
  return points;
}

// The mean of the points' times.
double meanUs(const LinkPoints& points) {
  double sum = 0;
  for (const auto& point : points) sum += point.second;
  return sum / static_cast<double>(points.size());
}

// One round of exchanges between ranks a and b at every point's size.
void sweepLink(loomComm_t comm, int rank, int a, int b, LinkPoints* points) {
  for (auto& [bytes, us] : *points) us = std::min(us, fromRankZero(exchangeUs(comm, rank, a, b, bytes), comm));
}

// The link's latency and bandwidth, fitted to its points; `what` names it in the output.
loom::LinkCost fitLink(const LinkPoints& points, int rank, const char* what) {
  for (const auto& [bytes, us] : points) {
    if (rank == 0) std::printf("#   %s exchange %7zu B: %9.2f us\n", what, bytes, us);
  }
  loom::LinkCost link;
  loom::Status fit = loom::fitLinkCost(points, &link);
  if (!fit.isOk()) fatal("--calibrate: %s link: %s", what, fit.message().c_str());
  return link;
}

// The bandwidth that makes the model predict `measuredUs` for a ring allreduce of `bytes`
// with `protocol`: the prediction is a + L / gbps in it, so two predictions give a and L.
double solveGbps(double measuredUs, size_t bytes, loom::Protocol protocol, CommProfile p) {
  double& field = protocol == loom::Protocol::kStreaming ? p.streamingGbps : p.memGbps;
  auto predicted = [&](double gbps) {
    field = gbps;
    return loom::predictUs(CallInfo::Kind::kAllReduce, loom::Algorithm::kRing, protocol, bytes, p);
  };
  const double fixedUs = predicted(1e12), perGbps = predicted(1.0) - fixedUs;
  return measuredUs > fixedUs ? perGbps / (measuredUs - fixedUs) : 0;
}

}  // namespace

int calibrate(loomComm_t comm, const std::string& path) {
  int rank = 0, nranks = 0;
  require(loomCommUserRank(comm, &rank), comm, "loomCommUserRank");
  require(loomCommCount(comm, &nranks), comm, "loomCommCount");
  const std::vector<std::string> names = hostNames(comm, rank, nranks);
  auto host = [&](int r) { return names[static_cast<size_t>(r)]; };
  int sameHost = -1, otherHost = -1, nhosts = 0;
  std::vector<std::string> seen;
  for (int r = 0; r < nranks; ++r) {
    if (r > 0 && host(r) == host(0) && sameHost < 0) sameHost = r;
    if (host(r) != host(0) && otherHost < 0) otherHost = r;
    bool known = false;
    for (const std::string& h : seen) known = known || h == host(r);
    if (!known) seen.push_back(host(r));
  }
  nhosts = static_cast<int>(seen.size());
  if (nranks % nhosts != 0) fatal("--calibrate: %d ranks on %d hosts: every host needs as many ranks", nranks, nhosts);

  // Found before measuring, which takes a while, and on every rank alike.
  if (fromRankZero(rank == 0 && !canWrite(path) ? 1.0 : 0.0, comm) != 0) {
    if (rank == 0) std::fprintf(stderr, "loom-perf: --calibrate: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return 1;
  }
  CommProfile p = CommProfile::defaults(nranks, nhosts);
  long long directMinBytes = 0;
  const loom::Status read = loom::env::getInt("LOOM_SHM_DIRECT_MIN_BYTES", 1, 1LL << 62, &directMinBytes);
  if (!read.isOk()) fatal("--calibrate: %s", read.message().c_str());
  // Calibration runs on processes (main.cc), one rank each: direct reads between them are
  // off (the FIFO) unless measured faster below.
  p.directMinBytes = 0;
  if (rank == 0) std::printf("# loom-perf --calibrate: %d ranks on %d host(s)\n", nranks, nhosts);
  // Copy, reduce and the streaming threshold: the machine calibration (calibration_cache.h),
  // which rank 0 took at the communicator's creation for the ranks on its host.
  if (loom::sanitizedBuild()) {
    if (rank == 0) std::printf("#   copy, reduce, streaming: a sanitized build, kept built in\n");
  } else {
    CommProfile measured = p;
    if (rank == 0) {
      int onHost = 0;
      for (int r = 0; r < nranks; ++r) onHost += host(r) == host(0);
      loom::MachineCalibration calibration;
      loom::Status status = loom::Registry::instance().machineCalibration(loom::calibrationThreadsFor(onHost),
                                                                          &calibration);
      if (status.isOk()) status = loom::applyTuningText(calibration.text, calibration.source, &measured);
      if (!status.isOk()) fatal("--calibrate: machine calibration: %s", status.message().c_str());
      std::printf("#   copy, reduce, streaming: machine calibration %s\n", calibration.source.c_str());
    }
    p.copyGbps = fromRankZero(measured.copyGbps, comm);
    p.reduceGbps = fromRankZero(measured.reduceGbps, comm);
    p.streamingGbps = fromRankZero(measured.streamingGbps, comm);
    p.streamingMinBytes = static_cast<size_t>(fromRankZero(static_cast<double>(measured.streamingMinBytes), comm));
  }

  // Every round measures everything once, in turn: a slow phase of the machine must last
  // the whole calibration to spoil a figure, where rounds of one figure back to back fall
  // into it together.
  const char* minBytesText = std::getenv("LOOM_STREAMING_MIN_BYTES");
  if (minBytesText != nullptr) p.streamingMinBytes = std::strtoull(minBytesText, nullptr, 10);
  const size_t pastCache = 2 * p.streamingMinBytes;
  const bool timesPastCache = nhosts == 1 && pastCache > 0;
  const loom::Protocol protocols[] = {loom::Protocol::kSimple, loom::Protocol::kStreaming};
  LinkPoints intra = linkPoints(), inter = linkPoints();
  LinkPoints direct = directPoints(static_cast<size_t>(directMinBytes)), fifo = direct;
  // Direct reads against the FIFO between processes, each on a communicator of its own. Not
  // in a sanitized build, whose times say nothing of the machine. The intra line is the
  // FIFO's too: on the job's communicator the larger exchanges may be read directly (where
  // the machine calibration turned direct reads on), which made the line's slope theirs.
  const bool comparesDirect = sameHost > 0 && !loom::sanitizedBuild();
  std::optional<ScopedComm> directComm, fifoComm;
  if (sameHost > 0) fifoComm.emplace(comm, rank, nranks, Settings{{"LOOM_SHM_DIRECT", "none"}});
  if (comparesDirect) directComm.emplace(comm, rank, nranks, Settings{{"LOOM_SHM_DIRECT", "all"}});
  double oneShotUs = HUGE_VAL;
  double ringUs[2] = {HUGE_VAL, HUGE_VAL};
  for (int round = 0; round < kRounds; ++round) {
    if (sameHost > 0) sweepLink(fifoComm->get(), rank, 0, sameHost, &intra);
    if (comparesDirect) {
      sweepLink(directComm->get(), rank, 0, sameHost, &direct);
      sweepLink(fifoComm->get(), rank, 0, sameHost, &fifo);
    }
    if (otherHost > 0) sweepLink(comm, rank, 0, otherHost, &inter);
    // With every rank on one host, the tuner runs an 8 B allreduce on the one-shot board.
    if (nhosts == 1) oneShotUs = std::min(oneShotUs, allReduceUs(comm, 8, 2000));
    for (int i = 0; timesPastCache && i < 2; ++i) {
      ScopedComm forced(comm, rank, nranks,
                        {{"LOOM_PROTO", loom::protocolName(protocols[i])}, {"LOOM_ALGO", "allreduce=ring"}});
      ringUs[i] = std::min(ringUs[i], allReduceUs(forced.get(), pastCache, 5));
    }
  }

  if (sameHost > 0) {
    p.intra = fitLink(intra, rank, "intra");
  } else if (rank == 0) {
    std::printf("#   intra: one rank per host, kept built in\n");
  }
  // -1: not measured (no shared memory here, or a sanitized build).
  long long directChoice = -1;
  if (comparesDirect) {
    const loom::LinkCost read = fitLink(direct, rank, "direct");
    fitLink(fifo, rank, "fifo");
    const double ratio = meanUs(direct) / meanUs(fifo);
    directChoice = clearlyFaster(ratio) ? directMinBytes : 0;
    if (directChoice > 0) {
      p.directGbps = read.gbps;
      p.directMinBytes = static_cast<size_t>(directChoice);
    }
    if (rank == 0) {
      std::printf("#   direct reads between processes: %.3f of the FIFO's time, %s\n", ratio,
                  directChoice > 0 ? "on (shm.direct_min_bytes, direct.gbps)"
                                   : "off (shm.direct_min_bytes = 0; direct.gbps kept built in)");
    }
  } else if (rank == 0) {
    std::printf("#   direct reads: %s, not measured\n", sameHost > 0 ? "a sanitized build" : "one rank per host");
  }
  if (otherHost > 0) {
    p.inter = fitLink(inter, rank, "inter");
  } else if (rank == 0) {
    std::printf("#   inter: one host, kept built in\n");
  }
  if (nhosts == 1) {
    p.oneShotLatencyUs = loom::oneShotLatencyFrom(oneShotUs, p);
    if (rank == 0) std::printf("#   oneshot 8 B allreduce: %.2f us\n", oneShotUs);
  }
  for (int i = 0; timesPastCache && i < 2; ++i) {
    const loom::Protocol protocol = protocols[i];
    const double gbps = solveGbps(ringUs[i], pastCache, protocol, p);
    (protocol == loom::Protocol::kStreaming ? p.streamingGbps : p.memGbps) = gbps > 0 ? gbps : p.memGbps;
    if (rank == 0) {
      std::printf("#   ring allreduce %zu MiB, %s: %.0f us\n", pastCache >> 20, loom::protocolName(protocol), ringUs[i]);
    }
  }

  // The data-path sizes, on links as this job's environment makes them.
  bool listsShm = false, listsSockets = false;
  for (const std::string& name : loom::env::splitList(loom::env::getOrDefault("LOOM_TRANSPORTS"))) {
    listsShm = listsShm || name == "shm";
    listsSockets = listsSockets || name == "socket" || name == "auto";
  }
  SizesJob sizesJob;
  sizesJob.rank = rank;
  sizesJob.nranks = nranks;
  sizesJob.sharedMemory = listsShm && sameHost > 0;
  sizesJob.sockets = listsSockets && (otherHost > 0 || (sameHost > 0 && !listsShm));
  sizesJob.pastCache = pastCache;
  sizesJob.rounds = kRounds;
  // A sanitized build's times say nothing of the machine, and would take minutes to gather.
  loom::DataPathSizes sizes;
  if (loom::sanitizedBuild()) {
    if (rank == 0) std::printf("#   chunk.bytes, shm.fifo_bytes, socket.sndbuf: a sanitized build, not measured\n");
  } else {
    sizes = calibrateSizes(comm, sizesJob);
  }
  sizes.shmDirectMinBytes = directChoice;

  const int status = rank == 0 ? writeTuningFile(path, p, {}, "", sizes) : 0;
  require(loomBarrier(comm, nullptr), comm, "loomBarrier at exit");
  return status;
}

}  // namespace loomperf
