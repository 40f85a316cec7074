// loom-info: what this Loom was built with, and the environment variables it reads.
//   loom-info                 version, build features, the NCCL library, variables that are set
//   loom-info --env-markdown  docs/ENVIRONMENT.md, generated from the same table
//   loom-info --nccl-path     the directory holding Loom's libnccl.so.2 (for LD_LIBRARY_PATH)
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/env.h"
#include "loom/loom.h"
#include "loom_build_config.h"

namespace {

// Loom's libnccl.so.2 beside this loom-info: installed (<prefix>/bin -> <prefix>/<libdir>/
// loom/nccl) or in the build tree it was built in; "" when neither holds it.
std::string ncclLibraryDir() {
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  std::vector<std::string> candidates;
  if (n > 0) {
    std::string dir(exe, static_cast<size_t>(n));
    dir.erase(dir.rfind('/'));
    candidates.push_back(dir + "/../" + LOOM_NCCL_INSTALL_DIR);
  }
  if (*LOOM_NCCL_BUILD_DIR != '\0') candidates.push_back(LOOM_NCCL_BUILD_DIR);
  for (const std::string& dir : candidates) {
    char resolved[PATH_MAX];
    if (access((dir + "/libnccl.so.2").c_str(), R_OK) == 0 && realpath(dir.c_str(), resolved) != nullptr) {
      return resolved;
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--env-markdown") == 0) {
    std::fputs(loom::env::markdown().c_str(), stdout);
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--nccl-path") == 0) {
    const std::string dir = ncclLibraryDir();
    if (dir.empty()) {
      std::fprintf(stderr, "loom-info: Loom's libnccl.so.2 was not built (it needs the nccl.h of a CUDA install)\n");
      return 1;
    }
    std::printf("%s\n", dir.c_str());
    return 0;
  }
  if (argc != 1) {
    std::fprintf(stderr, "usage: loom-info [--env-markdown | --nccl-path]\n");
    return 2;
  }
  int version = 0;
  loomGetVersion(&version);
  std::printf("Loom %s (version code %d)\n", LOOM_VERSION_STRING, version);
  std::printf("built with: cuda=%s hwloc=%s ucx=%s ibverbs=%s mpi(tools)=%s\n",
              LOOM_HAVE_CUDA ? "yes" : "no", LOOM_HAVE_HWLOC ? "yes" : "no",
              LOOM_HAVE_UCX ? "yes" : "no", LOOM_HAVE_IBVERBS ? "yes" : "no",
              LOOM_HAVE_MPI ? "yes" : "no");
  const std::string nccl = ncclLibraryDir();
  if (nccl.empty()) {
    std::printf("NCCL library: not built (it needs the nccl.h of a CUDA install)\n");
  } else {
    std::printf("NCCL library: %s/libnccl.so.2 (the ABI of NCCL %s); run NCCL programs on Loom with\n"
                "  LD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\n",
                nccl.c_str(), LOOM_NCCL_ABI_VERSION, nccl.c_str());
  }
  std::printf("environment:\n");
  for (const loom::env::Variable& v : loom::env::variables()) {
    std::optional<std::string> value = loom::env::get(v.name);
    if (value) std::printf("  %s=%s\n", v.name, value->c_str());
  }
  return 0;
}
