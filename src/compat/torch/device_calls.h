// CUDA tensors on the backend "loom" (built where torch has CUDA: LOOM_TORCH_CUDA). Each
// operation's Loom calls go to a device communicator from the caller's own thread, on its
// current CUDA stream, as NCCL's do under ProcessGroupNCCL: the plan kernel runs in stream
// order and no host thread waits for it. The operation's Work then completes a Future bound to
// the device at once (torch records CUDA events on the stream, so whoever uses the Future's
// value waits on the stream, not on the host); wait() makes the current stream wait, and raises
// the communicator's asynchronous error (a dead peer, a timeout) once one is known.
//
// The device communicator is made at the group's first operation on CUDA tensors, which every
// rank issues (as NCCL's are): a group whose first CUDA operation is a send or receive between
// two of its ranks must involve all of them (batch_isend_irecv across the group).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <memory>
#include <mutex>
#include <vector>

#include "compat/torch/runner.h"
#include "loom/loom.h"

namespace loom::torch_backend {

class DeviceWork;  // device_calls.cc

class DeviceCalls : public std::enable_shared_from_this<DeviceCalls> {
 public:
  DeviceCalls(c10::intrusive_ptr<c10d::Store> store, int rank, int size, int timeoutMs);
  ~DeviceCalls();  // destroys the communicator once its queued work has run
  DeviceCalls(const DeviceCalls&) = delete;
  DeviceCalls& operator=(const DeviceCalls&) = delete;

  // Launches op on `device`'s current stream; throws where Loom refuses the call.
  c10::intrusive_ptr<c10d::Work> run(LoomOp op, const at::Device& device);
  // Operations run in between are one Loom group on one device, launched by endCoalescing,
  // whose Work (null when there were none) completes with all of them.
  void startCoalescing();
  c10::intrusive_ptr<c10d::Work> endCoalescing();

 private:
  loomComm_t communicatorFor(const at::Device& device);  // under mutex_
  // Launches ops as one group (one op: no group), runs their finish, then ends their Works.
  void launch(std::vector<LoomOp>& ops, const std::vector<c10::intrusive_ptr<DeviceWork>>& works,
              const at::Device& device);

  c10::intrusive_ptr<c10d::Store> store_;
  const int rank_, size_, timeoutMs_;
  std::mutex mutex_;
  loomComm_t comm_ = nullptr;
  int device_ = -1;
  bool coalescing_ = false;
  std::vector<LoomOp> coalescedOps_;
  std::vector<c10::intrusive_ptr<DeviceWork>> coalescedWorks_;
  at::Device coalescedDevice_{at::kCPU};
};

}  // namespace loom::torch_backend
