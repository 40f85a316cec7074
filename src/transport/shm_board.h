// The one-shot board: one shared-memory segment for all ranks of a communicator that lives
// on one host. For a small allreduce each rank posts its contribution in its own slot, then
// reads every rank's slot and reduces them in rank order: one write and one pass of reads,
// the least latency a small allreduce can have, and the same bits on every rank. A small
// broadcast posts the root's buffer alone, which the others copy (core/one_shot.h).
//
//   segment:  [rank 0: pid | announcements seq%2=0, 1 | its last kHistory rounds' (round, header) |
//              slots round%kSlots=0..kSlots-1] [rank 1: ...]
//   slot:     round (atomic, written last) | call header | data (up to kMaxBytes)
//
// A rank posts round R once every rank has posted round R-kSlots+1 (mayPost): each of them
// did so after finishing round R-kSlots, that is after reading this rank's slot of that
// round, the slot the new post takes. So a rank that reads no post (a broadcast's root, a
// reduce's leaf) runs up to kSlots-1 rounds ahead of the others, as an MPI sender's eager
// messages do, and a loop of small broadcasts does not wait for the readers every call.
//
// Such a rank leaves its round unchecked: it compares the others' calls of that round with
// its own later, once all have posted it (core/one_shot.h), a few rounds at a time
// (checkDue), and at the latest before it posts round R+kSlots-1 (mayPost waits for those
// posts). It reads the others' posts and headers of those rounds from their history, which
// keeps 2*kSlots rounds, two to a cache line, so that a check of several rounds reads a line
// of each rank for every two rounds and no slot: a rank overwrites its entry of round j
// when it posts j+kHistory, which waits for this rank's post of j+kSlots+1, later than any
// check of round j.
//
// A post's stores go to lines that the readers of an earlier round hold. A store to such a
// line waits in the core's store buffer while the line comes over, and the next locked
// instruction (every call has some: its use of the communicator, its execution lock) waits
// for the store: a trip between the cores in every call, which in a slow phase of the VM
// (docs/RESULTS.md) was most of a small broadcast's time. So after a post the rank takes the
// first lines of its next round's slot for writing (once every rank has read them), while
// the call ends and the next begins.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "base/peer_process.h"
#include "base/status.h"
#include "bootstrap/bootstrap.h"
#include "transport/shm_segment.h"

namespace loom::transport {

class ShmBoard {
 public:
  static constexpr size_t kMaxBytes = 32 << 10;
  static constexpr size_t kHeaderBytes = 24;
  static constexpr uint64_t kSlots = 8;
  static constexpr uint64_t kHistory = 2 * kSlots;
  static constexpr size_t kMostBytesTakenAhead = 512;
  // Bootstrap tag of the segment's name (rank 0 to the others).
  static constexpr uint32_t kNameTag = 0x53484d02;

  // Collective over every rank of the bootstrap (all on this host): rank 0 creates the
  // segment in `dir`, the others map it, and it is unlinked once all have.
  static Status create(Bootstrap& bootstrap, const std::string& dir, std::unique_ptr<ShmBoard>* out);

  // This rank's data area (kMaxBytes) in round `round`: filled in place, then published.
  void* ownData(uint64_t round) { return slot(rank_, round).data; }
  // Publishes this rank's part of round `round`: the call header, the `bytes` of data already
  // in ownData (their number sizes what is taken ahead for the next round: see the top).
  void publish(uint64_t round, const uint8_t* header, size_t bytes);
  // Copies `bytes` of data into ownData(round) and publishes them.
  void post(uint64_t round, const uint8_t* header, const void* data, size_t bytes) {
    if (bytes > 0) std::memcpy(ownData(round), data, bytes);
    publish(round, header, bytes);
  }
  // Whether rank q has posted round `round` (inline: a waiting rank asks in a tight loop). A
  // later round in the slot counts: ranks post every round, in order.
  bool posted(int q, uint64_t round) const {
    return slot(q, round).round.load(std::memory_order_acquire) >= round;
  }
  // Whether every rank has posted round `round` (remembered for mayPost).
  bool allPosted(uint64_t round) {
    return allHavePosted(round, [&](int q) { return posted(q, round); });
  }
  uint64_t lastPosted() const { return lastPosted_; }
  // The round every rank must have posted before this rank posts its next (see the top).
  uint64_t roundBeforePost() const { return lastPosted_ + 2 > kSlots ? lastPosted_ + 2 - kSlots : 0; }
  // Whether this rank may post its next round: every rank has posted roundBeforePost().
  bool mayPost() {
    const uint64_t before = roundBeforePost();
    return seenAll_ >= before || allPosted(before);
  }
  // Rank q's call header of round `round`, the round this rank reads the posts of (q has
  // posted it): in the slot's line of the round's number, which this rank reads anyway.
  const uint8_t* header(int q, uint64_t round) const { return slot(q, round).header; }
  // Whether every rank has posted `round`, from their history (remembered for mayPost), and
  // rank q's header of that round there: for a round this rank left unchecked (see the top).
  // History lines are read only for such rounds: reading them every call would cost their
  // writer a miss.
  bool allPostedInHistory(uint64_t round) {
    return allHavePosted(round, [&](int q) { return postedInHistory(q, round); });
  }
  bool postedInHistory(int q, uint64_t round) const {
    return area(q).history[round % kHistory].round.load(std::memory_order_acquire) >= round;
  }
  const uint8_t* historyHeader(int q, uint64_t round) const { return area(q).history[round % kHistory].header; }
  // The rounds this rank left without comparing calls, oldest first (0: none).
  void leftUnchecked(uint64_t round) { unchecked_[(uncheckedFirst_ + uncheckedCount_++) % kSlots] = round; }
  uint64_t oldestUnchecked() const { return uncheckedCount_ > 0 ? unchecked(0) : 0; }
  size_t uncheckedCount() const { return uncheckedCount_; }
  uint64_t unchecked(size_t i) const { return unchecked_[(uncheckedFirst_ + i) % kSlots]; }
  // Whether to compare the unchecked rounds' calls before the next post: half the slots' worth
  // wait (a check reads a line of each rank for every two rounds), or the oldest must be
  // checked before this rank posts again (mayPost's round).
  bool checkDue() const {
    return uncheckedCount_ >= kSlots / 2 || (uncheckedCount_ > 0 && oldestUnchecked() <= roundBeforePost());
  }
  void checkedOldest() {
    uncheckedFirst_ = (uncheckedFirst_ + 1) % kSlots;
    --uncheckedCount_;
  }
  const void* data(int q, uint64_t round) const { return slot(q, round).data; }
  // loomRemoteError naming the first rank that has not posted `round` and whose process has
  // exited or whose communicator failed (and the rank whose failure made it give up, when it
  // said), which it also records as this rank's cause.
  Status checkAlive(uint64_t round);
  // Records that this rank's communicator failed, for the ranks that wait for its posts (a
  // failed communicator makes no more calls), and for them and the ranks that will see this
  // one exit, the rank whose failure made it give up (-1: none known: no cause is recorded).
  void markFailed(int causeRank);
  // What this rank recorded with markFailed (-1: nothing).
  int ownCause() const { return recordedCause(rank_); }
  // What rank q recorded with markFailed (-1: nothing, or not yet).
  int recordedCause(int q) const;
  // Rounds are numbered per communicator, in call order (the same on every rank).
  uint64_t nextRound() { return ++rounds_; }

  // Every collective announces (its sequence number, its header) when it starts, so that a
  // rank left waiting can see a peer that entered a different call, even one that moves no
  // bytes to it (a one-shot allreduce against a broadcast, two ranks that both think they
  // are the root). A rank's last two announcements stay (by seq % 2): a peer that looks
  // after this rank finished a call without waiting for anyone and went on to the next
  // still finds it.
  void announce(uint64_t seq, const uint8_t* header);
  // Copies rank q's header for call `seq` into out, if q announced it and has not yet
  // announced seq + 2.
  bool announced(int q, uint64_t seq, uint8_t* out) const;
  // The number of the latest call rank q announced (0: none yet).
  uint64_t latestAnnounced(int q) const;
  int nranks() const { return nranks_; }
  // Rank q's process as this rank sees it (q != this rank).
  const PeerProcess& peer(int q) const { return peers_[static_cast<size_t>(q)]; }
  // Every rank is a thread of this process (the same answer on every rank).
  bool oneProcess() const { return oneProcess_; }

 private:
  // Round, header and the first 32 bytes of data share one cache line: a reader of a small
  // allreduce takes one miss per peer, not two.
  struct alignas(64) Slot {
    std::atomic<uint64_t> round;
    uint8_t header[kHeaderBytes];
    alignas(8) uint8_t data[kMaxBytes];
  };
  // A sequence lock: written 0, header, sequence; read sequence, header, sequence again.
  // The header is atomic words, so a reader that races a new announcement reads words it
  // then discards rather than racing on plain bytes.
  struct alignas(64) Announcement {
    std::atomic<uint64_t> seq;
    std::atomic<uint64_t> header[kHeaderBytes / 8];
  };
  // Written header first, round last (release): a rank that reads the round reads the header.
  struct HistoryEntry {
    std::atomic<uint64_t> round;
    uint8_t header[kHeaderBytes];
  };
  static_assert(sizeof(HistoryEntry) == 32, "two history entries to a cache line");
  struct alignas(64) RankArea {
    int32_t pid;
    uint64_t pidNamespace;
    // 1 + the rank whose failure made this rank give up (0: it has not), so that the ranks
    // that see it exit name the first failure.
    std::atomic<uint32_t> failedBecauseOf;
    std::atomic<uint32_t> failed;  // 1 once markFailed
    Announcement announcements[2];  // by seq % 2
    alignas(64) HistoryEntry history[kHistory];  // by round % kHistory
    Slot slots[kSlots];
  };
  static_assert(std::atomic<uint64_t>::is_always_lock_free, "the board's flags must work across processes");
  static_assert(kHeaderBytes % 8 == 0, "the announced header is whole words");

  ShmBoard(ShmSegment segment, int rank, int nranks);
  // Whether postedBy(q) holds for every rank q, remembered for mayPost as `round` seen posted.
  template <typename PostedBy>
  bool allHavePosted(uint64_t round, PostedBy postedBy) {
    for (int q = 0; q < nranks_; ++q) {
      if (!postedBy(q)) return false;
    }
    seenAll_ = std::max(seenAll_, round);
    return true;
  }
  RankArea& area(int q) const { return static_cast<RankArea*>(segment_.data())[q]; }
  Slot& slot(int q, uint64_t round) const { return area(q).slots[round % kSlots]; }

  ShmSegment segment_;
  int rank_;
  int nranks_;
  uint64_t rounds_ = 0;
  uint64_t lastPosted_ = 0;  // the last round this rank posted
  uint64_t seenAll_ = 0;     // the last round this rank saw every rank post
  // Rounds left unchecked: all after roundBeforePost() (mayPost checks them first), so fewer
  // than kSlots.
  uint64_t unchecked_[kSlots] = {};
  uint64_t uncheckedFirst_ = 0, uncheckedCount_ = 0;
  std::vector<PeerProcess> peers_;
  bool oneProcess_ = true;
};

}  // namespace loom::transport
