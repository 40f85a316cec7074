// What the CUDA data path needs from the CUDA runtime, with Loom's error handling: one macro
// that turns a failed runtime call into a Status naming the call, and owners (RAII) for the
// resources it holds. Only the runtime is linked (libcudart), never libcuda: a build with
// CUDA must still load and run its host path on machines without a driver.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "base/status.h"

namespace loom::cuda {

// loomUnhandledCudaError naming the call, where it was made and CUDA's own words.
Status cudaFailure(cudaError_t err, const char* call, const char* file, int line);

}  // namespace loom::cuda

#define LOOM_CUDA_TRY(call)                                                              \
  do {                                                                                   \
    cudaError_t loom_cuda_err_ = (call);                                                 \
    if (loom_cuda_err_ != cudaSuccess)                                                   \
      return ::loom::cuda::cudaFailure(loom_cuda_err_, #call, __FILE__, __LINE__);       \
  } while (0)

namespace loom::cuda {

// Owners. Each frees its resource in its destructor; errors there are ignored (a dead
// context has already freed everything).
struct StreamDeleter {
  void operator()(CUstream_st* s) const;
};
using StreamPtr = std::unique_ptr<CUstream_st, StreamDeleter>;
// A stream that never waits for the legacy NULL stream (the caller's NULL stream may hold a
// kernel that waits for this stream's work).
Status makeStream(StreamPtr* out);

struct EventDeleter {
  void operator()(CUevent_st* e) const;
};
using EventPtr = std::unique_ptr<CUevent_st, EventDeleter>;
Status makeEvent(EventPtr* out);  // without timing, the cheapest to record and poll

struct DeviceDeleter {
  void operator()(void* p) const;
};
using DevicePtr = std::unique_ptr<void, DeviceDeleter>;
Status allocDevice(size_t bytes, DevicePtr* out);

struct PinnedDeleter {
  void operator()(void* p) const;
};
using PinnedPtr = std::unique_ptr<void, PinnedDeleter>;
// Page-locked host memory mapped into every device's address space.
Status allocPinned(size_t bytes, PinnedPtr* out);

struct RegisteredDeleter {
  void operator()(void* p) const;
};
using RegisteredPtr = std::unique_ptr<void, RegisteredDeleter>;
// Page-locks `bytes` of host memory at p (a shared-memory segment: the owner is released before
// the mapping goes) and maps them into every device's address space; *device is their address.
Status registerHost(void* p, size_t bytes, RegisteredPtr* out, void** device);

// For its lifetime, lets this thread allocate while one of its streams is being captured into
// a CUDA graph: an allocation is no stream work, but capture's default mode refuses it (a
// communicator's first call inside a capture may need memory for its plan).
class RelaxedCapture {
 public:
  RelaxedCapture();
  ~RelaxedCapture();
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;  // after the swap: the thread's own
};

}  // namespace loom::cuda
