// The device executor: creation, the block budget, destruction (device_comm.h;
// device_comm_impl.h says where the rest lives).
#include "core/device_comm.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "base/env.h"
#include "base/log.h"
#include "core/communicator.h"
#include "core/device_comm_impl.h"
#include "core/registry.h"
#include "device/fifo_layout.h"

namespace loom {

long long cudaHardwareQueues() {
  long long queues = 8;
  if (!env::getInt("CUDA_DEVICE_MAX_CONNECTIONS", 1, 32, &queues).isOk()) queues = 8;
  return queues;
}

namespace device_comm {

namespace {
constexpr uint32_t kFirstStepFlags = 4096;
constexpr size_t kFirstScratchBytes = size_t{16} << 20;  // a call's parked receives, made at creation
}  // namespace

Status DeviceCommImpl::init() {
  const CommConfig& config = comm_->config();
  Registry& registry = Registry::instance();
  LOOM_TRY(makeRuntime(comm_->device(), config.deviceEmulation, registry.emulatedDeviceBlocks(),
                       registry.deviceHandover(), &runtime_));
  peers_ = std::vector<PeerState>(static_cast<size_t>(comm_->nranks()));
  LOOM_TRY(agreeOnDevices());
  LOOM_TRY(openWatchChannel());
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
  // FIFOs in pinned host memory (GPUs without peer access) take 18 MiB per peer over 32 channels
  // where device memory takes 138 (4 MiB simple and 256 KiB low-latency a channel): a host of 8
  // GPUs would pin 7.7 GB for an all-to-all. PCIe, not the slot count, bounds that path: 8
  // slots of 64 KiB keep 512 KiB a channel in flight.
  hostShape_ = shape_;
  hostShape_.slotBytes = std::min<uint32_t>(shape_.slotBytes, 64 << 10);
  hostShape_.llLines = kLLControlLines + 512;
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

// Launches that wait for each other in calls that differ are compared on the board
// (group_agreement.h); where there is none (ranks on several hosts, or no shared memory), over
// a bootstrap channel of the watchdog's own, made here while every rank creates the
// communicator: the communicator's channel serves the thread that makes its calls.
Status DeviceCommImpl::openWatchChannel() {
  if (comm_->board() != nullptr || comm_->nranks() < 2) return Status::ok();
  Bootstrap& bootstrap = comm_->bootstrap();
  Acceptor listener;
  LOOM_TRY(Bootstrap::listen(bootstrap.secret(), bootstrap.address(), &listener));
  constexpr size_t kBytes = SocketAddress::kWireBytes;
  std::vector<uint8_t> addresses(kBytes * static_cast<size_t>(comm_->nranks()));
  listener.address().toWire(&addresses[kBytes * static_cast<size_t>(comm_->rank())]);
  LOOM_TRY(bootstrap.allGather(addresses.data(), kBytes).withContext("device watchdog channel exchange"));
  std::vector<PeerInfo> peers = bootstrap.peers();
  for (size_t r = 0; r < peers.size(); ++r) {
    LOOM_TRY(SocketAddress::fromWire(&addresses[kBytes * r], &peers[r].bootstrapAddress));
  }
  // No cancel signal: an aborted communicator still tells its peers that it gave up (its waits
  // are bounded by their deadlines).
  LOOM_TRY(Bootstrap::fromPeers(std::move(listener), bootstrap.secret(), comm_->commId(), comm_->rank(),
                                std::move(peers), -1, &watchChannel_));
  watchAnnouncements_ = std::make_unique<RemoteAnnouncements>(*watchChannel_);
  watchNotices_ = std::make_unique<FailureNotices>(*watchChannel_);
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
// across processes: under MPS their blocks share the SMs). The same exchange says, for each
// peer of this host, whether its device reaches this one's memory: where it does not (GPUs
// without peer access, or LOOM_P2P_DISABLE), this rank's FIFOs for it go in pinned host memory.
Status DeviceCommImpl::agreeOnDevices() {
  struct Entry {
    uint64_t hostHash;
    char deviceKey[56];  // a PCI bus id, NUL-terminated
    int32_t residentBlocks;
    int32_t unused;
  };
  const std::vector<PeerInfo>& peers = comm_->bootstrap().peers();
  std::vector<Entry> all(static_cast<size_t>(comm_->nranks()));
  Entry& own = all[static_cast<size_t>(comm_->rank())];
  own.hostHash = peers[static_cast<size_t>(comm_->rank())].hostHash;
  const std::string key = runtime_->deviceKey();
  std::snprintf(own.deviceKey, sizeof own.deviceKey, "%s", key.c_str());
  own.residentBlocks = runtime_->residentBlocks();
  LOOM_TRY(comm_->bootstrap().allGather(all.data(), sizeof(Entry)).withContext("device residency exchange"));
  auto sameDevice = [](const Entry& a, const Entry& b) {
    return a.hostHash == b.hostHash && std::strncmp(a.deviceKey, b.deviceKey, sizeof a.deviceKey) == 0;
  };
  int sharersOfMine = 0;
  for (const Entry& e : all) {
    if (e.residentBlocks <= 0) continue;
    int sharers = 0;
    for (const Entry& o : all) sharers += sameDevice(o, e);
    const int budget = std::max(1, e.residentBlocks / sharers);
    blockBudget_ = blockBudget_ == 0 ? budget : std::min(blockBudget_, budget);
    if (&e == &own) sharersOfMine = sharers;
  }
  long long p2pDisabled = 0;
  LOOM_TRY(env::getInt("LOOM_P2P_DISABLE", 0, 1, &p2pDisabled));
  int threadRanks = 0, firstThreadRank = -1;  // ranks of this process on this device, this one too
  for (size_t p = 0; p < all.size(); ++p) {
    if (all[p].hostHash == own.hostHash && static_cast<int>(p) != comm_->rank()) {
      const std::string peerKey(all[p].deviceKey, strnlen(all[p].deviceKey, sizeof all[p].deviceKey));
      peers_[p].hostFifo = p2pDisabled != 0 || !runtime_->reachedFrom(peerKey);
    }
    if (!sameDevice(all[p], own) || !sameProcess(peers[p], peers[static_cast<size_t>(comm_->rank())])) continue;
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
         __atomic_load_n(&control_->started, __ATOMIC_ACQUIRE) >
             __atomic_load_n(&control_->completed, __ATOMIC_ACQUIRE);
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
      // A communicator aborted, or failed, between launches: the watchdog may not have looked
      // since, and peers waiting on this rank must learn it from its status words before they go.
      if (!comm_->usable().isOk()) publishFailure();
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

}  // namespace device_comm

Status DeviceComm::create(Communicator* comm, std::unique_ptr<DeviceComm>* out) {
  auto impl = std::make_unique<device_comm::DeviceCommImpl>(comm);
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
  // A failure while connecting fails every communicator of the group, as the host executor's
  // does: peers wait for this rank's launches on each.
  auto connected = [&](size_t i, const Status& s) {
    const Status reason = why(i, s);
    if (reason.isOk()) return reason;
    for (size_t j = 0; j < jobs.size(); ++j) {
      comms[j]->fail(j == i ? reason : reason.withContext("another communicator of this group failed"));
    }
    return reason;
  };
  for (size_t i = 0; i < jobs.size(); ++i) LOOM_TRY(why(i, comms[i]->prepare(jobs[i])));
  for (size_t i = 0; i < jobs.size(); ++i) LOOM_TRY(connected(i, comms[i]->connectOut()));
  for (size_t i = 0; i < jobs.size(); ++i) LOOM_TRY(connected(i, comms[i]->acceptIn()));
  for (size_t i = 0; i < jobs.size(); ++i) LOOM_TRY(comms[i]->launchPrepared(jobs[i]));
  Status first;
  for (size_t i = 0; i < jobs.size(); ++i) {
    Status s = comms[i]->finish(jobs[i]);
    if (first.isOk()) first = s;
  }
  return first;
}

}  // namespace loom
