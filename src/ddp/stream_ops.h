// The elementwise work and memory the reducer needs, in the order of its stream: on a host
// stream the work runs on the stream's progress thread after what is already queued there
// (Loom collectives included); without a stream it runs at once; on a CUDA stream it is
// enqueued as kernels and copies. The reducer's code is the same for all three.
#pragma once

#include <cstddef>
#include <memory>

#include "base/status.h"
#include "loom/loom.h"

namespace loom::ddp {

class StreamOps {
 public:
  // Memory of the stream's kind (host or device). Host memory is freed by the deleter;
  // device memory lives until the ops are destroyed (see cuda_stream_ops.cc).
  using Memory = std::unique_ptr<void, void (*)(void*)>;

  virtual ~StreamOps() = default;

  // The stream Loom collectives that belong in this order are enqueued on.
  virtual loomStream_t stream() const = 0;

  // Synchronous: allocate happens now; the memory may be used by work enqueued after.
  virtual Status allocate(size_t bytes, Memory* out) = 0;

  // Enqueued: dst = src / divisor (kernels::scale's rounding); dst may equal src.
  virtual Status divide(void* dst, const void* src, size_t count, loomDataType_t type,
                        int divisor) = 0;
  // Enqueued: either pointer may also be host memory (for staging small exchanges).
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;
  virtual Status zero(void* dst, size_t bytes) = 0;
  // Enqueued: float32 <-> float16 / bfloat16 (kernels::convert).
  virtual Status convert(void* dst, loomDataType_t dstType, const void* src,
                         loomDataType_t srcType, size_t count) = 0;

  // Waits for everything enqueued so far, and returns the first error since the last call:
  // of this work, and on a host stream of the collectives queued there too.
  virtual Status synchronize() = 0;
};

// Ops for a host communicator on `stream`: a live host stream, or NULL (run at once).
// Allocations of at least mappedFrom bytes come from loomMemAlloc (0: none).
Status makeHostOps(size_t mappedFrom, loomStream_t stream, std::unique_ptr<StreamOps>* out);

// Ops for a device communicator on CUDA device `device` and `stream` (a cudaStream_t; NULL:
// the ops make their own non-blocking stream). loomInvalidUsage in builds without CUDA.
Status makeCudaOps(int device, loomStream_t stream, std::unique_ptr<StreamOps>* out);

// The ops that fit comm: host or CUDA, on `stream`.
Status makeOpsFor(loomComm_t comm, loomStream_t stream, std::unique_ptr<StreamOps>* out);

}  // namespace loom::ddp
