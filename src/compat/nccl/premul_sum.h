// ncclRedOpCreatePreMulSum's operations: a sum of every rank's input multiplied by a
// scalar first. Loom's collectives only sum, so the shim multiplies the input into a
// scratch buffer and sums that (host communicators; device ones refuse these ops).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "base/status.h"
#include "loom/loom.h"

namespace loom::nccl {

struct PreMulSum {
  loomDataType_t type;
  // ncclScalarHostImmediate: the value, copied at creation. ncclScalarDevice: read through
  // `scalar` at each call (on a host communicator the "device" memory is host memory).
  bool immediate;
  unsigned char value[8];
  const void* scalar;
};

// One communicator's created ops. NCCL numbers them from ncclNumOps (5) up; a destroyed
// op's number is given again by a later create. Thread-safe.
class PreMulSumOps {
 public:
  static constexpr int kFirstOp = loomNumOps;

  Status create(loomDataType_t type, const void* scalar, bool immediate, int* op);
  Status destroy(int op);
  // The op numbered `op`; an error when it is not a live op of this communicator.
  Status find(int op, PreMulSum* out);

 private:
  std::mutex mutex_;
  std::vector<std::optional<PreMulSum>> ops_;
};

// out = scalar * in, `count` elements of op.type: integers wrap as unsigned arithmetic
// does, float16/bfloat16 multiply in float32 and round to nearest-even.
void preMultiply(const PreMulSum& op, const void* in, size_t count, std::vector<unsigned char>* out);

}  // namespace loom::nccl
