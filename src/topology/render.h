// A Graph as text for people: the tree loom-topo prints, the GPU/NIC matrix in the
// vocabulary of `nvidia-smi topo -m`, and Graphviz DOT.
#pragma once

#include <string>

#include "topology/graph.h"

namespace loom::topo {

// CPUs, then what hangs from each over PCIe, indented, with link bandwidths; then the
// NVLink and inter-CPU links.
std::string renderTree(const Graph& graph);

// Rows and columns: GPUs then NICs. Cells: X, NV<lanes>, PIX, PXB, PHB, NODE, SYS; then
// each row's NUMA affinity, and a legend.
std::string renderMatrix(const Graph& graph);

// An undirected graph, one node per Graph node, edges labelled with kind and GB/s.
std::string renderDot(const Graph& graph);

}  // namespace loom::topo
