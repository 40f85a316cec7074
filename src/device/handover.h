// Device memory a rank shares with a thread rank of its own process, which reaches it by
// address. The peer may open it only after the owner's communicator is gone (a send that fit
// the FIFO ends the owner's part at once), and its kernel may store into it after that (its
// last consumer counter, its status word). So the owner hands the memory over here and the
// peer takes the reference, which keeps it: the memory goes with the last holder, as a
// mapping does between processes. Thread-safe; the registry keeps the process's one table.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "base/status.h"

namespace loom::device {

class Handover {
 public:
  // Holds `memory` at `address` until a peer takes it.
  void give(uint64_t address, std::shared_ptr<void> memory);
  // Takes the memory rank `peer` gave at `address` into `holders` (the caller's) and points *out
  // at it; an error when none waits there (never given, or taken already).
  Status take(uint64_t address, int peer, std::vector<std::shared_ptr<void>>* holders, void** out);

 private:
  std::mutex mutex_;
  // A given block waits here until taken; one its peer never takes (that peer's connection
  // failed first) stays until the process ends.
  std::map<uint64_t, std::shared_ptr<void>> given_;
};

}  // namespace loom::device
