#include "core/group.h"

#include <algorithm>
#include <map>
#include <vector>

#include "core/communicator.h"
#include "core/host_stream.h"

namespace loom::group {
namespace {

struct Recorded {
  P2POp op;
  HostStream* stream;
};

// The calling thread's open group, as in NCCL (groups are per thread).
struct ThreadGroup {
  int depth = 0;
  std::vector<Recorded> calls;
};
thread_local ThreadGroup tGroup;

std::vector<Communicator*> distinctComms(const std::vector<P2POp>& ops) {
  std::vector<Communicator*> comms;
  for (const P2POp& op : ops) {
    if (std::find(comms.begin(), comms.end(), op.comm) == comms.end()) comms.push_back(op.comm);
  }
  return comms;
}

// Runs ops with their communicators held in use (see CommUse) from now until they finish.
Status runHeld(std::vector<P2POp>& ops, const std::vector<Communicator*>& comms) {
  Status s = runP2P(ops);
  for (Communicator* c : comms) c->release();
  return s;
}

Status launch(std::vector<Recorded> calls) {
  std::vector<P2POp> now;
  std::map<HostStream*, std::vector<P2POp>> queued;
  for (Recorded& c : calls) {
    if (c.stream == nullptr) {
      now.push_back(c.op);
    } else {
      queued[c.stream].push_back(c.op);
    }
  }
  for (auto& [stream, ops] : queued) {
    std::vector<Communicator*> comms = distinctComms(ops);
    for (Communicator* c : comms) c->acquire();
    stream->enqueue([ops = std::move(ops), comms]() mutable { return runHeld(ops, comms); });
  }
  if (now.empty()) return Status::ok();
  std::vector<Communicator*> comms = distinctComms(now);
  for (Communicator* c : comms) c->acquire();
  return runHeld(now, comms);
}

}  // namespace

void start() { ++tGroup.depth; }

bool active() { return tGroup.depth > 0; }

Status end() {
  if (tGroup.depth == 0) {
    return error(loomInvalidUsage, "loomGroupEnd without a matching loomGroupStart");
  }
  if (--tGroup.depth > 0) return Status::ok();
  std::vector<Recorded> calls = std::move(tGroup.calls);
  tGroup.calls.clear();
  return launch(std::move(calls));
}

Status submit(const P2POp& op, HostStream* stream) {
  if (tGroup.depth > 0) {
    tGroup.calls.push_back({op, stream});
    return Status::ok();
  }
  return launch({{op, stream}});
}

}  // namespace loom::group
