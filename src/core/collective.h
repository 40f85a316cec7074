// Collectives from the core's side: a validated call becomes steps of a plan, built by the
// algorithm the selector picks for it.
#pragma once

#include "algorithms/plan.h"
#include "base/status.h"

namespace loom {

class Communicator;

struct CollectiveCall {
  Communicator* comm;
  CallInfo info;
  const void* send;
  void* recv;  // info.seq numbers the communicator's collective calls, in call order
};

// Elements each buffer of a call holds on `rank` (0 where the call does not use it there):
// per-rank blocks times nranks for the gathered side of AllGather, ReduceScatter and AllToAll,
// nothing for a non-root's Broadcast sendbuff or Reduce recvbuff. The caller has checked that
// count * nranks does not overflow.
void bufferElems(CallInfo::Kind kind, size_t count, int rank, int root, int nranks, size_t* sendElems,
                 size_t* recvElems);
// The same in bytes, for a call already made.
void bufferBytes(const CallInfo& info, int rank, int nranks, size_t* sendBytes, size_t* recvBytes);

// Appends the call's steps to plan (plan.comm == call.comm), headers marked.
void appendCollective(Plan& plan, const CollectiveCall& call);

// The tuner's prediction for the call with the algorithm it picks, in µs.
double predictedUs(const CollectiveCall& call);

// A lone call (no group, NULL stream) that runs without a plan: a small collective on the
// one-shot board, the latency-critical case.
bool runsAlone(const CollectiveCall& call);
Status runAlone(const CollectiveCall& call);

}  // namespace loom
