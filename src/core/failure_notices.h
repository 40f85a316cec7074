// Why a rank gave up, told to every peer over the bootstrap. A survivor whose link to a peer
// failed without the transport saying why (the peer closed its UCX worker, exited before
// mapping a segment, was never connected) asks for that peer's notice, so that every
// survivor names the first failure rather than the rank next to it. Transports that carry a
// cause themselves (sockets, shared memory) still do; this covers the rest.
#pragma once

#include <vector>

#include "bootstrap/bootstrap.h"

namespace loom {

class FailureNotices {
 public:
  explicit FailureNotices(Bootstrap& bootstrap);
  // Tells every other rank but `causeRank` that this rank gave up because `causeRank` failed
  // (-1: no peer's failure). Once per communicator; spends at most about a second.
  void tellPeers(int causeRank);
  // The rank `peer` said it gave up for, waiting briefly for a notice on its way; -1 when it
  // sent none (it died, or has not failed).
  int causeFrom(int peer);

 private:
  Bootstrap& bootstrap_;
  bool told_ = false;
  std::vector<int> noticed_;  // per peer: kNotAsked, or what causeFrom found
};

}  // namespace loom
