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
  void* recv;
};

// Appends the call's steps to plan (plan.comm == call.comm), headers marked.
void appendCollective(Plan& plan, const CollectiveCall& call);

}  // namespace loom
