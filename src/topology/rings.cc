// Ring orders within a host and across hosts (rings.h).
#include "topology/rings.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <tuple>

namespace loom::topo {

namespace {

// The CPU package a node is local to (-1 unknown).
int socketOf(const Graph& graph, int node) {
  const int cpu = graph.node(node).kind == NodeKind::kCpu ? node : graph.node(node).cpu;
  return cpu < 0 ? -1 : graph.node(cpu).socket;
}

// One hop of the ring, as the ring's score counts it.
struct Hop {
  Path path;
  bool crossesSockets = false;  // across the CPUs' interconnect between packages
  bool crossesNuma = false;     // between NUMA domains of one package
};

// Hops between the chain's members, computed once (path() searches the graph).
class PathTable {
 public:
  PathTable(const Graph& graph, const std::vector<int>& nodes) : n_(nodes.size()), hops_(n_ * n_) {
    for (size_t i = 0; i < n_; ++i) {
      for (size_t j = 0; j < n_; ++j) {
        Hop& hop = hops_[i * n_ + j];
        hop.path = graph.path(nodes[i], nodes[j]);
        if (hop.path.type != PathType::kSys) continue;
        // Unknown packages count as different: a crossing is the safer guess.
        const int a = socketOf(graph, nodes[i]), b = socketOf(graph, nodes[j]);
        (a >= 0 && a == b ? hop.crossesNuma : hop.crossesSockets) = true;
      }
    }
  }
  const Hop& at(size_t i, size_t j) const { return hops_[i * n_ + j]; }

 private:
  size_t n_;
  std::vector<Hop> hops_;
};

constexpr double kUnbounded = std::numeric_limits<double>::infinity();

// Score of a closed ring over member indices, or of one step of it: larger is better. A
// socket crossing costs more than any number of crossings between the NUMA domains of one
// package, which stay on the package's own fabric.
struct Score {
  double gbps = kUnbounded;
  int socketCrossings = 0;
  int numaCrossings = 0;
  int hops = 0;
  void add(const Hop& hop) {
    if (hop.path.type == PathType::kSelf) return;
    gbps = std::min(gbps, hop.path.gbps);
    socketCrossings += hop.crossesSockets;
    numaCrossings += hop.crossesNuma;
    hops += hop.path.hops;
  }
  bool betterThan(const Score& o) const {
    return std::make_tuple(gbps, -socketCrossings, -numaCrossings, -hops) >
           std::make_tuple(o.gbps, -o.socketCrossings, -o.numaCrossings, -o.hops);
  }
};

Score score(const PathTable& paths, const std::vector<int>& order) {
  Score s;
  if (order.size() < 2) return s;
  for (size_t i = 0; i < order.size(); ++i) {
    s.add(paths.at(static_cast<size_t>(order[i]), static_cast<size_t>(order[(i + 1) % order.size()])));
  }
  return s;
}

// The best cyclic order of members 0..n-1 (member 0 first).
std::vector<int> bestCycle(const PathTable& paths, size_t n) {
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (n <= 3) return order;  // every cycle of three or fewer is the same ring
  std::vector<int> best = order;
  if (n <= 9) {
    Score bestScore = score(paths, best);
    while (std::next_permutation(order.begin() + 1, order.end())) {
      Score s = score(paths, order);
      if (s.betterThan(bestScore)) {
        bestScore = s;
        best = order;
      }
    }
    return best;
  }
  // Nearest neighbour: from each member, go to the closest one not yet on the chain.
  std::vector<bool> used(n, false);
  used[0] = true;
  for (size_t k = 1; k < n; ++k) {
    int from = best[k - 1];
    int pick = -1;
    Score pickScore;
    for (size_t m = 0; m < n; ++m) {
      if (used[m]) continue;
      Score s;
      s.add(paths.at(static_cast<size_t>(from), m));
      if (pick < 0 || s.betterThan(pickScore)) {
        pick = static_cast<int>(m);
        pickScore = s;
      }
    }
    used[static_cast<size_t>(pick)] = true;
    best[k] = pick;
  }
  return best;
}

int nodeOf(const Place& p) { return p.gpu >= 0 ? p.gpu : p.cpu; }

}  // namespace

std::vector<int> hostChain(const Graph& graph, const std::vector<Place>& places) {
  std::vector<int> chain(places.size());
  std::iota(chain.begin(), chain.end(), 0);
  bool gpus = !places.empty() && std::all_of(places.begin(), places.end(), [](const Place& p) { return p.gpu >= 0; });
  if (!gpus) {
    auto key = [&](int r) {
      int cpu = places[static_cast<size_t>(r)].cpu;
      return cpu < 0 ? std::make_tuple(-1, -1, r) : std::make_tuple(graph.node(cpu).socket, graph.node(cpu).index, r);
    };
    std::stable_sort(chain.begin(), chain.end(), [&](int a, int b) { return key(a) < key(b); });
    return chain;
  }
  // Distinct GPUs in order of first appearance; ranks of one GPU stay together.
  std::vector<int> members;
  std::map<int, std::vector<int>> ranksOf;
  for (size_t r = 0; r < places.size(); ++r) {
    int node = nodeOf(places[r]);
    if (ranksOf[node].empty()) members.push_back(node);
    ranksOf[node].push_back(static_cast<int>(r));
  }
  PathTable paths(graph, members);
  chain.clear();
  for (int m : bestCycle(paths, members.size())) {
    const std::vector<int>& ranks = ranksOf[members[static_cast<size_t>(m)]];
    chain.insert(chain.end(), ranks.begin(), ranks.end());
  }
  return chain;
}

ChainQuality chainQuality(const Graph& graph, const std::vector<Place>& places, const std::vector<int>& chain) {
  ChainQuality q;
  if (chain.size() < 2) return q;
  std::vector<int> nodes;
  for (int r : chain) nodes.push_back(nodeOf(places[static_cast<size_t>(r)]));
  PathTable paths(graph, nodes);
  std::vector<int> order(chain.size());
  std::iota(order.begin(), order.end(), 0);
  Score s = score(paths, order);
  q.gbps = s.gbps == kUnbounded ? 0 : s.gbps;
  q.socketCrossings = s.socketCrossings;
  q.numaCrossings = s.numaCrossings;
  q.hops = s.hops;
  return q;
}

std::vector<int> globalRing(const std::vector<int>& hostOf, const std::vector<int>& chainPosition) {
  std::vector<int> ring(hostOf.size());
  std::iota(ring.begin(), ring.end(), 0);
  // A host's rank order is that of its lowest rank: first appearance in rank order.
  std::map<int, int> hostOrder;
  for (int h : hostOf) hostOrder.emplace(h, static_cast<int>(hostOrder.size()));
  std::sort(ring.begin(), ring.end(), [&](int a, int b) {
    return std::make_pair(hostOrder[hostOf[static_cast<size_t>(a)]], chainPosition[static_cast<size_t>(a)]) <
           std::make_pair(hostOrder[hostOf[static_cast<size_t>(b)]], chainPosition[static_cast<size_t>(b)]);
  });
  return ring;
}

}  // namespace loom::topo
