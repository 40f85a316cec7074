// Small collectives in one shot on a communicator's shared-memory board
// (transport/shm_board.h): every rank posts its send buffer (a broadcast's other ranks their
// call alone), then, once every rank's post is there, checks that all ranks made the same call
// and makes its result from the posts: folds them in rank order (allreduce, reduce at its
// root, this rank's block of a reduce-scatter), or copies what it receives (the root's buffer
// of a broadcast, every rank's block of an allgather, the block each rank addressed to it in
// an all-to-all). A rank that reads no post (a broadcast's root, a reduce's other ranks) is
// done once it has posted, as an MPI rank whose message went eagerly, and may run a few calls
// ahead (shm_board.h); it compares that call with the others' once every rank has posted it,
// in a later call, and fails that call if they differed. Used by
// the executor (a step that may have to wait for peers) and by the fast path of a lone small
// call, which skips building a plan.
#pragma once

#include "algorithms/plan.h"
#include "base/status.h"

namespace loom {

class Communicator;
namespace transport {
class ShmBoard;
}  // namespace transport

// A call on the board (the mapped allreduce's too: core/mapped_allreduce.h).
struct OneShot {
  const CallInfo* call;
  const void* src;
  void* dst;
  size_t bytes;  // the call's count in bytes: one block of an allgather, reduce-scatter or all-to-all
  uint64_t round;
  // kCallInfoWireBytes, the caller's: the call's encoding, written by postOneShot and compared
  // with every rank's by finishOneShot.
  uint8_t* header;
};

// Whether this rank may post now (ShmBoard::mayPost: the slot it takes has been read), after
// comparing the calls of the rounds this rank left unchecked where that is due
// (ShmBoard::checkDue, checkLeftRounds). `checkPeers` as below.
Status readyToPost(Communicator& comm, bool checkPeers, bool* ready);
// loomInvalidUsage where the ranks' calls differed in a round this rank left without reading
// the posts (a broadcast's root, a reduce's leaf) and every rank has posted since, oldest
// first; `current` is the round of the call being made, for the message.
Status checkLeftRounds(Communicator& comm, uint64_t current);
// The board's checkAlive(round), except that where a peer failed, the rounds this rank left
// unchecked are checked again (checkLeftRounds, `current` as there), those that not every rank
// has posted against the ranks that have, so that a mismatch in them is named rather than the
// failure it led to.
Status checkAliveNamingMismatches(Communicator& comm, uint64_t round, uint64_t current);
// Publishes this rank's part, once readyToPost (never waits): its send buffer, or for a
// premultiplied sum that times its scalar, multiplied straight into the board, or a
// broadcast's header alone where this rank is not the root; with announceSeq != 0 also announces the call under that number (see
// announceCall), from the same encoded header.
void postOneShot(Communicator& comm, const OneShot& op, uint64_t announceSeq);
// *done once dst holds the result: every rank has posted (or this rank reads no post); a
// mismatched call is loomInvalidUsage. `checkPeers`: also ask whether a missing rank's
// process has exited (a system call: only after waiting a while).
Status finishOneShot(Communicator& comm, const OneShot& op, bool checkPeers, bool* done);
// loomInvalidUsage where a rank's header of `round` (every rank has posted it, and this rank
// has posted no later round) differs from `header`, this rank's encoding of its call.
Status compareCalls(const transport::ShmBoard& board, uint64_t round, const uint8_t* header);

// Puts this rank's current call on the board (nothing without a board).
void announceCall(Communicator& comm, uint64_t seq, const CallInfo& call);
// loomInvalidUsage when a peer (or, checkAnnouncement, rank `peer`) has announced a different
// call under the same number; nothing is waited for.
Status checkAnnouncements(Communicator& comm, uint64_t seq, const CallInfo& call);
Status checkAnnouncement(Communicator& comm, uint64_t seq, const CallInfo& call, int peer);

// Runs one collective on the board to completion on this thread, with the
// communicator's no-progress timeout and abort.
Status runOneShot(Communicator& comm, uint64_t seq, const CallInfo& call, const void* src, void* dst);

}  // namespace loom
