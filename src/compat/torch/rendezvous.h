// A process group's Loom communicators are made through torch's store: rank 0 puts a fresh
// unique id under a key, the others get it there (the store's own wait and timeout apply).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>

#include "loom/loom.h"

namespace loom::torch_backend {

// The communicator of `rank` among `size` on `device` (-1: host memory), with every wait
// bounded by timeoutMs (torch's process-group timeout), its creation too. Throws a
// std::runtime_error with Loom's sentence when it cannot be made.
loomComm_t makeCommunicator(c10d::Store& store, const std::string& key, int rank, int size, int timeoutMs,
                            int device);

}  // namespace loom::torch_backend
