// The communicator's ring order (docs/TOPOLOGY.md, "Rings"): every rank finds its place on
// its host (NUMA domain, GPU), the ranks allgather places, each host orders its ranks from
// its topology, and the ranks allgather their positions, so all of them build the same ring.
#pragma once

#include <vector>

#include "base/status.h"
#include "bootstrap/bootstrap.h"

namespace loom {

struct RingPlacementInput {
  int rank = 0;
  int nranks = 1;
  int localRank = 0;
  int localRanks = 1;
  int device = -1;                  // CUDA ordinal, -1 for host ranks
  std::vector<uint64_t> hostOf;     // per rank: its host's hash
};

// Collective over the bootstrap (every rank calls it with the same nranks). `ring` gets the
// ranks in ring order, `hostStarts` the ring position where each host's ranks begin,
// `summary` a line for the INFO log.
Status placeRing(Bootstrap& bootstrap, const RingPlacementInput& in, std::vector<int>* ring,
                 std::vector<int>* hostStarts, std::string* summary);

}  // namespace loom
