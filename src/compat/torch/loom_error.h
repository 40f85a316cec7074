// What a failed Loom call becomes in Python: a RuntimeError carrying Loom's own sentence.
#pragma once

#include <stdexcept>
#include <string>

#include "loom/loom.h"

namespace loom::torch_backend {

// `what` names the call where the communicator alone does not (its creation: comm is null).
inline std::runtime_error loomError(loomComm_t comm, const std::string& what = "") {
  return std::runtime_error("loom: " + (what.empty() ? "" : what + ": ") + loomGetLastError(comm));
}

}  // namespace loom::torch_backend
