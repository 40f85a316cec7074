// loom-info: what this Loom was built with, and the environment variables it reads.
//   loom-info                 version, build features, variables that are set
//   loom-info --env-markdown  docs/ENVIRONMENT.md, generated from the same table
#include <cstdio>
#include <cstring>

#include "core/env.h"
#include "loom/loom.h"
#include "loom_build_config.h"

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--env-markdown") == 0) {
    std::fputs(loom::env::markdown().c_str(), stdout);
    return 0;
  }
  if (argc != 1) {
    std::fprintf(stderr, "usage: loom-info [--env-markdown]\n");
    return 2;
  }
  int version = 0;
  loomGetVersion(&version);
  std::printf("Loom %s (version code %d)\n", LOOM_VERSION_STRING, version);
  std::printf("built with: cuda=%s hwloc=%s ucx=%s ibverbs=%s mpi(tools)=%s\n",
              LOOM_HAVE_CUDA ? "yes" : "no", LOOM_HAVE_HWLOC ? "yes" : "no",
              LOOM_HAVE_UCX ? "yes" : "no", LOOM_HAVE_IBVERBS ? "yes" : "no",
              LOOM_HAVE_MPI ? "yes" : "no");
  std::printf("environment:\n");
  for (const loom::env::Variable& v : loom::env::variables()) {
    std::optional<std::string> value = loom::env::get(v.name);
    if (value) std::printf("  %s=%s\n", v.name, value->c_str());
  }
  return 0;
}
