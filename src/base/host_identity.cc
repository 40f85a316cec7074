// This host's identity from its name and boot id, or LOOM_HOST_ID (host_identity.h).
#include "base/host_identity.h"

#include <unistd.h>

#include <fstream>

#include "base/env.h"

namespace loom {
namespace {
uint64_t hashString(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}
}  // namespace

HostIdentity localHostIdentity() {
  HostIdentity id;
  if (std::optional<std::string> forced = env::get("LOOM_HOSTID")) {
    id.name = *forced;
    id.hash = hashString("hostid:" + *forced);
    return id;
  }
  char host[256] = "";
  ::gethostname(host, sizeof(host) - 1);
  // The boot id tells apart containers or VMs that share a host name.
  std::string bootId;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, bootId);
  id.name = host;
  id.hash = hashString(std::string(host) + "/" + bootId);
  return id;
}

}  // namespace loom
