// The one-shot allreduce and broadcast on a communicator's shared-memory board
// (transport/shm_board.h): post this rank's part, then, once every rank's part is there,
// check that all ranks made the same call and fold the parts in rank order (allreduce), or
// copy the root's (broadcast: the root's part is its buffer, the others' their call alone).
// Used by the executor (a step that may have to wait for peers) and by the fast path of a
// lone small call, which skips building a plan.
#pragma once

#include "algorithms/plan.h"
#include "base/status.h"

namespace loom {

class Communicator;

// A call on the board (the mapped allreduce's too: core/mapped_allreduce.h).
struct OneShot {
  const CallInfo* call;
  const void* src;
  void* dst;
  size_t bytes;
  uint64_t round;
  // kCallInfoWireBytes, the caller's: the call's encoding, written by postOneShot and compared
  // with every rank's by finishOneShot.
  uint8_t* header;
};

// Publishes this rank's part (never waits): src, or for a premultiplied sum src times its
// scalar, multiplied straight into the board, or a broadcast's header alone where this rank
// is not the root; with announceSeq != 0 also announces the call under that number (see
// announceCall), from the same encoded header.
void postOneShot(Communicator& comm, const OneShot& op, uint64_t announceSeq);
// *done once every rank has posted and dst holds the result; a mismatched call is
// loomInvalidUsage. `checkPeers`: also ask whether a missing rank's process has exited
// (a system call: only after waiting a while).
Status finishOneShot(Communicator& comm, const OneShot& op, bool checkPeers, bool* done);

// Puts this rank's current call on the board (nothing without a board).
void announceCall(Communicator& comm, uint64_t seq, const CallInfo& call);
// loomInvalidUsage when a peer (or, checkAnnouncement, rank `peer`) has announced a different
// call under the same number; nothing is waited for.
Status checkAnnouncements(Communicator& comm, uint64_t seq, const CallInfo& call);
Status checkAnnouncement(Communicator& comm, uint64_t seq, const CallInfo& call, int peer);

// Runs one allreduce or broadcast on the board to completion on this thread, with the
// communicator's no-progress timeout and abort.
Status runOneShot(Communicator& comm, uint64_t seq, const CallInfo& call, const void* src, void* dst);

}  // namespace loom
