// The device runtime on a GPU (runtime.h): device memory from cudaMalloc, shared with peers of
// other processes through CUDA IPC handles and with threads of this process by address (peer
// access on where the devices differ); for a peer whose device cannot reach this one, pinned
// host memory both reach over PCIe; pinned, mapped host memory for what the host watches; the
// plan kernel launched on the caller's stream.
//
// Launches of one communicator must run one after another (its FIFO counters and step flags
// are one set): on one stream they do; when a launch goes to another stream than the last,
// that stream first waits for the last launch's event (a wait on the device, not the host).
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

#include "base/cuda_call.h"
#include "device/handover.h"
#include "device/plan_kernel.h"
#include "device/runtime.h"
#include "device/shared_segment.h"

namespace loom::device {
namespace {

// Makes the communicator's device current for a scope, and puts the caller's back.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) {
      cudaSetDevice(device);
      restore_ = previous_ >= 0;
    }
  }
  ~DeviceScope() {
    if (restore_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
  bool restore_ = false;  // every launch makes a scope: one that changed nothing calls nothing
};

static_assert(sizeof(cudaIpcMemHandle_t) <= sizeof(SharedHandle::data), "an IPC handle fits a SharedHandle");

class CudaRuntime final : public DeviceRuntime {
 public:
  CudaRuntime(int device, Handover& handover) : device_(device), handover_(handover) {}
  ~CudaRuntime() override;
  Status init();

  const char* name() const override { return "cuda"; }
  std::string describe() const override {
    return format("CUDA device %d (%s, %d multiprocessors, %d plan-kernel blocks each, plan kernel sm_%d)", device_,
                  deviceName_.c_str(), multiprocessors_, blocksPerMultiprocessor_, planKernelArchitecture_);
  }
  int residentBlocks() const override { return multiprocessors_ * blocksPerMultiprocessor_; }
  // The plan kernel's build for this device, not the device's compute capability, decides: a
  // GPU of 8.9 runs the sm_80 build (Loom builds sm_80, sm_90 and compute_90 PTX).
  Status checkReduction(loomDataType_t type) const override {
    if ((type == loomFloat8e4m3 || type == loomFloat8e5m2) && planKernelArchitecture_ < 89) {
      return error(loomInvalidArgument,
                   "float8 reductions on a GPU need the plan kernel built for compute capability 8.9 or later "
                   "(float8 instructions); CUDA device %d (%s) runs its sm_%d build (float8 allgather, broadcast, "
                   "all-to-all and send/recv work)",
                   device_, deviceName_.c_str(), planKernelArchitecture_);
    }
    return Status::ok();
  }
  std::string deviceKey() const override { return busId_; }
  bool reachedFrom(const std::string& peerKey) const override;
  Status allocShared(size_t bytes, int peerPid, bool hostMemory, void** out, SharedHandle* handle) override;
  Status openShared(const SharedHandle& handle, int peer, void** out) override;
  Status allocHostMapped(size_t bytes, void** host, void** device) override;
  Status allocDevice(size_t bytes, void** out) override;
  Status copyToDevice(void* dst, const void* src, size_t bytes) override {
    return copyOnOwnStream(dst, src, bytes);
  }
  Status copyToHost(void* dst, const void* src, size_t bytes) override {
    return copyOnOwnStream(dst, src, bytes);
  }
  Status writeWord(uint32_t* word, uint32_t value) override;
  Status checkBuffer(const char* name, const void* ptr, size_t bytes) const override;
  Status launch(const LaunchArgs& args, const LaunchStream& stream, bool* captured) override;
  Status finishLaunches(const LaunchStream&) override { return Status::ok(); }

 private:
  Status copyOnOwnStream(void* dst, const void* src, size_t bytes);
  Status allocZeroed(size_t bytes, cuda::DevicePtr* out);
  Status allocSharedHost(size_t bytes, bool sameProcess, void** out, SharedHandle* handle);
  Status keepRegistered(transport::ShmSegment segment, void** out);
  Status allocPinnedZeroed(size_t bytes, cuda::PinnedPtr* memory, void** device);
  Status enablePeerAccess(int ownerDevice, int peer);

  int device_;
  std::string deviceName_;
  std::string busId_;  // the same GPU has the same one in every process, whatever its ordinal
  int multiprocessors_ = 0;
  int planKernelArchitecture_ = 0;  // of the build loaded: 80, 90, ...
  int blocksPerMultiprocessor_ = 0;
  Handover& handover_;
  std::vector<cuda::DevicePtr> deviceMemory_;
  std::vector<std::shared_ptr<void>> handedOver_;  // given to thread ranks, who may keep it (handover.h)
  std::vector<std::shared_ptr<void>> takenOver_;
  std::vector<cuda::PinnedPtr> pinned_;
  std::vector<void*> opened_;  // peers' memory mapped through IPC
  std::vector<transport::ShmSegment> segments_;  // FIFOs in host memory shared with other processes
  std::vector<cuda::RegisteredPtr> registered_;  // their registrations (declared after: undone first)
  cuda::StreamPtr own_;        // for writeWord: never a stream of the caller's
  uint32_t* words_ = nullptr;  // pinned staging for writeWord, one word per write
  size_t wordsUsed_ = 0;
  cuda::EventPtr lastLaunch_;
  void* lastStream_ = nullptr;
  bool launched_ = false;
};

constexpr size_t kStagedWords = 1024;

Status CudaRuntime::init() {
  DeviceScope scope(device_);
  cudaDeviceProp prop{};
  LOOM_CUDA_TRY(cudaGetDeviceProperties(&prop, device_));
  deviceName_ = prop.name;
  multiprocessors_ = prop.multiProcessorCount;
  char busId[32] = {};
  LOOM_CUDA_TRY(cudaDeviceGetPCIBusId(busId, sizeof busId, device_));
  busId_ = busId;
  // Now, before any peer's kernel waits for this rank's (see loadPlanKernel).
  LOOM_CUDA_TRY(static_cast<cudaError_t>(loadPlanKernel(&blocksPerMultiprocessor_, &planKernelArchitecture_)));
  LOOM_TRY(cuda::makeStream(&own_));
  LOOM_TRY(cuda::makeEvent(&lastLaunch_));
  void* device = nullptr;
  void* host = nullptr;
  LOOM_TRY(allocHostMapped(kStagedWords * sizeof(uint32_t), &host, &device));
  words_ = static_cast<uint32_t*>(host);
  return Status::ok();
}

CudaRuntime::~CudaRuntime() {
  DeviceScope scope(device_);
  // Every launch of the communicator has finished (device_comm.cc waits, or leaks this runtime).
  for (void* p : opened_) cudaIpcCloseMemHandle(p);
}

Status CudaRuntime::allocZeroed(size_t bytes, cuda::DevicePtr* out) {
  DeviceScope scope(device_);
  cuda::RelaxedCapture capture;
  LOOM_TRY(cuda::allocDevice(bytes, out));
  // On the runtime's own stream: cudaMemset would go on the legacy stream, which waits for the
  // caller's streams, where a kernel may be waiting for this very rank.
  LOOM_CUDA_TRY(cudaMemsetAsync(out->get(), 0, bytes, own_.get()));
  LOOM_CUDA_TRY(cudaStreamSynchronize(own_.get()));
  return Status::ok();
}

Status CudaRuntime::allocDevice(size_t bytes, void** out) {
  cuda::DevicePtr memory;
  LOOM_TRY(allocZeroed(bytes, &memory));
  *out = memory.get();
  deviceMemory_.push_back(std::move(memory));
  return Status::ok();
}

bool CudaRuntime::reachedFrom(const std::string& peerKey) const {
  if (peerKey == busId_) return true;
  int peer = -1, can = 0;
  // A device this process does not see (CUDA_VISIBLE_DEVICES) is not known to reach it.
  if (cudaDeviceGetByPCIBusId(&peer, peerKey.c_str()) != cudaSuccess ||
      cudaDeviceCanAccessPeer(&can, peer, device_) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return can != 0;
}

Status CudaRuntime::allocShared(size_t bytes, int peerPid, bool hostMemory, void** out, SharedHandle* handle) {
  const bool sameProcess = peerPid == ::getpid();
  *handle = ownSharedHandle(bytes, device_, hostMemory);
  if (hostMemory) {
    LOOM_TRY(allocSharedHost(bytes, sameProcess, out, handle));
  } else if (sameProcess) {
    cuda::DevicePtr memory;
    LOOM_TRY(allocZeroed(bytes, &memory));
    *out = memory.get();
    handedOver_.emplace_back(std::move(memory));
  } else {
    LOOM_TRY(allocDevice(bytes, out));
    // Only another process needs the IPC handle: a thread takes the block by its address.
    cudaIpcMemHandle_t ipc;
    LOOM_CUDA_TRY(cudaIpcGetMemHandle(&ipc, *out));
    std::memcpy(handle->data, &ipc, sizeof ipc);
  }
  handle->address = reinterpret_cast<uint64_t>(*out);
  if (sameProcess) handover_.give(handle->address, handedOver_.back());
  return Status::ok();
}

// Pinned host memory: for a thread peer from cudaHostAlloc (portable, so every device of the
// process reaches it), for another process a shared-memory file that both register.
Status CudaRuntime::allocSharedHost(size_t bytes, bool sameProcess, void** out, SharedHandle* handle) {
  if (!sameProcess) {
    transport::ShmSegment segment;
    LOOM_TRY(createSharedSegment(bytes, "device FIFO in host memory", &segment, handle));
    return keepRegistered(std::move(segment), out);
  }
  cuda::PinnedPtr memory;
  LOOM_TRY(allocPinnedZeroed(bytes, &memory, out));
  handedOver_.emplace_back(memory.release(), cuda::PinnedDeleter());
  return Status::ok();
}

// A shared-memory file of either side, registered with CUDA (mapped for every device) and
// kept, with its registration, as long as the runtime: *out is the devices' address.
Status CudaRuntime::keepRegistered(transport::ShmSegment segment, void** out) {
  DeviceScope scope(device_);
  cuda::RelaxedCapture capture;
  cuda::RegisteredPtr registration;
  LOOM_TRY(cuda::registerHost(segment.data(), segment.size(), &registration, out));
  segments_.push_back(std::move(segment));
  registered_.push_back(std::move(registration));
  return Status::ok();
}

Status CudaRuntime::openShared(const SharedHandle& handle, int peer, void** out) {
  if (handle.pid == ::getpid()) {
    LOOM_TRY(handover_.take(handle.address, peer, &takenOver_, out));
    return handle.hostMemory != 0 || handle.device == device_ ? Status::ok() : enablePeerAccess(handle.device, peer);
  }
  if (handle.hostMemory != 0) {
    transport::ShmSegment segment;
    LOOM_TRY(openSharedSegment(handle, peer, &segment));
    return keepRegistered(std::move(segment), out);
  }
  DeviceScope scope(device_);
  cudaIpcMemHandle_t ipc;
  std::memcpy(&ipc, handle.data, sizeof ipc);
  cudaError_t e = cudaIpcOpenMemHandle(out, ipc, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    return error(loomUnhandledCudaError,
                 "cannot map rank %d's device memory (process %d) with cudaIpcOpenMemHandle: %s (GPUs without "
                 "peer access to each other cannot share device memory)",
                 peer, handle.pid, cudaGetErrorString(e));
  }
  opened_.push_back(*out);
  return Status::ok();
}

// A thread rank's device memory on another device of this process: this device's kernels reach
// it once peer access is on, which lasts for the process (a second rank finds it on already).
Status CudaRuntime::enablePeerAccess(int ownerDevice, int peer) {
  DeviceScope scope(device_);
  const cudaError_t e = cudaDeviceEnablePeerAccess(ownerDevice, 0);
  if (e == cudaSuccess) return Status::ok();
  cudaGetLastError();
  if (e == cudaErrorPeerAccessAlreadyEnabled) return Status::ok();
  return error(loomUnhandledCudaError, "device %d cannot reach rank %d's memory on device %d: %s", device_, peer,
               ownerDevice, cudaGetErrorString(e));
}

// Pinned, mapped and zeroed; *device is the devices' address of it.
Status CudaRuntime::allocPinnedZeroed(size_t bytes, cuda::PinnedPtr* memory, void** device) {
  DeviceScope scope(device_);
  cuda::RelaxedCapture capture;
  LOOM_TRY(cuda::allocPinned(bytes, memory));
  std::memset(memory->get(), 0, bytes);
  LOOM_CUDA_TRY(cudaHostGetDevicePointer(device, memory->get(), 0));
  return Status::ok();
}

Status CudaRuntime::allocHostMapped(size_t bytes, void** host, void** device) {
  cuda::PinnedPtr memory;
  LOOM_TRY(allocPinnedZeroed(bytes, &memory, device));
  *host = memory.get();
  pinned_.push_back(std::move(memory));
  return Status::ok();
}

// Copies on the runtime's own stream: they wait for no stream of the caller's. The kind is the
// pointers' own (cudaMemcpyDefault): a FIFO block may be device memory or pinned host memory.
Status CudaRuntime::copyOnOwnStream(void* dst, const void* src, size_t bytes) {
  DeviceScope scope(device_);
  cuda::RelaxedCapture capture;
  LOOM_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, own_.get()));
  LOOM_CUDA_TRY(cudaStreamSynchronize(own_.get()));
  return Status::ok();
}

// The pinned word it copies from is not reused for kStagedWords writes (failures are rare).
Status CudaRuntime::writeWord(uint32_t* word, uint32_t value) {
  DeviceScope scope(device_);
  uint32_t* staged = &words_[wordsUsed_++ % kStagedWords];
  *staged = value;
  LOOM_CUDA_TRY(cudaMemcpyAsync(word, staged, sizeof value, cudaMemcpyDefault, own_.get()));
  return Status::ok();
}

Status CudaRuntime::checkBuffer(const char* name, const void* ptr, size_t bytes) const {
  if (bytes == 0) return Status::ok();
  cudaPointerAttributes attr{};
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return error(loomInvalidArgument, "%s %p: not memory CUDA knows (%s)", name, ptr, cudaGetErrorString(err));
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    return error(loomInvalidArgument, "%s %p is %s memory; a communicator on device %d takes device buffers", name, ptr,
                 attr.type == cudaMemoryTypeHost ? "pinned host" : "pageable host", device_);
  }
  if (attr.type == cudaMemoryTypeDevice && attr.device != device_) {
    return error(loomInvalidArgument, "%s %p is memory of device %d; this communicator's device is %d", name, ptr,
                 attr.device, device_);
  }
  return Status::ok();
}

Status CudaRuntime::launch(const LaunchArgs& args, const LaunchStream& stream, bool* captured) {
  DeviceScope scope(device_);
  const long long resident = static_cast<long long>(multiprocessors_) * blocksPerMultiprocessor_;
  if (static_cast<long long>(args.workers) > resident) {
    return error(loomInvalidUsage,
                 "this call's plan needs %u workers running at once, but device %d holds %lld plan-kernel blocks; "
                 "use fewer channels (LOOM_CHANNELS)",
                 args.workers, device_, resident);
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream.cuda);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  LOOM_CUDA_TRY(cudaStreamIsCapturing(s, &capture));
  *captured = capture == cudaStreamCaptureStatusActive;
  if (!*captured && launched_ && lastStream_ != stream.cuda) {
    LOOM_CUDA_TRY(cudaStreamWaitEvent(s, lastLaunch_.get(), 0));
  }
  LaunchArgs launched = args;
  launched.countsForHost = *captured ? 0 : 1;
  LOOM_CUDA_TRY(static_cast<cudaError_t>(launchPlanKernel(launched, s)));
  if (!*captured) {
    LOOM_CUDA_TRY(cudaEventRecord(lastLaunch_.get(), s));
    lastStream_ = stream.cuda;
    launched_ = true;
  }
  return Status::ok();
}

}  // namespace

Status checkDeviceExists(int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess && e != cudaErrorNoDevice && e != cudaErrorInsufficientDriver) {
    return cuda::cudaFailure(e, "cudaGetDeviceCount", __FILE__, __LINE__);
  }
  if (device >= count) {
    return error(loomInvalidUsage,
                 "config.device=%d asks for a device communicator, but this process sees %d CUDA device(s)%s%s; "
                 "use device=-1 for host memory, or LOOM_DEVICE_EMULATION=1 to run the device path on CPU threads",
                 device, count, e != cudaSuccess ? ": " : "", e != cudaSuccess ? cudaGetErrorString(e) : "");
  }
  return Status::ok();
}

Status makeCudaRuntime(int device, Handover& handover, std::unique_ptr<DeviceRuntime>* out) {
  auto runtime = std::make_unique<CudaRuntime>(device, handover);
  LOOM_TRY(runtime->init());
  *out = std::move(runtime);
  return Status::ok();
}

}  // namespace loom::device
