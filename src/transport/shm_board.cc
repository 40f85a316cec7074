// The one-shot board's segment, slots and flags (shm_board.h).
#include "transport/shm_board.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <string>

#include "base/cache_lines.h"
#include "base/log.h"

namespace loom::transport {

ShmBoard::ShmBoard(ShmSegment segment, int rank, int nranks)
    : segment_(std::move(segment)), rank_(rank), nranks_(nranks), peers_(static_cast<size_t>(nranks)) {}

Status ShmBoard::create(Bootstrap& bootstrap, const std::string& dir, std::unique_ptr<ShmBoard>* out) {
  const int rank = bootstrap.rank(), n = bootstrap.nranks();
  const size_t bytes = sizeof(RankArea) * static_cast<size_t>(n);
  ShmSegment segment;
  char name[256] = {};
  if (rank == 0) {
    LOOM_TRY(ShmSegment::create(dir, bytes, "one-shot board", &segment));
    if (segment.name().size() >= sizeof(name)) return error(loomInvalidArgument, "LOOM_SHM_DIR is too long");
    std::memcpy(name, segment.name().c_str(), segment.name().size());
    for (int q = 1; q < n; ++q) LOOM_TRY(bootstrap.send(q, kNameTag, name, sizeof(name)));
  } else {
    LOOM_TRY(bootstrap.recv(0, kNameTag, name, sizeof(name)));
    LOOM_TRY(ShmSegment::open(name, bytes, &segment));
  }
  std::unique_ptr<ShmBoard> board(new ShmBoard(std::move(segment), rank, n));
  RankArea& own = board->area(rank);
  own.pid = static_cast<int32_t>(::getpid());
  own.pidNamespace = PeerProcess::ownPidNamespace();
  for (Slot& s : own.slots) s.round.store(0, std::memory_order_relaxed);
  // After the barrier every rank has mapped the segment and filled in its pid.
  LOOM_TRY(bootstrap.barrier());
  if (rank == 0) board->segment_.unlink();
  for (int q = 0; q < n; ++q) {
    if (q == rank) continue;
    PeerProcess& peer = board->peers_[static_cast<size_t>(q)];
    peer.identify(board->area(q).pid, board->area(q).pidNamespace);
    board->oneProcess_ = board->oneProcess_ && peer.sameProcess();
  }
  *out = std::move(board);
  return Status::ok();
}

void ShmBoard::publish(uint64_t round, const uint8_t* header, size_t bytes) {
  static_assert(offsetof(Slot, data) == 32, "small data must share the round's cache line");
  Slot& s = slot(rank_, round);
  std::memcpy(s.header, header, kHeaderBytes);
  HistoryEntry& h = area(rank_).history[round % kHistory];
  std::memcpy(h.header, header, kHeaderBytes);
  h.round.store(round, std::memory_order_release);
  s.round.store(round, std::memory_order_release);
  lastPosted_ = round;
  // The next round's slot is free once every rank has posted roundBeforePost(), as mayPost
  // asks; before, taking its lines would take them from a reader. Its data is taken as far as
  // this round's went (a guess at the next call's size), up to kMostBytesTakenAhead: taking 4
  // KiB made a 4 KiB allreduce 7-11 % slower.
  if (seenAll_ < roundBeforePost()) return;
  prefetchForWriting(&slot(rank_, round + 1), std::min(offsetof(Slot, data) + bytes, kMostBytesTakenAhead));
}

void ShmBoard::announce(uint64_t seq, const uint8_t* header) {
  Announcement& own = area(rank_).announcements[seq % 2];
  uint64_t words[kHeaderBytes / 8];
  std::memcpy(words, header, kHeaderBytes);
  own.seq.store(0, std::memory_order_relaxed);
  // Release: a reader that sees one new word also sees the 0, and discards what it read.
  for (size_t i = 0; i < kHeaderBytes / 8; ++i) own.header[i].store(words[i], std::memory_order_release);
  own.seq.store(seq, std::memory_order_release);
}

bool ShmBoard::announced(int q, uint64_t seq, uint8_t* out) const {
  const Announcement& a = area(q).announcements[seq % 2];
  if (a.seq.load(std::memory_order_acquire) != seq) return false;
  uint64_t words[kHeaderBytes / 8];
  // Acquire: the sequence is read again only after every word.
  for (size_t i = 0; i < kHeaderBytes / 8; ++i) words[i] = a.header[i].load(std::memory_order_acquire);
  if (a.seq.load(std::memory_order_relaxed) != seq) return false;
  std::memcpy(out, words, kHeaderBytes);
  return true;
}

uint64_t ShmBoard::latestAnnounced(int q) const {
  const RankArea& a = area(q);
  // A slot being written reads 0 for the moment: the other one still holds an announcement.
  return std::max(a.announcements[0].seq.load(std::memory_order_acquire),
                  a.announcements[1].seq.load(std::memory_order_acquire));
}

void ShmBoard::markFailed(int causeRank) {
  // The cause first: a peer that sees the flag reads it next.
  if (causeRank >= 0) area(rank_).failedBecauseOf.store(static_cast<uint32_t>(causeRank) + 1, std::memory_order_release);
  area(rank_).failed.store(1, std::memory_order_release);
}

int ShmBoard::recordedCause(int q) const {
  return static_cast<int>(area(q).failedBecauseOf.load(std::memory_order_acquire)) - 1;
}

Status ShmBoard::checkAlive(uint64_t round) {
  for (int q = 0; q < nranks_; ++q) {
    const PeerProcess& p = peers_[static_cast<size_t>(q)];
    // A rank that posted the awaited round may be gone: one that reads no post leaves at once.
    if (q == rank_ || posted(q, round)) continue;
    // A live rank is waited for unless its communicator failed: then it makes no more calls.
    const bool alive = p.alive();
    if (alive && area(q).failed.load(std::memory_order_acquire) == 0) continue;
    const int cause = recordedCause(q);
    markFailed(cause >= 0 ? cause : q);
    const std::string what = alive ? format("rank %d gave up before it posted its part on the shared-memory board", q)
                                   : format("rank %d (pid %d) exited while the ranks met on the shared-memory board",
                                            q, p.pid());
    if (cause < 0 || cause == q) return error(loomRemoteError, "%s", what.c_str());
    return error(loomRemoteError, "%s, after it failed because rank %d failed", what.c_str(), cause);
  }
  return Status::ok();
}

}  // namespace loom::transport
