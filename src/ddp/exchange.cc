// Small host-byte collectives for the DDP layer's bookkeeping (exchange.h).
#include "ddp/exchange.h"

namespace loom::ddp {

Status fromLoom(loomResult_t result, loomComm_t comm, const char* call) {
  if (result == loomSuccess) return Status::ok();
  return Status(result, std::string(call) + ": " + loomGetLastError(comm));
}

Status allGatherBytes(loomComm_t comm, StreamOps& ops, const void* mine, size_t bytes,
                      std::vector<unsigned char>* all) {
  int nranks = 0;
  LOOM_TRY(fromLoom(loomCommCount(comm, &nranks), comm, "loomCommCount"));
  StreamOps::Memory staging(nullptr, nullptr);
  LOOM_TRY(ops.allocate(bytes * nranks, &staging));
  int rank = 0;
  LOOM_TRY(fromLoom(loomCommUserRank(comm, &rank), comm, "loomCommUserRank"));
  auto* base = static_cast<unsigned char*>(staging.get());
  LOOM_TRY(ops.copy(base + rank * bytes, mine, bytes));
  LOOM_TRY(fromLoom(loomAllGather(base + rank * bytes, base, bytes, loomUint8, comm, ops.stream()),
                    comm, "loomAllGather"));
  all->resize(bytes * nranks);
  LOOM_TRY(ops.copy(all->data(), base, bytes * nranks));
  return ops.synchronize();
}

Status broadcastBytes(loomComm_t comm, StreamOps& ops, void* data, size_t bytes, int root) {
  StreamOps::Memory staging(nullptr, nullptr);
  LOOM_TRY(ops.allocate(bytes, &staging));
  LOOM_TRY(ops.copy(staging.get(), data, bytes));
  LOOM_TRY(fromLoom(loomBroadcast(staging.get(), staging.get(), bytes, loomUint8, root, comm, ops.stream()),
                    comm, "loomBroadcast"));
  LOOM_TRY(ops.copy(data, staging.get(), bytes));
  return ops.synchronize();
}

}  // namespace loom::ddp
