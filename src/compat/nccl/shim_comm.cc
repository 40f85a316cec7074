// The shim's communicator and the registry of live ones.
#include "compat/nccl/shim_comm.h"

#include <utility>

loomResult_t ncclComm::init(bool blocking, std::function<loomResult_t(loomComm_t*)> create) {
  if (blocking) {
    loomComm_t created = nullptr;
    const loomResult_t result = create(&created);
    loom_.store(created, std::memory_order_release);
    initState_.store(result, std::memory_order_release);
    return result;
  }
  // The creating thread owns only loom_ and initState_ until it stores the state; readers
  // look at loom_ only after seeing loomSuccess (acquire).
  initThread_ = std::thread([this, create = std::move(create)] {
    loomComm_t created = nullptr;
    const loomResult_t result = create(&created);
    if (result != loomSuccess) setLastError(loomGetLastError(nullptr));
    loom_.store(created, std::memory_order_release);
    initState_.store(result, std::memory_order_release);
  });
  return loomInProgress;
}

loomResult_t ncclComm::waitInit() {
  if (initThread_.joinable()) initThread_.join();
  return initState();
}

loomResult_t ncclComm::destroy(bool abort) {
  waitInit();
  loomComm_t loom = loom_.exchange(nullptr, std::memory_order_acq_rel);
  if (loom == nullptr) return loomSuccess;
  return abort ? loomCommAbort(loom) : loomCommDestroy(loom);
}

void ncclComm::setLastError(std::string message) {
  std::lock_guard<std::mutex> lock(mutex_);
  lastError_ = std::move(message);
}

const char* ncclComm::lastError() {
  std::lock_guard<std::mutex> lock(mutex_);
  return lastError_.c_str();
}

namespace loom::nccl {

ShimRegistry& ShimRegistry::instance() {
  static ShimRegistry registry;
  return registry;
}

ncclComm* ShimRegistry::create() {
  auto comm = std::make_unique<ncclComm>();
  ncclComm* raw = comm.get();
  std::lock_guard<std::mutex> lock(mutex_);
  comms_.emplace(raw, std::move(comm));
  return raw;
}

bool ShimRegistry::acquire(const ncclComm* comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = comms_.find(comm);
  if (it == comms_.end()) return false;
  it->second->users_.fetch_add(1, std::memory_order_acquire);
  return true;
}

void ShimRegistry::remove(ncclComm* comm) {
  std::unique_ptr<ncclComm> owned;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = comms_.find(comm);
    if (it == comms_.end()) return;
    owned = std::move(it->second);
    comms_.erase(it);
  }
  // Calls that acquired it before it left the map finish first; each is bounded by the
  // communicator's deadlines, and Destroy/Abort already ended the Loom communicator.
  while (owned->users_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

}  // namespace loom::nccl
