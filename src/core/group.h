// Group calls: between loomGroupStart and loomGroupEnd a thread's point-to-point calls and
// collectives are only recorded; the outermost End launches them together (one plan per
// communicator, all plans progressed at once; see executor.h). Outside a group a call is a
// group of one.
#pragma once

#include <variant>

#include "base/status.h"
#include "core/collective.h"
#include "core/p2p.h"

namespace loom {

class HostStream;

namespace group {

using Call = std::variant<P2POp, CollectiveCall>;

void start();
// Launches what the group recorded: calls on the NULL stream run before End returns, calls
// on a host stream are enqueued on it. loomInvalidUsage without a matching start. Where it
// fails, *failed gets the communicators the launched calls use, so that the failure can be
// recorded on each (left empty on success: a small call notices the allocation).
Status end(std::vector<Communicator*>* failed);
bool active();
// loomGroupSimulateEnd: closes the group as end() does, but instead of making the outermost
// group's calls, *estimatedUs gets the tuner's predictions for them, summed, and each
// communicator's call log takes them back (their numbers go to the next calls). 0 for an
// inner End.
Status simulateEnd(double* estimatedUs);

// Records the call in the open group, or runs it now as a group of one. A call on a device
// communicator names a CUDA stream (cudaStream; `stream` is then unused, but for the
// emulation's host streams) and becomes part of one plan-kernel launch on it
// (core/device_comm.h); the calls of one communicator in a group must share it.
Status submit(const Call& call, HostStream* stream, void* cudaStream = nullptr);

// *out becomes one plan per communicator for the `count` calls at `calls`, in call order
// (sends and receives to self become copies), in *out's memory; empty on failure. With
// `scratch` (the device queue's direct path) the plans are over device memory and take their
// scratch from it (Plan::deviceMemory).
Status buildPlans(const Call* calls, size_t count, Plans* out, ScratchSource* scratch = nullptr);
// Runs calls on host buffers now, on this thread, LOOM_CHECK's exchange first, their
// communicators held in use meanwhile.
Status runNow(const std::vector<Call>& calls);

}  // namespace group
}  // namespace loom
