// The device executor: runs plans whose buffers are device memory, for a communicator whose
// ranks share a host. Data never passes through the host: a send only tells the receiver
// where its bytes are (a CUDA IPC region, see transport/cuda_ipc.h) and the receiver's copy
// or reduction kernel reads them from the sender's GPU memory directly (same GPU, NVLink or
// PCIe peer-to-peer), then says it is done so the sender may reuse the range. Those small
// control messages travel on the communicator's ordinary links, which brings their checks
// along: a peer's call header is compared with this rank's, a dead peer is a remote error.
//
//   sender                                       receiver
//   src ready on the GPU (its event completed)
//   post {region of src, bytes, header} ------>  matches its next receive on the link
//                                                kernel: dst = src_local op peer's src
//                                                kernel done (event)
//   step done <---------------------------------- done
//
// All device work of a rank goes onto one stream in the order it is issued, so a step may
// be issued as soon as the steps it depends on are issued; only a post waits for its data
// to be complete, since another process reads it. Copies are kernels too (cuda::copy), not
// cudaMemcpyAsync: CUDA counts a copy within one device's memory among the operations that
// may wait for other streams' earlier work, and the caller's stream is held until this job
// ends.
#pragma once

#include <memory>
#include <vector>

#include "algorithms/plan.h"
#include "core/cuda_call.h"
#include "core/status.h"
#include "transport/cuda_ipc.h"

namespace loom {

class Communicator;

class DeviceExecutor {
 public:
  // On the calling thread's current device (the communicator's).
  static Status create(Communicator* comm, std::unique_ptr<DeviceExecutor>* out);

  // Runs the plan to completion: returns once its device work has finished, or with the
  // first error (after the work already issued has drained). A plan that makes no progress
  // for the communicator's timeoutMs ends with loomTimeout; an abort ends it at once.
  Status run(Plan& plan);

  cudaStream_t stream() const { return stream_.get(); }

 private:
  explicit DeviceExecutor(Communicator* comm) : comm_(comm) {}
  class Run;

  Communicator* comm_;
  cuda::StreamPtr stream_;
  transport::CudaIpc ipc_;
  std::vector<cuda::EventPtr> idleEvents_;
};

}  // namespace loom
