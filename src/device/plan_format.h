// What the plan kernel reads: one rank's plan for one launch (a lone call or a group's calls
// on one communicator), flattened into plain structs that the host writes and the kernel
// (or its CPU emulation) reads, plus the communicator's state the kernel keeps between
// launches and the control block through which the host stops it and it reports failures.
//
//   PlanHeader | DeviceCall x calls | DeviceStep x steps | WorkerRange x workers | order
//
// Offsets are from the header, so a plan can be copied anywhere: small plans travel inside the
// kernel's parameter (LaunchArgs::inlinePlan, no copy to the device), larger ones in pinned
// host memory the kernel reads directly.
//
// A worker is one thread block (one CPU thread in the emulation) running the steps of one
// queue in order: every step on one connection (peer, channel, direction), or the plan's
// local copies. Queues run side by side, which is what keeps a send and a receive between two
// ranks from waiting on each other; `after` and `writeAfter` order steps across queues
// through the step flags (algorithms/plan.h has the rules).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/hd.h"

namespace loom::device {

struct Connection;  // fifo.h

enum class StepKind : uint8_t { kSend, kRecv, kRecvReduce, kCopy };

// How a connection carries a step's bytes (fifo.h): kSimple in large slots with one counter
// per slot, kLowLatency in 16-byte lines that carry their own flags.
enum class Wire : uint8_t { kSimple, kLowLatency };

constexpr uint8_t kStepHeader = 1;    // the first piece carries the call's header
constexpr uint8_t kStepFinalize = 2;  // the result is a loomAvg sum: divide it by the divisor
constexpr uint8_t kStepPreMultiply = 4;  // a copy that multiplies by the call's scalar

struct DeviceStep {
  StepKind kind;
  Wire wire;
  uint8_t flags;
  uint8_t reserved = 0;
  uint32_t call;        // index into the plan's calls
  int32_t conn;         // connection table index; -1 for a copy
  int32_t after;        // a step that must finish first (-1: none)
  int32_t writeAfter;   // kRecvReduce: its destination is written only after this step (-1: none)
  uint32_t reserved2 = 0;
  uint64_t bytes;
  const void* src;      // send: what goes; recvReduce: this rank's operand; copy: the source
  void* dst;
  void* scratch;        // recvReduce with writeAfter: `bytes` where arriving bytes may wait
};

// Per call: what its elements are, and the header a peer's matching step must carry.
struct DeviceCall {
  uint8_t type;      // loomDataType_t
  uint8_t op;        // loomRedOp_t
  uint16_t reserved = 0;
  int32_t divisor;   // for finalize: the rank count
  uint8_t header[24];  // the call's wire CallInfo (algorithms/plan.h)
  // A premultiplied sum's scalar: its bytes, or where to read it when the step runs.
  uint8_t scalar[8];
  const void* scalarAt;
};

struct WorkerRange {
  uint32_t first;  // into the order array
  uint32_t count;
  // The local queue may run on several workers, each doing its part of every copy (a copy on
  // one thread block ran near 41 GB/s on an H100); a connection's worker has parts 1.
  uint16_t part;
  uint16_t parts;
};

struct PlanHeader {
  uint64_t id;     // the communicator's number for this plan (names it in errors)
  uint32_t bytes;  // the whole plan, header included
  uint32_t calls, steps, workers;
  uint32_t callsAt, stepsAt, workersAt, orderAt;  // byte offsets from the header
};

// Read access to a flattened plan.
struct PlanView {
  const PlanHeader* header;

  LOOM_HD const uint8_t* at(uint32_t offset) const { return reinterpret_cast<const uint8_t*>(header) + offset; }
  LOOM_HD const DeviceCall& call(uint32_t i) const {
    return reinterpret_cast<const DeviceCall*>(at(header->callsAt))[i];
  }
  LOOM_HD const DeviceStep& step(uint32_t i) const {
    return reinterpret_cast<const DeviceStep*>(at(header->stepsAt))[i];
  }
  LOOM_HD const WorkerRange& worker(uint32_t i) const {
    return reinterpret_cast<const WorkerRange*>(at(header->workersAt))[i];
  }
  LOOM_HD uint32_t order(uint32_t i) const { return reinterpret_cast<const uint32_t*>(at(header->orderAt))[i]; }
};

// Why the host (or a failed worker) stopped the kernel; Control::abort holds one.
enum AbortReason : uint32_t {
  kRunning = 0,
  kAbortedByUser = 1,  // loomCommAbort
  kAbortedPeerGone = 3,  // the watchdog or the proxy: a peer process or link went away
  kAbortedFailure = 4,  // the communicator failed outside a kernel (the host stops its kernels)
};

// What went wrong, as the first failing worker saw it.
enum FailureKind : uint32_t {
  kNoFailure = 0,
  kStopped = 1,         // Control::abort was set while the worker waited
  kPeerFailed = 2,      // the peer's status word says it failed (got: its value)
  kWrongBytes = 3,      // the peer's piece had `got` bytes where this step expects `expected`
  kWrongHeader = 4,     // the peer's call header differs (header: the peer's)
  kOutOfStep = 5,       // a header where none was expected, or none where one was
  kTimedOut = 6,        // a wait saw nothing move for LaunchArgs::waitTimeoutNs
};

// What a stopped worker was waiting for (ErrorRecord::waitKind; expected and got are the
// word's target and its last value). Pieces count from the connection's first.
enum WaitKind : uint32_t {
  kWaitUnknown = 0,
  kWaitPiece = 1,  // a simple piece from the peer: the FIFO's tail
  kWaitSlot = 2,   // a free slot in the peer's FIFO: its head (simple or low-latency)
  kWaitLine = 3,   // a low-latency piece (expected: its flag; got: unknown, 0)
  kWaitStep = 4,   // this rank's step waitStep to finish in this launch: its flag
};

// Written with plain stores by the worker that claimed LaunchState::failureClaim first, then
// published by `complete` (no atomics on host memory: a GPU may not have them over PCIe).
struct ErrorRecord {
  uint32_t kind;        // FailureKind
  uint32_t step;
  uint64_t plan;        // PlanHeader::id
  int32_t peer;         // the peer the step talks to (-1: a local step)
  uint32_t worker;
  uint64_t launch;      // the launch's number (LaunchState::launches after it)
  uint64_t expected, got;
  uint8_t header[24];
  uint32_t waitKind;    // kStopped, kTimedOut: WaitKind
  uint32_t waitStep;    // kWaitStep: the step waited for
  uint32_t workersStarted, workers;  // of the failing launch, when the record was written
  uint32_t complete;    // 1 once the fields above are written
  uint32_t reserved;
};

// Host-mapped memory of one communicator, read by its watchdog thread while kernels run.
struct Control {
  uint32_t abort;       // AbortReason, set by the host; the kernel polls it
  int32_t abortPeer;    // kAbortedPeerGone: which peer
  uint32_t reserved[14];
  uint64_t started;     // number of the last launch that started
  uint64_t completed;   // number of the last launch whose workers all finished
  uint64_t hostLaunches;  // launches with countsForHost that finished (the host's own count)
  uint64_t startedPlan;   // PlanHeader::id of launch `started`, written before it
  uint64_t reserved2[4];
  ErrorRecord error;
};

// Device memory of one communicator that the kernel keeps between launches (launches of one
// communicator run one after another: device_comm.h). A launch's number is launches + 1 when
// it starts; its last worker to finish makes it launches.
struct LaunchState {
  uint64_t launches;
  uint32_t workersStarted;
  uint32_t workersDone;
  uint32_t failureClaim;  // 1 once a worker claimed the error record (for good: the rank failed)
  uint32_t stopped;       // 1 once a worker failed: this rank's other workers stop too
  uint64_t hostLaunches;  // Control::hostLaunches kept here, so that counting reads no host memory
};

// LOOM_DEVICE_TIMELINE: where a worker's time goes, launch after launch, in device memory the
// host reads when the communicator ends (device_watchdog.cc logs it). Times are the device's
// global nanosecond timer, the same for every rank of one GPU; sums over launches average out
// its coarse tick. A launch whose worker gave up is not counted.
constexpr uint32_t kTimelineSteps = 8;      // a worker's first steps, the rest not timed
constexpr uint32_t kTimelineWorkers = 128;  // workers past this are not timed

struct WorkerTimeline {
  uint64_t launches;                 // launches this worker ran to the end
  uint64_t lastStart;                // when the last of them started (global timer, ns)
  uint64_t lastPlan;                 // its PlanHeader::id
  uint64_t ready[kTimelineSteps];    // sum over launches: ns from the worker's start until the
                                     // step's `after` was done (it could start)
  uint64_t done[kTimelineSteps];     // ... until the step was done
  uint64_t end;                      // ... until the worker ended
  uint32_t stepIndex[kTimelineSteps];  // of the last launch: which plan step each was
  uint32_t steps;                    // of the last launch: how many were timed
  uint32_t reserved;
};

// The kernel's whole parameter, passed by value: a small plan goes inside it.
constexpr size_t kInlinePlanBytes = 3072;

struct LaunchArgs {
  const PlanHeader* plan;   // a plan in pinned memory; null: inlinePlan holds it
  uint64_t* planDone;       // for a plan in pinned memory: set to its id once the launch ends
  Connection* conns;        // the communicator's connection table
  uint32_t connCount;
  uint32_t workers;
  int32_t rank;
  uint32_t countsForHost;   // 1: count this launch in Control::hostLaunches (not a graph's replay)
  LaunchState* state;
  uint64_t* stepFlags;      // a step is done in launch L once its flag is L
  uint32_t* localArrivals;  // per step: parts of a local step done, over all launches
  Control* control;
  WorkerTimeline* timeline;  // kTimelineWorkers of them (LOOM_DEVICE_TIMELINE); null: none
  uint64_t waitTimeoutNs;    // timeoutMs: how long a wait may see nothing move (0: for ever;
                             // worker_context.h)
  uint64_t planId;           // PlanHeader::id, for Control::startedPlan without reading the plan
  alignas(16) uint8_t inlinePlan[kInlinePlanBytes];

  LOOM_HD PlanView view() const {
    return PlanView{plan != nullptr ? plan : reinterpret_cast<const PlanHeader*>(inlinePlan)};
  }
};

}  // namespace loom::device
