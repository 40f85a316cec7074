// The CUDA side of `loom-perf --device cuda`: which devices there are, and one rank's device
// memory, stream and CUDA graph. device_buffers.cc implements it with the CUDA runtime; in a
// Loom built without CUDA, no_device_buffers.cc stands in (no devices, saying why), so the
// rest of loom-perf has no #if.
//
// Every CUDA call that can synchronise the whole device (cudaMalloc, cudaFree, cudaStreamCreate,
// graph instantiation) happens here, and loom-perf makes them only while no collective of any
// rank is in flight: Loom's proxy thread can deadlock with a device-wide synchronisation when
// several ranks share one GPU in one process.
#pragma once

#include <loom/loom.h>

#include <cstddef>
#include <string>

namespace loomperf {

// The number of CUDA devices this process sees; 0 with *why saying why none can be used
// ("no CUDA device (...)", or "this Loom was built without CUDA ...").
int cudaDeviceCount(std::string* why);

// nccl-tests' description of a device: "device  0 [0000:1b:00] NVIDIA H100 80GB HBM3".
std::string deviceDescription(int device);

// One rank's send and receive buffers (cudaMalloc, `bytes` each), its stream (non-blocking:
// never the legacy NULL stream) and at most one instantiated CUDA graph, all freed by the
// destructor. Not thread-safe: one thread drives a rank. Every CUDA failure is fatal() naming
// the call, except the stream's, which synchronize() returns.
class DeviceRank {
 public:
  DeviceRank(int device, size_t bytes);
  ~DeviceRank();
  DeviceRank(const DeviceRank&) = delete;
  DeviceRank& operator=(const DeviceRank&) = delete;

  int device() const { return device_; }
  unsigned char* send() const { return send_; }
  unsigned char* recv() const { return recv_; }
  loomStream_t stream() const { return stream_; }

  // Copies on the stream, then waits for it (cudaMemcpyAsync + cudaStreamSynchronize).
  void copyIn(void* deviceDst, const void* hostSrc, size_t bytes);
  void copyOut(void* hostDst, const void* deviceSrc, size_t bytes);

  // Waits for everything enqueued on the stream. "" on success, else the CUDA error.
  std::string synchronize();

  // Calls issued on the stream between these two, by this thread, are captured (thread-local
  // mode) into the rank's graph instead of running; launchGraph runs them once more each time.
  void beginCapture();
  void endCapture();
  void launchGraph();
  void dropGraph();  // only once every rank's graph has finished

 private:
  // One copy on the stream and the wait for it; kind is a cudaMemcpyKind.
  void copy(void* dst, const void* src, size_t bytes, int kind, const char* direction);

  int device_;
  unsigned char* send_ = nullptr;
  unsigned char* recv_ = nullptr;
  loomStream_t stream_ = nullptr;
  void* graph_ = nullptr;  // cudaGraphExec_t
};

}  // namespace loomperf
