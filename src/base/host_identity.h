// Which host a rank runs on: ranks with equal identities share memory (shm transport) and
// count as one host in the topology. Host name + boot id, or LOOM_HOSTID when set.
#pragma once

#include <cstdint>
#include <string>

namespace loom {

struct HostIdentity {
  std::string name;  // shown in logs
  uint64_t hash = 0; // compared between ranks
};

HostIdentity localHostIdentity();

}  // namespace loom
