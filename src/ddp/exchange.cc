// Small host-byte exchanges for the DDP layer's bookkeeping (exchange.h).
#include "ddp/exchange.h"

#include <cstring>

#include "bootstrap/bootstrap.h"
#include "core/communicator.h"

namespace loom::ddp {

Status fromLoom(loomResult_t result, loomComm_t comm, const char* call) {
  if (result == loomSuccess) return Status::ok();
  return Status(result, std::string(call) + ": " + loomGetLastError(comm));
}

Status allGatherBytes(loomComm_t handle, const void* mine, size_t bytes, std::vector<unsigned char>* all) {
  Communicator* comm = nullptr;
  LOOM_TRY(lookupComm(handle, &comm));
  CommUse use(comm);
  all->assign(bytes * static_cast<size_t>(comm->nranks()), 0);
  if (bytes > 0) std::memcpy(all->data() + bytes * static_cast<size_t>(comm->rank()), mine, bytes);
  return comm->bootstrap().allGather(all->data(), bytes);
}

Status broadcastBytes(loomComm_t comm, void* data, size_t bytes, int root) {
  std::vector<unsigned char> all;
  LOOM_TRY(allGatherBytes(comm, data, bytes, &all));
  if (bytes > 0) std::memcpy(data, all.data() + bytes * static_cast<size_t>(root), bytes);
  return Status::ok();
}

Status hostBarrier(loomComm_t handle) {
  Communicator* comm = nullptr;
  LOOM_TRY(lookupComm(handle, &comm));
  CommUse use(comm);
  return comm->bootstrap().barrier();
}

}  // namespace loom::ddp
