// The one place Loom keeps process-wide mutable state: the live communicators, host streams
// and DDP reducers (so a destroyed or made-up handle is an error, not a crash), loomMemAlloc's
// allocations, the bootstrap
// roots loomGetUniqueId started, the host's topology and calibration, the emulated
// device's blocks, and device memory handed to thread ranks.
// Thread-safe. The log's sink is the one object kept elsewhere (base/log.cc): the ground
// may not reach up to this layer, and the sink is fixed by the environment at first use.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "algorithms/calibration_cache.h"
#include "base/mapped_memory.h"
#include "base/slot_pool.h"
#include "base/spin_lock.h"
#include "base/status.h"
#include "device/handover.h"
#include "topology/discover.h"

namespace loom {

class BootstrapRoot;

// Handles the API gave out and has not taken back. Thread-safe. Every call looks its handle
// up, so a thread whose last lookup found the same handle, with nothing added or removed
// since (every change bumps a generation), answers without taking the lock.
class HandleSet {
 public:
  void add(const void* handle);
  void remove(const void* handle);
  bool contains(const void* handle) const;

 private:
  mutable SpinLock lock_;
  std::unordered_set<const void*> handles_;
  std::atomic<uint64_t> generation_{0};
};

class Registry {
 public:
  static Registry& instance();

  HandleSet& comms() { return comms_; }
  HandleSet& streams() { return streams_; }
  HandleSet& reducers() { return reducers_; }
  MappedAllocations& mappedAllocations() { return mappedAllocations_; }

  // Keeps a root running until it finishes.
  void keepRoot(std::unique_ptr<BootstrapRoot> root);
  // Joins and frees the roots that have finished (called after every init and destroy,
  // so no finished thread outlives the work it served).
  void reapRoots();

  // This host's topology: the machine of `topoFile` (LOOM_TOPO_FILE) when not empty, else
  // the live one. Discovered once per file and kept, as the machine does not change; a
  // failure is not kept, so the next communicator tries again.
  Status hostGraph(const std::string& topoFile, const topo::Graph** out, topo::Source* source);

  // This machine's calibration for `threads` ranks copying at once (calibration_cache.h),
  // read or measured once per process and cache directory and kept; a failure is not kept. Callers wait while
  // another thread measures: they would measure the same, and two measuring at once would
  // share the memory bus and measure it wrong.
  Status machineCalibration(int threads, MachineCalibration* out);

  // The emulated device's resident blocks, shared by the process's emulated communicators
  // (LOOM_DEVICE_EMULATION_BLOCKS).
  SlotPool& emulatedDeviceBlocks() { return emulatedDeviceBlocks_; }
  // Device communicators' FIFO memory on its way to a peer of the same process (handover.h).
  device::Handover& deviceHandover() { return deviceHandover_; }

 private:
  Registry();
  ~Registry();
  // In a child after fork(): loomMemAlloc's memory becomes the child's own
  // (mapped_memory.h), and, the parent's threads not existing here, the roots they ran are
  // forgotten (their memory is left alone), never joined.
  static void afterForkInChild();

  std::mutex mutex_;
  HandleSet comms_;
  HandleSet streams_;
  HandleSet reducers_;
  MappedAllocations mappedAllocations_;
  std::vector<std::unique_ptr<BootstrapRoot>> roots_;
  std::mutex graphsMutex_;
  std::map<std::string, std::pair<std::unique_ptr<topo::Graph>, topo::Source>> graphs_;
  std::mutex calibrationsMutex_;
  std::map<std::pair<std::string, int>, MachineCalibration> calibrations_;
  SlotPool emulatedDeviceBlocks_;
  device::Handover deviceHandover_;
};

}  // namespace loom
