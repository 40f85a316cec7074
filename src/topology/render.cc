// A Graph as a tree, a GPU/NIC matrix and Graphviz DOT (render.h).
#include "topology/render.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <sstream>

#include "base/status.h"

namespace loom::topo {

namespace {

std::string bytesText(size_t bytes) {
  if (bytes >= (size_t{1} << 30)) return format("%zu GiB", bytes >> 30);
  if (bytes >= (size_t{1} << 20)) return format("%zu MiB", bytes >> 20);
  return format("%zu KiB", bytes >> 10);
}

std::string describe(const Node& n) {
  std::string text = n.name;
  switch (n.kind) {
    case NodeKind::kCpu:
      text += format("  NUMA %d, socket %d, %d cores", n.index, n.socket, n.cores);
      if (n.memoryBytes) text += ", " + bytesText(n.memoryBytes);
      if (n.cacheBytes) text += ", LLC " + bytesText(n.cacheBytes);
      if (!n.model.empty()) text += ", " + n.model;
      break;
    case NodeKind::kGpu:
      text += "  " + n.busId;
      if (!n.model.empty()) text += ", " + n.model;
      if (n.memoryBytes) text += ", " + bytesText(n.memoryBytes);
      break;
    case NodeKind::kNic:
      text += "  " + n.busId;
      if (n.portGbps > 0) text += format(", %g Gb/s", n.portGbps);
      if (!n.model.empty() && n.model != n.name) text += ", " + n.model;
      break;
    case NodeKind::kPciSwitch:
    case NodeKind::kHostBridge:
    case NodeKind::kNvSwitch:
      break;
  }
  return text;
}

const char* linkKindName(LinkKind kind) {
  switch (kind) {
    case LinkKind::kSmp: return "smp";
    case LinkKind::kPcie: return "pcie";
    case LinkKind::kNvlink: return "nvlink";
  }
  return "?";
}

// The GPUs then the NICs: the rows and columns of the matrix.
std::vector<int> devices(const Graph& graph) {
  std::vector<int> gpus = graph.all(NodeKind::kGpu);
  std::sort(gpus.begin(), gpus.end(), [&](int a, int b) { return graph.node(a).index < graph.node(b).index; });
  std::vector<int> nics = graph.all(NodeKind::kNic);
  gpus.insert(gpus.end(), nics.begin(), nics.end());
  return gpus;
}

std::string cell(const Graph& graph, int a, int b) {
  Path p = graph.path(a, b);
  if (p.type == PathType::kNvlink) return format("NV%d", p.nvlinks);
  return pathTypeName(p.type);
}

}  // namespace

std::string renderTree(const Graph& graph) {
  std::ostringstream out;
  out << "host " << (graph.host.empty() ? "(unnamed)" : graph.host) << ": "
      << graph.all(NodeKind::kCpu).size() << " NUMA domains, " << graph.all(NodeKind::kGpu).size() << " GPUs, "
      << graph.all(NodeKind::kNic).size() << " NICs\n";
  std::vector<bool> shown(graph.nodes().size(), false);
  std::function<void(int, int)> show = [&](int n, int depth) {
    shown[static_cast<size_t>(n)] = true;
    for (const Link& l : graph.links()) {
      if (l.kind != LinkKind::kPcie || (l.a != n && l.b != n)) continue;
      int child = l.a == n ? l.b : l.a;
      if (shown[static_cast<size_t>(child)]) continue;
      out << std::string(static_cast<size_t>(2 * depth), ' ') << "+- " << describe(graph.node(child))
          << format("  [pcie %.1f GB/s]", l.gbps) << "\n";
      show(child, depth + 1);
    }
  };
  for (int cpu : graph.all(NodeKind::kCpu)) {
    out << describe(graph.node(cpu)) << "\n";
    show(cpu, 1);
  }
  for (const Link& l : graph.links()) {
    if (l.kind == LinkKind::kPcie) continue;
    out << graph.node(l.a).name << " <-> " << graph.node(l.b).name << format("  [%s %.1f GB/s", linkKindName(l.kind), l.gbps);
    if (l.kind == LinkKind::kNvlink) out << ", " << l.lanes << " links";
    out << "]\n";
  }
  const std::vector<int> gpus = graph.all(NodeKind::kGpu);
  for (size_t i = 0; i < gpus.size(); ++i) {
    for (size_t j = i + 1; j < gpus.size(); ++j) {
      if (graph.peerAccess(gpus[i], gpus[j])) continue;
      out << graph.node(gpus[i]).name << " <-> " << graph.node(gpus[j]).name << "  [no peer-to-peer access]\n";
    }
  }
  return out.str();
}

std::string renderMatrix(const Graph& graph) {
  std::vector<int> rows = devices(graph);
  if (rows.empty()) return "no GPUs or NICs\n";
  size_t width = 6;
  for (int r : rows) width = std::max(width, graph.node(r).name.size() + 1);
  auto pad = [&](const std::string& s) { return s + std::string(width > s.size() ? width - s.size() : 1, ' '); };
  std::ostringstream out;
  out << pad("");
  for (int c : rows) out << pad(graph.node(c).name);
  out << "NUMA\n";
  for (int r : rows) {
    out << pad(graph.node(r).name);
    for (int c : rows) out << pad(cell(graph, r, c));
    int cpu = graph.node(r).cpu;
    out << (cpu >= 0 ? std::to_string(graph.node(cpu).index) : "?") << "\n";
  }
  out << "\nX = self, NV# = NVLink (# links), PIX = one PCIe switch, PXB = several PCIe switches,\n"
         "PHB = a host bridge, NODE = host bridges of one NUMA domain, SYS = across NUMA domains\n";
  return out.str();
}

std::string renderDot(const Graph& graph) {
  std::ostringstream out;
  out << "graph \"" << graph.host << "\" {\n  node [shape=box, fontname=\"Helvetica\"];\n";
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const Node& n = graph.nodes()[i];
    const char* color = n.kind == NodeKind::kGpu ? "palegreen" : n.kind == NodeKind::kNic ? "lightblue"
                        : n.kind == NodeKind::kCpu ? "khaki" : n.kind == NodeKind::kNvSwitch ? "plum" : "white";
    std::string label = describe(n);
    std::replace(label.begin(), label.end(), '"', '\'');
    size_t split = label.find("  ");
    if (split != std::string::npos) label.replace(split, 2, "\\n");
    out << "  n" << i << " [label=\"" << label << "\", style=filled, fillcolor=" << color << "];\n";
  }
  for (const Link& l : graph.links()) {
    out << "  n" << l.a << " -- n" << l.b << " [label=\"" << linkKindName(l.kind) << format(" %.0f GB/s", l.gbps)
        << "\"" << (l.kind == LinkKind::kNvlink ? ", color=green, penwidth=2" : "") << "];\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace loom::topo
