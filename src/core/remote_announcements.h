// Which call a rank waits in, told over the bootstrap to the peers it waits on where no
// shared-memory board carries announcements (core/one_shot.h): ranks on several hosts, or a
// communicator without shared memory. Two ranks that each wait for the other's bytes in calls
// that differ (each thinks it is a reduce's root; a reduce against a broadcast across hosts)
// send each other nothing that a header could be compared in; told so, they see it within
// milliseconds instead of at the deadline. A rank tells a peer only after kTellAfter without
// progress, once per call, and only what the connection takes at once (Bootstrap::offer): a
// peer that never waits that long never reads them, and they must never hold up the teller.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "algorithms/plan.h"
#include "base/status.h"
#include "bootstrap/bootstrap.h"

namespace loom {

class RemoteAnnouncements {
 public:
  // Calls that run this long without progress are rare (a slow peer, a large message on a slow
  // network) and each costs a message; a deadlock waits the whole timeout.
  static constexpr std::chrono::milliseconds kTellAfter{10};

  explicit RemoteAnnouncements(Bootstrap& bootstrap);
  // Tells `peer` that this rank waits in collective number `seq`, `call`: once per call, where
  // its connection takes it at once.
  void tell(int peer, uint64_t seq, const CallInfo& call);
  // Takes the announcements that came, without waiting, keeping each peer's latest.
  void listen();
  // loomInvalidUsage naming both calls where `peer` told that it waits in collective `seq` as
  // another call.
  Status check(int peer, uint64_t seq, const CallInfo& call) const;
  // The number of the latest call `peer` told of (0: none).
  uint64_t latest(int peer) const { return heard_[static_cast<size_t>(peer)].seq; }

 private:
  struct Heard {
    uint64_t seq = 0;
    uint8_t header[kCallInfoWireBytes] = {};
  };

  Bootstrap& bootstrap_;
  std::vector<uint64_t> told_;  // per peer: the last call told
  std::vector<Heard> heard_;    // per peer: its latest announcement
};

}  // namespace loom
