#include "core/cuda_call.h"

#include <cuda.h>

#include <mutex>

namespace loom::cuda {
namespace {

// The driver functions, from the runtime's entry-point lookup (no link against libcuda).
struct DriverFunctions {
  CUresult (*getAddressRange)(CUdeviceptr*, size_t*, CUdeviceptr) = nullptr;
  Status status;
};

template <typename F>
Status lookup(const char* name, F* out) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  LOOM_CUDA_TRY(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    return error(loomUnhandledCudaError, "the CUDA driver has no %s", name);
  }
  *out = reinterpret_cast<F>(fn);
  return Status::ok();
}

const DriverFunctions& driver() {
  static std::once_flag once;
  static DriverFunctions functions;  // filled once, read-only afterwards
  std::call_once(once, [] {
    DriverFunctions f;
    f.status = lookup("cuMemGetAddressRange", &f.getAddressRange);
    functions = f;
  });
  return functions;
}

Status driverFailure(CUresult r, const char* call) {
  return error(loomUnhandledCudaError, "%s failed: CUDA driver error %d", call, static_cast<int>(r));
}

}  // namespace

Status cudaFailure(cudaError_t err, const char* call, const char* file, int line) {
  return error(loomUnhandledCudaError, "%s failed: %s (%s) at %s:%d", call, cudaGetErrorName(err),
               cudaGetErrorString(err), file, line);
}

bool haveDevice() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

Status allocationRange(const void* ptr, void** base, size_t* size) {
  const DriverFunctions& d = driver();
  LOOM_TRY(d.status);
  CUdeviceptr b = 0;
  CUresult r = d.getAddressRange(&b, size, reinterpret_cast<CUdeviceptr>(ptr));
  if (r != CUDA_SUCCESS) return driverFailure(r, "cuMemGetAddressRange");
  *base = reinterpret_cast<void*>(b);
  return Status::ok();
}

void StreamDeleter::operator()(CUstream_st* s) const { cudaStreamDestroy(s); }
void EventDeleter::operator()(CUevent_st* e) const { cudaEventDestroy(e); }
void DeviceDeleter::operator()(void* p) const { cudaFree(p); }
void PinnedDeleter::operator()(void* p) const { cudaFreeHost(p); }

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

}  // namespace loom::cuda
