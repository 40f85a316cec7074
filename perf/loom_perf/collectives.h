// What loom-perf knows of each collective: nccl-tests' buffer layout and bandwidth factors,
// how to call it, and what every rank must hold afterwards.
#pragma once

#include <loom/loom.h>

#include <cstddef>

#include "options.h"

namespace loomperf {

// Buffer sizes and the count argument, in elements, for a message of `count` elements, as
// nccl-tests lays them out (allgather, reducescatter and alltoall round the per-rank share
// down to 16 bytes).
struct Layout {
  size_t sendCount = 0;
  size_t recvCount = 0;
  size_t paramCount = 0;         // the count passed to the call
  size_t sendInPlaceOffset = 0;  // in place, send = recv buffer + this * rank
  size_t recvInPlaceOffset = 0;  // in place, recv = recv buffer + this * rank
};
Layout layoutFor(Collective c, size_t count, size_t typeSize, int nranks);

bool takesOp(Collective c);
bool takesRoot(Collective c);
// Loom defines no in-place form of all-to-all, nor of a send and receive on one buffer.
bool hasInPlace(Collective c);

// nccl-tests' algbw numerator (bytes) and busbw factor.
double algorithmBytes(Collective c, const Layout& layout, size_t typeSize, int nranks);
double busBandwidthFactor(Collective c, int nranks);

// One call of a collective on one rank, with the buffers it uses.
struct Call {
  Collective collective;
  loomDataType_t type;
  loomRedOp_t op;  // ignored where the collective takes none
  int root;        // ignored where the collective takes none
  size_t count;    // Layout::paramCount
  void* send;  // writable: loom-perf fills it before a check
  void* recv;
};

// Issues the call on `comm` (sendrecv: a send to rank+1 and a receive from rank-1, grouped).
loomResult_t launch(const Call& call, loomComm_t comm, loomStream_t stream);

// The data check. Rank `rank` fills its input with fillInput (the in-place input lies in the
// receive buffer) after poisonOutput; countWrong then counts the elements of the result that
// differ from what the collective must produce. `rep` varies the data between checks, so a
// result left over from an earlier call does not pass.
struct CheckCase {
  Call call;
  Layout layout;
  int rank;
  int nranks;
  int rep;
};
void poisonOutput(const CheckCase& c);  // the whole receive side, before the input is written
void fillInput(const CheckCase& c);
size_t countWrong(const CheckCase& c);
// Changes one element of the result where countWrong looks (the --test-corrupt switch).
void corruptOutput(const CheckCase& c);

}  // namespace loomperf
