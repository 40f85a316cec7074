// Point-to-point execution: runs a batch of sends and receives (one group, possibly over
// several communicators) to completion, all interleaved, so that no order of calls across
// ranks can deadlock. Messages between a pair of ranks match in issue order.
//
// Wire form of one message on a link: header {magic "LMP2", kind u16, 0 u16, bytes u64}
// then the payload. The receiver checks kind and size against what it posted, which turns
// mismatched calls into an error instead of corrupted data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace loom {

class Communicator;

enum class MessageKind : uint16_t { kUser = 1, kBarrier = 2 };

struct P2POp {
  enum class Direction { kSend, kRecv };
  Direction direction;
  Communicator* comm;
  int peer;
  void* buffer;  // read for sends, written for receives
  size_t bytes;
  MessageKind kind = MessageKind::kUser;
};

// Runs every op; returns the first error. A failure (timeout, dead peer, mismatch, abort)
// also puts each communicator with unfinished ops in its error state, since its links are
// no longer in step with its peers.
Status runP2P(std::vector<P2POp>& ops);

// Dissemination barrier over the communicator's links.
Status runBarrier(Communicator& comm);

}  // namespace loom
