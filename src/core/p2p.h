// Point-to-point calls as plan steps: each loomSend / loomRecv is one message with its own
// header (so the receiver checks size and kind against what it posted), and messages
// between a pair of ranks match in issue order. The executor interleaves all of a group's
// messages, so no order of calls across ranks can deadlock.
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/plan.h"
#include "base/status.h"

namespace loom {

class Communicator;

struct P2POp {
  enum class Direction { kSend, kRecv };
  Direction direction;
  Communicator* comm;
  int peer;
  void* buffer;  // read for sends, written for receives
  size_t bytes;
};

// The header a message carries, which the receiver checks against its own.
CallInfo messageInfo(size_t bytes);

// Appends one message to another rank (op.peer != this rank).
void appendP2P(Plan& plan, const P2POp& op);

// Sends and receives a rank posts to itself in one group match each other in order and
// become local copies. Mismatched counts or sizes are loomInvalidUsage (nothing has moved).
Status appendSelfCopies(Plan& plan, const std::vector<P2POp>& selfOps);

// Dissemination barrier: round k signals rank + 2^k and waits for rank - 2^k. appendBarrier
// writes its steps into a plan (the device path runs them in its kernel).
void appendBarrier(Plan& plan, int rank, int nranks);
Status runBarrier(Communicator& comm);

}  // namespace loom
