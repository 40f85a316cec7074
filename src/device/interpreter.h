// The plan interpreter: what one worker of the plan kernel does. The same source runs in the
// CUDA kernel (plan_kernel.cu, a worker per thread block) and in the CPU emulation
// (emulated_runtime.cc, a worker per thread), templated on the memory-ordering policy W
// (worker_context.h lists what W supplies).
//
// A worker runs its queue's steps in plan order (plan_format.h). Before a step it waits for
// the step named by `after`; when a step is done its flag becomes this launch's number, which
// the workers waiting on it see. Failures stop the whole rank (Control::abort) and tell its
// peers (the rank's status word); every worker still finishes the launch, so the caller's
// stream always moves on.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "device/data_moves.h"
#include "device/fifo.h"
#include "device/plan_format.h"
#include "device/worker_context.h"
#include "kernels/element_ops.h"
#include "kernels/hd.h"

namespace loom::device {

// What a receive does with the bytes that arrive: copies them to dst, divides them by
// `divisor` into dst (kScale), or stores src op them into dst (kReduce; the reduction fused
// into the receive). Simple pieces come as a range of FIFO memory that the worker's threads
// share (range), low-latency ones as 8-byte words, each on the thread that polled it (word).
// `at` is the offset in the step.
//
// The type and op are looked at per piece or word, not made template parameters: one
// receive instance then serves every type x op. An instance per type x op (61 of them, each
// with both wires' loops) was half of the plan kernel's PTX and most of ptxas's time: 7
// minutes for sm_90 where it now takes half a minute (docs/TESTING.md). The cost is a call
// per piece and per low-latency word that is not a plain copy.
template <class W>
struct Arrivals {
  enum Kind { kCopy, kScale, kReduce };
  W& w;
  Kind kind;
  loomDataType_t type;
  loomRedOp_t op;
  uint8_t* dst;
  const uint8_t* src;  // kReduce only
  int divisor;

  LOOM_HD void range(uint64_t at, const uint8_t* fifo, uint64_t n) {
    if (kind == kCopy) {
      copyBytes<true>(w, dst + at, fifo, n);
    } else {
      combineRange(at, fifo, n);
    }
  }
  LOOM_HD void word(uint64_t at, uint64_t v, uint64_t n) {
    if (kind == kCopy) {
      memcpy(dst + at, &v, n);
    } else {
      combineWord(at, v, n);
    }
  }

  LOOM_HD_CALLED void combineRange(uint64_t at, const uint8_t* fifo, uint64_t n) const {
    withJob([&](auto tag, const auto& job) {
      using T = typename decltype(tag)::type;
      if constexpr (std::decay_t<decltype(job)>::kInputs == 1) {
        elementwise<T, true, false>(w, dst + at, fifo, nullptr, n / sizeof(T), job);
      } else {
        elementwise<T, false, true>(w, dst + at, src + at, fifo, n / sizeof(T), job);
      }
    });
  }
  LOOM_HD_CALLED void combineWord(uint64_t at, uint64_t v, uint64_t n) const {
    withJob([&](auto tag, const auto& job) { combineElements<typename decltype(tag)::type>(at, v, n, job); });
  }
  // Calls f(Tag<T>, job) with this call's type and its job: the scale, or the reduction by op.
  template <class F>
  LOOM_HD void withJob(F&& f) const {
    byType<kPlanFloat8>(type, false, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (kind == kScale) {
        f(tag, ScaleJob<T>{divisor});
        return true;
      }
      return byOp(op, false, [&](auto opTag) {
        f(tag, ReduceJob<T, typename decltype(opTag)::type>{divisor});
        return true;
      });
    });
  }
  // dst[at + e] = job(own, in) for the elements of one word: `in` from the word, `own` from
  // src (a two-input job) or `in` again.
  template <class T, class Job>
  LOOM_HD void combineElements(uint64_t at, uint64_t v, uint64_t n, const Job& job) const {
    for (uint64_t e = 0; e < n; e += sizeof(T)) {
      T in;
      memcpy(&in, reinterpret_cast<const uint8_t*>(&v) + e, sizeof in);
      T own = in;
      if constexpr (Job::kInputs == 2) memcpy(&own, src + at + e, sizeof own);
      const T r = job(own, in);
      memcpy(dst + at + e, &r, sizeof r);
    }
  }
};

// Receives a step's bytes into `consume` over its connection and wire, then stores the end's
// counter back for the next step (or launch).
template <class W>
LOOM_HD_CALLED bool receive(const Ctx<W>& ctx, const Connection& c, const DeviceStep& s, const uint8_t* header,
                            Arrivals<W>& consume) {
  const int wire = s.wire == Wire::kSimple ? 0 : 1;
  uint64_t done = c.counters[wire];
  const bool ok = s.wire == Wire::kSimple ? recvSimple(ctx, c, s.bytes, header, consume, &done)
                                          : recvLowLatency(ctx, c, s.bytes, header, consume, &done);
  ctx.w.sync();
  if (ctx.w.thread() == 0) c.counters[wire] = done;
  return ok;
}

template <class W>
LOOM_HD_CALLED bool send(const Ctx<W>& ctx, const Connection& c, const DeviceStep& s, const uint8_t* header) {
  const int wire = s.wire == Wire::kSimple ? 0 : 1;
  uint64_t done = c.counters[wire];
  const auto* src = static_cast<const uint8_t*>(s.src);
  const bool ok = s.wire == Wire::kSimple ? sendSimple(ctx, c, src, s.bytes, header, &done)
                                          : sendLowLatency(ctx, c, src, s.bytes, header, &done);
  ctx.w.sync();
  if (ctx.w.thread() == 0) c.counters[wire] = done;
  return ok;
}

// Whether this kernel has the type's instances (float8 is left out below sm_90, where the
// runtime refuses such calls before they reach a kernel).
LOOM_HD bool hasType(loomDataType_t type) {
  return byType<kPlanFloat8>(type, false, [](auto) { return true; });
}

// Whether step `index` is done in this launch, the same answer on every thread.
template <class W>
LOOM_HD bool isDone(const Ctx<W>& ctx, int32_t index) {
  bool done = false;
  if (ctx.w.thread() == 0) done = ctx.w.acquireLocal(&ctx.args.stepFlags[index]) >= ctx.launch;
  return ctx.w.syncAny(done);
}

template <class W>
LOOM_HD bool runStep(const Ctx<W>& ctx, const DeviceStep& s, const DeviceCall& call) {
  W& w = ctx.w;
  auto* dst = static_cast<uint8_t*>(s.dst);
  const auto* src = static_cast<const uint8_t*>(s.src);
  const loomDataType_t type = static_cast<loomDataType_t>(call.type);
  const loomRedOp_t op = static_cast<loomRedOp_t>(call.op);
  const int divisor = (s.flags & kStepFinalize) != 0 ? call.divisor : 0;
  const uint8_t* header = (s.flags & kStepHeader) != 0 ? call.header : nullptr;
  // The step's connection, copied once from the table (device memory) for the whole step.
  Connection local{};
  if (s.conn >= 0) local = ctx.args.conns[s.conn];
  const Connection* c = s.conn >= 0 ? &local : nullptr;
  switch (s.kind) {
    case StepKind::kCopy: {
      // This worker's part of the copy, cut at 16-byte multiples so vectors stay aligned.
      const uint64_t units = (s.bytes + 15) / 16;
      const uint64_t at = units * ctx.part / ctx.parts * 16;
      const uint64_t end = units * (ctx.part + 1) / ctx.parts * 16;
      const uint64_t n = (end < s.bytes ? end : s.bytes) - (at < s.bytes ? at : s.bytes);
      if (divisor == 0 && (s.flags & kStepPreMultiply) == 0) {
        copyBytes<false>(w, dst + at, src + at, n);
        return true;
      }
      return byType<kPlanFloat8>(type, false, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (divisor != 0) {
          elementwise<T, false, false>(w, dst + at, src + at, nullptr, n / sizeof(T), ScaleJob<T>{divisor});
          return true;
        }
        // The scalar is read where the step runs: loomScalarDevice lets it change between calls.
        T scalar;
        if (call.scalarAt != nullptr) {
          scalar = loadElement<T, false>(w, static_cast<const uint8_t*>(call.scalarAt));
        } else {
          memcpy(&scalar, call.scalar, sizeof scalar);
        }
        elementwise<T, false, false>(w, dst + at, src + at, nullptr, n / sizeof(T), MultiplyJob<T>{scalar});
        return true;
      });
    }
    case StepKind::kSend: return send(ctx, *c, s, header);
    case StepKind::kRecv: {
      if (divisor != 0 && !hasType(type)) return false;
      Arrivals<W> out{w, divisor == 0 ? Arrivals<W>::kCopy : Arrivals<W>::kScale, type, op, dst, nullptr, divisor};
      return receive(ctx, *c, s, header, out);
    }
    case StepKind::kRecvReduce: {
      if (!hasType(type) || !byOp(op, false, [](auto) { return true; })) return false;
      Arrivals<W> into{w, Arrivals<W>::kReduce, type, op, dst, src, divisor};
      if (s.writeAfter < 0 || isDone(ctx, s.writeAfter)) return receive(ctx, *c, s, header, into);
      // The destination may not be written yet (a peer may still be reading it): the bytes
      // wait in scratch, so the sender is not held up, and are reduced once it may.
      auto* scratch = static_cast<uint8_t*>(s.scratch);
      Arrivals<W> park{w, Arrivals<W>::kCopy, type, op, scratch, nullptr, 0};
      if (!receive(ctx, *c, s, header, park)) return false;
      if (!waitAtLeast(ctx, &ctx.args.stepFlags[s.writeAfter], ctx.launch, nullptr,
                       Wait{kWaitStep, static_cast<uint32_t>(s.writeAfter)})) return false;
      into.combineRange(0, scratch, s.bytes);
      return true;
    }
  }
  return false;
}

// Thread 0 of a worker that has done its part of step `index`: whether the step is now done.
// The last of a local step's parts to arrive says so, after the others' writes, and clears
// the count for the next launch (which starts once this one has ended). Only this rank's
// workers read the count and the step's bytes (a send that forwards them publishes them at
// system scope itself): device-scope fences. (A lone 512 MiB in-place allreduce, 256 steps
// that copied nothing, took 2.5 ms on an H200 with system-scope ones.)
template <class W>
LOOM_HD bool lastPart(const Ctx<W>& ctx, uint32_t index) {
  if (ctx.parts == 1) return true;
  ctx.w.fenceLocal();
  if (ctx.w.fetchAdd32(&ctx.args.localArrivals[index], 1) != ctx.parts - 1) return false;
  ctx.w.fenceLocal();
  ctx.w.fetchAdd32(&ctx.args.localArrivals[index], static_cast<uint32_t>(-ctx.parts));
  return true;
}

// Thread 0's account of one launch of its worker for LOOM_DEVICE_TIMELINE, added to the
// worker's WorkerTimeline once the launch ran to its end.
template <class W>
struct LaunchTimes {
  W& w;
  WorkerTimeline* timeline;  // null: not timed
  uint64_t start = 0;
  // Written only where timed (no zeroing on every thread of every launch); ended() reads the
  // first `steps`, each written by then.
  uint64_t ready[kTimelineSteps], done[kTimelineSteps];
  uint32_t index[kTimelineSteps];
  uint32_t steps = 0;

  LOOM_HD LaunchTimes(W& worker, const LaunchArgs& args, uint32_t id)
      : w(worker), timeline(args.timeline != nullptr && id < kTimelineWorkers && w.thread() == 0 ? &args.timeline[id]
                                                                                                 : nullptr) {
    if (timeline != nullptr) start = w.now();
  }
  LOOM_HD void stepReady(uint32_t k, uint32_t stepIndex) {
    if (timeline == nullptr || k >= kTimelineSteps) return;
    ready[k] = w.now() - start;
    index[k] = stepIndex;
    steps = k + 1;
  }
  LOOM_HD void stepDone(uint32_t k) {
    if (timeline != nullptr && k < kTimelineSteps) done[k] = w.now() - start;
  }
  LOOM_HD void ended(uint64_t planId) {
    if (timeline == nullptr) return;
    WorkerTimeline& t = *timeline;
    t.end += w.now() - start;
    for (uint32_t k = 0; k < steps; ++k) {
      t.ready[k] += ready[k];
      t.done[k] += done[k];
      t.stepIndex[k] = index[k];
    }
    t.steps = steps;
    t.lastStart = start;
    t.lastPlan = planId;
    ++t.launches;
  }
};

// Runs worker `worker` of the launch described by args, on every thread of the worker.
template <class W>
LOOM_HD void runWorker(const LaunchArgs& args, uint32_t worker, W& w) {
  const PlanView plan = args.view();
  LaunchTimes<W> times(w, args, worker);
  Ctx<W> ctx{w, args, args.state->launches + 1, worker};
  // A sign of life for the watchdog, which publishes no data: no fence. The plan's id first,
  // for the watchdog that reads it after the number (device_watchdog.cc).
  if (w.thread() == 0 && w.fetchAdd32(&args.state->workersStarted, 1) == 0) {
    w.publish(&args.control->startedPlan, args.planId);
    w.publish(&args.control->started, ctx.launch);
  }
  const WorkerRange range = plan.worker(worker);
  ctx.part = range.part;
  ctx.parts = range.parts;
  bool finished = true;
  for (uint32_t k = 0; k < range.count; ++k) {
    const uint32_t index = plan.order(range.first + k);
    // Copies: a plan too large for the kernel's parameter is in host-mapped memory.
    const DeviceStep s = plan.step(index);
    const DeviceCall call = plan.call(s.call);
    ctx.step = index;
    ctx.peer = s.conn >= 0 ? args.conns[s.conn].peer : -1;
    if (s.after >= 0 && !waitAtLeast(ctx, &args.stepFlags[s.after], ctx.launch, nullptr,
                                       Wait{kWaitStep, static_cast<uint32_t>(s.after)})) {
      finished = false;
      break;
    }
    times.stepReady(k, index);
    if (!runStep(ctx, s, call)) {
      finished = false;
      break;
    }
    w.sync();
    if (w.thread() == 0 && lastPart(ctx, index)) w.releaseLocal(&args.stepFlags[index], ctx.launch);
    times.stepDone(k);
  }
  if (finished) times.ended(plan.header->id);
  // The last worker to finish ends the launch: the next one gets the next number.
  w.sync();
  if (w.thread() == 0 && w.fetchAdd32(&args.state->workersDone, 1) == args.workers - 1) {
    args.state->workersStarted = 0;
    args.state->workersDone = 0;
    w.fence();
    w.publish(&args.state->launches, ctx.launch);
    if (args.planDone != nullptr) w.publish(args.planDone, plan.header->id);
    if (args.countsForHost != 0) w.publish(&args.control->hostLaunches, ++args.state->hostLaunches);
    w.publish(&args.control->completed, ctx.launch);
  }
}

}  // namespace loom::device
