// Small exchanges of host bytes among a communicator's ranks, for the DDP layer's bookkeeping
// (shape checks, the bucket rebuild), over the communicator's bootstrap: on the host, with no
// stream, kernel or device memory. Ranks that are threads of one process on one GPU must not
// allocate while a peer's kernel waits for them (docs/ARCHITECTURE.md, "Thread ranks on one
// GPU"); staging these bytes through device memory did, and the barrier here lets every rank
// allocate its buckets before any rank reduces one.
#pragma once

#include <cstddef>
#include <vector>

#include "base/status.h"
#include "loom/loom.h"

namespace loom::ddp {

// A failed Loom call as a Status carrying comm's message.
Status fromLoom(loomResult_t result, loomComm_t comm, const char* call);

// Collective: *all = every rank's `bytes` bytes from mine, in rank order.
Status allGatherBytes(loomComm_t comm, const void* mine, size_t bytes, std::vector<unsigned char>* all);

// Collective: data (bytes bytes) = root's.
Status broadcastBytes(loomComm_t comm, void* data, size_t bytes, int root);

// Collective: returns once every rank has called it.
Status hostBarrier(loomComm_t comm);

}  // namespace loom::ddp
