// The registry's handle sets, bootstrap roots and host topology (registry.h).
#include "core/registry.h"

#include <pthread.h>

#include <algorithm>

#include "base/log.h"
#include "bootstrap/bootstrap_root.h"
#include "core/link_calibration.h"

namespace loom {

Registry& Registry::instance() {
  static Registry registry;
  return registry;
}

Registry::Registry() {
  // Makes the log's sink before this registry, so the sink outlives it: the roots this
  // registry stops at process exit may still log.
  (void)log::enabled(log::Level::kWarn);
  ::pthread_atfork([] { instance().mappedAllocations_.beforeFork(); },
                   [] { instance().mappedAllocations_.afterForkInParent(); }, &Registry::afterForkInChild);
}

void Registry::afterForkInChild() {
  instance().mappedAllocations_.afterForkInChild();
  // Joining a copied std::thread could wait on whatever thread the child makes next
  // with the same descriptor; leaking the handful of root objects is the safe choice.
  for (auto& root : instance().roots_) (void)root.release();
  instance().roots_.clear();
}

// Roots still waiting for ranks are stopped and joined here, at process exit.
Registry::~Registry() = default;

namespace {
// The calling thread's last lookup that found its handle, in any set.
struct LastFound {
  const HandleSet* set = nullptr;
  const void* handle = nullptr;
  uint64_t generation = 0;
};
thread_local LastFound tLastFound;
}  // namespace

void HandleSet::add(const void* handle) {
  std::lock_guard<SpinLock> lock(lock_);
  handles_.insert(handle);
  generation_.fetch_add(1, std::memory_order_release);
}

void HandleSet::remove(const void* handle) {
  std::lock_guard<SpinLock> lock(lock_);
  handles_.erase(handle);
  generation_.fetch_add(1, std::memory_order_release);
}

bool HandleSet::contains(const void* handle) const {
  // Read before the lookup: a change after it makes the next call look again.
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  LastFound& last = tLastFound;
  if (last.set == this && last.handle == handle && last.generation == generation) return true;
  bool found;
  {
    std::lock_guard<SpinLock> lock(lock_);
    found = handles_.count(handle) != 0;
  }
  if (found) last = {this, handle, generation};
  return found;
}

void Registry::keepRoot(std::unique_ptr<BootstrapRoot> root) {
  reapRoots();
  std::lock_guard<std::mutex> lock(mutex_);
  roots_.push_back(std::move(root));
}

void Registry::reapRoots() {
  std::vector<std::unique_ptr<BootstrapRoot>> finished;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto done = std::stable_partition(roots_.begin(), roots_.end(),
                                      [](const auto& r) { return !r->finished(); });
    std::move(done, roots_.end(), std::back_inserter(finished));
    roots_.erase(done, roots_.end());
  }
  // `finished` joins its threads here, outside the lock.
}

Status Registry::hostGraph(const std::string& topoFile, const topo::Graph** out, topo::Source* source) {
  std::lock_guard<std::mutex> lock(graphsMutex_);
  auto found = graphs_.find(topoFile);
  if (found == graphs_.end()) {
    auto graph = std::make_unique<topo::Graph>();
    topo::Source from = topo::Source::kFile;
    LOOM_TRY(topoFile.empty() ? topo::discoverLive(graph.get(), &from) : topo::loadXml(topoFile, graph.get()));
    found = graphs_.emplace(topoFile, std::make_pair(std::move(graph), from)).first;
  }
  *out = found->second.first.get();
  *source = found->second.second;
  return Status::ok();
}

Status Registry::machineCalibration(int threads, MachineCalibration* out) {
  const std::string dir = machineCalibrationDir();
  std::lock_guard<std::mutex> lock(calibrationsMutex_);
  auto found = calibrations_.find({dir, threads});
  if (found == calibrations_.end()) {
    MachineCalibration calibration;
    LOOM_TRY(loadOrMeasureMachineCalibration(threads, dir, &calibration, kCalibrationMaxCopyBytes,
                                             measureSharedMemoryLinks));
    found = calibrations_.emplace(std::make_pair(dir, threads), calibration).first;
  }
  *out = found->second;
  return Status::ok();
}

}  // namespace loom
