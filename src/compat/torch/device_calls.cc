// DeviceCalls and the Work of a CUDA operation (device_calls.h).
#include "compat/torch/device_calls.h"

#include <ATen/core/ivalue.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <utility>

#include "compat/torch/loom_error.h"
#include "compat/torch/rendezvous.h"

namespace loom::torch_backend {
namespace {

const char kDeviceIdKey[] = "loom/unique_id/cuda";

void checkCuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("loom: ") + what + ": " + cudaGetErrorString(e));
}

// A CUDA event that only orders (no timing), owned.
class CudaEvent {
 public:
  CudaEvent() { checkCuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate"); }
  ~CudaEvent() { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  void record(cudaStream_t stream) { checkCuda(cudaEventRecord(event_, stream), "cudaEventRecord"); }
  bool reached() const { return cudaEventQuery(event_) == cudaSuccess; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace

class DeviceWork : public c10d::Work {
 public:
  DeviceWork(std::shared_ptr<DeviceCalls> owner, loomComm_t comm, int rank, c10d::OpType type,
             std::vector<at::Tensor> outputs, const at::Device& device)
      : c10d::Work(rank, type),
        owner_(std::move(owner)),
        comm_(comm),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<at::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                         std::vector<c10::Device>{device})) {}

  // The operation's calls are on `stream`, the device's current one: the Future completes now,
  // torch recording its own events there for whoever uses the value.
  void launched(cudaStream_t stream) {
    end_.record(stream);
    launched_.store(true, std::memory_order_release);
    future_->markCompleted(c10::IValue(outputs_));
  }

  bool isCompleted() override { return failure() != nullptr || ended(); }
  bool isSuccess() const override { return failure() == nullptr && ended(); }
  std::exception_ptr exception() const override { return failure(); }
  std::vector<at::Tensor> result() override { return outputs_; }
  bool wait(std::chrono::milliseconds) override {
    if (!launched_.load(std::memory_order_acquire)) {
      throw std::runtime_error("loom: wait() on a CUDA operation of a coalescing block that has not ended, or ended "
                               "with an error");
    }
    future_->wait();  // the caller's current stream waits for the operation; the host does not
    if (std::exception_ptr e = failure()) std::rethrow_exception(e);
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  bool ended() const { return launched_.load(std::memory_order_acquire) && end_.reached(); }
  // The communicator's asynchronous error, once one is known.
  std::exception_ptr failure() const {
    loomResult_t async = loomSuccess;
    if (loomCommGetAsyncError(comm_, &async) == loomSuccess && async == loomSuccess) return nullptr;
    return std::make_exception_ptr(loomError(comm_));
  }

  std::shared_ptr<DeviceCalls> owner_;  // keeps the communicator
  loomComm_t comm_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<at::ivalue::Future> future_;
  CudaEvent end_;
  std::atomic<bool> launched_{false};
};

DeviceCalls::DeviceCalls(c10::intrusive_ptr<c10d::Store> store, int rank, int size, int timeoutMs)
    : store_(std::move(store)), rank_(rank), size_(size), timeoutMs_(timeoutMs) {}

DeviceCalls::~DeviceCalls() {
  if (comm_ != nullptr) loomCommDestroy(comm_);
}

loomComm_t DeviceCalls::communicatorFor(const at::Device& device) {
  if (comm_ == nullptr) {
    comm_ = makeCommunicator(*store_, kDeviceIdKey, rank_, size_, timeoutMs_, device.index());
    device_ = device.index();
  } else if (device.index() != device_) {
    throw std::runtime_error("loom: this group's CUDA operations run on cuda:" + std::to_string(device_) +
                             ", so one on cuda:" + std::to_string(device.index()) +
                             " cannot (one device per process and group, as with NCCL)");
  }
  return comm_;
}

c10::intrusive_ptr<c10d::Work> DeviceCalls::run(LoomOp op, const at::Device& device) {
  std::lock_guard<std::mutex> lock(mutex_);
  const c10::cuda::CUDAGuard guard(device);
  auto work = c10::make_intrusive<DeviceWork>(shared_from_this(), communicatorFor(device), rank_, op.type,
                                              op.outputs, device);
  if (coalescing_) {
    if (!coalescedOps_.empty() && coalescedDevice_ != device) {
      throw std::runtime_error("loom: a coalescing block's CUDA operations must all be on one device");
    }
    coalescedDevice_ = device;
    coalescedOps_.push_back(std::move(op));
    coalescedWorks_.push_back(work);
    return work;
  }
  std::vector<LoomOp> ops;
  ops.push_back(std::move(op));
  launch(ops, {work}, device);
  return work;
}

void DeviceCalls::startCoalescing() {
  std::lock_guard<std::mutex> lock(mutex_);
  coalescing_ = true;
}

c10::intrusive_ptr<c10d::Work> DeviceCalls::endCoalescing() {
  std::lock_guard<std::mutex> lock(mutex_);
  coalescing_ = false;
  std::vector<LoomOp> ops = std::move(coalescedOps_);
  std::vector<c10::intrusive_ptr<DeviceWork>> works = std::move(coalescedWorks_);
  coalescedOps_.clear();
  coalescedWorks_.clear();
  if (ops.empty()) return {};
  const c10::cuda::CUDAGuard guard(coalescedDevice_);
  launch(ops, works, coalescedDevice_);
  return works.back();
}

void DeviceCalls::launch(std::vector<LoomOp>& ops, const std::vector<c10::intrusive_ptr<DeviceWork>>& works,
                         const at::Device& device) {
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  if (launchGrouped(ops, comm_, stream) != loomSuccess) {
    throw loomError(comm_);
  }
  for (LoomOp& op : ops) {
    if (op.finish) op.finish();
  }
  for (const auto& work : works) work->launched(stream);
}

}  // namespace loom::torch_backend
