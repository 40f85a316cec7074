#include "device_buffers.h"

#include <cuda_runtime_api.h>

#include <cstdio>

#include "fatal.h"

namespace loomperf {
namespace {

void check(cudaError_t e, const char* what, int device) {
  if (e != cudaSuccess) fatal("%s (device %d): %s", what, device, cudaGetErrorString(e));
}

cudaStream_t cudaStream(loomStream_t s) { return static_cast<cudaStream_t>(s); }

}  // namespace

int cudaDeviceCount(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("no CUDA device (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")";
    return 0;
  }
  if (n <= 0) *why = "no CUDA device (cudaGetDeviceCount found none)";
  return n > 0 ? n : 0;
}

std::string deviceDescription(int device) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties", device);
  char text[320];
  std::snprintf(text, sizeof text, "device %2d [%04x:%02x:%02x] %s", device, prop.pciDomainID, prop.pciBusID,
                prop.pciDeviceID, prop.name);
  return text;
}

DeviceRank::DeviceRank(int device, size_t bytes) : device_(device) {
  check(cudaSetDevice(device_), "cudaSetDevice", device_);
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", device_);
  stream_ = s;
  // At least one byte, so that every rank has a buffer of its own even at size 0.
  void* p = nullptr;
  check(cudaMalloc(&p, bytes > 0 ? bytes : 1), "cudaMalloc of the send buffer", device_);
  send_ = static_cast<unsigned char*>(p);
  check(cudaMalloc(&p, bytes > 0 ? bytes : 1), "cudaMalloc of the receive buffer", device_);
  recv_ = static_cast<unsigned char*>(p);
}

DeviceRank::~DeviceRank() {
  // Errors are not fatal here: a failed run has already said what failed.
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(cudaStream(stream_));
  dropGraph();
  cudaFree(send_);
  cudaFree(recv_);
  if (stream_) cudaStreamDestroy(cudaStream(stream_));
}

void DeviceRank::copyIn(void* deviceDst, const void* hostSrc, size_t bytes) {
  copy(deviceDst, hostSrc, bytes, cudaMemcpyHostToDevice, "to the device");
}

void DeviceRank::copyOut(void* hostDst, const void* deviceSrc, size_t bytes) {
  copy(hostDst, deviceSrc, bytes, cudaMemcpyDeviceToHost, "from the device");
}

void DeviceRank::copy(void* dst, const void* src, size_t bytes, int kind, const char* direction) {
  if (bytes == 0) return;
  check(cudaSetDevice(device_), "cudaSetDevice", device_);
  std::string what = std::string("cudaMemcpyAsync ") + direction;
  check(cudaMemcpyAsync(dst, src, bytes, static_cast<cudaMemcpyKind>(kind), cudaStream(stream_)), what.c_str(),
        device_);
  what = std::string("cudaStreamSynchronize after a copy ") + direction;
  check(cudaStreamSynchronize(cudaStream(stream_)), what.c_str(), device_);
}

std::string DeviceRank::synchronize() {
  const cudaError_t e = cudaStreamSynchronize(cudaStream(stream_));
  return e == cudaSuccess ? std::string() : std::string("cudaStreamSynchronize: ") + cudaGetErrorString(e);
}

void DeviceRank::beginCapture() {
  check(cudaSetDevice(device_), "cudaSetDevice", device_);
  check(cudaStreamBeginCapture(cudaStream(stream_), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture",
        device_);
}

void DeviceRank::endCapture() {
  dropGraph();
  cudaGraph_t graph = nullptr;
  check(cudaStreamEndCapture(cudaStream(stream_), &graph), "cudaStreamEndCapture", device_);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check(e, "cudaGraphInstantiate", device_);
  graph_ = exec;
}

void DeviceRank::launchGraph() {
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph_), cudaStream(stream_)), "cudaGraphLaunch", device_);
}

void DeviceRank::dropGraph() {
  if (graph_ == nullptr) return;
  cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph_));
  graph_ = nullptr;
}

}  // namespace loomperf
