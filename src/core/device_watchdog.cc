// The device executor's watchdog: timeouts, dead peers, the failures kernels record, and the
// logs that explain a hang (device_comm_impl.h).
#include <algorithm>

#include "base/log.h"
#include "core/call_check.h"
#include "core/communicator.h"
#include "core/device_comm_impl.h"

namespace loom::device_comm {

namespace {

// How long a launch may still run after a peer went away before the watchdog stops it.
constexpr std::chrono::milliseconds kPeerGoneGrace(1000);

// "receiving 4000 bytes from rank 1", "a local copy".
std::string stepWords(const PlanNote::StepNote& s) {
  if (s.peer < 0) return "a local copy";
  const bool send = s.kind == Step::Kind::kSend;
  return format("%s %zu bytes %s rank %d", send ? "sending" : s.kind == Step::Kind::kCopy ? "copying" : "receiving",
                s.bytes, send ? "to" : "from", s.peer);
}

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

}  // namespace

// Every connection's counters as the kernels left them, beside the FIFO words they wait on:
// what the peer says it took of this rank's pieces (head, llHead) and what the next low-latency
// slot to read holds (its first line's flags, which the piece's number + 1 must be). The two
// ends of a connection that disagree explain a hang.
void DeviceCommImpl::logCounters() {
  std::vector<uint64_t> counters(conns_.size() * 2);
  if (!runtime_->copyToHost(counters.data(), counters_, counters.size() * sizeof(uint64_t)).isOk()) return;
  auto word = [&](const uint64_t* at) {
    uint64_t v = 0;
    return at != nullptr && runtime_->copyToHost(&v, at, sizeof v).isOk() ? static_cast<unsigned long long>(v) : 0ull;
  };
  std::string text;
  for (int p = 0; p < comm_->nranks(); ++p) {
    for (int c = 0; c < channels_; ++c) {
      const Connection& out = conns_[static_cast<size_t>(connIndex(p, c, true))];
      const Connection& in = conns_[static_cast<size_t>(connIndex(p, c, false))];
      const uint64_t* sent = &counters[2 * static_cast<size_t>(connIndex(p, c, true))];
      const uint64_t* taken = &counters[2 * static_cast<size_t>(connIndex(p, c, false))];
      if (sent[0] + sent[1] + taken[0] + taken[1] == 0 || in.ready == 0) continue;
      LLLine next{};
      const LLLine* nextAt = in.ll + (taken[1] % in.shape.llSlots) * in.shape.llLines;
      (void)runtime_->copyToHost(&next, nextAt, sizeof next);
      text += format(" %d/%d: %llu+%llu sent (peer took %llu+%llu), %llu+%llu taken (tail %llu, next line flags "
                     "%u/%u);",
                     p, c, static_cast<unsigned long long>(sent[0]), static_cast<unsigned long long>(sent[1]),
                     word(out.head), word(out.llHead), static_cast<unsigned long long>(taken[0]),
                     static_cast<unsigned long long>(taken[1]), word(in.tail), next.flag0, next.flag1);
    }
  }
  LOOM_TRACE("comm %016llx rank %d: FIFO pieces at the end (peer/channel: simple+low-latency):%s",
             static_cast<unsigned long long>(comm_->commId()), comm_->rank(), text.c_str());
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
      return error(loomInvalidUsage,
                   "%s: rank %d sent a piece of %llu bytes where this rank expects %llu (mismatched calls)",
                   where.c_str(), e.peer, static_cast<unsigned long long>(e.got),
                   static_cast<unsigned long long>(e.expected));
    case kOutOfStep:
      return error(loomInvalidUsage, "%s: rank %d's messages are out of step with this rank's (a call differs)",
                   where.c_str(), e.peer);
    case kPeerFailed: {
      const int cause = static_cast<int>(e.got) - 1;
      // A peer that failed on its own (it found mismatched calls, timed out or was aborted)
      // names itself; its own error says which.
      const std::string why = cause != e.peer ? format(" because rank %d failed", cause)
                                              : " (it failed itself: mismatched calls, a timeout or an abort there; "
                                                "its error says which)";
      return error(loomRemoteError, "%s: rank %d gave up%s", where.c_str(), e.peer, why.c_str());
    }
    case kTimedOut:
      return error(loomTimeout, "%s: timed out after %lld ms without progress (timeoutMs, LOOM_TIMEOUT_MS)%s",
                   where.c_str(), static_cast<long long>(comm_->config().timeoutMs), waitedFor(e).c_str());
    default: break;
  }
  const std::string waiting = waitedFor(e);
  switch (abortReason) {
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
// failed: running kernels stop, and peers waiting on this rank learn it from its status words,
// or (peers on other hosts) from its failure notice over the watchdog's channel.
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
  if (watchNotices_ == nullptr) return;
  const int cause = failureCause();
  const uint64_t seq = failureSeq();
  std::lock_guard<std::mutex> telling(agreementMutex_);
  watchNotices_->tellPeers(cause != comm_->rank() ? cause : -1, seq);
}

void DeviceCommImpl::fail(const Status& s) {
  comm_->fail(s);
  publishFailure();
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

// As the host executor heeds a notice (Run::noticeConcerning): every rank takes part in a
// collective, so a rank that gave up in one of the launch's collectives or before will not
// finish it, and one that gave up later finished its part; a launch of messages alone heeds
// the ranks it exchanges them with.
Status DeviceCommImpl::heardFailure() {
  watchNotices_->listen();
  auto talksTo = [this](int rank) {
    return std::find(comparedPeers_.begin(), comparedPeers_.end(), rank) != comparedPeers_.end();
  };
  int cause = -1;
  const int from = watchNotices_->first(
      [&](int peer, int named, uint64_t seq) {
        if (comparedLast_ != 0) return seq == 0 || seq <= comparedLast_;
        return talksTo(peer) || (named >= 0 && talksTo(named));
      },
      &cause);
  if (from < 0) return Status::ok();
  return cause >= 0 ? error(loomRemoteError, "rank %d gave up because rank %d failed (its failure notice)", from,
                            cause)
                    : error(loomRemoteError, "rank %d gave up (its failure notice: mismatched calls, a timeout or "
                            "an abort there; its error says which)", from);
}

uint64_t DeviceCommImpl::failureSeq() {
  const uint64_t started = __atomic_load_n(&control_->started, __ATOMIC_ACQUIRE);
  if (started > __atomic_load_n(&control_->completed, __ATOMIC_ACQUIRE)) {
    const uint64_t plan = __atomic_load_n(&control_->startedPlan, __ATOMIC_ACQUIRE);
    std::lock_guard<std::mutex> lock(mutex_);
    auto note = notes_.find(plan);
    if (note == notes_.end()) return 0;
    return note->second.firstSeq != 0 ? note->second.firstSeq : note->second.seqBefore + 1;
  }
  // Launches made but not started: which comes first is the stream's to say.
  if (launchesOutstanding()) return 0;
  return launchedSeq_.load() + 1;
}

// Launches that wait for each other in calls that differ (each rank the root of a reduce)
// send nothing a kernel could compare: once the running launch has gone on a while, its
// collectives are walked with the peers' on the board, or over the watchdog's channel
// (group_agreement.h), and a mismatch fails the communicator, which stops the kernel and tells
// the peers. Over the channel come the peers' failure notices too (heardFailure).
void DeviceCommImpl::compareRunningCalls(Clock::time_point now) {
  const bool compared = comm_->board() != nullptr || watchAnnouncements_ != nullptr;
  if (!compared || now - watchedSince_ < GroupAgreement::kLookAfter) return;
  // The kernel writes the plan before the launch's number; a later launch that started since
  // is looked at next time.
  const uint64_t plan = __atomic_load_n(&control_->startedPlan, __ATOMIC_ACQUIRE);
  if (__atomic_load_n(&control_->started, __ATOMIC_ACQUIRE) != watched_) return;
  Status s;
  {
    std::lock_guard<std::mutex> walking(agreementMutex_);
    if (watched_ != comparedLaunch_ || plan != comparedPlan_) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto note = notes_.find(plan);
      if (note == notes_.end()) return;
      std::vector<int> peers;
      for (const PlanNote::StepNote& step : note->second.steps) {
        if (step.peer >= 0 && std::find(peers.begin(), peers.end(), step.peer) == peers.end()) {
          peers.push_back(step.peer);
        }
      }
      runningAgreement_.reset(note->second.calls, peers);
      comparedPeers_ = std::move(peers);
      comparedLast_ = note->second.lastSeq;
      comparedLaunch_ = watched_;
      comparedPlan_ = plan;
    }
    s = runningAgreement_.look(*comm_, watchAnnouncements_.get());
    if (s.isOk() && watchNotices_ != nullptr) s = heardFailure();
  }
  if (!s.isOk()) fail(s);
}

void DeviceCommImpl::inspect(Clock::time_point now) {
  static_cast<void>(reportRecordedFailure());
  if (!comm_->usable().isOk()) publishFailure();
  // A launch whose peer process is gone is stopped (its kernel times out its own waits).
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
  compareRunningCalls(now);
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

}  // namespace loom::device_comm
