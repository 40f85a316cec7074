// Communication hooks: what a launched bucket does to become the reduction over ranks.
// torch's default ALLREDUCE and FP16/BF16_COMPRESS hooks are built in; a user's C hook is
// called as it is.
#pragma once

#include <cstddef>
#include <memory>

#include "base/status.h"
#include "ddp/stream_ops.h"
#include "loom/ddp.h"

namespace loom::ddp {

class CommHook {
 public:
  virtual ~CommHook() = default;
  // Called when the buckets are (re)built, with nothing in flight: the largest bucket, in
  // elements, that run() may be given.
  virtual Status reserve(size_t maxCount) = 0;
  // Enqueues the bucket's reduction on bucket.stream (through ops for elementwise work).
  virtual Status run(const loomDdpBucket_t& bucket) = 0;
};

// loomAllReduce of the bucket in place.
std::unique_ptr<CommHook> makeAllReduceHook();

// float32 buckets travel as `wire` (float16 or bfloat16) in a scratch buffer from ops;
// other types go as they are.
std::unique_ptr<CommHook> makeCompressHook(loomDataType_t wire, StreamOps& ops);

// The user's function and state.
std::unique_ptr<CommHook> makeUserHook(loomDdpCommHook_t hook, void* state);

}  // namespace loom::ddp
