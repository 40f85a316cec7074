// Group calls: recording, one plan per communicator, launch on the host or the device (group.h).
#include "core/group.h"

#include <algorithm>
#include <map>
#include <memory_resource>
#include <vector>

#include "base/call_arena.h"
#include "base/host_stream.h"
#include "core/call_check.h"
#include "core/communicator.h"
#include "core/device_comm.h"
#include "core/executor.h"
#include "core/quick_messages.h"

namespace loom::group {
namespace {

struct Recorded {
  Call call;
  HostStream* stream;
  void* cudaStream;  // device communicators only
};

// The calling thread's open group, as in NCCL (groups are per thread).
struct ThreadGroup {
  int depth = 0;
  std::vector<Recorded> calls;
};
thread_local ThreadGroup tGroup;

Communicator* commOf(const Call& call) {
  return std::visit([](const auto& c) { return c.comm; }, call);
}

}  // namespace

Status buildPlans(const Call* calls, size_t count, Plans* out, ScratchSource* scratch) {
  Plans& plans = *out;
  plans.clear();
  // Plans and their steps live where *out's do (a call's arena, or the heap).
  std::pmr::memory_resource* memory = plans.get_allocator().resource();
  // One plan per communicator, in order of first use; a group spans a few communicators, so
  // a scan finds a call's plan (and a single call allocates no map).
  auto planFor = [&](Communicator* comm) -> Plan& {
    for (Plan& p : plans) {
      if (p.comm == comm) return p;
    }
    Plan& p = plans.emplace_back(memory);
    p.comm = comm;
    p.scratchSource = scratch;
    p.deviceMemory = scratch != nullptr;
    // Room for a step a call, what a group of messages takes.
    p.calls.reserve(count);
    p.steps.reserve(count);
    p.callOf.reserve(count);
    return p;
  };
  std::vector<std::pair<Communicator*, std::vector<P2POp>>> selfOps;
  for (size_t i = 0; i < count; ++i) {
    const Call& call = calls[i];
    Communicator* comm = commOf(call);
    Plan& plan = planFor(comm);
    if (const P2POp* op = std::get_if<P2POp>(&call)) {
      if (op->peer != comm->rank()) {
        appendP2P(plan, *op);
        continue;
      }
      auto own = std::find_if(selfOps.begin(), selfOps.end(), [&](const auto& e) { return e.first == comm; });
      if (own == selfOps.end()) own = selfOps.insert(own, {comm, {}});
      own->second.push_back(*op);
    } else {
      appendCollective(plan, std::get<CollectiveCall>(call));
    }
  }
  for (auto& [comm, ops] : selfOps) {
    const Status s = appendSelfCopies(planFor(comm), ops);
    if (!s.isOk()) {
      plans.clear();  // no half-built plans for the caller
      return s;
    }
  }
  return Status::ok();
}

namespace {

// Runs plans with their communicators held in use (see CommUse) from now until they finish.
Status runHeld(Plans& plans) {
  // Work queued on a host stream runs after the calls before it, which may have failed the
  // communicator since: then it fails at once, as a call made now would.
  Status s;
  for (const Plan& p : plans) {
    if (s.isOk()) s = p.comm->usable();
  }
  if (s.isOk()) s = checkCalls(plans);  // LOOM_CHECK: the ranks agree on the calls before data moves
  if (s.isOk()) s = execute(plans);
  for (Plan& p : plans) p.comm->release();
  return s;
}

// Device communicators' calls: one launch per communicator, on its one stream.
Status launchOnDevices(const std::vector<Recorded>& recorded) {
  if (recorded.empty()) return Status::ok();
  std::vector<DeviceJob> jobs;
  for (const Recorded& r : recorded) {
    Communicator* comm = commOf(r.call);
    auto job = std::find_if(jobs.begin(), jobs.end(), [&](const DeviceJob& j) { return j.comm == comm; });
    if (job == jobs.end()) {
      jobs.push_back(DeviceJob{comm, {}, false, r.stream, r.cudaStream});
      job = jobs.end() - 1;
    } else if (job->cudaStream != r.cudaStream || job->hostStream != r.stream) {
      return error(loomInvalidUsage,
                   "a group's calls on one device communicator (rank %d) use two streams (%p and %p); "
                   "use one stream per communicator in a group",
                   comm->rank(), job->cudaStream != r.cudaStream ? job->cudaStream : static_cast<void*>(job->hostStream),
                   job->cudaStream != r.cudaStream ? r.cudaStream : static_cast<void*>(r.stream));
    }
    job->calls.push_back(r.call);
  }
  return launchDeviceJobs(jobs);
}

// Copies the calls into ops where they are messages (at most kMostQuickMessages) of one host
// communicator, run now: the quick path's candidates.
bool messagesRunNow(const Recorded* recorded, size_t count, P2POp* ops) {
  if (count == 0 || count > kMostQuickMessages) return false;
  for (size_t i = 0; i < count; ++i) {
    const P2POp* op = std::get_if<P2POp>(&recorded[i].call);
    if (op == nullptr || recorded[i].stream != nullptr || op->comm != commOf(recorded[0].call) ||
        op->comm->device() >= 0) {
      return false;
    }
    ops[i] = *op;
  }
  return true;
}

Status launch(const Recorded* recorded, size_t count) {
  if (P2POp ops[kMostQuickMessages]; messagesRunNow(recorded, count, ops) && quickMessages(ops, count)) {
    return runQuickMessages(ops, count);
  }
  // What runs now is built and run in this arena: it all ends before launch returns.
  CallArena arena;
  std::pmr::vector<Call> now(&arena);
  now.reserve(count);
  std::map<HostStream*, std::vector<Call>> queued;
  std::vector<Recorded> onDevices;
  for (const Recorded* r = recorded; r != recorded + count; ++r) {
    if (commOf(r->call)->device() >= 0) {
      onDevices.push_back(*r);
    } else if (r->stream == nullptr) {
      now.push_back(r->call);
    } else {
      queued[r->stream].push_back(r->call);
    }
  }
  // Everything is built (and self-matching checked) before anything runs or is queued.
  std::map<HostStream*, Plans> queuedPlans;
  for (auto& [stream, calls] : queued) LOOM_TRY(buildPlans(calls.data(), calls.size(), &queuedPlans[stream]));
  Plans nowPlans(&arena);
  LOOM_TRY(buildPlans(now.data(), now.size(), &nowPlans));
  LOOM_TRY(launchOnDevices(onDevices));
  for (auto& [stream, plans] : queuedPlans) {
    for (Plan& p : plans) p.comm->acquire();
    auto shared = std::make_shared<Plans>(std::move(plans));
    stream->enqueue([shared] { return runHeld(*shared); });
  }
  if (nowPlans.empty()) return Status::ok();
  for (Plan& p : nowPlans) p.comm->acquire();
  return runHeld(nowPlans);
}

}  // namespace

Status runNow(const std::vector<Call>& calls) {
  CallArena arena;
  Plans plans(&arena);
  LOOM_TRY(buildPlans(calls.data(), calls.size(), &plans));
  for (Plan& p : plans) p.comm->acquire();
  return runHeld(plans);
}

void start() { ++tGroup.depth; }

bool active() { return tGroup.depth > 0; }

Status end(std::vector<Communicator*>* failed) {
  failed->clear();
  if (tGroup.depth == 0) {
    return error(loomInvalidUsage, "loomGroupEnd without a matching loomGroupStart");
  }
  if (--tGroup.depth > 0) return Status::ok();
  // The calls stay in place while they run and are cleared after, keeping the vector's
  // capacity for the thread's next group (nothing in launch opens a group on this thread).
  Status s = launch(tGroup.calls.data(), tGroup.calls.size());
  if (!s.isOk()) {
    for (const Recorded& r : tGroup.calls) {
      Communicator* comm = commOf(r.call);
      if (std::find(failed->begin(), failed->end(), comm) == failed->end()) failed->push_back(comm);
    }
  }
  tGroup.calls.clear();
  return s;
}

Status simulateEnd(double* estimatedUs) {
  *estimatedUs = 0;
  if (tGroup.depth == 0) return error(loomInvalidUsage, "loomGroupSimulateEnd without a matching loomGroupStart");
  if (--tGroup.depth > 0) return Status::ok();
  struct Taken {
    uint64_t calls = 0, collectives = 0;
  };
  std::map<Communicator*, Taken> taken;
  for (const Recorded& r : tGroup.calls) {
    Communicator* comm = commOf(r.call);
    Taken& t = taken[comm];
    ++t.calls;
    if (const CollectiveCall* c = std::get_if<CollectiveCall>(&r.call)) {
      ++t.collectives;
      *estimatedUs += predictedUs(*c);
      continue;
    }
    // A message: the sender's link; to itself a rank copies once, at its receive.
    const P2POp& op = std::get<P2POp>(r.call);
    const CommProfile& profile = comm->profile();
    if (op.peer == comm->rank()) {
      if (op.direction == P2POp::Direction::kRecv) {
        *estimatedUs += static_cast<double>(op.bytes) / (profile.copyGbps * 1e3);
      }
      continue;
    }
    const std::vector<PeerInfo>& peers = comm->bootstrap().peers();
    const bool otherHost =
        peers[static_cast<size_t>(op.peer)].hostHash != peers[static_cast<size_t>(comm->rank())].hostHash;
    *estimatedUs += predictMessageUs(op.bytes, otherHost, profile);
  }
  for (auto& [comm, t] : taken) comm->callLog().forget(t.calls, t.collectives);
  tGroup.calls.clear();
  return Status::ok();
}

Status submit(const Call& call, HostStream* stream, void* cudaStream) {
  if (tGroup.depth > 0) {
    tGroup.calls.push_back({call, stream, cudaStream});
    return Status::ok();
  }
  // The caller (the API frame) holds the communicator in use for the length of this call.
  if (const CollectiveCall* c = std::get_if<CollectiveCall>(&call);
      c != nullptr && stream == nullptr && c->comm->device() < 0 && runsAlone(*c)) {
    return runAlone(*c);
  }
  const Recorded one{call, stream, cudaStream};
  return launch(&one, 1);
}

}  // namespace loom::group
