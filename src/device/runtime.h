// Where a device communicator's memory lives and how its plan kernel starts: the CUDA
// runtime on a GPU (cuda_runtime.cc), or the CPU emulation (emulated_runtime.cc), which runs
// the very same plan interpreter on host threads over host memory so that CI tests the
// device protocol without a GPU. The device communicator (device_comm.h) sees only this.
//
// Every allocation lives as long as the runtime, or longer: device memory is never freed while
// communicators run (freeing on a GPU waits for the whole device, where another rank's kernel
// may be waiting for this one), and memory shared with a thread rank of the same process goes
// with the last of the two runtimes (handover.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "device/plan_format.h"
#include "loom/loom.h"

namespace loom {
class HostStream;
class SlotPool;
}

namespace loom::device {

class Handover;

// What a peer needs to reach memory this rank shares with it.
struct SharedHandle {
  int32_t pid = 0;        // the owner's process
  uint32_t bytes = 0;
  uint64_t address = 0;   // in the owner's process (enough for a peer in the same process)
  int32_t device = 0;     // the owner's device, by its ordinal in the owner's process
  uint32_t hostMemory = 0;  // 1: pinned host memory (allocShared's hostMemory)
  uint8_t data[96] = {};  // the runtime's own: a CUDA IPC handle, a shared-memory file name
};
// A handle for memory of `bytes` this process shares from `device`, the runtime's data empty.
SharedHandle ownSharedHandle(size_t bytes, int device, bool hostMemory);

// The stream a call was made on: a CUDA stream on a GPU; in the emulation NULL (the call
// completes before it returns) or a Loom host stream.
struct LaunchStream {
  void* cuda = nullptr;
  HostStream* host = nullptr;
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  // "cuda" or "emulated", and a sentence for the INFO log.
  virtual const char* name() const = 0;
  virtual std::string describe() const = 0;
  // How many plan-kernel workers (thread blocks) the device runs at once, for all the ranks
  // that share it (0: no limit), and a name for the device that is the same in every process
  // of the host that uses it (the PCI bus id of a GPU).
  virtual int residentBlocks() const = 0;
  // loomInvalidArgument where the plan kernel cannot reduce `type` on this device: float8 needs
  // its build for compute capability 8.9 or later (element_ops.h, kPlanFloat8).
  virtual Status checkReduction(loomDataType_t type) const = 0;
  virtual std::string deviceKey() const = 0;
  // Whether a kernel on the device named `peerKey` (its deviceKey, from a rank of this host)
  // reaches this device's memory: the same device, or peer access between the two.
  virtual bool reachedFrom(const std::string& peerKey) const = 0;

  // Memory a peer may map, zeroed. `peerPid`: the process that will open it (this one: the
  // memory is handed over, see handover.h). `hostMemory`: pinned host memory both devices
  // reach over PCIe, for a peer whose device cannot reach this one's memory.
  virtual Status allocShared(size_t bytes, int peerPid, bool hostMemory, void** out, SharedHandle* handle) = 0;
  // A peer's shared memory in this process (mapped, or taken over, once per handle). `peer`
  // names it in errors.
  virtual Status openShared(const SharedHandle& handle, int peer, void** out) = 0;
  // Memory the host and the kernel both reach (pinned and mapped on a GPU), zeroed: *host is
  // the host's address, *device the kernel's.
  virtual Status allocHostMapped(size_t bytes, void** host, void** device) = 0;
  // Memory only the kernel uses (and the host through writeWord), zeroed.
  virtual Status allocDevice(size_t bytes, void** out) = 0;
  // Copies host memory to allocDevice memory and waits for the copy, but for no stream of the
  // caller's (setup, while the caller's streams may hold kernels that wait for this rank).
  virtual Status copyToDevice(void* dst, const void* src, size_t bytes) = 0;
  // Copies allocDevice memory to the host the same way (for TRACE logs).
  virtual Status copyToHost(void* dst, const void* src, size_t bytes) = 0;
  // Stores `value` at `word` (allocShared or allocDevice memory) from the host, without
  // waiting for any stream of the caller's.
  virtual Status writeWord(uint32_t* word, uint32_t value) = 0;

  // loomInvalidArgument unless [ptr, ptr + bytes) is memory the kernel may use as a buffer.
  virtual Status checkBuffer(const char* name, const void* ptr, size_t bytes) const = 0;

  // Starts the plan kernel on `stream` once what is before it there has finished; returns
  // without waiting. *captured: the launch became part of a CUDA graph being captured (it
  // then runs once per replay). The runtime sets args.countsForHost: 1 for a launch that runs
  // once, 0 for a captured one, whose replays the host does not count.
  virtual Status launch(const LaunchArgs& args, const LaunchStream& stream, bool* captured) = 0;
  // For a stream whose work completes within the call (the emulation's NULL stream): waits
  // for the launches started on it. Elsewhere returns at once.
  virtual Status finishLaunches(const LaunchStream& stream) = 0;
};

// The runtime for a device communicator on `device`: the emulation when LOOM_DEVICE_EMULATION
// is 1, else CUDA. `emulatedBlocks`: the emulated device's resident blocks, one pool for
// every emulated runtime of the process; `handover`: the process's table of memory shared
// with thread ranks (the caller's registry keeps both).
Status makeRuntime(int device, bool emulated, SlotPool& emulatedBlocks, Handover& handover,
                   std::unique_ptr<DeviceRuntime>* out);
// Whether this process can run a device communicator on `device` (not the emulation): a
// clear error when the build lacks CUDA or the device is not there, asked before a
// communicator reaches its root.
Status checkDeviceExists(int device);
Status makeEmulatedRuntime(SlotPool& blocks, Handover& handover, std::unique_ptr<DeviceRuntime>* out);
Status makeCudaRuntime(int device, Handover& handover, std::unique_ptr<DeviceRuntime>* out);  // with CUDA only

}  // namespace loom::device
