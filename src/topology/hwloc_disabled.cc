// A build without hwloc: the live machine comes from /sys (discover.cc), and what needs
// hwloc's XML says so.
#include "topology/discover.h"
#include "topology/hwloc_discovery.h"

namespace loom::topo {

namespace {
Status noHwloc(const char* what) {
  return error(loomInvalidUsage, "%s needs hwloc, and this Loom was built without it (install libhwloc-dev "
               "and rebuild; meson option -Dhwloc=enabled makes it required)", what);
}
}  // namespace

Status loadXml(const std::string& path, Graph*) { return noHwloc(("topology file " + path).c_str()); }
Status hwlocLive(Graph*) { return noHwloc("hwloc discovery"); }
Status dumpXml(const std::string&) { return noHwloc("LOOM_TOPO_DUMP_FILE"); }

}  // namespace loom::topo
