// The host graph's nodes, links and path classification (graph.h).
#include "topology/graph.h"

#include <algorithm>
#include <deque>
#include <functional>

namespace loom::topo {

const char* pathTypeName(PathType type) {
  switch (type) {
    case PathType::kSelf: return "X";
    case PathType::kNvlink: return "NV";
    case PathType::kPix: return "PIX";
    case PathType::kPxb: return "PXB";
    case PathType::kPhb: return "PHB";
    case PathType::kNode: return "NODE";
    case PathType::kSys: return "SYS";
  }
  return "?";
}

int Graph::add(Node node) {
  nodes_.push_back(std::move(node));
  return static_cast<int>(nodes_.size()) - 1;
}

void Graph::connect(int a, int b, LinkKind kind, double gbps, double latencyUs, int lanes) {
  links_.push_back(Link{a, b, kind, gbps, latencyUs, lanes});
}

std::vector<int> Graph::all(NodeKind kind) const {
  std::vector<int> out;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].kind == kind) out.push_back(static_cast<int>(i));
  }
  return out;
}

int Graph::gpuByOrdinal(int ordinal) const {
  for (int i : all(NodeKind::kGpu)) {
    if (node(i).index == ordinal) return i;
  }
  return -1;
}

int Graph::gpuByBusId(const std::string& busId) const {
  for (int i : all(NodeKind::kGpu)) {
    if (node(i).busId == busId) return i;
  }
  return -1;
}

int Graph::cpuByNuma(int numa) const {
  for (int i : all(NodeKind::kCpu)) {
    if (node(i).index == numa) return i;
  }
  return -1;
}

bool Graph::peerAccess(int a, int b) const {
  const std::pair<int, int> pair(std::min(a, b), std::max(a, b));
  return std::find(noPeerAccess_.begin(), noPeerAccess_.end(), pair) == noPeerAccess_.end();
}

void Graph::denyPeerAccess(int a, int b) {
  if (a != b && peerAccess(a, b)) noPeerAccess_.emplace_back(std::min(a, b), std::max(a, b));
}

namespace {

// Classifies a path by what it passes through, as nvidia-smi topo -m does.
PathType classify(const Graph& g, const std::vector<int>& nodes, const std::vector<const Link*>& links) {
  if (nodes.size() == 1) return PathType::kSelf;
  bool nvlinkOnly = std::all_of(links.begin(), links.end(), [](const Link* l) { return l->kind == LinkKind::kNvlink; });
  if (nvlinkOnly) return PathType::kNvlink;
  if (std::any_of(links.begin(), links.end(), [](const Link* l) { return l->kind == LinkKind::kSmp; })) {
    return PathType::kSys;
  }
  int bridges = 0, switches = 0;
  for (size_t i = 1; i + 1 < nodes.size(); ++i) {
    NodeKind k = g.node(nodes[i]).kind;
    bridges += k == NodeKind::kHostBridge;
    switches += k == NodeKind::kPciSwitch;
  }
  if (bridges > 1) return PathType::kNode;
  if (bridges == 1) return PathType::kPhb;
  return switches > 1 ? PathType::kPxb : PathType::kPix;
}

}  // namespace

Path Graph::path(int a, int b) const {
  Path result;
  if (a == b) return result;
  // Thresholds from the widest link down: the first at which b is reachable over links at
  // least that wide gives the widest path; breadth-first search gives its fewest hops.
  std::vector<double> widths;
  for (const Link& l : links_) widths.push_back(l.gbps);
  std::sort(widths.begin(), widths.end(), std::greater<double>());
  widths.erase(std::unique(widths.begin(), widths.end()), widths.end());
  // GPUs and NICs end paths; they do not forward between other devices.
  auto forwards = [&](int n) { return nodes_[static_cast<size_t>(n)].kind != NodeKind::kGpu &&
                                      nodes_[static_cast<size_t>(n)].kind != NodeKind::kNic; };
  for (double width : widths) {
    std::vector<const Link*> via(nodes_.size(), nullptr);
    std::vector<bool> seen(nodes_.size(), false);
    std::deque<int> queue{a};
    seen[static_cast<size_t>(a)] = true;
    while (!queue.empty() && !seen[static_cast<size_t>(b)]) {
      int n = queue.front();
      queue.pop_front();
      if (n != a && !forwards(n)) continue;
      for (const Link& l : links_) {
        if (l.gbps < width || (l.a != n && l.b != n)) continue;
        int m = l.a == n ? l.b : l.a;
        if (seen[static_cast<size_t>(m)]) continue;
        seen[static_cast<size_t>(m)] = true;
        via[static_cast<size_t>(m)] = &l;
        queue.push_back(m);
      }
    }
    if (!seen[static_cast<size_t>(b)]) continue;
    std::vector<int> nodes{b};
    std::vector<const Link*> links;
    for (int n = b; n != a;) {
      const Link* l = via[static_cast<size_t>(n)];
      links.push_back(l);
      n = l->a == n ? l->b : l->a;
      nodes.push_back(n);
    }
    result.type = classify(*this, nodes, links);
    result.hops = static_cast<int>(links.size());
    result.gbps = links.front()->gbps;
    result.nvlinks = 0;
    for (const Link* l : links) {
      result.latencyUs += l->latencyUs;
      if (l->gbps <= result.gbps) {
        result.gbps = l->gbps;
        if (l->kind == LinkKind::kNvlink) result.nvlinks = l->lanes;
      }
    }
    return result;
  }
  result.type = PathType::kSys;  // unconnected: only the host's memory joins them
  return result;
}

}  // namespace loom::topo
