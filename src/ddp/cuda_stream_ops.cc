// StreamOps for device communicators: Loom's CUDA kernels and the runtime's async copies,
// enqueued on the reducer's CUDA stream.
#include <cuda_runtime_api.h>

#include <vector>

#include "base/cuda_call.h"
#include "ddp/stream_ops.h"
#include "kernels/cuda/device_reduce.h"

namespace loom::ddp {
namespace {

// A kernel launcher's int result as a Status naming the work.
Status launched(int err, const char* what) {
  if (err == 0) return Status::ok();
  return cuda::cudaFailure(static_cast<cudaError_t>(err), what, __FILE__, __LINE__);
}

class CudaStreamOps : public StreamOps {
 public:
  CudaStreamOps(int device, cudaStream_t stream, cuda::StreamPtr owned)
      : device_(device), stream_(stream), owned_(std::move(owned)) {}

  loomStream_t stream() const override { return stream_; }

  // The ops keep every allocation until they are destroyed: cudaFree waits for the whole
  // device, and with ranks sharing a GPU another rank's stream may be waiting for a
  // collective this rank has not enqueued yet, which would then never come.
  Status allocate(size_t bytes, Memory* out) override {
    LOOM_CUDA_TRY(cudaSetDevice(device_));
    cuda::DevicePtr memory;
    LOOM_TRY(cuda::allocDevice(bytes == 0 ? 1 : bytes, &memory));
    *out = Memory(memory.get(), [](void*) {});
    allocations_.push_back(std::move(memory));
    return Status::ok();
  }

  Status divide(void* dst, const void* src, size_t count, loomDataType_t type, int divisor) override {
    LOOM_CUDA_TRY(cudaSetDevice(device_));
    return launched(cuda::scale(dst, src, count, type, divisor, stream_), "loom::cuda::scale");
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0 || dst == src) return Status::ok();
    LOOM_CUDA_TRY(cudaSetDevice(device_));
    LOOM_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
    return Status::ok();
  }
  Status zero(void* dst, size_t bytes) override {
    if (bytes == 0) return Status::ok();
    LOOM_CUDA_TRY(cudaSetDevice(device_));
    LOOM_CUDA_TRY(cudaMemsetAsync(dst, 0, bytes, stream_));
    return Status::ok();
  }
  Status convert(void* dst, loomDataType_t dstType, const void* src, loomDataType_t srcType,
                 size_t count) override {
    LOOM_CUDA_TRY(cudaSetDevice(device_));
    return launched(cuda::convert(dst, dstType, src, srcType, count, stream_), "loom::cuda::convert");
  }

  Status synchronize() override {
    LOOM_CUDA_TRY(cudaStreamSynchronize(stream_));
    return Status::ok();
  }

 private:
  int device_;
  cudaStream_t stream_;
  cuda::StreamPtr owned_;  // set when the ops made their own stream
  std::vector<cuda::DevicePtr> allocations_;
};

}  // namespace

Status makeCudaOps(int device, loomStream_t stream, std::unique_ptr<StreamOps>* out) {
  cuda::StreamPtr owned;
  if (stream == nullptr) {
    LOOM_CUDA_TRY(cudaSetDevice(device));
    LOOM_TRY(cuda::makeStream(&owned));
    stream = owned.get();
  }
  *out = std::make_unique<CudaStreamOps>(device, static_cast<cudaStream_t>(stream), std::move(owned));
  return Status::ok();
}

}  // namespace loom::ddp
