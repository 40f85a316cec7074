// Group calls: between loomGroupStart and loomGroupEnd a thread's point-to-point calls are
// only recorded; the outermost End launches them together (see p2p.h). Outside a group a
// call is a group of one.
#pragma once

#include "core/p2p.h"
#include "core/status.h"

namespace loom {

class HostStream;

namespace group {

void start();
// Launches what the group recorded: ops on the NULL stream run before End returns, ops on
// a host stream are enqueued on it. loomInvalidUsage without a matching start.
Status end();
bool active();

// Records the op in the open group, or runs it now as a group of one.
Status submit(const P2POp& op, HostStream* stream);

}  // namespace group
}  // namespace loom
