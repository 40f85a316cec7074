// Rank, size and rendezvous from the launcher's variables (launch_env.h).
#include "bootstrap/launch_env.h"

#include <cerrno>
#include <cstdlib>

#include "base/env.h"

namespace loom {
namespace {

struct Source {
  const char* name;
  const char* rank;
  const char* size;
  const char* localRank;
};

// In order of preference.
constexpr Source kSources[] = {
    {"loomrun (LOOM_*)", "LOOM_RANK", "LOOM_WORLD_SIZE", "LOOM_LOCAL_RANK"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

Status parseInt(const char* name, const std::string& text, long long min, long long max, int* out) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0' || v < min || v > max) {
    return error(loomInvalidArgument, "%s=\"%s\" is not an integer in [%lld, %lld]", name,
                 text.c_str(), min, max);
  }
  *out = static_cast<int>(v);
  return Status::ok();
}

}  // namespace

Status readLaunchRank(LaunchRank* out, bool* found) {
  const Source* source = nullptr;
  for (const Source& s : kSources) {
    if (env::get(s.rank) && env::get(s.size)) {
      source = &s;
      break;
    }
  }
  *found = source != nullptr;
  if (source == nullptr) return Status::ok();
  LaunchRank r;
  r.source = source->name;
  LOOM_TRY(parseInt(source->size, *env::get(source->size), 1, 1 << 24, &r.worldSize));
  LOOM_TRY(parseInt(source->rank, *env::get(source->rank), 0, r.worldSize - 1, &r.rank));
  if (std::optional<std::string> local = env::get(source->localRank)) {
    LOOM_TRY(parseInt(source->localRank, *local, 0, r.worldSize - 1, &r.localRank));
  }
  *out = r;
  return Status::ok();
}

Status readLaunchEnv(LaunchEnv* out) {
  LaunchEnv e;
  bool found = false;
  LOOM_TRY(readLaunchRank(&e, &found));
  if (!found) {
    return error(loomInvalidUsage,
                 "loomCommInitFromEnv: no rank and world size in the environment; set LOOM_RANK and "
                 "LOOM_WORLD_SIZE (loomrun does), or run under torchrun, mpirun or srun");
  }

  std::optional<std::string> host = env::get("LOOM_MASTER_ADDR");
  if (!host) host = env::get("MASTER_ADDR");
  if (!host) {
    return error(loomInvalidUsage,
                 "loomCommInitFromEnv: no master address; set LOOM_MASTER_ADDR (or MASTER_ADDR) to "
                 "the address of the host running rank 0 (ranks from %s)",
                 e.source.c_str());
  }
  e.masterHost = *host;
  const char* portVar = env::get("LOOM_MASTER_PORT") || !env::get("MASTER_PORT") ? "LOOM_MASTER_PORT"
                                                                                  : "MASTER_PORT";
  std::string port = portVar[0] == 'L' ? env::getOrDefault("LOOM_MASTER_PORT") : *env::get("MASTER_PORT");
  LOOM_TRY(parseInt(portVar, port, 1, 65535, &e.masterPort));
  e.portSource = portVar;
  // torchrun's static rendezvous keeps its agent's TCPStore listening on MASTER_PORT for the
  // whole job, so Loom's root takes the port after it.
  if (portVar[0] == 'M' && env::getOrDefault("TORCHELASTIC_USE_AGENT_STORE") == "True") {
    if (e.masterPort == 65535) {
      return error(loomInvalidArgument,
                   "MASTER_PORT=65535 is held by torchrun's agent store and Loom's root would take the "
                   "port after it; set LOOM_MASTER_PORT to a free port");
    }
    ++e.masterPort;
    e.portSource = "MASTER_PORT + 1 (torchrun's agent store holds MASTER_PORT)";
  }

  if (std::optional<std::string> hex = env::get("LOOM_SECRET")) {
    LOOM_TRY(Secret::fromHex(*hex, &e.secret));
  } else {
    e.secretDerived = true;
    e.secret = Secret::derive(format("%s:%d/%d", e.masterHost.c_str(), e.masterPort, e.worldSize));
  }
  *out = e;
  return Status::ok();
}

}  // namespace loom
