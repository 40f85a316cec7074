// The ring order from the places every rank reports (ring_placement.h).
#include "core/ring_placement.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <map>

#include "base/env.h"
#include "core/registry.h"
#include "topology/rings.h"

namespace loom {

namespace {

// The NUMA domain this thread runs on now (-1 unknown).
int currentNuma() {
  unsigned cpu = 0, node = 0;
  return syscall(SYS_getcpu, &cpu, &node, nullptr) == 0 ? static_cast<int>(node) : -1;
}

// This rank's place in `graph`. On the live machine: where this thread runs and its GPU.
// On a loaded file (another machine): host ranks spread evenly over its NUMA domains and
// GPU ranks on the GPU of their ordinal, as loom-topo --rings does.
topo::Place ownPlace(const topo::Graph& graph, bool live, const RingPlacementInput& in) {
  topo::Place place;
  std::vector<int> cpus = graph.all(topo::NodeKind::kCpu);
  if (in.device >= 0) {
    place.gpu = graph.gpuByOrdinal(in.device);
    if (place.gpu >= 0) place.cpu = graph.node(place.gpu).cpu;
  }
  if (place.cpu < 0 && live) place.cpu = graph.cpuByNuma(currentNuma());
  if (place.cpu < 0 && !cpus.empty()) {
    place.cpu = cpus[static_cast<size_t>(in.localRank) * cpus.size() / static_cast<size_t>(in.localRanks)];
  }
  return place;
}

}  // namespace

Status placeRing(Bootstrap& bootstrap, const RingPlacementInput& in, std::vector<int>* ring,
                 std::vector<int>* hostStarts, std::string* summary) {
  const size_t n = static_cast<size_t>(in.nranks);
  std::string topoFile = env::get("LOOM_TOPO_FILE").value_or("");
  if (std::optional<std::string> dump = env::get("LOOM_TOPO_DUMP_FILE")) {
    if (in.localRank == 0) LOOM_TRY(topo::dumpXml(*dump));
  }
  const topo::Graph* graph = nullptr;
  topo::Source source;
  LOOM_TRY(Registry::instance().hostGraph(topoFile, &graph, &source).withContext("topology"));

  // Round 1: places. Node numbers mean the same to every rank of a host: they read the
  // same machine (or the same file).
  std::vector<int32_t> places(2 * n);
  topo::Place mine = ownPlace(*graph, source != topo::Source::kFile, in);
  places[2 * static_cast<size_t>(in.rank)] = mine.cpu;
  places[2 * static_cast<size_t>(in.rank) + 1] = mine.gpu;
  LOOM_TRY(bootstrap.allGather(places.data(), 2 * sizeof(int32_t)));

  // This host's chain, computed alike by each of its ranks.
  std::vector<int> local;
  std::vector<topo::Place> localPlaces;
  for (size_t r = 0; r < n; ++r) {
    if (in.hostOf[r] != in.hostOf[static_cast<size_t>(in.rank)]) continue;
    local.push_back(static_cast<int>(r));
    localPlaces.push_back(topo::Place{places[2 * r], places[2 * r + 1]});
  }
  std::vector<int> chain = topo::hostChain(*graph, localPlaces);
  topo::ChainQuality quality = topo::chainQuality(*graph, localPlaces, chain);

  // Round 2: positions in the host chains.
  std::vector<int32_t> position(n, 0);
  for (size_t i = 0; i < chain.size(); ++i) {
    if (local[static_cast<size_t>(chain[i])] == in.rank) position[static_cast<size_t>(in.rank)] = static_cast<int32_t>(i);
  }
  LOOM_TRY(bootstrap.allGather(position.data(), sizeof(int32_t)));
  std::map<uint64_t, int> hostNumber;
  std::vector<int> hostOf(n), chainPosition(position.begin(), position.end());
  for (size_t r = 0; r < n; ++r) hostOf[r] = hostNumber.emplace(in.hostOf[r], static_cast<int>(hostNumber.size())).first->second;
  *ring = topo::globalRing(hostOf, chainPosition);
  hostStarts->clear();
  for (size_t p = 0; p < n; ++p) {
    if (p == 0 || hostOf[static_cast<size_t>((*ring)[p])] != hostOf[static_cast<size_t>((*ring)[p - 1])]) {
      hostStarts->push_back(static_cast<int>(p));
    }
  }

  std::string order;
  for (int r : *ring) order += (order.empty() ? "" : " ") + std::to_string(r);
  std::string hops = quality.gbps > 0 ? format("narrowest hop %.1f GB/s, %d socket crossing(s), %d NUMA crossing(s) "
                                                "within a socket",
                                                quality.gbps, quality.socketCrossings, quality.numaCrossings)
                                       : std::string("its ranks share one NUMA domain or device");
  *summary = format("ring %s; this host's chain (topology from %s%s): %s", order.c_str(), topo::sourceName(source),
                    topoFile.empty() ? "" : (" " + topoFile).c_str(), hops.c_str());
  return Status::ok();
}

}  // namespace loom
