// Binding a thread to the CPUs near its device (docs/TOPOLOGY.md, "Affinity"): a device
// communicator's proxy thread, which carries its FIFOs to peers on other hosts, runs on the
// NUMA domain its GPU hangs from, near the host-mapped FIFOs it copies.
#pragma once

#include <string>
#include <vector>

namespace loom::topo {

// Restricts the calling thread to those of `cpus` it may already use (a taskset or cgroup
// limit is kept). Returns false, leaving the thread as it was, when none of them is allowed
// or the system refuses; `note` says what happened, for the INFO log.
bool bindCurrentThread(const std::vector<int>& cpus, std::string* note);

}  // namespace loom::topo
