// The device side of a communicator (config.device >= 0): collectives on device buffers, run
// by one kernel launch per group call on the caller's stream. The kernel executes this rank's
// plan (the plans the host executor runs too) over FIFOs in memory the peers map; no host
// thread holds or waits on the caller's stream.
//
//   calls -> plan (algorithms) -> lowered (plan_lowering.h) -> LaunchArgs -> plan kernel
//                                                                                |
//   watchdog thread: timeouts, dead peers, loomCommAbort -> Control::abort ------'
//                    the kernel's ErrorRecord          -> the communicator's error
//
// Connections to a peer are made the first time a plan needs one (both ranks need it then:
// their plans mirror each other), all channels at once, by exchanging memory handles over the
// bootstrap; a peer on another host gets local FIFOs that a proxy thread bridges to the
// communicator's sockets (proxy.h). Launches of one communicator run one after another.
#pragma once

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "core/group.h"

namespace loom {

class Communicator;
class HostStream;

// One communicator's share of a group launch: its calls (or a barrier) and its stream.
struct DeviceJob {
  Communicator* comm;
  std::vector<group::Call> calls;
  bool barrier = false;
  HostStream* hostStream = nullptr;  // the emulation's streams
  void* cudaStream = nullptr;
};

class DeviceComm {
 public:
  // Binds to comm->device(), or to the emulation (LOOM_DEVICE_EMULATION=1).
  static Status create(Communicator* comm, std::unique_ptr<DeviceComm>* out);
  // Waits (up to the communicator's timeout, then stops them) for launches still running.
  virtual ~DeviceComm() = default;

  // "cuda" or "emulated", for logs.
  virtual const char* runtimeName() const = 0;
  // Whether its streams are Loom host streams (the emulation) rather than CUDA streams.
  virtual bool hostStreams() const = 0;
  // loomInvalidArgument unless [ptr, ptr + bytes) can be a buffer of this communicator's calls.
  virtual Status checkBuffer(const char* name, const void* ptr, size_t bytes) const = 0;
  // loomInvalidArgument unless this device's plan kernel reduces `type` (float8 needs its build
  // for compute capability 8.9 or later).
  virtual Status checkReduction(loomDataType_t type) const = 0;
  // loomCommAbort: running kernels give up their waits and end; later calls fail.
  virtual void abort() = 0;
  // How many workers (thread blocks) one rank's launch may have, so that the launches of all
  // the communicator's ranks that share a device can be resident at once, as they must be to
  // wait on each other: the smallest of (resident blocks / ranks sharing the device) over the
  // devices. The same on every rank; 0: no limit (the emulation without
  // LOOM_DEVICE_EMULATION_BLOCKS).
  virtual int blockBudget() const = 0;

  // The phases of launchDeviceJobs, one communicator's part each.
  virtual Status prepare(const DeviceJob& job) = 0;  // plans, LOOM_CHECK's exchange
  virtual Status connectOut() = 0;                    // the connections the plan needs: sends handles
  virtual Status acceptIn() = 0;                      // takes the peers' handles
  virtual Status launchPrepared(const DeviceJob& job) = 0;
  virtual Status finish(const DeviceJob& job) = 0;    // NULL stream of the emulation: waits
  // Held from prepare to finish: one launch of a communicator is built at a time.
  virtual std::mutex& launchLock() = 0;
  // A call failed between its launches' prepare and launch (a connection half made, mismatched
  // calls): the communicator keeps `s` as its error, its running kernels stop, and peers whose
  // kernels wait on this rank learn it from its status words.
  virtual void fail(const Status& s) = 0;
  // Makes a failure a finished kernel recorded the communicator's error now. The watchdog
  // does it too, but only on its next look (2 to 100 ms on): loomCommGetAsyncError, asked
  // right after the stream was synchronised, must already see it.
  virtual void collectFailure() = 0;
};

// Channels of `connectionsPerChannel` workers each that fit `blockBudget` beside one worker
// for local copies: at least one, at most `most` (`most` where the budget is 0: no limit).
inline int channelsWithin(int blockBudget, int connectionsPerChannel, int most) {
  if (blockBudget <= 0) return most;
  return std::clamp((blockBudget - 1) / connectionsPerChannel, 1, most);
}

// CUDA spreads a context's streams over its hardware queues (CUDA_DEVICE_MAX_CONNECTIONS), each
// run in order. Thread ranks of one process on one device bring two streams each (the caller's
// and the runtime's own); with more streams than queues two ranks share one, where a rank's
// kernel can wait behind a peer's that waits for it.
inline bool threadRanksShareQueues(int threadRanks, long long queues) { return 2LL * threadRanks > queues; }
// CUDA_DEVICE_MAX_CONNECTIONS as the driver takes it: 1 to 32, else CUDA's default of 8.
long long cudaHardwareQueues();

// Launches each job's calls as one kernel on its communicator's stream and returns without
// waiting for them (but for the emulation's NULL stream, whose calls complete first). Errors
// in building, connecting or launching are returned; errors the kernels meet later become
// their communicators' async errors. Jobs of several communicators may wait on each other
// (one thread driving several ranks): each phase runs for all of them before the next.
Status launchDeviceJobs(std::vector<DeviceJob>& jobs);

}  // namespace loom
