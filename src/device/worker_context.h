// What every piece of a worker's code needs beside its memory-ordering policy: which launch,
// worker and step it is running, how it waits, and how it reports a failure.
//
// The policy W (host_worker.h for the CPU emulation, cuda_worker.cuh on the GPU) supplies the
// threads of a worker, their barriers, and loads and stores with the ordering the protocol
// needs:
//   thread(), threads()           this thread's index in the worker, and how many there are
//   sync(), syncAny(bool)         barrier; barrier that tells every thread whether any said true
//   acquire(p), acquire32(p)      load-acquire, visible across devices and processes
//   release(p, v), release32      store-release; callers sync() first, so that every thread's
//                                 earlier writes are published with it
//   acquireLocal, releaseLocal    the same for words only this rank's kernel uses (device scope)
//   fence(), publish(p, v)        a release fence, then stores it orders (several words, one fence)
//   fenceLocal()                  a fence for words only this rank's kernel reads (device scope)
//   fetchAdd32(p, v), cas32(p, e, v)  atomics on device memory (never on host memory)
//   storeLine / loadLine          a low-latency line (fifo.h)
//   load<U>, loadFresh<U>, store<U>  aligned data moves; loadFresh for memory a peer rewrites
//   pause(spins)                  between two looks at a word that has not changed yet
//   now()                         a clock in ns, the same for every worker (wait deadlines,
//                                 LOOM_DEVICE_TIMELINE)
//   kChecksEvery                  looks between two checks of the abort word (a power of two)
#pragma once

#include <cstdint>

#include "device/fifo_layout.h"
#include "device/plan_format.h"
#include "kernels/hd.h"

namespace loom::device {

// What a waiting worker waits for, so that a wait given up can say (ErrorRecord).
struct Wait {
  uint32_t kind;  // WaitKind
  uint32_t step;  // kWaitStep: which
};

template <class W>
struct Ctx {
  W& w;
  const LaunchArgs& args;
  uint64_t launch;   // this launch's number
  uint32_t worker;
  uint32_t step = 0;  // the step running now
  int32_t peer = -1;  // its peer (-1: a local step)
  uint32_t part = 0, parts = 1;  // this worker's share of each step (WorkerRange)

  // Records the first failure of the rank (any thread may call; the first caller wins), then
  // stops this rank's other workers and tells peers this rank failed.
  LOOM_HD_CALLED void fail(uint32_t kind, uint64_t expected, uint64_t got, const uint8_t* header,
                           Wait wait = {kWaitUnknown, 0}) const {
    Control* control = args.control;
    if (w.cas32(&args.state->failureClaim, 0, 1) == 0) {
      ErrorRecord& e = control->error;
      e.kind = kind;
      e.waitKind = wait.kind;
      e.waitStep = wait.step;
      e.workersStarted = w.acquire32(&args.state->workersStarted);
      e.workers = args.workers;
      e.step = step;
      e.plan = args.view().header->id;
      e.peer = peer;
      e.worker = worker;
      e.launch = launch;
      e.expected = expected;
      e.got = got;
      for (int i = 0; i < 24; ++i) e.header[i] = header != nullptr ? header[i] : 0;
      w.release32(&e.complete, 1);
    }
    w.release32(&args.state->stopped, 1);
    // Peers waiting on this rank stop too, and name the rank whose failure started it all.
    int32_t cause = args.rank;
    if (kind == kPeerFailed) cause = static_cast<int32_t>(got) - 1;
    if (kind == kStopped && w.acquire32(&control->abort) == kAbortedPeerGone) {
      cause = static_cast<int32_t>(w.acquire32(reinterpret_cast<const uint32_t*>(&control->abortPeer)));
    }
    // Every peer watches its own copy of this rank's status (a rare path: a plain loop).
    for (uint32_t i = 0; i < args.connCount; ++i) {
      const Connection& c = args.conns[i];
      if (c.ready != 0 && c.ownStatus != nullptr) w.cas32(c.ownStatus, 0, static_cast<uint32_t>(cause) + 1);
    }
  }

  // Whether the worker must give up its wait for `wait` (the word's target and last value):
  // the rank was stopped, the peer failed, or the wait saw nothing move for waitTimeoutNs.
  // *since is the wait's clock, 0 until this first look (kChecksEvery turns in, so a wait that
  // ends sooner never reads the clock). timeoutMs bounds every wait, as on the host, not a
  // launch: a large call on a slow link may run longer while it moves. A wait for this rank's
  // own step is left to the worker running that step, which times out itself if it is stuck,
  // unless some of the launch's workers never started (that step may be theirs).
  LOOM_HD bool mustStop(const uint32_t* peerStatus, Wait wait, uint64_t target, uint64_t seen, uint64_t* since) const {
    if (w.acquire32(&args.control->abort) != kRunning || w.acquire32(&args.state->stopped) != 0) {
      fail(kStopped, target, seen, nullptr, wait);
      return true;
    }
    if (peerStatus != nullptr) {
      const uint32_t status = w.acquire32(peerStatus);
      if (status != 0) {
        fail(kPeerFailed, 0, status, nullptr);
        return true;
      }
    }
    if (args.waitTimeoutNs == 0) return false;
    if (wait.kind == kWaitStep && w.acquire32(&args.state->workersStarted) >= args.workers) return false;
    const uint64_t now = w.now();
    if (*since == 0) {
      *since = now;
    } else if (now - *since > args.waitTimeoutNs) {
      fail(kTimedOut, target, seen, nullptr, wait);
      return true;
    }
    return false;
  }
};

// Thread 0 waits until *word >= target, looking at the abort word and at the peer's status
// every so often. Returns false on every thread of the worker when the wait was given up.
// A step flag (kWaitStep) is a word only this rank's kernel writes.
template <class W>
LOOM_HD_CALLED bool waitAtLeast(const Ctx<W>& ctx, const uint64_t* word, uint64_t target, const uint32_t* peerStatus,
                                Wait wait) {
  W& w = ctx.w;
  const bool local = wait.kind == kWaitStep;
  bool stop = false;
  if (w.thread() == 0) {
    uint64_t seen, since = 0;
    for (uint32_t spins = 1; (seen = local ? w.acquireLocal(word) : w.acquire(word)) < target; ++spins) {
      if ((spins & (W::kChecksEvery - 1)) == 0 && ctx.mustStop(peerStatus, wait, target, seen, &since)) {
        stop = true;
        break;
      }
      w.pause(spins);
    }
  }
  return !w.syncAny(stop);
}

}  // namespace loom::device
