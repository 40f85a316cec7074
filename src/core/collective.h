// Collectives from the core's side: a validated call becomes steps of a plan, built by the
// algorithm the selector picks for it.
#pragma once

#include "algorithms/plan.h"
#include "core/status.h"

namespace loom {

class Communicator;

struct CollectiveCall {
  Communicator* comm;
  CallInfo info;
  const void* send;
  void* recv;  // info.seq numbers the communicator's collective calls, in call order
};

// Appends the call's steps to plan (plan.comm == call.comm), headers marked.
void appendCollective(Plan& plan, const CollectiveCall& call);

// A lone call (no group, NULL stream) that runs without a plan: a small allreduce on the
// one-shot board, the latency-critical case.
bool runsAlone(const CollectiveCall& call);
Status runAlone(const CollectiveCall& call);

}  // namespace loom
