// torch.distributed's backend "loom": a c10d::ProcessGroup over Loom's C API.
//
// Every operation is queued and runs in the order it was issued, which is the order every
// rank issues them, as blocking Loom calls on host memory (a host communicator), one at a
// time: on the process group's worker thread, or on the caller's own thread when its wait()
// finds the operation still queued (a blocking call then costs no hand-off between threads,
// and no thread spins beside the one moving the bytes). The worker, after an operation, and
// a caller whose operation the worker runs look again for a moment before they block, so
// that a small call does not cost thread wakeups. Its Work completes a Future with the
// operation's output tensors, as Gloo's does, so wait(), is_completed(), get_future() and
// DDP's comm hooks behave the same. Operations issued between startCoalescing and endCoalescing (as
// batch_isend_irecv does) run as one Loom group. A Loom failure completes the Work with a
// RuntimeError carrying loomGetLastError's sentence.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "loom/loom.h"

namespace loom::torch_backend {

// One operation: the Loom calls it makes (inside its batch's group), what it does once they
// returned (copies out of temporaries), and the tensors its Work completes with.
struct LoomOp {
  std::function<loomResult_t(loomComm_t)> launch;
  std::function<void()> finish;
  std::vector<at::Tensor> outputs;
  c10d::OpType type;
};

class Runner;  // the queue and the communicator (process_group_loom.cc)

class ProcessGroupLoom : public c10d::ProcessGroup {
 public:
  // Rank 0 makes the unique id and puts it in the store; the others get it (the store's own
  // wait and timeout apply). `timeout` becomes the communicator's timeoutMs.
  static c10::intrusive_ptr<c10d::ProcessGroup> create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                        int size, std::chrono::duration<float> timeout);

  ProcessGroupLoom(loomComm_t comm, int rank, int size);
  ~ProcessGroupLoom() override;  // runs what is queued, then destroys the communicator

  const std::string getBackendName() const override { return "loom"; }

  void startCoalescing() override;
  void endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& reqs) override;

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
  c10::intrusive_ptr<c10d::Work> enqueue(LoomOp op);

  // Shared with the Works, which may outlive the group (and run what is queued in wait()).
  std::shared_ptr<Runner> runner_;
  std::thread worker_;
};

}  // namespace loom::torch_backend
