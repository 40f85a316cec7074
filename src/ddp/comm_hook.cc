// The built-in communication hooks and the user hook's adapter (comm_hook.h).
#include "ddp/comm_hook.h"

#include "algorithms/plan.h"
#include "ddp/exchange.h"

namespace loom::ddp {
namespace {

Status allReduceInPlace(void* data, size_t count, loomDataType_t type, const loomDdpBucket_t& bucket) {
  return fromLoom(loomAllReduce(data, data, count, type, bucket.op, bucket.comm, bucket.stream),
                  bucket.comm, "loomAllReduce");
}

class AllReduceHook : public CommHook {
 public:
  Status reserve(size_t) override { return Status::ok(); }
  Status run(const loomDdpBucket_t& bucket) override {
    return allReduceInPlace(bucket.data, bucket.count, bucket.type, bucket);
  }
};

// One scratch buffer serves every bucket: the stream runs buckets one after another, so a
// bucket's widening back is done before the next one's narrowing starts.
class CompressHook : public CommHook {
 public:
  CompressHook(loomDataType_t wire, StreamOps& ops) : wire_(wire), ops_(ops) {}

  Status reserve(size_t maxCount) override {
    if (maxCount <= reserved_) return Status::ok();
    LOOM_TRY(ops_.allocate(maxCount * typeSize(wire_), &scratch_));
    reserved_ = maxCount;
    return Status::ok();
  }

  Status run(const loomDdpBucket_t& bucket) override {
    if (bucket.type != loomFloat32) return allReduceInPlace(bucket.data, bucket.count, bucket.type, bucket);
    LOOM_TRY(ops_.convert(scratch_.get(), wire_, bucket.data, loomFloat32, bucket.count));
    LOOM_TRY(allReduceInPlace(scratch_.get(), bucket.count, wire_, bucket));
    return ops_.convert(bucket.data, loomFloat32, scratch_.get(), wire_, bucket.count);
  }

 private:
  loomDataType_t wire_;
  StreamOps& ops_;
  StreamOps::Memory scratch_{nullptr, nullptr};
  size_t reserved_ = 0;
};

class UserHook : public CommHook {
 public:
  UserHook(loomDdpCommHook_t hook, void* state) : hook_(hook), state_(state) {}
  Status reserve(size_t) override { return Status::ok(); }
  Status run(const loomDdpBucket_t& bucket) override {
    const loomResult_t result = hook_(state_, &bucket);
    if (result == loomSuccess) return Status::ok();
    return error(result, "the communication hook failed on bucket %d (%s; the communicator says: \"%s\")",
                 bucket.index, loomGetErrorString(result), loomGetLastError(bucket.comm));
  }

 private:
  loomDdpCommHook_t hook_;
  void* state_;
};

}  // namespace

std::unique_ptr<CommHook> makeAllReduceHook() { return std::make_unique<AllReduceHook>(); }

std::unique_ptr<CommHook> makeCompressHook(loomDataType_t wire, StreamOps& ops) {
  return std::make_unique<CompressHook>(wire, ops);
}

std::unique_ptr<CommHook> makeUserHook(loomDdpCommHook_t hook, void* state) {
  return std::make_unique<UserHook>(hook, state);
}

}  // namespace loom::ddp
