#include "transport/cuda_ipc.h"

#include <unistd.h>

#include <cstring>

#include "core/cuda_call.h"

namespace loom::transport {
namespace {

// Mappings kept open: each pins the peer's allocation (it is not freed while mapped), so
// the cache stays small; a training loop reuses a handful of buffers.
constexpr size_t kMaxMapped = 64;

}  // namespace

CudaIpc::~CudaIpc() {
  for (auto& entry : mapped_) cudaIpcCloseMemHandle(entry.second);
}

IpcRegion CudaIpc::describe(const void* ptr) {
  IpcRegion r;
  r.pid = static_cast<int32_t>(getpid());
  r.address = reinterpret_cast<uint64_t>(ptr);
  void* base = nullptr;
  size_t size = 0;
  // Memory from pools (cudaMallocAsync) or other allocators may have no legacy IPC handle:
  // then only peers of this process can read it, which open() reports clearly.
  if (cuda::allocationRange(ptr, &base, &size).isOk() && cudaIpcGetMemHandle(&r.handle, base) == cudaSuccess) {
    r.hasHandle = 1;
    r.offset = r.address - reinterpret_cast<uint64_t>(base);
  } else {
    cudaGetLastError();  // not sticky, but keep the runtime's last error clean for the caller
  }
  return r;
}

Status CudaIpc::open(const IpcRegion& region, int peer, const void** out) {
  if (region.pid == static_cast<int32_t>(getpid())) {
    *out = reinterpret_cast<const void*>(region.address);
    return Status::ok();
  }
  if (!region.hasHandle) {
    return error(loomInvalidUsage,
                 "rank %d's device buffer %#llx cannot be shared with other processes (no CUDA IPC handle: "
                 "allocate it with cudaMalloc, or set LOOM_CUDA_IPC=0 to stage through host memory)",
                 peer, static_cast<unsigned long long>(region.address));
  }
  Key key;
  std::memcpy(key.data(), &region.handle, key.size());
  for (auto it = mapped_.begin(); it != mapped_.end(); ++it) {
    if (it->first == key) {
      mapped_.splice(mapped_.begin(), mapped_, it);
      *out = static_cast<const char*>(it->second) + region.offset;
      return Status::ok();
    }
  }
  void* base = nullptr;
  cudaError_t err = cudaIpcOpenMemHandle(&base, region.handle, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) {
    return error(loomUnhandledCudaError, "cannot map rank %d's device buffer (process %d) with cudaIpcOpenMemHandle: %s",
                 peer, region.pid, cudaGetErrorString(err));
  }
  mapped_.emplace_front(key, base);
  *out = static_cast<const char*>(base) + region.offset;
  return Status::ok();
}

void CudaIpc::trim() {
  while (mapped_.size() > kMaxMapped) {
    cudaIpcCloseMemHandle(mapped_.back().second);
    mapped_.pop_back();
  }
}

}  // namespace loom::transport
