// The walk of a group's collectives on the board (group_agreement.h).
#include "core/group_agreement.h"

#include "core/communicator.h"
#include "core/one_shot.h"
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

Status GroupAgreement::look(Communicator& comm) {
  const transport::ShmBoard* board = comm.board();
  if (board == nullptr) return Status::ok();
  while (next_ < calls_.size()) {
    const CallInfo& call = calls_[next_];
    if (announced_ != call.seq) {
      announceCall(comm, call.seq, call);
      announced_ = call.seq;
    }
    for (int peer : peers_) LOOM_TRY(checkAnnouncement(comm, call.seq, call, peer));
    // A peer announces the next call only once every one of its peers announced this one as
    // it did: one at a later call agrees on this one.
    for (int peer : peers_) {
      if (board->latestAnnounced(peer) < call.seq) return Status::ok();
    }
    ++next_;
  }
  return Status::ok();
}

}  // namespace loom
