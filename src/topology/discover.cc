// A host's Graph from an hwloc XML file, live hwloc or /sys (discover.h).
#include "topology/discover.h"

#include <unistd.h>

#include <memory>

#include "base/env.h"
#include "base/log.h"
#include "topology/hwloc_discovery.h"
#include "topology/nvml_probe.h"

namespace loom::topo {

const char* sourceName(Source source) {
  switch (source) {
    case Source::kFile: return "file";
    case Source::kHwloc: return "hwloc";
    case Source::kSysfs: return "sysfs";
  }
  return "?";
}

namespace {

// hwloc knows NVLink only through its NVML backend, which Debian's build lacks, and peer
// access not at all: NVML, loaded at run time, is asked directly.
void addNvmlFacts(Graph* graph) {
  if (graph->all(NodeKind::kGpu).empty()) return;
  std::string why;
  std::unique_ptr<NvmlSource> nvml = openNvml(&why);
  if (!nvml) {
    LOOM_INFO("topology: no NVLink or peer-access information (%s)", why.c_str());
    return;
  }
  LOOM_INFO("topology: NVML adds %d NVLink connection(s) between GPUs and NVSwitches", applyNvml(*nvml, graph));
}

}  // namespace

Status discoverLive(Graph* out, Source* source) {
  Status hwloc = hwlocLive(out);
  if (hwloc.isOk()) {
    *source = Source::kHwloc;
  } else {
    LOOM_INFO("topology: %s; reading /sys instead", hwloc.message().c_str());
    *source = Source::kSysfs;
    LOOM_TRY(discoverSysfs("/sys", out));
    if (out->host.empty()) {
      char name[256] = {};
      gethostname(name, sizeof(name) - 1);
      out->host = name;
    }
  }
  addNvmlFacts(out);
  return Status::ok();
}

Status discover(Graph* out, Source* source) {
  if (std::optional<std::string> dump = env::get("LOOM_TOPO_DUMP_FILE")) LOOM_TRY(dumpXml(*dump));
  if (std::optional<std::string> file = env::get("LOOM_TOPO_FILE")) {
    *source = Source::kFile;
    return loadXml(*file, out).withContext("LOOM_TOPO_FILE");
  }
  return discoverLive(out, source);
}

}  // namespace loom::topo
