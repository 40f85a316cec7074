// A communicator's premultiplied-sum ops (loomRedOpCreatePreMulSum): the sum over ranks of
// each rank's input multiplied by its scalar first. Numbered from loomNumOps up, as NCCL
// numbers its ncclRedOpCreatePreMulSum ops; a destroyed op's number is given again by a later
// create. Thread-safe.
#pragma once

#include <mutex>
#include <optional>
#include <vector>

#include "algorithms/plan.h"
#include "base/status.h"
#include "loom/loom.h"

namespace loom {

class PreMulOps {
 public:
  static constexpr int kFirstOp = loomNumOps;

  // `scalar` points at one element of `type`: copied now when `immediate`, else read through
  // at each use.
  Status create(loomDataType_t type, const void* scalar, bool immediate, int* op);
  Status destroy(int op);
  // What a call with op `op` of `type` multiplies by; an error when `op` is not a live op of
  // this communicator or was made for another type.
  Status find(int op, loomDataType_t type, PreMul* out);

 private:
  struct Entry {
    loomDataType_t type;
    PreMul preMul;
  };
  // The slot of a live op numbered `op` (null: none); the caller holds mutex_.
  std::optional<Entry>* liveSlot(int op);

  std::mutex mutex_;
  std::vector<std::optional<Entry>> ops_;
};

}  // namespace loom
