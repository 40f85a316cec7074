// Why a rank gave up, told to every peer over the bootstrap. A survivor whose link to a peer
// failed without the transport saying why (the peer closed its UCX worker, exited before
// mapping a segment, was never connected) asks for that peer's notice, so that every
// survivor names the first failure rather than the rank next to it. Transports that carry a
// cause themselves (sockets, shared memory) still do; this covers the rest. A call that
// sleeps also listens for notices, for the survivor no failed link reaches (UCX's
// shared-memory lanes tell nobody that a peer closed its endpoint).
#pragma once

#include <poll.h>

#include <cstdint>
#include <vector>

#include "bootstrap/bootstrap.h"

namespace loom {

class FailureNotices {
 public:
  explicit FailureNotices(Bootstrap& bootstrap);
  // Tells every other rank but `causeRank` that this rank gave up because `causeRank` failed
  // (-1: no peer's failure), in the collective numbered `seq` (0: in calls without a number).
  // Once per communicator; spends at most about a second.
  void tellPeers(int causeRank, uint64_t seq);
  // The rank `peer` said it gave up for, waiting briefly for a notice on its way; -1 when it
  // sent none (it died, or has not failed).
  int causeFrom(int peer);

  // For a sleeping wait: adds the bootstrap's descriptors to poll (and takes a notice another
  // exchange already read).
  void addWaitFds(PollFds* fds);
  // Takes the notices that came, without waiting.
  void listen();
  // The first peer (-1: none) whose notice, taken, satisfies concerns(peer, cause, seq): the
  // rank it named (-1: it gave up on its own, then also in *cause) and the collective it gave
  // up in (0: calls without a number).
  template <typename Concerns>
  int first(Concerns concerns, int* cause) const {
    for (size_t peer = 0; peer < heard_.size(); ++peer) {
      const Heard& heard = heard_[peer];
      if (!heard.came || !concerns(static_cast<int>(peer), heard.cause, heard.seq)) continue;
      *cause = heard.cause;
      return static_cast<int>(peer);
    }
    return -1;
  }

 private:
  struct Heard {
    bool asked = false;  // causeFrom waited for it (whether or not it came)
    bool came = false;
    int cause = -1;
    uint64_t seq = 0;
  };
  // Takes peer's notice if one is here or comes by `until`.
  void take(int peer, const Deadline& until);

  Bootstrap& bootstrap_;
  bool told_ = false;
  std::vector<Heard> heard_;  // per peer
};

}  // namespace loom
