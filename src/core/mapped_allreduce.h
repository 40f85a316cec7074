// The mapped allreduce: a large allreduce straight between the ranks' buffers, where every
// rank of a one-host communicator can reach every other's: ranks that are threads of one
// process (any buffer), or processes whose buffers came from loomMemAlloc (base/
// mapped_memory.h). Rank r reduces the r-th slice of every input and writes it into every
// rank's output, so each rank reads and writes its own slice of each buffer once: two bytes
// of memory traffic per byte of busbw and nothing through a FIFO, where the ring's FIFO
// carries two more (docs/PERF.md).
//
// It is one step (Step::Kind::kMapped) in front of the call's plan, on the shared-memory
// board, over three rounds:
//
//   round k     every rank posts its call, where its send and receive buffers are,
//               whether its peers can reach them (threads of its process, or loomMemAlloc
//               buffers) and whether it calls in place: where one says no to the reach,
//               every rank runs a plan from here
//   round k+1   every rank posts whether it could map every peer's buffers
//               all could:  rank r writes out_j[slice r] = op over i of in_i[slice r], all j
//   round k+2   every rank posts that it is done; the step ends once all have
//
// Every rank sees the same verdicts, so all take the same way: with all of them yes, the
// call's other steps are marked done unrun; with any no, they run (the plan the tuner chose)
// and the step moved nothing. Which plan: in place is each rank's own, so the tuner compares
// algorithms out of place (algorithms/select.h), but round k tells every rank whether all are
// in place. A rank in place whose tuner prefers another algorithm where all are also holds
// that plan (Step::OnlyIf), and runs it when all are; ranks that are not do not hold it and
// run the out-of-place choice, as the others then do.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/plan.h"
#include "base/mapped_memory.h"
#include "base/status.h"
#include "core/one_shot.h"
#include "transport/store_chooser.h"

namespace loom {

class Communicator;

// LOOM_MAPPED_MIN_BYTES's defaults. Threads of one process always reach each other's
// buffers: on the AMD EPYC VM the mapped allreduce matched the plan at 64 KiB and ran
// 1.2-1.35x at 96 KiB, 1.5-2x from 256 KiB. Between processes a call whose buffers are not
// loomMemAlloc's spends a board round finding out before it runs its plan: 0.4-3 us at 256
// KiB (3-10 %), within the spread at 1 MiB.
constexpr long long kMappedMinBytesThreads = 64 << 10;
constexpr long long kMappedMinBytesProcesses = 1 << 20;

// The smallest host allreduce, in bytes, that tries the mapped allreduce on comm; 0 where none
// does: ranks on more than one host or without shared memory (no board), a lone rank, an
// allreduce algorithm forced by LOOM_ALGO, LOOM_MAPPED_MIN_BYTES=0. The same on every rank
// (shared settings only). loomCommMappedMinBytes reports it.
size_t mappedMinBytes(Communicator& comm);

// Board rounds the step takes.
constexpr uint64_t kMappedRounds = 3;

// Where the mapped step is: what it posted last.
enum class MappedPhase : uint8_t { kStart, kPosted, kJudged, kWritten, kFinished };

// What the step found: whether every rank calls in place (known after round k), and whether
// the call ran mapped (its other steps are then not to run).
struct MappedVerdict {
  bool everyRankInPlace = false;
  bool mapped = false;
};

// A communicator's peers' buffers as this rank maps them, kept across calls (under the
// communicator's executionLock).
class MappedPeers {
 public:
  explicit MappedPeers(transport::Stores stores);
  // Advances the step of `op` (round: the first of its kMappedRounds) as far as it can
  // without waiting, filling *verdict as it learns it; *phase kFinished at its end.
  // `checkPeers`: also ask whether a missing rank's process exited.
  Status advance(Communicator& comm, const OneShot& op, bool checkPeers, MappedPhase* phase, MappedVerdict* verdict);
  // "rank 1, rank 3": the ranks that have not posted the round the step waits for in `phase`
  // (`round`: its first), for a timeout's message.
  static std::string missingRanks(Communicator& comm, uint64_t round, MappedPhase phase);
  // The executor ran a call's plan for every rank in place (Step::OnlyIf): counted, and said at
  // INFO the first time.
  void ranEveryRankInPlacePlan(Communicator& comm, const CallInfo& call);
  // Calls that ran mapped, ever, and calls that ran the plan for every rank in place (for
  // tests and logs).
  uint64_t mappedCalls() const { return mappedCalls_; }
  uint64_t everyRankInPlaceCalls() const { return everyRankInPlaceCalls_; }
  // Peer allocations mapped now, and mappings ever made (for tests).
  size_t mappingsKept() const { return mappings_.size(); }
  uint64_t mappingsMade() const { return mappingsMade_; }

 private:
  // A peer buffer's address here, or nullptr (with the reason logged) when it cannot be mapped.
  char* resolve(Communicator& comm, int q, const void* ref);
  // Unmaps rank q's allocations that its process (pid) has freed since.
  void letGoFreed(int q, int pid);
  void reduceSlice(Communicator& comm, const OneShot& op);
  // The call runs its plan: said at INFO the first time.
  void ranPlan(Communicator& comm, const OneShot& op);

  std::map<std::pair<int, uint64_t>, PeerAllocation> mappings_;  // (rank, allocation serial)
  std::vector<std::pair<int, uint64_t>> useOrder_;          // least recently used first
  std::vector<const char*> sends_;  // every rank's buffers, as this rank reaches them
  std::vector<char*> recvs_;
  std::vector<const void*> pieceSends_;  // reduceSlice's piece of each, kept to not allocate per call
  std::vector<void*> pieceRecvs_;
  transport::StoreChooser stores_;
  uint64_t mappedCalls_ = 0;
  uint64_t everyRankInPlaceCalls_ = 0;
  uint64_t mappingsMade_ = 0;
  bool toldUnmapped_ = false;  // the first call that ran its plan was logged
  std::string unmappedWhy_;    // this rank's last failure to map a peer's allocation
};

}  // namespace loom
