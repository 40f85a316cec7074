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

// Calls timed per collective figure: 24 to 200, a tenth of a millisecond or so each.
int collectiveCallsFor(size_t bytes) {
  return static_cast<int>(std::clamp<size_t>((size_t{1} << 20) / (bytes + 4096), 24, 200));
}

// A rank's best µs of each figure, over the rounds.
struct RankTimes {
  std::vector<double> exchange;
  double oneShot = HUGE_VAL;
  std::vector<LinkFigures::BoardTiming> board;  // kBoardTimedKinds' order
};

// The calls of one rank on its two communicators, one with every collective on the board and
// one with none: both ranks make the same calls, and each times its own.
class LinkRank {
 public:
  LinkRank(loomComm_t board, loomComm_t fifo, int rank, size_t maxBytes)
      : board_(board), fifo_(fifo), rank_(rank), out_(maxBytes / sizeof(float) + 1, 1.0f), in_(out_.size()) {}

  // µs of one exchange of `bytes` each way, through the FIFO.
  Status exchangeUs(size_t bytes, double* us) {
    return timed(fifo_, callsFor(bytes), us, [&] {
      loomResult_t r = loomGroupStart();
      if (r == loomSuccess) r = loomSend(out_.data(), bytes, loomInt8, 1 - rank_, fifo_, nullptr);
      if (r == loomSuccess) r = loomRecv(in_.data(), bytes, loomInt8, 1 - rank_, fifo_, nullptr);
      // Ends the group whatever happened in it.
      const loomResult_t end = loomGroupEnd();
      return r == loomSuccess ? end : r;
    });
  }

  // µs of one 8 B float32 sum allreduce on the board.
  Status allReduceUs(double* us) {
    return timed(board_, callsFor(8), us, [&] {
      return loomAllReduce(out_.data(), in_.data(), 2, loomFloat32, loomSum, board_, nullptr);
    });
  }

  // µs of one float32 call of `kind` moving `bytes` (as the tuner counts them), out of place,
  // on the board or through the FIFO.
  Status collectiveUs(CallInfo::Kind kind, size_t bytes, bool onBoard, double* us) {
    loomComm_t comm = onBoard ? board_ : fifo_;
    const size_t count = bytes / sizeof(float);
    const float* send = out_.data();
    float* recv = in_.data();
    return timed(comm, collectiveCallsFor(bytes), us, [&] {
      switch (kind) {
        case CallInfo::Kind::kBroadcast: return loomBroadcast(send, recv, count, loomFloat32, 0, comm, nullptr);
        case CallInfo::Kind::kReduce: return loomReduce(send, recv, count, loomFloat32, loomSum, 0, comm, nullptr);
        case CallInfo::Kind::kAllGather: return loomAllGather(send, recv, count / 2, loomFloat32, comm, nullptr);
        case CallInfo::Kind::kReduceScatter:
          return loomReduceScatter(send, recv, count / 2, loomFloat32, loomSum, comm, nullptr);
        case CallInfo::Kind::kAllToAll: return loomAllToAll(send, recv, count / 2, loomFloat32, comm, nullptr);
        default: return loomAllReduce(send, recv, count, loomFloat32, loomSum, comm, nullptr);
      }
    });
  }

 private:
  // A loop of `calls` after five untimed ones, begun by both ranks together: an 8 B allreduce
  // on the board first, since a broadcast's root or a reduce's leaf would otherwise start the
  // next loop while the other rank still finishes this one.
  template <typename Call>
  Status timed(loomComm_t comm, int calls, double* us, Call call) {
    for (int i = 0; i < 5; ++i) LOOM_TRY(check(comm, call()));
    LOOM_TRY(check(board_, loomAllReduce(out_.data(), in_.data(), 2, loomFloat32, loomSum, board_, nullptr)));
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < calls; ++i) LOOM_TRY(check(comm, call()));
    *us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / calls;
    return Status::ok();
  }

  Status check(loomComm_t comm, loomResult_t result) {
    if (result == loomSuccess) return Status::ok();
    return error(result, "machine calibration's thread rank %d: %s", rank_, loomGetLastError(comm));
  }

  loomComm_t board_, fifo_;
  int rank_;
  std::vector<float> out_, in_;
};

// One round of every figure, each kept in *best where it is the fastest yet.
Status measureRound(LinkRank& calls, int round, const std::vector<size_t>& sizes, RankTimes* best) {
  for (size_t i = 0; i < sizes.size(); ++i) {
    double us = 0;
    LOOM_TRY(calls.exchangeUs(sizes[i], &us));
    best->exchange[i] = std::min(best->exchange[i], us);
  }
  double us = 0;
  LOOM_TRY(calls.allReduceUs(&us));
  best->oneShot = std::min(best->oneShot, us);
  for (LinkFigures::BoardTiming& timing : best->board) {
    for (size_t i = 0; i < timing.bytes.size(); ++i) {
      // Which goes first alternates, so that neither always follows the other's traffic.
      for (bool onBoard : {round % 2 == 0, round % 2 != 0}) {
        LOOM_TRY(calls.collectiveUs(timing.kind, timing.bytes[i], onBoard, &us));
        double& kept = onBoard ? timing.boardUs[i] : timing.fifoUs[i];
        kept = std::min(kept, us);
      }
    }
  }
  return Status::ok();
}

// One thread rank: joins both communicators (ids and configs: on the board, off it) on
// `cpu`, measures, and leaves them.
Status runRank(const std::array<UniqueId, 2>& ids, const std::array<CommConfig, 2>& configs, int rank, int cpu,
               const std::vector<size_t>& sizes, RankTimes* out) {
  runOnCpu(cpu);
  loomComm_t board = nullptr, fifo = nullptr;
  LOOM_TRY(initRank(&board, 2, ids[0], rank, configs[0]));
  Status status = initRank(&fifo, 2, ids[1], rank, configs[1]);
  RankTimes best;
  best.exchange.assign(sizes.size(), HUGE_VAL);
  for (CallInfo::Kind kind : kBoardTimedKinds) {
    const std::vector<size_t> bytes(std::begin(kBoardTimedBytes), std::end(kBoardTimedBytes));
    best.board.push_back({kind, bytes, std::vector<double>(bytes.size(), HUGE_VAL),
                          std::vector<double>(bytes.size(), HUGE_VAL)});
  }
  if (status.isOk()) {
    LinkRank calls(board, fifo, rank, std::max(sizes.back(), kBoardTimedBytes[std::size(kBoardTimedBytes) - 1]));
    for (int round = 0; round < kRounds && status.isOk(); ++round) status = measureRound(calls, round, sizes, &best);
    (void)loomCommDestroy(fifo);
  }
  (void)loomCommDestroy(board);
  LOOM_TRY(status);
  *out = best;
  return Status::ok();
}

// The slower rank's time of each figure: what a loop of such calls takes.
LinkFigures slowerOf(const std::array<RankTimes, 2>& ranks, const std::vector<size_t>& sizes) {
  LinkFigures figures;
  for (size_t i = 0; i < sizes.size(); ++i) {
    figures.exchangeUs.emplace_back(sizes[i], std::max(ranks[0].exchange[i], ranks[1].exchange[i]));
  }
  figures.oneShotUs = std::max(ranks[0].oneShot, ranks[1].oneShot);
  figures.board = ranks[0].board;
  for (size_t k = 0; k < figures.board.size(); ++k) {
    LinkFigures::BoardTiming& timing = figures.board[k];
    for (size_t i = 0; i < timing.bytes.size(); ++i) {
      timing.boardUs[i] = std::max(timing.boardUs[i], ranks[1].board[k].boardUs[i]);
      timing.fifoUs[i] = std::max(timing.fifoUs[i], ranks[1].board[k].fifoUs[i]);
    }
  }
  return figures;
}

}  // namespace

Status linkCalibrationConfig(bool board, CommConfig* out) {
  CommConfig c;
  LOOM_TRY(builtInConfig(&c));
  c.name = board ? "machine calibration, on the board" : "machine calibration, off the board";
  c.timeoutMs = c.initTimeoutMs = kWaitMs;
  LOOM_TRY(parseAlgorithmSetting(board ? "oneshot" : "^oneshot", &c.algorithms));
  c.machineCalibration = false;
  *out = c;
  return Status::ok();
}

Status measureSharedMemoryLinks(LinkFigures* out) {
  const Clock::time_point begin = Clock::now();
  const std::vector<int> cpus = calibrationCpus(2);
  if (cpus.size() < 2) return error(loomSystemError, "this process may run on one CPU only");
  std::vector<size_t> sizes;
  LOOM_TRY(fifoSizes(&sizes));
  std::array<CommConfig, 2> configs;
  LOOM_TRY(linkCalibrationConfig(true, &configs[0]));
  LOOM_TRY(linkCalibrationConfig(false, &configs[1]));
  // Roots of their own on loopback, one a communicator: the two ranks never leave this process.
  SocketAddress loopback;
  LOOM_TRY(SocketAddress::resolve("127.0.0.1", 0, &loopback));
  std::array<UniqueId, 2> ids;
  std::array<std::unique_ptr<BootstrapRoot>, 2> roots;
  for (size_t i = 0; i < ids.size(); ++i) {
    LOOM_TRY(Secret::random(&ids[i].secret));
    LOOM_TRY(BootstrapRoot::start(loopback, ids[i].secret, &roots[i]));
    ids[i].root = roots[i]->address();
  }
  // Threads of their own, which they pin: the caller's thread keeps its CPUs.
  std::array<Status, 2> results = {Status::ok(), Status::ok()};
  std::array<RankTimes, 2> times;
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      const size_t r = static_cast<size_t>(rank);
      results[r] = runRank(ids, configs, rank, cpus[r], sizes, &times[r]);
    });
  }
  for (std::thread& rank : ranks) rank.join();
  for (const Status& result : results) LOOM_TRY(result.withContext("shared-memory links"));
  LinkFigures figures = slowerOf(times, sizes);
  figures.seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  *out = figures;
  return Status::ok();
}

}  // namespace loom
