// The order ranks take around a ring. Within a host, neighbours should share the widest
// path (NVLink, then one PCIe switch) and the ring should cross CPU sockets as few times as
// it can; across hosts, each host's ranks stay together so the ring crosses the network
// once per host (twice in all for two hosts, the least a ring can).
//
//   PCIe box, 4 GPUs, two per socket:   gpu0 -PIX- gpu1 -SYS- gpu2 -PIX- gpu3 -SYS- (gpu0)
//   (gpu0 gpu2 gpu1 gpu3 would cross sockets four times)
#pragma once

#include <string>
#include <vector>

#include "topology/graph.h"

namespace loom::topo {

// Where one rank of a host runs, as graph node indices.
struct Place {
  int cpu = -1;  // the CPU node (NUMA domain) its thread runs on
  int gpu = -1;  // its GPU, -1 for a host rank
};

// The ring's neighbours along a host's chain, summarised.
struct ChainQuality {
  double gbps = 0;         // the narrowest hop around the closed ring (0: one rank)
  int socketCrossings = 0; // hops between CPU packages (SYS)
  int numaCrossings = 0;   // hops between NUMA domains of one package (also SYS)
  int hops = 0;            // links traversed, summed over the hops
};

// The order (indices into `places`) in which one host's ranks sit on the ring. GPU ranks:
// the order of their distinct GPUs that maximises the narrowest hop, then minimises socket
// crossings, then crossings between NUMA domains of one package, then hops (exhaustive up
// to 9 GPUs, nearest neighbour beyond); ranks that share a GPU sit together. Host ranks:
// grouped by socket, then NUMA domain. Ties keep the input order, so equal machines give
// equal orders.
std::vector<int> hostChain(const Graph& graph, const std::vector<Place>& places);

// The chain's quality as a closed ring.
ChainQuality chainQuality(const Graph& graph, const std::vector<Place>& places, const std::vector<int>& chain);

// The ring over all ranks: hosts in the order of their lowest rank, each host's ranks in its
// chain. `hostOf[r]` is rank r's host number; `chainPosition[r]` its index in its host's chain.
std::vector<int> globalRing(const std::vector<int>& hostOf, const std::vector<int>& chainPosition);

}  // namespace loom::topo
