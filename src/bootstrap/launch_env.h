// Reads rank, world size and rendezvous from whatever launched the process: loomrun's
// LOOM_* variables, else torchrun's, Open MPI's or Slurm's.
#pragma once

#include <string>

#include "base/socket.h"
#include "base/status.h"
#include "bootstrap/unique_id.h"

namespace loom {

// Where this process sits in its job, from the first launcher whose rank and size variables
// are set.
struct LaunchRank {
  int rank = -1;
  int worldSize = 0;
  int localRank = -1;  // -1 when the launcher does not say
  std::string source;  // "loomrun", "torchrun", "Open MPI", "Slurm"
};

// *found is false, and *out untouched, when no launcher's variables are set; malformed
// values are an error.
Status readLaunchRank(LaunchRank* out, bool* found);

struct LaunchEnv : LaunchRank {
  std::string masterHost;
  int masterPort = 0;
  std::string portSource;  // the variable the port came from, and why, for the INFO log
  Secret secret;
  bool secretDerived = false;  // true: no LOOM_SECRET, so the secret protects nothing
};

Status readLaunchEnv(LaunchEnv* out);

}  // namespace loom
