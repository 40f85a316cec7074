// Lowering: a rank's Plan (algorithms/plan.h: steps over pointers, peers and channels) as the
// flat plan the kernel reads (plan_format.h). Steps keep their index, so `after` and
// `writeAfter` carry over unchanged; each step gets the connection it uses, its wire and its
// flags, and the steps are dealt to workers: one per connection (peer, channel, direction) and
// the local copies, each in plan order, which are the host executor's queues. Large local
// copies are split among as many workers as the budget leaves (up to kMaxLocalParts), each
// running the whole local queue and doing its part of every step.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "algorithms/plan.h"
#include "base/status.h"
#include "device/plan_format.h"

namespace loom::device {

// What the lowering needs to know of the communicator's connections.
struct ConnectionMap {
  int channels = 1;  // connections per peer and direction; plan channel c uses c % channels
  int nranks = 1;    // the divisor of a loomAvg
  int workerBudget = 0;  // workers a launch may have (0: no limit); spare ones split local copies
  // Index in the connection table of (peer, channel, send or receive).
  std::function<int(int peer, int channel, bool send)> index;
  // Whether the peer is on another host: its connections carry only the simple wire.
  std::function<bool(int peer)> offHost;
};

// A lone rank's 512 MiB, copied in 2 MiB steps of 8 parts each, ran at 135 GB/s on an H200,
// where a device copy runs at 2 TB/s: a copy needs most of the device's multiprocessors.
constexpr int kMaxLocalParts = 64;
constexpr uint64_t kLocalPartBytes = 256 << 10;  // the least a part of a copy is worth a worker for

// Flattens `plan` into *out (PlanHeader first), numbered `id`. A recvReduce with writeAfter
// gets scratch from plan.scratch() for bytes that arrive before it may write. A one-shot step
// (host memory only) is loomInternalError.
Status lowerPlan(Plan& plan, uint64_t id, const ConnectionMap& connections, std::vector<uint8_t>* out);

}  // namespace loom::device
