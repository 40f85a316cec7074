// The communicator behind an ncclComm_t: a Loom communicator plus what NCCL's API has and
// Loom's does not (non-blocking creation, finalize), and the error text ncclGetLastError
// returns. ShimRegistry tells live handles from stale ones, so a destroyed or made-up
// ncclComm_t is an error, not a crash.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

#include "base/status.h"
#include "loom/loom.h"

namespace loom::nccl {
class ShimRegistry;
}

struct ncclComm {
  ncclComm() = default;
  // A communicator still live at exit is freed with the registry: its creation thread, if
  // any, is joined first (the Loom communicator is left to process exit, as Loom's own are).
  ~ncclComm() { waitInit(); }
  ncclComm(const ncclComm&) = delete;
  ncclComm& operator=(const ncclComm&) = delete;

  // Creates the Loom communicator with `create`, at once (blocking) or on a thread of its
  // own (non-blocking: init() returns loomInProgress; initState() says when it is done).
  loomResult_t init(bool blocking, std::function<loomResult_t(loomComm_t*)> create);

  // loomInProgress while a non-blocking creation runs, then its result. Any thread.
  loomResult_t initState() const { return initState_.load(std::memory_order_acquire); }
  // Waits for a non-blocking creation to end (it has its own deadline); its result.
  loomResult_t waitInit();

  // The Loom communicator; valid only once initState() is loomSuccess.
  loomComm_t loom() const { return loom_.load(std::memory_order_acquire); }
  int device() const { return device_; }
  void setDevice(int device) { device_ = device; }

  // Waits for a creation still running (it has its own deadline), then destroys or aborts
  // the Loom communicator. The object is freed by ShimRegistry::remove.
  loomResult_t destroy(bool abort);

  // After ncclCommFinalize collectives are refused; Destroy still frees.
  void finalize() { finalized_.store(true, std::memory_order_release); }
  bool finalized() const { return finalized_.load(std::memory_order_acquire); }
  // ncclCommRevoke was called: finalizing is invalid from then on.
  void revoke() { revoked_.store(true, std::memory_order_release); }
  bool revoked() const { return revoked_.load(std::memory_order_acquire); }


  // The message ncclGetLastError(comm) returns; valid until the next error on this comm.
  void setLastError(std::string message);
  const char* lastError();

  // Calls in flight on this communicator (ShimRegistry::acquire / CommUse); remove() waits
  // for them, so ncclCommAbort from another thread never frees a communicator in use.
  void release() { users_.fetch_sub(1, std::memory_order_release); }

 private:
  friend class loom::nccl::ShimRegistry;
  std::atomic<int> users_{0};
  std::atomic<loomComm_t> loom_{nullptr};
  int device_ = -1;
  std::atomic<loomResult_t> initState_{loomInProgress};
  std::thread initThread_;
  std::atomic<bool> finalized_{false};
  std::atomic<bool> revoked_{false};
  std::mutex mutex_;  // guards lastError_
  std::string lastError_;
};

namespace loom::nccl {

// The live shim communicators of this process: the shim's one piece of global state.
class ShimRegistry {
 public:
  static ShimRegistry& instance();

  ncclComm* create();  // a new communicator, live until remove()
  // Marks a call in flight on `comm` and returns true when it is live; false (nothing
  // marked) when it is not, e.g. destroyed or never created.
  bool acquire(const ncclComm* comm);
  // Makes `comm` unknown to acquire(), waits until its calls in flight have left, frees it.
  void remove(ncclComm* comm);

 private:
  std::mutex mutex_;
  std::map<const ncclComm*, std::unique_ptr<ncclComm>> comms_;
};

// Holds a call in flight on a communicator acquired from the registry.
class CommUse {
 public:
  explicit CommUse(ncclComm* comm) : comm_(comm) {}
  ~CommUse() { comm_->release(); }
  CommUse(const CommUse&) = delete;
  CommUse& operator=(const CommUse&) = delete;

 private:
  ncclComm* comm_;
};

}  // namespace loom::nccl
