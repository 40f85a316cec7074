// The mapped allreduce's step on the shared-memory board (mapped_allreduce.h).
#include "core/mapped_allreduce.h"

#include <algorithm>
#include <cstring>

#include "base/log.h"
#include "base/spin_lock.h"
#include "base/tsan_handoff.h"
#include "core/communicator.h"
#include "core/registry.h"
#include "kernels/reduce.h"
#include "transport/shm_board.h"

namespace loom {
namespace {

// Where one buffer is, as its owner posts it: the address (enough for threads of its process)
// and, inside a loomMemAlloc allocation, which one (serial 0: none).
struct BufferRef {
  uint64_t address;
  uint64_t serial;
  uint64_t segmentBytes;
  uint64_t offset;
  int32_t fd;
  int32_t unused;
};
struct Descriptor {
  BufferRef send, recv;
  // Whether every peer can reach both buffers as far as their owner knows: threads of its
  // process, or loomMemAlloc buffers and a shared pid namespace. Where one rank says no, all
  // ranks run the plan after this one round.
  uint32_t reachable;
  uint32_t inPlace;
};

BufferRef refOf(const void* p, size_t bytes) {
  BufferRef ref{};
  ref.address = reinterpret_cast<uintptr_t>(p);
  MappedRange range;
  if (Registry::instance().mappedAllocations().find(p, bytes, &range)) {
    ref.serial = range.serial;
    ref.segmentBytes = range.segmentBytes;
    ref.offset = range.offset;
    ref.fd = range.fd;
  }
  return ref;
}

// Whether every rank has posted `round` of the call that began in round `first`; a rank whose
// process exited or whose communicator failed is loomRemoteError (checkAliveNamingMismatches).
Status allPosted(Communicator& comm, uint64_t round, uint64_t first, bool checkPeers, bool* all) {
  *all = comm.board()->allPosted(round);
  return *all || !checkPeers ? Status::ok() : checkAliveNamingMismatches(comm, round, first);
}

// Looks at the board for round k before the step returns to the executor (see advance).
constexpr int kLooksBeforeReturning = 256;
// The chooser of stores samples a piece at a time.
constexpr size_t kPieceBytes = 32 << 10;
// Mappings kept per peer: buffers a program keeps stay mapped (DDP's buckets, one per 25
// MiB of gradients by default: a model of 400 MiB has 17). Mappings of allocations the peer
// has freed are let go whenever a new one is made, so this bounds live ones only.
constexpr size_t kMappingsPerPeer = 256;

}  // namespace

size_t mappedMinBytes(Communicator& comm) {
  const CommConfig& config = comm.config();
  if (comm.board() == nullptr || comm.nranks() < 2 || config.algorithms.forced(CallInfo::Kind::kAllReduce)) return 0;
  if (config.mappedMinBytes >= 0) return static_cast<size_t>(config.mappedMinBytes);
  return static_cast<size_t>(comm.board()->oneProcess() ? kMappedMinBytesThreads : kMappedMinBytesProcesses);
}

MappedPeers::MappedPeers(transport::Stores stores)
    : stores_(transport::StoreChooser::reductionRules(stores)) {}

char* MappedPeers::resolve(Communicator& comm, int q, const void* posted) {
  BufferRef ref;
  std::memcpy(&ref, posted, sizeof(ref));
  const transport::PeerProcess& peer = comm.board()->peer(q);
  if (q == comm.rank() || peer.sameProcess()) return reinterpret_cast<char*>(static_cast<uintptr_t>(ref.address));
  if (ref.serial == 0 || peer.foreign()) return nullptr;
  const std::pair<int, uint64_t> key{q, ref.serial};
  auto it = mappings_.find(key);
  if (it == mappings_.end()) {
    letGoFreed(q, peer.pid());
    PeerAllocation mapping;
    const MappedRange range{ref.fd, ref.serial, static_cast<size_t>(ref.segmentBytes), static_cast<size_t>(ref.offset)};
    Status s = mapPeerAllocation(peer.pid(), range, &mapping);
    if (!s.isOk()) {
      unmappedWhy_ = format("rank %d's loomMemAlloc buffer cannot be mapped on rank %d: %s", q, comm.rank(),
                            s.message().c_str());
      LOOM_TRACE("comm %016llx: %s", static_cast<unsigned long long>(comm.commId()), unmappedWhy_.c_str());
      return nullptr;
    }
    if (std::count_if(useOrder_.begin(), useOrder_.end(), [&](const auto& k) { return k.first == q; }) >=
        static_cast<long>(kMappingsPerPeer)) {
      auto oldest = std::find_if(useOrder_.begin(), useOrder_.end(), [&](const auto& k) { return k.first == q; });
      mappings_.erase(*oldest);
      useOrder_.erase(oldest);
    }
    it = mappings_.emplace(key, std::move(mapping)).first;
    ++mappingsMade_;
  } else {
    useOrder_.erase(std::find(useOrder_.begin(), useOrder_.end(), key));
  }
  useOrder_.push_back(key);
  return it->second.mapping.data() + ref.offset;
}

void MappedPeers::letGoFreed(int q, int pid) {
  for (auto k = useOrder_.begin(); k != useOrder_.end();) {
    if (k->first == q && !peerStillHolds(pid, mappings_.at(*k))) {
      mappings_.erase(*k);
      k = useOrder_.erase(k);
    } else {
      ++k;
    }
  }
}

void MappedPeers::reduceSlice(Communicator& comm, const OneShot& op) {
  const int n = comm.nranks(), r = comm.rank();
  const loomDataType_t type = op.call->type;
  const size_t es = typeSize(type), count = op.bytes / es;
  // Slices start on cache lines, so ranks writing neighbouring slices of one buffer never
  // write the same line.
  const size_t unit = 64 / es;
  const size_t per = ((count + static_cast<size_t>(n) - 1) / static_cast<size_t>(n) + unit - 1) / unit * unit;
  const size_t lo = std::min(count, per * static_cast<size_t>(r)), hi = std::min(count, lo + per);
  // Out of place past the cache (LOOM_STREAMING_MIN_BYTES) the stores are the chooser's:
  // plain ones read every output line first. In place the outputs are the lines just read,
  // and a smaller call's result stays in the caches its ranks read it from.
  const size_t streamingMin = comm.profile().streamingMinBytes;
  const bool pastCache = op.src != op.dst && streamingMin > 0 && op.bytes >= streamingMin;
  const int divisor = op.call->op == loomAvg ? n : 1;
  pieceSends_.resize(static_cast<size_t>(n));
  pieceRecvs_.resize(static_cast<size_t>(n));
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
    tsanAcquire(sends_[i]);
    tsanAcquire(recvs_[i]);
  }
  bool streamed = false;
  for (size_t e = lo; e < hi; e += kPieceBytes / es) {
    const size_t m = std::min(kPieceBytes / es, hi - e), offset = e * es;
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      pieceSends_[i] = sends_[i] + offset;
      pieceRecvs_[i] = recvs_[i] + offset;
    }
    const transport::StoreChooser::Choice stores = pastCache ? stores_.next(m * es) : transport::StoreChooser::Choice{};
    kernels::reduceNTo(pieceRecvs_.data(), n, pieceSends_.data(), n, m, type, op.call->op, divisor, stores.streaming);
    streamed = streamed || stores.streaming;
    if (stores.timed) stores_.ended(stores, m * es);
  }
  if (streamed) kernels::storeFence();
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
    tsanRelease(sends_[i]);
    tsanRelease(recvs_[i]);
  }
}

std::string MappedPeers::missingRanks(Communicator& comm, uint64_t round, MappedPhase phase) {
  // Before posting, the wait is for the board's slots: the others' posts of roundBeforePost().
  const uint64_t waited = phase == MappedPhase::kStart ? comm.board()->roundBeforePost()
                          : round + (phase == MappedPhase::kJudged ? 1 : phase == MappedPhase::kWritten ? 2 : 0);
  std::string ranks;
  for (int q = 0; q < comm.nranks(); ++q) {
    if (!comm.board()->posted(q, waited)) ranks += format("%srank %d", ranks.empty() ? "" : ", ", q);
  }
  return ranks.empty() ? std::string("no rank") : ranks;
}

void MappedPeers::ranPlan(Communicator& comm, const OneShot& op) {
  if (toldUnmapped_) return;
  toldUnmapped_ = true;
  LOOM_INFO("comm %016llx: %s ran its plan: some rank's buffers were out of another's reach (%s); later calls log "
            "nothing", static_cast<unsigned long long>(comm.commId()), op.call->describe().c_str(),
            unmappedWhy_.empty() ? "processes reach only loomMemAlloc's" : unmappedWhy_.c_str());
}

void MappedPeers::ranEveryRankInPlacePlan(Communicator& comm, const CallInfo& call) {
  if (everyRankInPlaceCalls_++ > 0) return;
  LOOM_INFO("comm %016llx: %s ran the plan chosen for every rank in place, as every rank is; later calls log nothing",
            static_cast<unsigned long long>(comm.commId()), call.describe().c_str());
}

Status MappedPeers::advance(Communicator& comm, const OneShot& op, bool checkPeers, MappedPhase* phase,
                            MappedVerdict* verdict) {
  transport::ShmBoard& board = *comm.board();
  const int n = board.nranks();
  bool all = false;
  if (*phase == MappedPhase::kStart) {
    bool ready = false;
    LOOM_TRY(readyToPost(comm, checkPeers, &ready));
    if (!ready) return Status::ok();
    encodeCallInfo(*op.call, op.header);
    Descriptor own{refOf(op.src, op.bytes), refOf(op.dst, op.bytes), 1, op.call->inPlace ? 1u : 0u};
    for (int q = 0; q < n; ++q) {
      if (q == comm.rank() || board.peer(q).sameProcess()) continue;
      if (own.send.serial == 0 || own.recv.serial == 0 || board.peer(q).foreign()) own.reachable = 0;
    }
    // The board's release and acquire are at other addresses in every thread: TSan learns of
    // the hand-off of each buffer from its address (base/tsan_handoff.h), here and below.
    tsanRelease(op.src);
    tsanRelease(op.dst);
    board.post(op.round, op.header, &own, sizeof(own));
    *phase = MappedPhase::kPosted;
  }
  if (*phase == MappedPhase::kPosted) {
    // The peers post within a microsecond or two of this rank where they run: look again a
    // while before going back to the executor, whose idle pass gives up the core (a system
    // call that cost about 1.5 us of a 64 KiB call that runs its plan).
    LOOM_TRY(allPosted(comm, op.round, op.round, checkPeers, &all));
    for (int look = 0; look < kLooksBeforeReturning && !all; ++look) {
      cpuRelax();
      LOOM_TRY(allPosted(comm, op.round, op.round, false, &all));
    }
    if (!all) return Status::ok();
    LOOM_TRY(checkLeftRounds(comm, op.round));
    LOOM_TRY(compareCalls(board, op.round, op.header));
    bool reachable = true;
    verdict->everyRankInPlace = true;
    for (int q = 0; q < n; ++q) {
      Descriptor d;
      std::memcpy(&d, board.data(q, op.round), sizeof(d));
      reachable = reachable && d.reachable != 0;
      verdict->everyRankInPlace = verdict->everyRankInPlace && d.inPlace != 0;
    }
    // Every rank skips the call's other rounds alike, and posts them at once: ranks post every
    // round, in order (shm_board.h).
    if (!reachable) {
      board.publish(op.round + 1, op.header, 0);
      board.publish(op.round + 2, op.header, 0);
      ranPlan(comm, op);
      *phase = MappedPhase::kFinished;
      return Status::ok();
    }
    uint8_t canMap = 1;
    sends_.assign(static_cast<size_t>(n), nullptr);
    recvs_.assign(static_cast<size_t>(n), nullptr);
    for (int q = 0; q < n; ++q) {
      const char* posted = static_cast<const char*>(board.data(q, op.round));
      sends_[static_cast<size_t>(q)] = resolve(comm, q, posted + offsetof(Descriptor, send));
      recvs_[static_cast<size_t>(q)] = resolve(comm, q, posted + offsetof(Descriptor, recv));
      if (sends_[static_cast<size_t>(q)] == nullptr || recvs_[static_cast<size_t>(q)] == nullptr) canMap = 0;
    }
    board.post(op.round + 1, op.header, &canMap, 1);
    *phase = MappedPhase::kJudged;
  }
  if (*phase == MappedPhase::kJudged) {
    LOOM_TRY(allPosted(comm, op.round + 1, op.round, checkPeers, &all));
    if (!all) return Status::ok();
    verdict->mapped = true;
    for (int q = 0; q < n; ++q) {
      verdict->mapped = verdict->mapped && *static_cast<const uint8_t*>(board.data(q, op.round + 1)) == 1;
    }
    if (verdict->mapped) {
      reduceSlice(comm, op);
      if (mappedCalls_++ == 0) {
        LOOM_INFO("comm %016llx: %s ran mapped: every rank reached every rank's buffers; later calls log nothing",
                  static_cast<unsigned long long>(comm.commId()), op.call->describe().c_str());
      }
    } else {
      ranPlan(comm, op);
    }
    board.post(op.round + 2, op.header, nullptr, 0);
    *phase = MappedPhase::kWritten;
  }
  LOOM_TRY(allPosted(comm, op.round + 2, op.round, checkPeers, &all));
  if (all) {
    tsanAcquire(op.src);
    tsanAcquire(op.dst);
    *phase = MappedPhase::kFinished;
  }
  return Status::ok();
}

}  // namespace loom
