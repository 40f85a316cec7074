// Small collectives in one shot on the shared-memory board (one_shot.h).
#include "core/one_shot.h"

#include <poll.h>
#include <sched.h>

#include <chrono>
#include <cstring>
#include <mutex>

#include "base/spin_lock.h"
#include "core/collective.h"
#include "core/communicator.h"
#include "core/wait_policy.h"
#include "kernels/reduce.h"
#include "transport/shm_board.h"

namespace loom {

namespace {

// Bytes this rank posts for its call: its whole send buffer (collective.h, bufferBytes), which
// for a broadcast's other ranks is nothing (they post their header alone).
size_t postedBytes(const Communicator& comm, const CallInfo& call) {
  size_t sendBytes = 0, recvBytes = 0;
  bufferBytes(call, comm.rank(), comm.nranks(), &sendBytes, &recvBytes);
  return sendBytes;
}

// Whether this rank posts its own block of the send buffer. An all-to-all's and a
// reduce-scatter's block `rank` is this rank's alone, which it reads from its send buffer,
// except a premultiplied sum's (the post is multiplied) and a reduce-scatter's in place (the
// fold writes the result over that block as it reads it).
bool postsOwnBlock(const OneShot& op, int rank) {
  const CallInfo& call = *op.call;
  if (call.kind == CallInfo::Kind::kAllToAll) return false;
  if (call.kind != CallInfo::Kind::kReduceScatter || call.preMul.on) return true;
  const auto* own = static_cast<const uint8_t*>(op.src) + static_cast<size_t>(rank) * op.bytes;
  const auto* dst = static_cast<const uint8_t*>(op.dst);
  return own < dst + op.bytes && dst < own + op.bytes;
}

// Folds, in rank order, the `bytes` at `offset` of every rank's post into dst (this rank's
// part from `own` where it is not in its post): the same bits on every rank.
void reduceParts(const transport::ShmBoard& board, const OneShot& op, size_t offset, const void* own, int rank,
                 void* dst) {
  const int n = board.nranks();
  // At most kMaxBytes of the smallest type: a fixed array, no allocation on this path.
  const void* inputs[64];
  std::vector<const void*> many;
  const void** parts = inputs;
  if (n > 64) {
    many.resize(static_cast<size_t>(n));
    parts = many.data();
  }
  for (int r = 0; r < n; ++r) parts[r] = static_cast<const uint8_t*>(board.data(r, op.round)) + offset;
  if (own != nullptr) parts[rank] = static_cast<const uint8_t*>(own) + offset;
  const loomDataType_t type = op.call->type;
  const size_t count = op.bytes / typeSize(type);
  kernels::reduceN(dst, parts, n, count, type, op.call->op);
  if (op.call->op == loomAvg) kernels::scale(dst, dst, count, type, n);
}

// Copies rank r's part into block `to` of dst: `from` is the offset in r's post, whose bytes
// this rank reads from its own buffer where r is itself (nothing to do in place).
void copyPart(const transport::ShmBoard& board, const OneShot& op, int rank, int r, size_t from, size_t to) {
  const void* part = r == rank ? op.src : board.data(r, op.round);
  const auto* src = static_cast<const uint8_t*>(part);
  uint8_t* dst = static_cast<uint8_t*>(op.dst) + to;
  if (dst != src + from && op.bytes > 0) std::memcpy(dst, src + from, op.bytes);
}

// This rank's result, once every rank has posted: op.bytes is the call's count in bytes (one
// block of an allgather, reduce-scatter or all-to-all).
void resultFromBoard(const transport::ShmBoard& board, const OneShot& op, int rank) {
  const CallInfo& call = *op.call;
  const size_t block = op.bytes;
  switch (call.kind) {
    case CallInfo::Kind::kAllReduce: return reduceParts(board, op, 0, nullptr, rank, op.dst);
    case CallInfo::Kind::kReduce:
      if (rank == call.root) reduceParts(board, op, 0, nullptr, rank, op.dst);
      return;
    case CallInfo::Kind::kReduceScatter:
      return reduceParts(board, op, static_cast<size_t>(rank) * block, postsOwnBlock(op, rank) ? nullptr : op.src, rank,
                         op.dst);
    case CallInfo::Kind::kBroadcast: return copyPart(board, op, rank, call.root, 0, 0);
    case CallInfo::Kind::kAllGather:
      for (int r = 0; r < board.nranks(); ++r) copyPart(board, op, rank, r, 0, static_cast<size_t>(r) * block);
      return;
    case CallInfo::Kind::kAllToAll:
      for (int r = 0; r < board.nranks(); ++r) {
        copyPart(board, op, rank, r, static_cast<size_t>(rank) * block, static_cast<size_t>(r) * block);
      }
      return;
    default: return;
  }
}

// Whether this rank's result needs the others' posts: a broadcast's root and a reduce's other
// ranks read none, so they finish once they have posted (the next post waits, if need be,
// for the board's slots: shm_board.h).
bool readsPosts(const CallInfo& call, int rank) {
  switch (call.kind) {
    case CallInfo::Kind::kBroadcast: return rank != call.root;
    case CallInfo::Kind::kReduce: return rank == call.root;
    default: return true;
  }
}

// loomInvalidUsage where a rank's header (headerOf(r)) differs from `header`, this rank's
// encoding of its call (decoded only to describe a difference).
template <typename HeaderOf>
Status compareHeaders(int nranks, HeaderOf headerOf, const uint8_t* header) {
  // Equal bytes are the same call, and only a difference needs decoding to be described.
  for (int r = 0; r < nranks; ++r) {
    const uint8_t* theirs = headerOf(r);
    if (std::memcmp(theirs, header, kCallInfoWireBytes) == 0) continue;
    CallInfo mine;
    decodeCallInfo(header, &mine);
    LOOM_TRY(checkCallInfo(theirs, mine, r));
  }
  return Status::ok();
}

// loomInvalidUsage where this rank's call of `round`, a round it left unchecked, differs from
// that of a rank that has posted it by posted(r); named for the call of round `current`.
template <typename Posted>
Status compareLeftRound(const transport::ShmBoard& board, int rank, uint64_t round, uint64_t current, Posted posted) {
  const uint8_t* mine = board.historyHeader(rank, round);
  const Status s = compareHeaders(
      board.nranks(), [&](int r) { return posted(r) ? board.historyHeader(r, round) : mine; }, mine);
  if (s.isOk()) return s;
  if (round + 1 == current) return s.withContext("this rank's previous call on the shared-memory board");
  return s.withContext(format("this rank's call on the shared-memory board %llu rounds before this one",
                              static_cast<unsigned long long>(current - round)));
}

}  // namespace

Status checkLeftRounds(Communicator& comm, uint64_t current) {
  transport::ShmBoard& board = *comm.board();
  // A rank that read the posts of such a round compared the calls then, and failed if they differed.
  for (uint64_t round; (round = board.oldestUnchecked()) != 0 && board.allPostedInHistory(round);
       board.checkedOldest()) {
    LOOM_TRY(compareLeftRound(board, comm.rank(), round, current, [](int) { return true; }));
  }
  return Status::ok();
}

// A peer found failed may have posted the rounds this rank left unchecked just before it
// failed (on a mismatch there): they were checked before checkAlive, but the peer may have
// posted and failed in between. It may also have failed on a mismatch it saw in the
// announcements before every rank had posted such a round (a root that is late): those
// rounds are compared with the ranks that have posted them.
Status checkAliveNamingMismatches(Communicator& comm, uint64_t round, uint64_t current) {
  transport::ShmBoard& board = *comm.board();
  const Status alive = board.checkAlive(round);
  if (alive.isOk() || board.oldestUnchecked() == 0) return alive;
  LOOM_TRY(checkLeftRounds(comm, current));
  for (size_t i = 0; i < board.uncheckedCount(); ++i) {
    const uint64_t left = board.unchecked(i);
    LOOM_TRY(compareLeftRound(board, comm.rank(), left, current, [&](int r) { return board.postedInHistory(r, left); }));
  }
  return alive;
}

Status readyToPost(Communicator& comm, bool checkPeers, bool* ready) {
  transport::ShmBoard& board = *comm.board();
  *ready = board.mayPost();
  // After mayPost: where it holds, the rounds that checkDue says must be checked are complete.
  if (board.checkDue()) LOOM_TRY(checkLeftRounds(comm, board.lastPosted() + 1));
  if (*ready || !checkPeers) return Status::ok();
  return checkAliveNamingMismatches(comm, board.roundBeforePost(), board.lastPosted() + 1);
}

Status compareCalls(const transport::ShmBoard& board, uint64_t round, const uint8_t* header) {
  return compareHeaders(board.nranks(), [&](int r) { return board.header(r, round); }, header);
}

void postOneShot(Communicator& comm, const OneShot& op, uint64_t announceSeq) {
  transport::ShmBoard& board = *comm.board();
  encodeCallInfo(*op.call, op.header);
  if (announceSeq != 0) board.announce(announceSeq, op.header);
  const CallInfo& call = *op.call;
  // Every rank posts, the broadcast's others too: their posts tell the others when a slot may
  // be written again (shm_board.h), and their headers are compared.
  const size_t bytes = postedBytes(comm, call);
  if (bytes == 0) return board.publish(op.round, op.header, 0);
  if (!postsOwnBlock(op, comm.rank())) {
    // The blocks before this rank's and after it, at their offsets.
    const size_t own = static_cast<size_t>(comm.rank()) * op.bytes, rest = own + op.bytes;
    auto* to = static_cast<uint8_t*>(board.ownData(op.round));
    const auto* from = static_cast<const uint8_t*>(op.src);
    if (own > 0) std::memcpy(to, from, own);
    if (bytes > rest) std::memcpy(to + rest, from + rest, bytes - rest);
    return board.publish(op.round, op.header, bytes);
  }
  if (!call.preMul.on) return board.post(op.round, op.header, op.src, bytes);
  kernels::multiply(board.ownData(op.round), op.src, bytes / typeSize(call.type), call.type, call.preMul.scalar());
  board.publish(op.round, op.header, bytes);
}

Status finishOneShot(Communicator& comm, const OneShot& op, bool checkPeers, bool* done) {
  transport::ShmBoard& board = *comm.board();
  *done = false;
  if (!readsPosts(*op.call, comm.rank())) {
    resultFromBoard(board, op, comm.rank());  // an out-of-place broadcast's root copies its own buffer
    board.leftUnchecked(op.round);
    *done = true;
    return Status::ok();
  }
  const bool all = board.allPosted(op.round);
  // Once all have posted this round, all have posted the earlier ones: a call that reads the
  // posts leaves no earlier round unchecked. While it waits, a peer that failed on a mismatch
  // of an earlier round is named by that mismatch, not by its failure.
  if (board.oldestUnchecked() != 0) LOOM_TRY(checkLeftRounds(comm, op.round));
  if (!all) return checkPeers ? checkAliveNamingMismatches(comm, op.round, op.round) : Status::ok();
  LOOM_TRY(compareCalls(board, op.round, op.header));
  resultFromBoard(board, op, comm.rank());
  *done = true;
  return Status::ok();
}

void announceCall(Communicator& comm, uint64_t seq, const CallInfo& call) {
  if (comm.board() == nullptr || seq == 0) return;
  uint8_t header[kCallInfoWireBytes];
  encodeCallInfo(call, header);
  comm.board()->announce(seq, header);
}

Status checkAnnouncement(Communicator& comm, uint64_t seq, const CallInfo& call, int peer) {
  transport::ShmBoard* board = comm.board();
  if (board == nullptr || seq == 0 || peer == comm.rank()) return Status::ok();
  uint8_t header[kCallInfoWireBytes];
  return board->announced(peer, seq, header) ? checkCallInfo(header, call, peer) : Status::ok();
}

Status checkAnnouncements(Communicator& comm, uint64_t seq, const CallInfo& call) {
  if (comm.board() == nullptr) return Status::ok();
  for (int r = 0; r < comm.nranks(); ++r) LOOM_TRY(checkAnnouncement(comm, seq, call, r));
  return Status::ok();
}

namespace {
// As the executor does on a failure: the communicator keeps the error, the board says so to
// the ranks that wait for this one's posts, and its links close, telling peers which rank's
// failure this is (what the board recorded, if anything).
Status failWith(Communicator& comm, const Status& s) {
  comm.fail(s);
  comm.board()->markFailed(-1);
  comm.transport().closeAll(comm.board()->ownCause());
  return s;
}
}  // namespace

Status runOneShot(Communicator& comm, uint64_t seq, const CallInfo& call, const void* src, void* dst) {
  using Clock = std::chrono::steady_clock;
  std::lock_guard<YieldingLock> lock(comm.executionLock());
  uint8_t header[kCallInfoWireBytes];
  OneShot op{&call, src, dst, call.count * typeSize(call.type), comm.board()->nextRound(), header};
  bool posted = false;
  // The clock is first read after 64 passes: a call that finishes before (most do, in a
  // fraction of a microsecond) would spend a good part of its time reading it.
  Clock::time_point start, lastCheck;
  // Spin first (a peer on this host is about to post); every 64 passes look at the clock,
  // every millisecond check abort and the peers' processes. The core is given up every 64
  // passes where ranks outnumber cores (the peer may be waiting for it), else every 4096: a
  // yield is a system call, longer than a whole call when the peer is a moment behind. Past
  // kSpinBeforeSleep the peer is away (busy elsewhere): every 64th pass naps on the abort
  // descriptor instead (core/wait_policy.h).
  const unsigned yieldMask = comm.oversubscribed() ? 63 : 4095;
  for (unsigned spins = 0;; ++spins) {
    bool done = false;
    bool slow = (spins & 63) == 63;
    Clock::time_point now = slow ? Clock::now() : lastCheck;
    if (spins == 63) start = lastCheck = now;
    bool check = slow && now - lastCheck > std::chrono::milliseconds(1);
    Status s;
    if (!posted) {
      s = readyToPost(comm, check, &posted);
      if (posted) postOneShot(comm, op, seq);
    }
    if (s.isOk() && posted) s = finishOneShot(comm, op, check, &done);
    if (s.isOk() && check) s = checkAnnouncements(comm, seq, call);
    if (!s.isOk()) return failWith(comm, s);
    if (done) return s;
    // Two pauses between looks: a look can take the peer's slot line away between the
    // peer's stores to it (header, data, round), which then wait another trip between the
    // cores. Where that trip is slow (the VM's slow phase, docs/RESULTS.md) a 2-rank 8 B
    // allreduce takes 0.385 -> 0.343 us; in a fast phase 0.123 -> 0.125. One pause gains
    // less, four lose in the fast phase.
    cpuRelax();
    cpuRelax();
    if (!slow) continue;
    const bool nap = now - start > kSpinBeforeSleep;
    if (!nap && (spins & yieldMask) == yieldMask) sched_yield();
    if (!nap && !check) continue;
    pollfd cancel{comm.cancelFd(), POLLIN, 0};
    if (pollFor(&cancel, 1, nap ? napAfter(now - start) : std::chrono::nanoseconds(0)) > 0) {
      return failWith(comm, comm.cancelReason());
    }
    if (!check) continue;
    lastCheck = now;
    long long limitMs = comm.config().timeoutMs;
    if (now - start > std::chrono::milliseconds(limitMs)) {
      return failWith(comm, error(loomTimeout, "%s: waiting for every rank's part on the shared-memory board timed out after %lld ms",
                                  call.describe().c_str(), limitMs));
    }
  }
}

}  // namespace loom
