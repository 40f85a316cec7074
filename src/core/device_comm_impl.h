// The device communicator's implementation, shared by its files: device_comm.cc (creation,
// the block budget, destruction), device_connect.cc (plans and the FIFOs they need),
// device_launch.cc (lowered plans launched on the caller's stream) and device_watchdog.cc
// (timeouts, dead peers, the kernel's recorded failure, logs). Not part of any interface:
// the rest of the library sees device_comm.h.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "algorithms/plan.h"
#include "base/peer_process.h"
#include "core/device_comm.h"
#include "core/failure_notices.h"
#include "core/group_agreement.h"
#include "core/remote_announcements.h"
#include "device/plan_format.h"
#include "device/proxy.h"
#include "device/runtime.h"

namespace loom::device_comm {

using Clock = std::chrono::steady_clock;
using namespace device;

// A plan too large for the kernel's parameter goes to a slot of pinned memory of at least this size.
constexpr size_t kPlanSlotBytes = 64 << 10;

// Scratch for plans (partial results of ring and tree steps, bytes that wait for writeAfter):
// reset for each launch, since launches of a communicator run one after another, and grown,
// never freed early.
class DeviceArena : public ScratchSource {
 public:
  explicit DeviceArena(DeviceRuntime& runtime) : runtime_(runtime) {}
  void reset() { block_ = offset_ = 0; }
  // Allocates the first block now (at creation) rather than in a call's launch path.
  Status reserve(size_t bytes) {
    void* p = nullptr;
    LOOM_TRY(runtime_.allocDevice(bytes, &p));
    blocks_.emplace_back(static_cast<char*>(p), bytes);
    return Status::ok();
  }
  // Whether a call since the last look needed a block beyond the ones it had.
  bool grewSinceAsked() { return std::exchange(grew_, false); }
  char* get(size_t bytes) override {
    bytes = (bytes + 255) & ~size_t{255};
    while (block_ < blocks_.size() && offset_ + bytes > blocks_[block_].second) {
      ++block_;
      offset_ = 0;
    }
    if (block_ == blocks_.size()) {
      const size_t size = std::max(bytes, size_t{16} << 20);
      void* p = nullptr;
      if (!runtime_.allocDevice(size, &p).isOk()) throw std::bad_alloc();
      blocks_.emplace_back(static_cast<char*>(p), size);
      grew_ = true;
    }
    char* p = blocks_[block_].first + offset_;
    offset_ += bytes;
    return p;
  }

 private:
  DeviceRuntime& runtime_;
  std::vector<std::pair<char*, size_t>> blocks_;
  size_t block_ = 0, offset_ = 0;
  bool grew_ = false;
};

// A plan too large for the kernel's parameter, in pinned memory the kernel reads. Free again
// once the kernel has written the plan's id to `done`; kept for good when a CUDA graph
// captured its launch.
struct PlanSlot {
  uint8_t* host = nullptr;
  uint8_t* device = nullptr;
  size_t capacity = 0;
  uint64_t* doneHost = nullptr;
  uint64_t* doneDevice = nullptr;
  uint64_t id = 0;
  bool kept = false;
};

// What an error message says of a plan: its calls and, per step, what it did with whom.
struct PlanNote {
  struct StepNote {
    Step::Kind kind;
    int peer;
    size_t bytes;
    uint32_t call;
  };
  std::vector<CallInfo> calls;
  std::vector<StepNote> steps;
  uint64_t firstSeq = 0;   // its first and last collectives' numbers (0: none)
  uint64_t lastSeq = 0;
  uint64_t seqBefore = 0;  // the last collective launched before it
  bool kept = false;
};

struct PeerState {
  // Set (release) once the fields below are; the watchdog reads them after seeing it.
  std::atomic<bool> connected{false};
  bool offHost = false;
  bool hostFifo = false;         // block in pinned host memory: the peer's device cannot reach this one's
  bool peerHostFifo = false;     // the peer's block for this rank is in pinned host memory
  uint8_t* block = nullptr;      // this rank's memory for the peer (device view)
  uint8_t* hostBlock = nullptr;  // the same, host view (off-host peers: what the proxy reads)
  uint8_t* peerBlock = nullptr;  // the peer's block for this rank, mapped (same host only)
  transport::PeerProcess process;  // another process on this host: watched for exit
};

class DeviceCommImpl final : public DeviceComm {
 public:
  explicit DeviceCommImpl(Communicator* comm) : comm_(comm) {}
  ~DeviceCommImpl() override;
  Status init();
  Status connectEagerly();

  const char* runtimeName() const override { return runtime_->name(); }
  bool hostStreams() const override { return std::strcmp(runtime_->name(), "emulated") == 0; }
  Status checkBuffer(const char* name, const void* ptr, size_t bytes) const override {
    return runtime_->checkBuffer(name, ptr, bytes);
  }
  Status checkReduction(loomDataType_t type) const override { return runtime_->checkReduction(type); }
  void abort() override;
  int blockBudget() const override { return blockBudget_; }
  void collectFailure() override { static_cast<void>(reportRecordedFailure()); }

  Status prepare(const DeviceJob& job) override;
  Status connectOut() override;
  Status acceptIn() override;
  Status launchPrepared(const DeviceJob& job) override;
  Status finish(const DeviceJob& job) override;
  std::mutex& launchLock() override { return launchMutex_; }
  void fail(const Status& s) override;

 private:
  // The FIFOs of a block in device memory, or in pinned host memory (hostShape_).
  const FifoShape& shapeOf(bool hostMemory) const { return hostMemory ? hostShape_ : shape_; }
  size_t blockBytes(const FifoShape& shape, bool offHost) const {
    const size_t channel = ChannelLayout::bytes(shape) * (offHost ? 2 : 1);
    return kBlockStatusBytes + channel * static_cast<size_t>(channels_);
  }
  int connIndex(int peer, int channel, bool send) const { return (peer * channels_ + channel) * 2 + (send ? 0 : 1); }
  // device_comm.cc
  Status agreeOnDevices();
  Status openWatchChannel();
  void warnOfSharedQueues(int threadRanks);
  bool launchesOutstanding() const;
  void stopRunningKernels(AbortReason reason, int peer);
  // device_connect.cc
  Status fillConnections(int peer);
  Status receiveConnectWord(int peer, void* data, size_t bytes, const std::string& what);
  // device_launch.cc
  Status addPlanSlot(size_t capacity);
  void memoryMadeInCall(const char* what);
  Status placePlan(const std::vector<uint8_t>& plan, uint64_t id, LaunchArgs* args);
  void note(const Plan& plan, uint64_t id);
  // device_watchdog.cc
  void logCounters();
  void logTimeline();
  Status statusOf(const ErrorRecord& e, uint32_t abortReason);
  // The first failure the kernel recorded, once, as the communicator's error.
  Status reportRecordedFailure();
  int failureCause() const;
  void publishFailure();
  void watch();
  void endQueued(Clock::time_point now);
  void compareRunningCalls(Clock::time_point now);
  // loomRemoteError where a rank told over the watchdog's channel that it gave up in the running
  // launch's calls or before (under agreementMutex_).
  Status heardFailure();
  // The collective this rank gave up in, as FailureNotices tells it (0: unknown).
  uint64_t failureSeq();
  void inspect(Clock::time_point now);

  Communicator* comm_;
  std::unique_ptr<DeviceRuntime> runtime_;
  FifoShape shape_{};
  FifoShape hostShape_{};  // blocks in pinned host memory: smaller slots (device_comm.cc)
  int channels_ = 1;
  int blockBudget_ = 0;
  bool threadPeerOnDevice_ = false;  // a peer is a thread of this process on this rank's device
  bool warnedMemoryInCall_ = false;
  std::mutex stopMutex_;  // the callers of stopRunningKernels: watchdog, proxy, loomCommAbort
  Control* control_ = nullptr;        // host view
  Control* controlDevice_ = nullptr;  // kernel view
  LaunchState* state_ = nullptr;
  // The connection table: filled here, copied to device memory as peers connect. The kernel
  // reads an entry at every step; from host-mapped memory that was a PCIe round trip each.
  std::vector<Connection> conns_;
  Connection* connsDevice_ = nullptr;
  uint64_t* counters_ = nullptr;
  WorkerTimeline* timeline_ = nullptr;  // LOOM_DEVICE_TIMELINE; null: launches are not timed
  uint64_t* stepFlags_ = nullptr;
  uint32_t* localArrivals_ = nullptr;  // beside the step flags, as many
  size_t stepFlagCapacity_ = 0;
  std::vector<PeerState> peers_;
  std::unique_ptr<DeviceArena> arena_;
  std::vector<PlanSlot> slots_;
  std::unique_ptr<Proxy> proxy_;

  std::mutex launchMutex_;
  // Between prepare and finish, under launchMutex_.
  Plans plans_;
  std::vector<int> connecting_;
  GroupAgreement connectAgreement_;  // the job's calls, compared while a peer's handle is awaited
  Clock::time_point connectSince_;   // when the job began to connect
  uint64_t nextPlanId_ = 0;
  std::atomic<uint64_t> uncapturedLaunches_{0};  // launches counted in Control::hostLaunches

  // Shared with the watchdog.
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<uint64_t, PlanNote> notes_;
  bool reported_ = false;
  bool published_ = false;
  bool stopping_ = false;
  std::atomic<bool> watchingSlowly_{true};  // the watchdog looks every 100 ms, not every 2
  std::thread watchdog_;
  // The watchdog thread's own: the launch it is timing, since when, its last look at peers.
  uint64_t watched_ = 0;
  Clock::time_point watchedSince_, lastPeerCheck_;
  Clock::time_point goneSince_;  // when a peer was first seen gone (epoch: none is)
  int firstGone_ = -1;           // and which
  Clock::time_point queuedSince_;  // since when a launch is made but not started (epoch: none)
  bool queuedWarned_ = false;
  GroupAgreement runningAgreement_;  // the running launch's calls, compared with the peers'
  // Where no board carries announcements: a bootstrap channel of the agreements' own (the
  // communicator's serves its caller's thread) and what goes over it.
  std::unique_ptr<Bootstrap> watchChannel_;
  std::unique_ptr<RemoteAnnouncements> watchAnnouncements_;
  // Why ranks gave up, told over the same channel (peers on this host say it in their status
  // words too), and the number of the last collective launched, which tells in which call.
  std::unique_ptr<FailureNotices> watchNotices_;
  std::atomic<uint64_t> launchedSeq_{0};
  uint64_t comparedLaunch_ = 0, comparedPlan_ = 0;  // which launch and plan it holds
  std::vector<int> comparedPeers_;                  // and the ranks that plan exchanges bytes with
  uint64_t comparedLast_ = 0;                       // and its last collective's number (0: none)
  // The board's announcement area has one writer per rank, and the watchdog's channel one user:
  // the watchdog or the caller, one at a time.
  std::mutex agreementMutex_;
};

}  // namespace loom::device_comm
