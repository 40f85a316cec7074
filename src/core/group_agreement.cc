// The walk of a group's collectives on the board (group_agreement.h).
#include "core/group_agreement.h"

#include "core/communicator.h"
#include "core/one_shot.h"
#include "core/remote_announcements.h"
#include "transport/shm_board.h"

namespace loom {

void GroupAgreement::reset(const std::vector<CallInfo>& calls, std::vector<int> peers) {
  calls_.clear();
  for (const CallInfo& call : calls) {
    if (call.seq != 0) calls_.push_back(call);
  }
  peers_ = std::move(peers);
  next_ = 0;
  announced_ = 0;
}

Status GroupAgreement::look(Communicator& comm, RemoteAnnouncements* remote) {
  const transport::ShmBoard* board = comm.board();
  if (board == nullptr && remote == nullptr) return Status::ok();
  if (board == nullptr) remote->listen();
  while (next_ < calls_.size()) {
    const CallInfo& call = calls_[next_];
    if (announced_ != call.seq) {
      if (board != nullptr) announceCall(comm, call.seq, call);
      announced_ = call.seq;
    }
    // Told once per call and peer (RemoteAnnouncements::tell); only what the connection takes
    // at once, so a look never waits.
    for (int peer : peers_) {
      if (board == nullptr) remote->tell(peer, call.seq, call);
    }
    // Compared with every rank's, not only the peers': over the bootstrap a rank hears only
    // ranks whose own calls name it, which differ from this rank's peers where the calls differ.
    if (board != nullptr) LOOM_TRY(checkAnnouncements(comm, call.seq, call));
    for (int rank = 0; rank < comm.nranks() && board == nullptr; ++rank) LOOM_TRY(remote->check(rank, call.seq, call));
    // A peer announces the next call only once every one of its peers announced this one as
    // it did: one at a later call agrees on this one.
    for (int peer : peers_) {
      if ((board != nullptr ? board->latestAnnounced(peer) : remote->latest(peer)) < call.seq) return Status::ok();
    }
    ++next_;
  }
  return Status::ok();
}

}  // namespace loom
