// The device executor: lowered plans launched on the caller's stream (device_comm_impl.h).
#include <algorithm>

#include "base/log.h"
#include "core/communicator.h"
#include "core/device_comm_impl.h"
#include "device/plan_lowering.h"

namespace loom::device_comm {

namespace {
constexpr size_t kNotesKept = 256;  // descriptions of recent plans, for error messages
}  // namespace

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
  n.calls.assign(plan.calls.begin(), plan.calls.end());
  const auto [first, last] = plan.collectiveSeqs();
  n.firstSeq = first;
  n.lastSeq = last;
  n.seqBefore = launchedSeq_.load();
  if (last > n.seqBefore) launchedSeq_.store(last);
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
    args->waitTimeoutNs = static_cast<uint64_t>(comm_->config().timeoutMs) * 1000000;
    args->planId = id;
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

}  // namespace loom::device_comm
