// Send, receive and barrier as plan steps (p2p.h).
#include "core/p2p.h"

#include "core/communicator.h"
#include "core/executor.h"

namespace loom {

CallInfo messageInfo(size_t bytes) {
  CallInfo info;
  info.kind = CallInfo::Kind::kSend;
  info.count = bytes;
  return info;
}

void appendP2P(Plan& plan, const P2POp& op) {
  plan.beginCall(messageInfo(op.bytes));
  Step step{op.direction == P2POp::Direction::kSend ? Step::Kind::kSend : Step::Kind::kRecv};
  step.peer = op.peer;
  step.src = op.buffer;
  step.dst = op.buffer;
  step.bytes = op.bytes;
  step.header = true;
  plan.add(step);
}

Status appendSelfCopies(Plan& plan, const std::vector<P2POp>& selfOps) {
  std::vector<const P2POp*> sends, recvs;
  for (const P2POp& op : selfOps) (op.direction == P2POp::Direction::kSend ? sends : recvs).push_back(&op);
  if (sends.size() != recvs.size()) {
    return error(loomInvalidUsage,
                 "%zu send(s) to self but %zu receive(s) from self in one group: each needs its match "
                 "in the same group",
                 sends.size(), recvs.size());
  }
  for (size_t i = 0; i < sends.size(); ++i) {
    if (sends[i]->bytes != recvs[i]->bytes) {
      return error(loomInvalidUsage, "mismatched calls: send to self of %zu bytes, receive of %zu", sends[i]->bytes,
                   recvs[i]->bytes);
    }
  }
  if (sends.empty()) return Status::ok();
  plan.beginCall(CallInfo{});
  for (size_t i = 0; i < sends.size(); ++i) {
    Step copy{Step::Kind::kCopy};
    copy.src = sends[i]->buffer;
    copy.dst = recvs[i]->buffer;
    copy.bytes = sends[i]->bytes;
    plan.add(copy);
  }
  return Status::ok();
}

void appendBarrier(Plan& plan, int r, int n) {
  CallInfo info;
  info.kind = CallInfo::Kind::kBarrier;
  plan.beginCall(info);
  int heard = Step::kNone;
  // After round k a rank has heard, through others, from 2^(k+1) ranks.
  for (int step = 1; step < n; step <<= 1) {
    Step signal{Step::Kind::kSend};
    signal.peer = (r + step) % n;
    signal.after = heard;
    signal.header = true;
    plan.add(signal);
    Step wait{Step::Kind::kRecv};
    wait.peer = (r - step + n) % n;
    wait.header = true;
    heard = plan.add(wait);
  }
}

Status runBarrier(Communicator& comm) {
  Plans plans(1);
  plans[0].comm = &comm;
  appendBarrier(plans[0], comm.rank(), comm.nranks());
  return execute(plans).withContext("loomBarrier");
}

}  // namespace loom
