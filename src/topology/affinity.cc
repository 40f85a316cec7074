// Binding a thread to the CPUs near its device (affinity.h).
#include "topology/affinity.h"

#include <pthread.h>
#include <sched.h>

#include <cstring>

#include "base/status.h"

namespace loom::topo {

bool bindCurrentThread(const std::vector<int>& cpus, std::string* note) {
  cpu_set_t allowed, wanted;
  CPU_ZERO(&wanted);
  if (pthread_getaffinity_np(pthread_self(), sizeof(allowed), &allowed) != 0) {
    *note = "cannot read this thread's CPU set";
    return false;
  }
  int count = 0;
  for (int c : cpus) {
    if (c >= 0 && c < CPU_SETSIZE && CPU_ISSET(c, &allowed)) {
      CPU_SET(c, &wanted);
      ++count;
    }
  }
  if (count == 0) {
    *note = format("none of the %zu CPUs near the device is allowed to this process; left unbound", cpus.size());
    return false;
  }
  int err = pthread_setaffinity_np(pthread_self(), sizeof(wanted), &wanted);
  if (err != 0) {
    *note = format("binding refused (%s); left unbound", std::strerror(err));
    return false;
  }
  *note = format("bound to the %d allowed CPU(s) of the device's NUMA domain", count);
  return true;
}

}  // namespace loom::topo
