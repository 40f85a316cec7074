// CUDA runtime errors as Statuses, and the owners of CUDA memory and events (cuda_call.h).
#include "base/cuda_call.h"

namespace loom::cuda {

Status cudaFailure(cudaError_t err, const char* call, const char* file, int line) {
  return error(loomUnhandledCudaError, "%s failed: %s (%s) at %s:%d", call, cudaGetErrorName(err),
               cudaGetErrorString(err), file, line);
}

void StreamDeleter::operator()(CUstream_st* s) const { cudaStreamDestroy(s); }
void EventDeleter::operator()(CUevent_st* e) const { cudaEventDestroy(e); }
void DeviceDeleter::operator()(void* p) const { cudaFree(p); }
void PinnedDeleter::operator()(void* p) const { cudaFreeHost(p); }
void RegisteredDeleter::operator()(void* p) const { cudaHostUnregister(p); }

Status makeStream(StreamPtr* out) {
  cudaStream_t s = nullptr;
  LOOM_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  out->reset(s);
  return Status::ok();
}

Status makeEvent(EventPtr* out) {
  cudaEvent_t e = nullptr;
  LOOM_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  out->reset(e);
  return Status::ok();
}

Status allocDevice(size_t bytes, DevicePtr* out) {
  void* p = nullptr;
  LOOM_CUDA_TRY(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  out->reset(p);
  return Status::ok();
}

Status allocPinned(size_t bytes, PinnedPtr* out) {
  void* p = nullptr;
  LOOM_CUDA_TRY(cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocMapped | cudaHostAllocPortable));
  out->reset(p);
  return Status::ok();
}

Status registerHost(void* p, size_t bytes, RegisteredPtr* out, void** device) {
  LOOM_CUDA_TRY(cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
  out->reset(p);
  LOOM_CUDA_TRY(cudaHostGetDevicePointer(device, p, 0));
  return Status::ok();
}

RelaxedCapture::RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }
RelaxedCapture::~RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }

}  // namespace loom::cuda
