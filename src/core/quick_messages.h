// Small messages moved without a plan. Building and running a plan for a lone small
// loomSend/loomRecv, or a group of a few, cost several times the message's trip between two
// cores (docs/RESULTS.md, "Small messages without a plan"). So where every message of such a
// group fits its link whole (Link::wholeMessageBytes), each send goes into its link as one
// message and each receive takes its message once it is there whole, under the header this
// rank expects, spinning as a waiting rank does at first (kBusyBeforeYield). Whatever has not
// moved by then (a link without room, a message not there yet, a header that is not the one
// expected) runs through the executor as a plan of its own, under the same hold of the
// communicator, which waits, times out and reports as for any call: this path only takes what
// moves at once, in each link's order.
#pragma once

#include <cstddef>

#include "base/status.h"
#include "core/p2p.h"

namespace loom {

// The most messages a group may have for this path.
constexpr size_t kMostQuickMessages = 16;

// Whether `ops` (at most kMostQuickMessages, all of one host communicator, run now) take this
// path: each goes to another rank over a link made already that moves its message whole.
bool quickMessages(const P2POp* ops, size_t count);

// Moves them; the communicator is held in use (CommUse) meanwhile.
Status runQuickMessages(const P2POp* ops, size_t count);

}  // namespace loom
