#include "core/registry.h"

#include <pthread.h>

#include <algorithm>

#include "core/bootstrap_root.h"

namespace loom {

Registry& Registry::instance() {
  static Registry registry;
  return registry;
}

Registry::Registry() { ::pthread_atfork(nullptr, nullptr, &Registry::forgetInheritedThreads); }

void Registry::forgetInheritedThreads() {
  // Joining a copied std::thread could wait on whatever thread the child makes next
  // with the same descriptor; leaking the handful of root objects is the safe choice.
  for (auto& root : instance().roots_) (void)root.release();
  instance().roots_.clear();
}

// Roots still waiting for ranks are stopped and joined here, at process exit.
Registry::~Registry() = default;

log::Logger& Registry::logger() {
  std::call_once(loggerOnce_, [this] { logger_ = std::make_unique<log::Logger>(); });
  return *logger_;
}

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

void SlotPool::setCapacity(int capacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (capacity_ == 0) capacity_ = capacity;
}

int SlotPool::capacity() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return capacity_;
}

void SlotPool::take() {
  std::unique_lock<std::mutex> lock(mutex_);
  freed_.wait(lock, [this] { return capacity_ == 0 || taken_ < capacity_; });
  ++taken_;
}

void SlotPool::give() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --taken_;
  }
  freed_.notify_one();
}

}  // namespace loom
