// The environment loomrun gives each rank: who it is, where to meet, and the job secret.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "options.h"
#include "status.h"

namespace loom::loomrun {

// What all ranks of this node share.
struct JobEnvironment {
  std::string masterAddr;
  int masterPort = 0;
  // The LOOM_SECRET every rank gets. Empty on a multi-node job launched without one: then the
  // ranks fall back to a secret derived from the master address (see docs/LOOMRUN.md).
  std::optional<std::string> secret;
};

// Fills in the master port (a free one, if none was given) and the secret: the one in
// loomrun's own environment if set, else a fresh random one for a single-node job.
Status prepareJobEnvironment(const LaunchOptions& options, JobEnvironment* job);

// 32 lowercase hex digits (128 bits) from the kernel's random source.
Status generateSecret(std::string* hex);

// A TCP port that was free on `addr` a moment ago: bound as port 0, read back, closed.
// Another process may take it before rank 0 binds it; on one host that is rare enough.
Status findFreePort(const std::string& addr, int* port);

// The complete environment ("NAME=value") of one local rank: `inherited` (normally
// loomrun's environ) with every variable loomrun sets replaced by its value for that rank.
std::vector<std::string> rankEnvironment(const JobEnvironment& job, const LaunchOptions& options,
                                         int localRank, const char* const* inherited);

}  // namespace loom::loomrun
