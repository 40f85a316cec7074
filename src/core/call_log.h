// The last calls made on a communicator, for the log of a failure: what torch's DETAIL mode
// users ask for when a job dies ("which collective, and what came before it?"). It also
// numbers the collectives, in the same critical section as it records them (one locked
// instruction per call, not two). Recording copies a few words under a spin lock; the lines
// are built only when printed.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/plan.h"
#include "base/spin_lock.h"

namespace loom {

class CallLog {
 public:
  static constexpr size_t kEntries = 16;

  // A collective: returns its number, 1 for the first (the call order, the same on every
  // rank, which the mismatch checks compare).
  uint64_t recordCollective(const CallInfo& info);
  // A barrier, which is not numbered.
  void recordBarrier();
  // A loomSend or loomRecv (`call`, a string literal) of `bytes` with `peer`.
  void recordPointToPoint(const char* call, int peer, uint64_t bytes);
  // Takes back the last `calls` records, `collectives` of them collectives, whose numbers the
  // next collectives get again (loomGroupSimulateEnd: calls recorded, then not made).
  void forget(uint64_t calls, uint64_t collectives);
  // Oldest first, one line each: "#12 loomAllReduce(count 10, float32, sum)".
  std::vector<std::string> lines() const;

 private:
  struct Entry {
    // The fields a line prints (CallInfo::describe), written one by one (addLocked).
    CallInfo info;
    uint64_t seq;      // collectives
    const char* call;  // point-to-point (nullptr for a collective)
    int peer;
  };
  void addLocked(const CallInfo& info, uint64_t seq, const char* call, int peer);

  mutable SpinLock lock_;
  std::array<Entry, kEntries> entries_{};
  uint64_t recorded_ = 0;
  uint64_t collectives_ = 0;
  // The oldest record still in entries_: forgotten ones overwrote older ones there.
  uint64_t oldest_ = 0;
};

}  // namespace loom
