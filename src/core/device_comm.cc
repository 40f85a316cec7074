// The device executor: FIFOs, connections, the plan kernel's launches and the watchdog (device_comm.h).
#include "core/device_comm.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <new>
#include <set>
#include <thread>
#include <utility>

#include "base/env.h"
#include "base/log.h"
#include "base/peer_process.h"
#include "core/call_check.h"
#include "core/communicator.h"
#include "core/p2p.h"
#include "core/registry.h"
#include "device/fifo_layout.h"
#include "device/plan_lowering.h"
#include "device/proxy.h"
#include "device/runtime.h"

namespace loom {

long long cudaHardwareQueues() {
  long long queues = 8;
  if (!env::getInt("CUDA_DEVICE_MAX_CONNECTIONS", 1, 32, &queues).isOk()) queues = 8;
  return queues;
}

namespace {

using Clock = std::chrono::steady_clock;
using namespace device;

constexpr uint32_t kConnectTag = 0x44455601;  // "DEV" 1: a peer's block handle
constexpr uint32_t kFirstStepFlags = 4096;
constexpr size_t kFirstScratchBytes = size_t{16} << 20;  // a call's parked receives, made at creation
constexpr size_t kPlanSlotBytes = 64 << 10;              // a plan too large for the kernel's parameter
constexpr size_t kNotesKept = 256;  // descriptions of recent plans, for error messages

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
  bool kept = false;
};

// How long a launch may still run after a peer went away before the watchdog stops it.
constexpr std::chrono::milliseconds kPeerGoneGrace(1000);

struct PeerState {
  // Set (release) once the fields below are; the watchdog reads them after seeing it.
  std::atomic<bool> connected{false};
  bool offHost = false;
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

 private:
  size_t blockBytes(bool offHost) const {
    const size_t channel = ChannelLayout::bytes(shape_) * (offHost ? 2 : 1);
    return kBlockStatusBytes + channel * static_cast<size_t>(channels_);
  }
  int connIndex(int peer, int channel, bool send) const { return (peer * channels_ + channel) * 2 + (send ? 0 : 1); }
  Status agreeOnBlockBudget();
  void warnOfSharedQueues(int threadRanks);
  void logCounters();
  void logTimeline();
  Status addPlanSlot(size_t capacity);
  void memoryMadeInCall(const char* what);
  void endQueued(Clock::time_point now);
  int failureCause() const;
  Status fillConnections(int peer);
  Status placePlan(const std::vector<uint8_t>& plan, uint64_t id, LaunchArgs* args);
  void note(const Plan& plan, uint64_t id);
  Status statusOf(const ErrorRecord& e, uint32_t abortReason);
  // The first failure the kernel recorded, once, as the communicator's error.
  Status reportRecordedFailure();
  void stopRunningKernels(AbortReason reason, int peer);
  void publishFailure();
  void watch();
  void inspect(Clock::time_point now);
  bool launchesOutstanding() const;

  Communicator* comm_;
  std::unique_ptr<DeviceRuntime> runtime_;
  FifoShape shape_{};
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
  std::vector<Plan> plans_;
  std::vector<int> connecting_;
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
};

Status DeviceCommImpl::init() {
  const CommConfig& config = comm_->config();
  Registry& registry = Registry::instance();
  LOOM_TRY(makeRuntime(comm_->device(), config.deviceEmulation, registry.emulatedDeviceBlocks(),
                       registry.deviceHandover(), &runtime_));
  LOOM_TRY(agreeOnBlockBudget());
  // No plan uses more channels than fit its share of resident blocks (collective.cc), two
  // workers per channel at the least, so no more are connected: each costs FIFO memory.
  channels_ = channelsWithin(blockBudget_, 2, config.deviceChannels);
  shape_.slots = 8;
  shape_.slotBytes = static_cast<uint32_t>(config.deviceFifoBytes / shape_.slots / 256 * 256);
  shape_.llSlots = 8;
  // 16 KiB of data per LL slot, four lines for each thread of a 512-thread worker: with one
  // line each (4 KiB) a slot's turn around the ring, not the bytes, paced the wire (about
  // 1 GB/s on an H100).
  shape_.llLines = kLLControlLines + 2048;
  const int n = comm_->nranks();
  const size_t connections = static_cast<size_t>(n) * static_cast<size_t>(channels_) * 2;
  void* host = nullptr;
  void* device = nullptr;
  LOOM_TRY(runtime_->allocHostMapped(sizeof(Control), &host, &device));
  control_ = static_cast<Control*>(host);
  controlDevice_ = static_cast<Control*>(device);
  conns_.assign(connections, Connection{});
  LOOM_TRY(runtime_->allocDevice(connections * sizeof(Connection), &device));
  connsDevice_ = static_cast<Connection*>(device);
  LOOM_TRY(runtime_->allocDevice(sizeof(LaunchState), &device));
  state_ = static_cast<LaunchState*>(device);
  LOOM_TRY(runtime_->allocDevice(connections * 2 * sizeof(uint64_t), &device));
  counters_ = static_cast<uint64_t*>(device);
  LOOM_TRY(runtime_->allocDevice(kFirstStepFlags * sizeof(uint64_t), &device));
  stepFlags_ = static_cast<uint64_t*>(device);
  LOOM_TRY(runtime_->allocDevice(kFirstStepFlags * sizeof(uint32_t), &device));
  localArrivals_ = static_cast<uint32_t*>(device);
  stepFlagCapacity_ = kFirstStepFlags;
  long long timeline = 0;
  LOOM_TRY(env::getInt("LOOM_DEVICE_TIMELINE", 0, 1, &timeline));
  if (timeline != 0) {
    LOOM_TRY(runtime_->allocDevice(kTimelineWorkers * sizeof(WorkerTimeline), &device));
    timeline_ = static_cast<WorkerTimeline*>(device);
  }
  peers_ = std::vector<PeerState>(static_cast<size_t>(n));
  arena_ = std::make_unique<DeviceArena>(*runtime_);
  // Made now, not in a call: see memoryMadeInCall.
  LOOM_TRY(arena_->reserve(kFirstScratchBytes));
  LOOM_TRY(addPlanSlot(kPlanSlotBytes));
  LOOM_TRY(connectEagerly());
  LOOM_INFO("comm %016llx rank %d: device %d, %s; %d channel(s) per peer, FIFOs of %u x %u bytes (simple) and "
            "%u x %llu bytes (low latency) per channel and direction",
            static_cast<unsigned long long>(comm_->commId()), comm_->rank(), comm_->device(),
            runtime_->describe().c_str(), channels_, shape_.slots, shape_.slotBytes, shape_.llSlots,
            static_cast<unsigned long long>(shape_.llPayload()));
  watchdog_ = std::thread([this] { watch(); });
  return Status::ok();
}

// Ranks that are threads of one process share its CUDA context, and a context's streams share
// a few hardware queues (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default) in which work runs in
// order. Connecting a pair waits on the host for work on the runtime's own stream (zeroing the
// FIFOs, copying the connection table), which may then sit behind a thread peer's kernel that
// waits for this very rank's next launch: a hang until the timeout (8 thread-ranks on an H100,
// at the first call that joined a new pair). So where any rank has a thread peer, every rank
// connects every peer here, before a kernel of the communicator runs; every rank sees every
// rank's process, so all decide alike (a rank connecting alone would wait for its peers).
Status DeviceCommImpl::connectEagerly() {
  const std::vector<PeerInfo>& info = comm_->bootstrap().peers();
  bool threads = false;
  for (size_t a = 0; a < info.size() && !threads; ++a) {
    for (size_t b = a + 1; b < info.size() && !threads; ++b) {
      threads = sameProcess(info[a], info[b]);
    }
  }
  if (!threads) return Status::ok();
  connecting_.clear();
  for (int p = 0; p < comm_->nranks(); ++p) {
    if (p != comm_->rank()) connecting_.push_back(p);
  }
  LOOM_TRY(connectOut());
  return acceptIn();
}

// Streams are assigned to the queues in turn as they are made, so which ranks share one is
// not known; the stall is real: 8 thread ranks on an H200 stalled so (until the timeout) in
// every run with 8 queues and in none with 32 (2026-11-28).
void DeviceCommImpl::warnOfSharedQueues(int threadRanks) {
  if (comm_->config().deviceEmulation) return;
  const long long queues = cudaHardwareQueues();
  if (!threadRanksShareQueues(threadRanks, queues)) return;
  LOOM_WARN("comm %016llx: %d ranks are threads of this process on device %d, and their streams (2 each) share "
            "%lld CUDA hardware queue(s): a rank's kernel can wait behind a peer's that waits for it, a stall until "
            "the timeout. Set CUDA_DEVICE_MAX_CONNECTIONS=32 before the process first uses CUDA, or run the ranks "
            "as processes (docs/ARCHITECTURE.md, 'Thread ranks on one GPU')",
            static_cast<unsigned long long>(comm_->commId()), threadRanks, comm_->device(), queues);
}

// Ranks whose plan kernels share a device wait on each other's workers, so all of their workers
// must be resident at once: a worker left waiting for a free block while the blocks are held by
// workers waiting for it is a hang. Ranks of one host naming the same device key share it (also
// across processes: under MPS their blocks share the SMs).
Status DeviceCommImpl::agreeOnBlockBudget() {
  struct Entry {
    uint64_t hostHash;
    uint64_t deviceKey;
    int32_t residentBlocks;
    int32_t unused;
  };
  const std::vector<PeerInfo>& peers = comm_->bootstrap().peers();
  std::vector<Entry> all(static_cast<size_t>(comm_->nranks()));
  all[static_cast<size_t>(comm_->rank())] = {peers[static_cast<size_t>(comm_->rank())].hostHash,
                                             std::hash<std::string>{}(runtime_->deviceKey()),
                                             runtime_->residentBlocks(), 0};
  LOOM_TRY(comm_->bootstrap().allGather(all.data(), sizeof(Entry)).withContext("device residency exchange"));
  int sharersOfMine = 0;
  for (const Entry& e : all) {
    if (e.residentBlocks <= 0) continue;
    int sharers = 0;
    for (const Entry& o : all) sharers += o.hostHash == e.hostHash && o.deviceKey == e.deviceKey;
    const int budget = std::max(1, e.residentBlocks / sharers);
    blockBudget_ = blockBudget_ == 0 ? budget : std::min(blockBudget_, budget);
    if (&e == &all[static_cast<size_t>(comm_->rank())]) sharersOfMine = sharers;
  }
  const Entry& mine = all[static_cast<size_t>(comm_->rank())];
  int threadRanks = 0, firstThreadRank = -1;  // ranks of this process on this device, this one too
  for (size_t p = 0; p < all.size(); ++p) {
    if (all[p].deviceKey != mine.deviceKey || !sameProcess(peers[p], peers[static_cast<size_t>(comm_->rank())])) {
      continue;
    }
    if (threadRanks++ == 0) firstThreadRank = static_cast<int>(p);
  }
  threadPeerOnDevice_ = threadRanks > 1;
  if (threadPeerOnDevice_ && firstThreadRank == comm_->rank()) warnOfSharedQueues(threadRanks);
  if (blockBudget_ > 0) {
    LOOM_INFO("comm %016llx rank %d: %d rank(s) share this device (%d resident plan-kernel blocks); each rank's "
              "launch may use %d",
              static_cast<unsigned long long>(comm_->commId()), comm_->rank(), sharersOfMine,
              runtime_->residentBlocks(), blockBudget_);
  }
  return Status::ok();
}

bool DeviceCommImpl::launchesOutstanding() const {
  return __atomic_load_n(&control_->hostLaunches, __ATOMIC_ACQUIRE) < uncapturedLaunches_.load() ||
         __atomic_load_n(&control_->started, __ATOMIC_ACQUIRE) > __atomic_load_n(&control_->completed, __ATOMIC_ACQUIRE);
}

DeviceCommImpl::~DeviceCommImpl() {
  if (runtime_ != nullptr) {
    // Launches still queued or running use this memory: wait for them, then stop them.
    // Then what they sent to other hosts leaves before the proxy stops.
    const Clock::time_point limit = Clock::now() + std::chrono::milliseconds(comm_->config().timeoutMs);
    std::unique_lock<std::mutex> launching(launchMutex_);
    while (launchesOutstanding() && Clock::now() < limit) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (launchesOutstanding()) {
      stopRunningKernels(kAbortedByUser, -1);
      const Clock::time_point grace = Clock::now() + std::chrono::seconds(5);
      while (launchesOutstanding() && Clock::now() < grace) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (launchesOutstanding()) {
      // A stream that never reaches the launch would start it after the memory is gone.
      LOOM_WARN("rank %d: destroying a device communicator whose launches have not finished after %lld ms; "
                "its device memory is left allocated",
                comm_->rank(), static_cast<long long>(comm_->config().timeoutMs));
      (void)runtime_.release();
    } else {
      if (log::enabled(log::Level::kTrace)) logCounters();
      if (timeline_ != nullptr) logTimeline();
    }
    if (proxy_ != nullptr) proxy_->drain(std::chrono::milliseconds(comm_->config().timeoutMs));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  proxy_.reset();
}

// Every connection's counters as the kernels left them, to set beside the peer's: the two
// ends of a connection that disagree explain a hang.
void DeviceCommImpl::logCounters() {
  std::vector<uint64_t> counters(conns_.size() * 2);
  if (!runtime_->copyToHost(counters.data(), counters_, counters.size() * sizeof(uint64_t)).isOk()) return;
  std::string text;
  for (int p = 0; p < comm_->nranks(); ++p) {
    for (int c = 0; c < channels_; ++c) {
      const uint64_t* sent = &counters[2 * static_cast<size_t>(connIndex(p, c, true))];
      const uint64_t* taken = &counters[2 * static_cast<size_t>(connIndex(p, c, false))];
      if (sent[0] + sent[1] + taken[0] + taken[1] == 0) continue;
      text += format(" %d/%d: %llu+%llu sent, %llu+%llu taken;", p, c, static_cast<unsigned long long>(sent[0]),
                     static_cast<unsigned long long>(sent[1]), static_cast<unsigned long long>(taken[0]),
                     static_cast<unsigned long long>(taken[1]));
    }
  }
  LOOM_TRACE("comm %016llx rank %d: FIFO pieces at the end (peer/channel: simple+low-latency):%s",
             static_cast<unsigned long long>(comm_->commId()), comm_->rank(), text.c_str());
}

// "receiving 4000 bytes from rank 1", "a local copy".
std::string stepWords(const PlanNote::StepNote& s) {
  if (s.peer < 0) return "a local copy";
  const bool send = s.kind == Step::Kind::kSend;
  return format("%s %zu bytes %s rank %d", send ? "sending" : s.kind == Step::Kind::kCopy ? "copying" : "receiving",
                s.bytes, send ? "to" : "from", s.peer);
}

// LOOM_DEVICE_TIMELINE: each worker's mean times over the launches it ran to the end, from
// its own start, and how long after the last launch's first worker it started (the global
// timer: set beside the same line of a thread peer on the same GPU, it shows who waited).
void DeviceCommImpl::logTimeline() {
  std::vector<WorkerTimeline> all(kTimelineWorkers);
  if (!runtime_->copyToHost(all.data(), timeline_, all.size() * sizeof(WorkerTimeline)).isOk()) return;
  uint64_t first = UINT64_MAX;
  for (const WorkerTimeline& t : all) {
    if (t.launches != 0) first = std::min(first, t.lastStart);
  }
  if (first == UINT64_MAX) return;
  LOOM_INFO("comm %016llx rank %d: timeline of the workers (us from each worker's start, means over its launches); "
            "the last launch's first worker started at %llu ns",
            static_cast<unsigned long long>(comm_->commId()), comm_->rank(), static_cast<unsigned long long>(first));
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t w = 0; w < all.size(); ++w) {
    const WorkerTimeline& t = all[w];
    if (t.launches == 0) continue;
    const double perLaunchUs = 1e-3 / static_cast<double>(t.launches);
    auto note = notes_.find(t.lastPlan);
    std::string steps;
    for (uint32_t k = 0; k < t.steps && k < kTimelineSteps; ++k) {
      const uint32_t index = t.stepIndex[k];
      const bool known = note != notes_.end() && index < note->second.steps.size();
      steps += format(" step %u (%s) ready %.2f done %.2f;", index,
                      known ? stepWords(note->second.steps[index]).c_str() : "?",
                      static_cast<double>(t.ready[k]) * perLaunchUs, static_cast<double>(t.done[k]) * perLaunchUs);
    }
    LOOM_INFO("comm %016llx rank %d worker %zu: %llu launches, started %.2f us after the first;%s end %.2f",
              static_cast<unsigned long long>(comm_->commId()), comm_->rank(), w,
              static_cast<unsigned long long>(t.launches), static_cast<double>(t.lastStart - first) * 1e-3,
              steps.c_str(), static_cast<double>(t.end) * perLaunchUs);
  }
}

void DeviceCommImpl::abort() {
  stopRunningKernels(kAbortedByUser, -1);
  changed_.notify_all();
}

// The first reason stands: a later one (another peer gone, an abort) must not change the peer
// a stopped kernel names, so the peer is written only by the caller that sets the reason.
void DeviceCommImpl::stopRunningKernels(AbortReason reason, int peer) {
  std::lock_guard<std::mutex> lock(stopMutex_);
  if (__atomic_load_n(&control_->abort, __ATOMIC_ACQUIRE) != kRunning) return;
  if (reason == kAbortedPeerGone) __atomic_store_n(&control_->abortPeer, peer, __ATOMIC_RELAXED);
  __atomic_store_n(&control_->abort, static_cast<uint32_t>(reason), __ATOMIC_RELEASE);
}

// ---- Building and connecting ------------------------------------------------------------------

Status DeviceCommImpl::prepare(const DeviceJob& job) {
  arena_->reset();
  plans_.clear();
  connecting_.clear();
  try {
    if (job.barrier) {
      Plan& plan = plans_.emplace_back();
      plan.comm = comm_;
      plan.deviceMemory = true;
      plan.scratchSource = arena_.get();
      appendBarrier(plan, comm_->rank(), comm_->nranks());
    } else {
      LOOM_TRY(group::buildPlans(job.calls, &plans_, arena_.get()));
    }
  } catch (const std::bad_alloc&) {
    return error(loomSystemError, "out of device memory for a call's scratch on device %d", comm_->device());
  }
  LOOM_TRY(checkCalls(plans_));
  std::set<int> needed;
  for (const Plan& plan : plans_) {
    for (const Step& s : plan.steps) {
      if (s.peer != Step::kNone && !peers_[static_cast<size_t>(s.peer)].connected.load(std::memory_order_acquire)) needed.insert(s.peer);
    }
  }
  connecting_.assign(needed.begin(), needed.end());
  return Status::ok();
}

Status DeviceCommImpl::connectOut() {
  const std::vector<PeerInfo>& info = comm_->bootstrap().peers();
  const PeerInfo& self = info[static_cast<size_t>(comm_->rank())];
  std::vector<int> remote;
  for (int p : connecting_) {
    PeerState& peer = peers_[static_cast<size_t>(p)];
    const PeerInfo& them = info[static_cast<size_t>(p)];
    peer.offHost = them.hostHash != self.hostHash;
    if (peer.offHost) {
      void* host = nullptr;
      void* device = nullptr;
      LOOM_TRY(runtime_->allocHostMapped(blockBytes(true), &host, &device));
      peer.hostBlock = static_cast<uint8_t*>(host);
      peer.block = static_cast<uint8_t*>(device);
      remote.push_back(p);
      continue;
    }
    SharedHandle handle;
    void* block = nullptr;
    LOOM_TRY(runtime_->allocShared(blockBytes(false), them.pid, &block, &handle));
    peer.block = static_cast<uint8_t*>(block);
    LOOM_TRY(comm_->bootstrap().send(p, kConnectTag, &handle, sizeof handle).withContext(
        format("device connection to rank %d", p)));
  }
  if (!remote.empty()) {
    LOOM_TRY(comm_->transport().connectOut(remote, Deadline::afterMs(comm_->config().timeoutMs)));
  }
  return Status::ok();
}

Status DeviceCommImpl::acceptIn() {
  const std::vector<PeerInfo>& info = comm_->bootstrap().peers();
  std::vector<int> remote;
  for (int p : connecting_) {
    if (peers_[static_cast<size_t>(p)].offHost) remote.push_back(p);
  }
  if (!remote.empty()) {
    LOOM_TRY(comm_->transport().acceptIn(remote, Deadline::afterMs(comm_->config().timeoutMs)));
    if (proxy_ == nullptr) proxy_ = std::make_unique<Proxy>(comm_->rank(), comm_->transport(), comm_->deviceCpus());
  }
  for (int p : connecting_) {
    PeerState& peer = peers_[static_cast<size_t>(p)];
    const PeerInfo& them = info[static_cast<size_t>(p)];
    if (!peer.offHost) {
      SharedHandle handle;
      LOOM_TRY(comm_->bootstrap().recv(p, kConnectTag, &handle, sizeof handle).withContext(
          format("device connection from rank %d", p)));
      void* mapped = nullptr;
      LOOM_TRY(runtime_->openShared(handle, p, &mapped));
      peer.peerBlock = static_cast<uint8_t*>(mapped);
      if (them.pid != ::getpid()) {
        peer.process.identify(them.pid, them.pidNamespace);
        const uint8_t mappedNotice = 1;
        LOOM_TRY(comm_->bootstrap().send(p, kConnectTag, &mappedNotice, sizeof mappedNotice).withContext(
            format("device connection to rank %d", p)));
      }
    }
    LOOM_TRY(fillConnections(p));
    if (peer.offHost) {
      for (int c = 0; c < channels_; ++c) {
        const size_t at = kBlockStatusBytes + static_cast<size_t>(c) * 2 * ChannelLayout::bytes(shape_);
        proxy_->add(p, c, shape_, peer.hostBlock + at, peer.hostBlock + at + ChannelLayout::bytes(shape_));
      }
    }
    peer.connected.store(true, std::memory_order_release);
    LOOM_INFO("comm %016llx rank %d: device connection to rank %d: %s, %d channel(s)",
              static_cast<unsigned long long>(comm_->commId()), comm_->rank(), p,
              peer.offHost ? "another host: local FIFOs bridged to sockets by the proxy thread"
              : them.pid == ::getpid() ? "same process: the peer's memory by address"
                                       : (std::strcmp(runtime_->name(), "cuda") == 0 ? "CUDA IPC" : "shared memory"),
              channels_);
  }
  // A process's block stays open to its peer until the peer has mapped it: a sender whose
  // call fits the FIFO may finish and destroy its communicator (removing the block's name)
  // before the receiver, just connected, has opened it. (A thread rank's block waits in the
  // process's handover table instead, which no wait here could replace: one thread may drive
  // both ranks.)
  for (int p : connecting_) {
    if (peers_[static_cast<size_t>(p)].offHost || info[static_cast<size_t>(p)].pid == ::getpid()) continue;
    uint8_t mappedNotice = 0;
    LOOM_TRY(comm_->bootstrap().recv(p, kConnectTag, &mappedNotice, sizeof mappedNotice).withContext(
        format("device connection from rank %d: waiting for it to map this rank's block", p)));
  }
  connecting_.clear();
  return Status::ok();
}

// Points the table's entries for `peer` at the FIFOs (fifo_layout.h): a same-host peer's
// receive side is in the receiver's block, head and llHead in the sender's; an off-host
// peer's channel c is two local regions, incoming then outgoing. The peer's entries (one run
// of the table: connIndex) then go to the kernel's copy.
Status DeviceCommImpl::fillConnections(int peer) {
  PeerState& p = peers_[static_cast<size_t>(peer)];
  const size_t channelBytes = ChannelLayout::bytes(shape_);
  for (int c = 0; c < channels_; ++c) {
    uint8_t *in, *out, *headsOut, *headsIn;
    if (p.offHost) {
      in = p.block + kBlockStatusBytes + static_cast<size_t>(c) * 2 * channelBytes;
      out = in + channelBytes;
      headsOut = out;  // the proxy moves the outgoing slots and frees them
      headsIn = in;    // the proxy reads what the kernel freed
    } else {
      in = p.block + kBlockStatusBytes + static_cast<size_t>(c) * channelBytes;
      out = p.peerBlock + kBlockStatusBytes + static_cast<size_t>(c) * channelBytes;
      headsOut = in;   // the peer frees this rank's slots in this rank's block
      headsIn = out;   // this rank frees the peer's slots in the peer's block
    }
    auto fill = [&](bool send, uint8_t* fifo, uint8_t* heads) {
      const int index = connIndex(peer, c, send);
      Connection& k = conns_[index];
      k.tail = reinterpret_cast<uint64_t*>(fifo + ChannelLayout::kTailAt);
      k.info = reinterpret_cast<SlotInfo*>(fifo + ChannelLayout::kInfoAt);
      k.data = fifo + ChannelLayout::dataAt(shape_);
      k.ll = reinterpret_cast<LLLine*>(fifo + ChannelLayout::llAt(shape_));
      k.head = reinterpret_cast<uint64_t*>(heads + ChannelLayout::kHeadAt);
      k.llHead = reinterpret_cast<uint64_t*>(heads + ChannelLayout::kLLHeadAt);
      k.counters = counters_ + 2 * static_cast<size_t>(index);
      k.peerStatus = p.offHost ? nullptr : reinterpret_cast<const uint32_t*>(p.peerBlock);
      k.ownStatus = p.offHost ? nullptr : reinterpret_cast<uint32_t*>(p.block);
      k.peer = peer;
      k.shape = shape_;
      k.ready = 1;
    };
    fill(true, out, headsOut);
    fill(false, in, headsIn);
  }
  const size_t first = static_cast<size_t>(connIndex(peer, 0, true)), count = static_cast<size_t>(channels_) * 2;
  return runtime_->copyToDevice(connsDevice_ + first, &conns_[first], count * sizeof(Connection));
}

// ---- Launching --------------------------------------------------------------------------------

Status DeviceCommImpl::addPlanSlot(size_t capacity) {
  PlanSlot s;
  s.capacity = capacity;
  void* host = nullptr;
  void* device = nullptr;
  LOOM_TRY(runtime_->allocHostMapped(s.capacity + 64, &host, &device));
  s.host = static_cast<uint8_t*>(host);
  s.device = static_cast<uint8_t*>(device);
  s.doneHost = reinterpret_cast<uint64_t*>(s.host + s.capacity);
  s.doneDevice = reinterpret_cast<uint64_t*>(s.device + s.capacity);
  slots_.push_back(s);
  return Status::ok();
}

// CUDA does not run a kernel launched after a device or pinned allocation (or a memset) beside
// one launched before it in the same context. A thread peer on this GPU whose kernel waits for
// this rank's next launch then waits until the timeout: what a communicator makes at creation
// (scratch, a plan slot, step flags) covers the usual calls, and a call that needs more says so.
void DeviceCommImpl::memoryMadeInCall(const char* what) {
  if (!threadPeerOnDevice_ || warnedMemoryInCall_) return;
  warnedMemoryInCall_ = true;
  LOOM_WARN("rank %d: a call on device %d needed %s beyond what the communicator made at creation, so it allocated "
            "memory while a peer that is a thread of this process may be waiting on the same GPU: its launch can be "
            "held until the timeout (docs/ARCHITECTURE.md, 'Thread ranks on one GPU')",
            comm_->rank(), comm_->device(), what);
}

Status DeviceCommImpl::placePlan(const std::vector<uint8_t>& plan, uint64_t id, LaunchArgs* args) {
  if (plan.size() <= kInlinePlanBytes) {
    std::memcpy(args->inlinePlan, plan.data(), plan.size());
    return Status::ok();
  }
  PlanSlot* slot = nullptr;
  for (PlanSlot& s : slots_) {
    const bool free = !s.kept && (s.id == 0 || __atomic_load_n(s.doneHost, __ATOMIC_ACQUIRE) == s.id);
    if (free && s.capacity >= plan.size()) {
      slot = &s;
      break;
    }
  }
  if (slot == nullptr) {
    LOOM_TRY(addPlanSlot(std::max(plan.size(), kPlanSlotBytes)));
    memoryMadeInCall("a slot for its plan");
    slot = &slots_.back();
  }
  std::memcpy(slot->host, plan.data(), plan.size());
  slot->id = id;
  args->plan = reinterpret_cast<const PlanHeader*>(slot->device);
  args->planDone = slot->doneDevice;
  return Status::ok();
}

void DeviceCommImpl::note(const Plan& plan, uint64_t id) {
  PlanNote n;
  n.calls = plan.calls;
  n.steps.reserve(plan.steps.size());
  for (size_t k = 0; k < plan.steps.size(); ++k) {
    const Step& s = plan.steps[k];
    n.steps.push_back({s.kind, s.peer, s.bytes, plan.callOf[k]});
  }
  std::lock_guard<std::mutex> lock(mutex_);
  notes_[id] = std::move(n);
  while (notes_.size() > kNotesKept) {
    auto oldest = std::find_if(notes_.begin(), notes_.end(), [](const auto& e) { return !e.second.kept; });
    if (oldest == notes_.end()) break;
    notes_.erase(oldest);
  }
}

Status DeviceCommImpl::launchPrepared(const DeviceJob& job) {
  for (Plan& plan : plans_) {
    const uint64_t id = ++nextPlanId_;
    ConnectionMap map;
    map.channels = channels_;
    map.workerBudget = blockBudget_;
    map.nranks = comm_->nranks();
    map.index = [this](int peer, int channel, bool send) { return connIndex(peer, channel, send); };
    map.offHost = [this](int peer) { return peers_[static_cast<size_t>(peer)].offHost; };
    std::vector<uint8_t> bytes;
    LOOM_TRY(lowerPlan(plan, id, map, &bytes));
    if (arena_->grewSinceAsked()) memoryMadeInCall("scratch for its plan");
    const PlanHeader& header = *reinterpret_cast<const PlanHeader*>(bytes.data());
    if (header.workers == 0) continue;  // nothing to do on this rank (count 0 alone)
    if (blockBudget_ > 0 && header.workers > static_cast<uint32_t>(blockBudget_)) {
      return error(loomInvalidUsage,
                   "this call's plan needs %u workers running at once, but with the ranks that share the device "
                   "each may have %d (its resident blocks divided among them); use fewer channels (LOOM_CHANNELS)",
                   header.workers, blockBudget_);
    }
    if (header.steps > stepFlagCapacity_) {
      // A larger table; the old one stays, as a captured graph may still use it.
      size_t capacity = stepFlagCapacity_;
      while (capacity < header.steps) capacity *= 2;
      void* flags = nullptr;
      void* arrivals = nullptr;
      LOOM_TRY(runtime_->allocDevice(capacity * sizeof(uint64_t), &flags));
      LOOM_TRY(runtime_->allocDevice(capacity * sizeof(uint32_t), &arrivals));
      stepFlags_ = static_cast<uint64_t*>(flags);
      localArrivals_ = static_cast<uint32_t*>(arrivals);
      stepFlagCapacity_ = capacity;
      memoryMadeInCall("step flags for its plan");
    }
    auto args = std::make_unique<LaunchArgs>();
    std::memset(args.get(), 0, sizeof(LaunchArgs));
    args->conns = connsDevice_;
    args->connCount = static_cast<uint32_t>(static_cast<size_t>(comm_->nranks()) * channels_ * 2);
    args->workers = header.workers;
    args->rank = comm_->rank();
    args->state = state_;
    args->stepFlags = stepFlags_;
    args->localArrivals = localArrivals_;
    args->control = controlDevice_;
    args->timeline = timeline_;
    LOOM_TRY(placePlan(bytes, id, args.get()));
    note(plan, id);
    LaunchStream stream{job.cudaStream, job.hostStream};
    bool captured = false;
    LOOM_TRY(runtime_->launch(*args, stream, &captured));
    if (captured) {
      // Replays run this plan again and again: its memory and its note stay.
      for (PlanSlot& s : slots_) {
        if (s.id == id) s.kept = true;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      notes_[id].kept = true;
    } else {
      ++uncapturedLaunches_;
    }
    LOOM_TRACE("comm %016llx: plan %llu: %u steps, %u workers, %s%s", static_cast<unsigned long long>(comm_->commId()),
               static_cast<unsigned long long>(id), header.steps, header.workers,
               args->plan == nullptr ? "in the kernel's parameter" : "in pinned memory",
               captured ? ", captured in a CUDA graph" : "");
  }
  // The watchdog watches more closely while launches run; waking it on every launch put a
  // futex call and a thread wakeup into each call of a loop, so only the first launch after
  // it went to its slow period wakes it.
  if (watchingSlowly_.exchange(false)) changed_.notify_all();
  return Status::ok();
}

Status DeviceCommImpl::finish(const DeviceJob& job) {
  LOOM_TRY(runtime_->finishLaunches(LaunchStream{job.cudaStream, job.hostStream}));
  if (job.cudaStream != nullptr || job.hostStream != nullptr || !hostStreams()) return Status::ok();
  LOOM_TRY(reportRecordedFailure());
  return comm_->usable();
}

// ---- Failures ---------------------------------------------------------------------------------

// What the worker that was stopped had waited for: the difference between a peer that never
// sent (a FIFO word short of its target) and a step of this rank that never ended tells a hang's
// cause apart. Piece numbers count from the connection's first.
std::string waitedFor(const ErrorRecord& e) {
  const auto target = static_cast<unsigned long long>(e.expected), seen = static_cast<unsigned long long>(e.got);
  std::string text;
  switch (e.waitKind) {
    case kWaitPiece:
      text = format("; it waited for piece %llu from rank %d, and %llu had arrived", target, e.peer, seen);
      break;
    case kWaitSlot:
      text = format("; it waited for rank %d to take piece %llu to free a slot, and it had taken %llu", e.peer, target,
                    seen);
      break;
    case kWaitLine: text = format("; it waited for low-latency piece %llu from rank %d", target, e.peer); break;
    case kWaitStep: text = format("; it waited for this rank's step %u to finish", e.waitStep); break;
    default: break;
  }
  if (e.workersStarted < e.workers) {
    text += format("; only %u of the launch's %u workers (thread blocks) had started", e.workersStarted, e.workers);
  }
  return text;
}

Status DeviceCommImpl::statusOf(const ErrorRecord& e, uint32_t abortReason) {
  std::string where = format("device plan %llu", static_cast<unsigned long long>(e.plan));
  CallInfo call;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = notes_.find(e.plan);
    if (it != notes_.end() && e.step < it->second.steps.size()) {
      const PlanNote::StepNote& s = it->second.steps[e.step];
      call = it->second.calls[s.call];
      known = true;
      where = format("%s: step %u (%s)", call.describeNumbered().c_str(), e.step, stepWords(s).c_str());
    }
  }
  switch (e.kind) {
    case kWrongHeader:
      if (known) return checkCallInfo(e.header, call, e.peer).withContext(where);
      return error(loomInvalidUsage, "%s: rank %d called a different collective (mismatched calls)", where.c_str(),
                   e.peer);
    case kWrongBytes:
      return error(loomInvalidUsage, "%s: rank %d sent a piece of %llu bytes where this rank expects %llu (mismatched calls)",
                   where.c_str(), e.peer, static_cast<unsigned long long>(e.got),
                   static_cast<unsigned long long>(e.expected));
    case kOutOfStep:
      return error(loomInvalidUsage, "%s: rank %d's messages are out of step with this rank's (a call differs)",
                   where.c_str(), e.peer);
    case kPeerFailed: {
      const int cause = static_cast<int>(e.got) - 1;
      // A peer that failed on its own (it found mismatched calls, timed out or was aborted)
      // names itself; its own error says which.
      return error(loomRemoteError, "%s: rank %d gave up%s", where.c_str(), e.peer,
                   cause != e.peer ? format(" because rank %d failed", cause).c_str()
                                   : " (it failed itself: mismatched calls, a timeout or an abort there; its error says "
                                     "which)");
    }
    default: break;
  }
  const std::string waiting = e.kind == kStopped ? waitedFor(e) : std::string();
  switch (abortReason) {
    case kAbortedTimeout:
      return error(loomTimeout, "%s: timed out after %lld ms without progress (timeoutMs, LOOM_TIMEOUT_MS)%s",
                   where.c_str(), static_cast<long long>(comm_->config().timeoutMs), waiting.c_str());
    case kAbortedPeerGone: {
      const int peer = __atomic_load_n(&control_->abortPeer, __ATOMIC_ACQUIRE);
      return error(loomRemoteError, "%s: rank %d is gone (its process exited or its connection closed)%s",
                   where.c_str(), peer, waiting.c_str());
    }
    default: {
      // loomCommAbort, loomCommRevoke or LOOM_SHRINK_ABORT: the communicator says which.
      const Status why = comm_->cancelReason();
      return error(why.code(), "%s: %s%s", where.c_str(), why.message().c_str(), waiting.c_str());
    }
  }
}

Status DeviceCommImpl::reportRecordedFailure() {
  const ErrorRecord& e = control_->error;
  if (__atomic_load_n(&e.complete, __ATOMIC_ACQUIRE) == 0) return Status::ok();
  ErrorRecord copy;
  std::memcpy(&copy, &e, sizeof copy);
  Status s = statusOf(copy, __atomic_load_n(&control_->abort, __ATOMIC_ACQUIRE));
  // Before anything else (the communicator keeps the first failure): a caller that finds the
  // record reported by the watchdog must also find the communicator failed.
  comm_->fail(s);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (reported_) return s;
    reported_ = true;
  }
  LOOM_WARN("rank %d: a call on device %d failed: %s", comm_->rank(), comm_->device(), s.message().c_str());
  comm_->setLastError(s.message());
  return s;
}

// The rank whose failure started this rank's, as a failing kernel names it to the peers
// (worker_context.h): the status words publishFailure writes must say the same, or a peer
// that reads them after this store learns only that this rank gave up, not why.
int DeviceCommImpl::failureCause() const {
  const ErrorRecord& e = control_->error;
  if (__atomic_load_n(&e.complete, __ATOMIC_ACQUIRE) != 0) {
    if (e.kind == kPeerFailed) return static_cast<int>(e.got) - 1;
    if (e.kind == kStopped && __atomic_load_n(&control_->abort, __ATOMIC_ACQUIRE) == kAbortedPeerGone) {
      return __atomic_load_n(&control_->abortPeer, __ATOMIC_ACQUIRE);
    }
  }
  return comm_->rank();
}

// The communicator failed outside a kernel (a failed connection, an abort), or a kernel
// failed: running kernels stop, and peers waiting on this rank learn it from its status words.
void DeviceCommImpl::publishFailure() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (published_) return;
    published_ = true;
  }
  stopRunningKernels(kAbortedFailure, -1);
  const uint32_t status = static_cast<uint32_t>(failureCause()) + 1;
  for (PeerState& p : peers_) {
    if (p.connected.load(std::memory_order_acquire) && !p.offHost) {
      Status s = runtime_->writeWord(reinterpret_cast<uint32_t*>(p.block), status);
      if (!s.isOk()) LOOM_WARN("rank %d: telling peers of a failure: %s", comm_->rank(), s.message().c_str());
    }
  }
}

// The watchdog: looks closely (every 2 ms) while launches run, rarely otherwise (graph replays
// start without the host knowing).
void DeviceCommImpl::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    const bool busy = launchesOutstanding();
    watchingSlowly_.store(!busy);
    changed_.wait_for(lock, busy ? std::chrono::milliseconds(2) : std::chrono::milliseconds(100));
    if (stopping_) return;
    lock.unlock();
    inspect(Clock::now());
    lock.lock();
  }
}

// A launch that was queued has started. Said after the fact too when it was held back over
// half the timeout: its peers may have timed out waiting, and its own stream is where the
// cause sits.
void DeviceCommImpl::endQueued(Clock::time_point now) {
  if (queuedSince_ == Clock::time_point()) return;
  const auto held = std::chrono::duration_cast<std::chrono::milliseconds>(now - queuedSince_);
  queuedSince_ = Clock::time_point();
  if (held.count() <= comm_->config().timeoutMs / 2) return;
  LOOM_WARN("rank %d: a launch on device %d started up to %lld ms after it was made: its stream held earlier work "
            "that long (with ranks that are threads of one process on one GPU: docs/ARCHITECTURE.md, 'Thread ranks "
            "on one GPU')",
            comm_->rank(), comm_->device(), static_cast<long long>(held.count()));
}

void DeviceCommImpl::inspect(Clock::time_point now) {
  static_cast<void>(reportRecordedFailure());
  if (!comm_->usable().isOk()) publishFailure();
  // A launch that runs past the timeout is stopped; so is one whose peer process is gone.
  const uint64_t started = __atomic_load_n(&control_->started, __ATOMIC_ACQUIRE);
  const uint64_t completed = __atomic_load_n(&control_->completed, __ATOMIC_ACQUIRE);
  if (started <= completed) {
    watched_ = 0;
    // A launch made but not started is never timed (its workers set `started`): say so, or a
    // rank whose launch waits behind other work on the device is silent while peers time out.
    if (__atomic_load_n(&control_->hostLaunches, __ATOMIC_ACQUIRE) >= uncapturedLaunches_.load()) {
      endQueued(now);  // it started and ended between two looks
      queuedWarned_ = false;
    } else if (queuedSince_ == Clock::time_point()) {
      queuedSince_ = now;
    } else if (!queuedWarned_ && now - queuedSince_ > std::chrono::milliseconds(comm_->config().timeoutMs)) {
      queuedWarned_ = true;
      LOOM_WARN("rank %d: a launch on device %d has not started %lld ms after it was made: its stream waits for "
                "earlier work there (or, with ranks sharing the device, for work that waits for this rank)",
                comm_->rank(), comm_->device(), static_cast<long long>(comm_->config().timeoutMs));
    }
    return;
  }
  endQueued(now);
  if (started != watched_) {
    watched_ = started;
    watchedSince_ = now;
  }
  if (now - watchedSince_ > std::chrono::milliseconds(comm_->config().timeoutMs)) {
    stopRunningKernels(kAbortedTimeout, -1);
  }
  if (now - lastPeerCheck_ > std::chrono::milliseconds(100)) {
    lastPeerCheck_ = now;
    int gone = -1;
    for (size_t p = 0; p < peers_.size() && gone < 0; ++p) {
      const PeerState& peer = peers_[p];
      if (peer.connected.load(std::memory_order_acquire) && peer.process.identified() && !peer.process.alive()) {
        gone = static_cast<int>(p);
      }
    }
    if (gone < 0 && proxy_ != nullptr) gone = proxy_->failedPeer();
    if (gone >= 0 && goneSince_ == Clock::time_point()) {
      goneSince_ = now;
      firstGone_ = gone;
    }
    // A peer that did its part and left (its process exited, its sockets closed) fails nothing:
    // what it sent is already here. Only a launch still running a while after it went, or
    // after it started, waits for the peer in vain. The one named is the first seen gone: the
    // others may have left since, having failed because of it.
    if (gone >= 0 && now - std::max(goneSince_, watchedSince_) >= kPeerGoneGrace) {
      stopRunningKernels(kAbortedPeerGone, firstGone_);
    }
  }
}

}  // namespace

Status DeviceComm::create(Communicator* comm, std::unique_ptr<DeviceComm>* out) {
  auto impl = std::make_unique<DeviceCommImpl>(comm);
  LOOM_TRY(impl->init());
  *out = std::move(impl);
  return Status::ok();
}

Status launchDeviceJobs(std::vector<DeviceJob>& jobs) {
  // In address order, so that two groups over the same communicators cannot deadlock.
  std::vector<DeviceComm*> comms;
  for (DeviceJob& job : jobs) comms.push_back(&job.comm->deviceComm());
  std::vector<size_t> order(jobs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return comms[a] < comms[b]; });
  std::vector<std::unique_lock<std::mutex>> locks;
  for (size_t i : order) locks.emplace_back(comms[i]->launchLock());
  // A connection's wait that the cancel signal ended (bootstrap, sockets) knows no reason; the
  // communicator does.
  auto why = [&](size_t i, const Status& s) {
    Communicator& comm = *jobs[i].comm;
    return !s.isOk() && comm.cancelled() ? comm.cancelReason().withContext("connecting its device FIFOs") : s;
  };
  for (size_t i = 0; i < jobs.size(); ++i) LOOM_TRY(why(i, comms[i]->prepare(jobs[i])));
  for (size_t i = 0; i < jobs.size(); ++i) LOOM_TRY(why(i, comms[i]->connectOut()));
  for (size_t i = 0; i < jobs.size(); ++i) LOOM_TRY(why(i, comms[i]->acceptIn()));
  for (size_t i = 0; i < jobs.size(); ++i) LOOM_TRY(comms[i]->launchPrepared(jobs[i]));
  Status first;
  for (size_t i = 0; i < jobs.size(); ++i) {
    Status s = comms[i]->finish(jobs[i]);
    if (first.isOk()) first = s;
  }
  return first;
}

}  // namespace loom
