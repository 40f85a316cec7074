// The device side of a communicator (config.device >= 0): collectives on device buffers,
// enqueued on the caller's CUDA stream. A call returns at once; on the stream it becomes
//
//   host function "start job"  ->  wait until flag == 1  ->  flag = 0
//
// and the communicator's proxy thread runs the job when the stream reaches it (everything
// before it on the stream has finished, so the buffers are ready), then sets the flag: the
// stream goes on, and work after the call sees its result. The three stream operations can
// be captured in a CUDA graph; each replay runs the job again.
//
// A job runs on one of two paths, chosen when the communicator is made:
// - cuda_ipc (every rank on this host, LOOM_CUDA_IPC=1): the device executor moves data
//   between GPU buffers directly (core/device_executor.h);
// - host-staged (ranks on several hosts, or LOOM_CUDA_IPC=0, the default until the direct
//   path works on a GPU): device buffers are copied to
//   pinned host memory, the host executor runs the calls over shm and sockets, and the
//   results are copied back.
//
// This header needs no CUDA headers; without CUDA built in, create() says so.
#pragma once

#include <memory>
#include <vector>

#include "core/group.h"
#include "core/status.h"

namespace loom {

class Communicator;

class DeviceQueue {
 public:
  // Binds to comm->device(): makes the proxy thread, its stream and the flags.
  static Status create(Communicator* comm, std::unique_ptr<DeviceQueue>* out);
  // Waits (up to the communicator's timeout) for jobs already on streams, then stops.
  virtual ~DeviceQueue() = default;

  // "cuda_ipc" or "host-staged", for logs.
  virtual const char* path() const = 0;
  // loomInvalidArgument unless [ptr, ptr + bytes) is device memory this communicator's GPU
  // can use (host memory and another GPU's memory are refused).
  virtual Status checkBuffer(const char* name, const void* ptr, size_t bytes) const = 0;
  // Puts calls (all on this communicator, in call order) on `stream` (a cudaStream_t; NULL
  // is the device's legacy stream) as one job; returns without waiting for it. Errors the
  // job meets later become the communicator's async error (loomCommGetAsyncError).
  virtual Status enqueue(std::vector<group::Call> calls, void* stream) = 0;
  // loomBarrier on a stream.
  virtual Status enqueueBarrier(void* stream) = 0;
};

}  // namespace loom
