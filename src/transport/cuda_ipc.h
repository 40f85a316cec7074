// CUDA IPC: how a rank lets the other processes on its host read its device buffers, and
// how it reads theirs. A sender describes a range of its memory (the allocation's IPC
// handle and the offset into it); a receiver maps the handle once and then reads the peer's
// bytes with its own kernels and copies (NVLink or PCIe peer-to-peer, or the same GPU).
// Ranks that share a process skip the handle and use the address.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <list>
#include <utility>

#include "core/status.h"

namespace loom::transport {

// A sender's range, as it travels to a receiver.
struct IpcRegion {
  int32_t pid = 0;           // the sender's process
  uint8_t hasHandle = 0;     // 0: not exportable (only a same-process peer can read it)
  uint64_t address = 0;      // in the sender's process
  uint64_t offset = 0;       // from the base of the allocation the handle names
  cudaIpcMemHandle_t handle{};
};

class CudaIpc {
 public:
  CudaIpc() = default;
  // Unmaps what it mapped.
  ~CudaIpc();
  CudaIpc(const CudaIpc&) = delete;
  CudaIpc& operator=(const CudaIpc&) = delete;

  // Describes ptr (device memory of the current device) for a peer.
  static IpcRegion describe(const void* ptr);
  // The region's address in this process: its own address for a sender in this process,
  // else the mapping of its handle (cached by handle). `peer` names the sender in errors.
  Status open(const IpcRegion& region, int peer, const void** out);
  // Closes the least recently used mappings beyond a few dozen; only between calls, when
  // no copy or kernel of this rank still reads them.
  void trim();

 private:
  using Key = std::array<char, sizeof(cudaIpcMemHandle_t)>;
  std::list<std::pair<Key, void*>> mapped_;  // most recently used first
};

}  // namespace loom::transport
