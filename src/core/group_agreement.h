// Ranks that each wait for another's bytes in calls that differ (each names itself a reduce's
// root) send each other nothing a receiver could compare with its own call. Where a group of
// calls runs as one unit that no host thread follows call by call (a device launch, or a
// device group while it connects its FIFOs), the ranks walk the group's collectives together,
// on the shared-memory board or, where there is none (ranks on several hosts), told over a
// bootstrap channel (remote_announcements.h): each announces the first, compares it with what
// its peers announced under that number, and moves to the next once every peer has announced
// the same one or a later one. Ranks stuck in one group so meet at the first call they
// disagree on and fail there, milliseconds after they start to look, not at the timeout.
//
// Why telling the group's peers suffices: the ranks that exchange bytes in a collective form a
// connected graph (its bytes reach every rank), so where ranks make different calls, one of
// them has a peer in its own call that makes another, and tells it; every rank compares what
// any rank told. Where the calls agree, peers are mutual, so each hears all of its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "algorithms/plan.h"
#include "base/status.h"

namespace loom {

class Communicator;
class RemoteAnnouncements;

class GroupAgreement {
 public:
  // A unit that runs this long without finishing is compared (a deadlock waits the whole
  // timeout; most units end well before).
  static constexpr std::chrono::milliseconds kLookAfter{10};

  // A new unit: its calls (those without a number, point-to-point, are skipped) and the ranks
  // it exchanges bytes with.
  void reset(const std::vector<CallInfo>& calls, std::vector<int> peers);
  // One look, never waiting: announces the call being compared, checks the peers' announcements
  // and moves on as far as they agree. loomInvalidUsage naming both calls where a peer announced
  // another call under the same number. On the communicator's board, else through `remote`
  // (its user's alone: not the communicator's own, which its calls use); nothing with neither.
  Status look(Communicator& comm, RemoteAnnouncements* remote);

 private:
  std::vector<CallInfo> calls_;
  std::vector<int> peers_;
  size_t next_ = 0;        // the call being compared
  uint64_t announced_ = 0;  // the number of the last call this unit announced
};

}  // namespace loom
