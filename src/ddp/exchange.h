// Small collectives over host bytes on any communicator (a device one stages them through
// device memory), for the DDP layer's bookkeeping: shape checks and the bucket rebuild.
#pragma once

#include <cstddef>
#include <vector>

#include "base/status.h"
#include "ddp/stream_ops.h"
#include "loom/loom.h"

namespace loom::ddp {

// A failed Loom call as a Status carrying comm's message.
Status fromLoom(loomResult_t result, loomComm_t comm, const char* call);

// Collective: *all = every rank's `bytes` bytes from mine, in rank order. Waits.
Status allGatherBytes(loomComm_t comm, StreamOps& ops, const void* mine, size_t bytes,
                      std::vector<unsigned char>* all);

// Collective: data (bytes bytes of host memory) = root's. Waits.
Status broadcastBytes(loomComm_t comm, StreamOps& ops, void* data, size_t bytes, int root);

}  // namespace loom::ddp
