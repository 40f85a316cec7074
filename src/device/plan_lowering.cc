// Lowering a rank's Plan to the flat plan the kernel reads (plan_lowering.h).
#include "device/plan_lowering.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace loom::device {
namespace {

size_t alignUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// An empty vector's data() may be null, which memcpy must not be given even for 0 bytes.
template <typename T>
void appendAt(std::vector<uint8_t>* out, size_t at, const std::vector<T>& items) {
  if (!items.empty()) std::memcpy(out->data() + at, items.data(), items.size() * sizeof(T));
}

StepKind kindOf(Step::Kind kind) {
  switch (kind) {
    case Step::Kind::kSend: return StepKind::kSend;
    case Step::Kind::kRecv: return StepKind::kRecv;
    case Step::Kind::kRecvReduce: return StepKind::kRecvReduce;
    default: return StepKind::kCopy;
  }
}

}  // namespace

Status lowerPlan(Plan& plan, uint64_t id, const ConnectionMap& connections, std::vector<uint8_t>* out) {
  const size_t nsteps = plan.steps.size(), ncalls = plan.calls.size();
  std::vector<DeviceCall> calls(ncalls);
  for (size_t i = 0; i < ncalls; ++i) {
    const CallInfo& info = plan.calls[i];
    calls[i].type = static_cast<uint8_t>(info.type);
    calls[i].op = static_cast<uint8_t>(info.op);
    calls[i].divisor = connections.nranks;
    encodeCallInfo(info, calls[i].header);
    std::memcpy(calls[i].scalar, info.preMul.value, sizeof calls[i].scalar);
    calls[i].scalarAt = info.preMul.at;
  }

  // Workers in order of their first step.
  std::vector<DeviceStep> steps(nsteps);
  std::vector<int> workerOfConn;  // connection index -> worker, -1: none yet
  std::vector<std::vector<uint32_t>> queues;
  int localWorker = -1;
  for (size_t k = 0; k < nsteps; ++k) {
    const Step& s = plan.steps[k];
    const CallInfo& call = plan.callOfStep(k);
    if (s.kind == Step::Kind::kOneShot || s.kind == Step::Kind::kMapped) {
      return error(loomInternalError, "%s: a board step reached a device plan (the board is host memory)",
                   call.describe().c_str());
    }
    DeviceStep& d = steps[k];
    d.kind = kindOf(s.kind);
    d.call = plan.callOf[k];
    d.after = s.after;
    d.writeAfter = s.writeAfter;
    d.bytes = s.bytes;
    d.src = s.src;
    d.dst = s.dst;
    d.scratch = nullptr;
    d.flags = static_cast<uint8_t>((s.header ? kStepHeader : 0) |
                                   (s.finalize && call.op == loomAvg ? kStepFinalize : 0) |
                                   (s.preMultiply ? kStepPreMultiply : 0));
    d.wire = Wire::kSimple;
    d.conn = -1;
    int* worker = &localWorker;
    if (s.peer != Step::kNone) {
      const bool send = s.kind == Step::Kind::kSend;
      d.conn = connections.index(s.peer, s.channel % connections.channels, send);
      if (call.lowLatency && !connections.offHost(s.peer)) d.wire = Wire::kLowLatency;
      if (static_cast<size_t>(d.conn) >= workerOfConn.size()) workerOfConn.resize(static_cast<size_t>(d.conn) + 1, -1);
      worker = &workerOfConn[static_cast<size_t>(d.conn)];
    }
    if (s.kind == Step::Kind::kRecvReduce && s.writeAfter != Step::kNone) {
      try {
        d.scratch = plan.scratch(s.bytes);
      } catch (const std::bad_alloc&) {
        return error(loomSystemError, "%s: out of device memory for %zu bytes of scratch", call.describe().c_str(),
                     s.bytes);
      }
    }
    if (*worker < 0) {
      *worker = static_cast<int>(queues.size());
      queues.emplace_back();
    }
    queues[static_cast<size_t>(*worker)].push_back(static_cast<uint32_t>(k));
  }

  int localParts = 1;
  if (localWorker >= 0) {
    uint64_t largest = 0;
    for (uint32_t k : queues[static_cast<size_t>(localWorker)]) largest = std::max<uint64_t>(largest, steps[k].bytes);
    const int spare = connections.workerBudget > 0 ? connections.workerBudget - static_cast<int>(queues.size() - 1)
                                                   : kMaxLocalParts;
    localParts = static_cast<int>(std::min<uint64_t>(largest / kLocalPartBytes, static_cast<uint64_t>(kMaxLocalParts)));
    localParts = std::clamp(std::min(localParts, spare), 1, kMaxLocalParts);
  }
  std::vector<WorkerRange> workers;
  std::vector<uint32_t> order;
  order.reserve(nsteps);
  for (size_t q = 0; q < queues.size(); ++q) {
    const auto first = static_cast<uint32_t>(order.size()), count = static_cast<uint32_t>(queues[q].size());
    const int parts = static_cast<int>(q) == localWorker ? localParts : 1;
    for (int part = 0; part < parts; ++part) {
      workers.push_back({first, count, static_cast<uint16_t>(part), static_cast<uint16_t>(parts)});
    }
    order.insert(order.end(), queues[q].begin(), queues[q].end());
  }

  PlanHeader h{};
  h.id = id;
  h.calls = static_cast<uint32_t>(ncalls);
  h.steps = static_cast<uint32_t>(nsteps);
  h.workers = static_cast<uint32_t>(workers.size());
  h.callsAt = static_cast<uint32_t>(alignUp(sizeof(PlanHeader), 16));
  h.stepsAt = static_cast<uint32_t>(alignUp(h.callsAt + ncalls * sizeof(DeviceCall), 16));
  h.workersAt = static_cast<uint32_t>(alignUp(h.stepsAt + nsteps * sizeof(DeviceStep), 16));
  h.orderAt = static_cast<uint32_t>(alignUp(h.workersAt + workers.size() * sizeof(WorkerRange), 16));
  const size_t total = alignUp(h.orderAt + order.size() * sizeof(uint32_t), 16);
  if (total > UINT32_MAX) return error(loomInvalidUsage, "a device plan of %zu steps is too large", nsteps);
  h.bytes = static_cast<uint32_t>(total);
  out->assign(total, 0);
  std::memcpy(out->data(), &h, sizeof h);
  appendAt(out, h.callsAt, calls);
  appendAt(out, h.stepsAt, steps);
  appendAt(out, h.workersAt, workers);
  appendAt(out, h.orderAt, order);
  return Status::ok();
}

}  // namespace loom::device
