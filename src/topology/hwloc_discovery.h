// The hwloc half of discovery (hwloc_discovery.cc, or hwloc_disabled.cc in a build without
// hwloc, where it is an error saying so).
#pragma once

#include "base/status.h"
#include "topology/graph.h"

namespace loom::topo {

// The live machine through hwloc.
Status hwlocLive(Graph* out);

}  // namespace loom::topo
