// Ranks that each wait for another's bytes in calls that differ (each names itself a reduce's
// root) send each other nothing a receiver could compare with its own call. Where a group of
// calls runs as one unit that no host thread follows call by call (a device launch, or a
// device group while it connects its FIFOs), the ranks walk the group's collectives together
// on the shared-memory board: each announces the first, compares it with what its peers
// announced under that number, and moves to the next once every peer has announced the same
// one or a later one. Ranks stuck in one group so meet at the first call they disagree on and
// fail there, milliseconds after they start to look, not at the timeout.
//
// Why comparing with the group's peers alone suffices: the ranks that exchange bytes in a
// collective form a connected graph (its bytes reach every rank), so ranks whose calls are not
// all the same include two neighbours whose calls differ, and these two see it.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "algorithms/plan.h"
#include "base/status.h"

namespace loom {

class Communicator;

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
  // another call under the same number; nothing where the communicator has no board.
  Status look(Communicator& comm);

 private:
  std::vector<CallInfo> calls_;
  std::vector<int> peers_;
  size_t next_ = 0;        // the call being compared
  uint64_t announced_ = 0;  // the number of the last call this unit announced
};

}  // namespace loom
