// torch.distributed's backend "loom": Loom's C API under torch's process-group interface, a
// c10d::ProcessGroup on torch 1.13 and a c10d::Backend (which torch's ProcessGroup wraps) on
// torch 2.
//
// Every operation is queued and runs in the order it was issued (runner.h). Its Work
// completes a Future with the operation's output tensors, as Gloo's does, so wait(),
// is_completed(), get_future() and DDP's comm hooks behave the same. Operations issued
// between startCoalescing and endCoalescing run as one Loom group. A Loom failure completes
// the Work with a RuntimeError carrying loomGetLastError's sentence.
#pragma once

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "compat/torch/runner.h"
#include "loom/loom.h"

namespace loom::torch_backend {

class DeviceCalls;  // device_calls.h: CUDA tensors, where built with CUDA

#if TORCH_VERSION_MAJOR >= 2
using ProcessGroupBase = c10d::Backend;
#else
using ProcessGroupBase = c10d::ProcessGroup;
#endif

// A blocking operation (its caller waits for it at once) runs on the caller's thread, with no
// hand-off to the worker (runner.h). Torch's options cannot say which operations block (only
// some of torch 2's carry asyncOp, and torch sets it for few), so loom_torch wraps
// torch.distributed's collectives, which say it per thread: setCallerWaits(true) while one
// that blocks issues its operation. Returns the previous word.
bool setCallerWaits(bool callerWaits);

class ProcessGroupLoom : public ProcessGroupBase {
 public:
  // Rank 0 makes the unique id and puts it in the store; the others get it (the store's own
  // wait and timeout apply). `timeout` becomes the communicator's timeoutMs.
  static c10::intrusive_ptr<ProcessGroupBase> create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                        int size, std::chrono::duration<float> timeout);

  // Makes the host communicator now; a device one waits for the first CUDA operation.
  ProcessGroupLoom(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, int timeoutMs);
  ~ProcessGroupLoom() override;  // runs what is queued, then destroys the communicator

  const std::string getBackendName() const override { return "loom"; }

  // Coalescing changed shape between torch versions, and supportsCoalescing (which lets torch 2's
  // batch_isend_irecv coalesce) came in a later 2.x: no `override`, so that each declaration
  // overrides the base's virtual where the installed torch has it and is a plain member where
  // it has not.
  void startCoalescing() override;
  void endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& reqs);  // torch 1.13
  c10::intrusive_ptr<c10d::Work> endCoalescing();                          // torch 2
  bool supportsCoalescing() const { return true; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  // torch 2 (declared without `override` as above): one group of the tensor form per pair.
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts);
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts);
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

 private:
  // Runs op where the tensor `on` lives: a CPU tensor (or none) on the queue (run by this thread
  // at once where callerWaits, see Runner::enqueue), a CUDA one on the device communicator, on
  // the current stream.
  c10::intrusive_ptr<c10d::Work> enqueue(const at::Tensor& on, LoomOp op, bool callerWaits);

  // Shared with the Works, which may outlive the group (and run what is queued in wait()).
  std::shared_ptr<Runner> runner_;
  std::thread worker_;
  std::shared_ptr<DeviceCalls> device_;  // null where built without CUDA
};

}  // namespace loom::torch_backend
