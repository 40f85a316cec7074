// Building a host's Graph: from an hwloc XML file (LOOM_TOPO_FILE, and the fixtures in
// tests/topologies), from hwloc's view of the live machine, or, without hwloc, from /sys.
// The XML conventions (which hwloc objects become which nodes, and Loom's own info
// attributes) are in docs/TOPOLOGY.md.
#pragma once

#include <string>

#include "base/status.h"
#include "topology/graph.h"

namespace loom::topo {

// Where discover() took its graph from, for logs and loom-topo's header.
enum class Source : uint8_t { kFile, kHwloc, kSysfs };
const char* sourceName(Source source);  // "file", "hwloc", "sysfs"

// The graph of an hwloc XML file.
Status loadXml(const std::string& path, Graph* out);

// The graph of the machine this runs on: hwloc when built with it, /sys otherwise (or when
// hwloc fails), so discovery always yields at least one CPU node.
Status discoverLive(Graph* out, Source* source);

// The graph of /sys under `root` (a test can point it at a copied tree): NUMA nodes and
// their CPUs, PCI GPUs and NICs with their NUMA node, network port speeds.
Status discoverSysfs(const std::string& root, Graph* out);

// LOOM_TOPO_FILE when set, else discoverLive(); LOOM_TOPO_DUMP_FILE, when set, receives the
// live machine's hwloc XML (a file that LOOM_TOPO_FILE can load back).
Status discover(Graph* out, Source* source);

// Writes the live machine's hwloc XML to `path` (an error when built without hwloc).
Status dumpXml(const std::string& path);

}  // namespace loom::topo
