// The gradient reducer: buckets, readiness, launches, rebuild and no-sync (reducer.h).
#include "ddp/reducer.h"

#include <algorithm>
#include <cstdint>

#include "algorithms/plan.h"
#include "base/log.h"
#include "ddp/exchange.h"
#include "ddp/shape_check.h"

namespace loom::ddp {

size_t Gradient::bytes() const { return shape.count * typeSize(shape.type); }

Reducer::OwnedHostStream::~OwnedHostStream() {
  if (handle != nullptr) loomStreamDestroy(handle);
}

Reducer::Reducer(loomComm_t comm, int rank, int nranks, std::vector<Gradient> gradients,
                 const loomDdpOptions_t& options)
    : comm_(comm),
      rank_(rank),
      nranks_(nranks),
      gradients_(std::move(gradients)),
      options_(options),
      op_(options.averaging == loomDdpAvgOp ? loomAvg : loomSum),
      divisor_(options.averaging == loomDdpPreDivide ? nranks : 1),
      ready_(gradients_.size(), false) {}

Reducer::~Reducer() {
  // Launched buckets still read and write the gradients and the storage: let them end. An
  // error here was, or will be, reported by finish.
  if (ops_) (void)ops_->synchronize();
}

Status Reducer::create(loomComm_t comm, std::vector<Gradient> gradients,
                       const loomDdpOptions_t& options, std::unique_ptr<Reducer>* out) {
  int rank = 0, nranks = 0, device = -1;
  LOOM_TRY(fromLoom(loomCommUserRank(comm, &rank), comm, "loomCommUserRank"));
  LOOM_TRY(fromLoom(loomCommCount(comm, &nranks), comm, "loomCommCount"));
  LOOM_TRY(fromLoom(loomCommDevice(comm, &device), comm, "loomCommDevice"));
  std::unique_ptr<Reducer> reducer(new Reducer(comm, rank, nranks, std::move(gradients), options));

  loomStream_t stream = options.stream;
  if (stream == nullptr && device < 0) {
    LOOM_TRY(fromLoom(loomStreamCreate(&reducer->ownedStream_.handle), nullptr, "loomStreamCreate"));
    stream = reducer->ownedStream_.handle;
  }
  LOOM_TRY(makeOpsFor(comm, stream, &reducer->ops_));

  std::vector<TensorShape> shapes;
  std::vector<std::string> names;
  for (const Gradient& g : reducer->gradients_) {
    shapes.push_back(g.shape);
    names.push_back(g.name);
  }
  LOOM_TRY(checkSameShapes(comm, shapes, names).withContext("the gradients"));

  if (options.commHook != nullptr) {
    reducer->hook_ = makeUserHook(options.commHook, options.commHookState);
  } else if (options.compression == loomDdpAllReduce) {
    reducer->hook_ = makeAllReduceHook();
  } else {
    reducer->hook_ = makeCompressHook(
        options.compression == loomDdpFp16Compress ? loomFloat16 : loomBfloat16, *reducer->ops_);
  }
  LOOM_TRY(reducer->buildBuckets(reverseOrder(static_cast<int>(reducer->gradients_.size()))));
  // No rank reduces a bucket before every rank has allocated its own (exchange.h says why).
  LOOM_TRY(hostBarrier(comm).withContext("the buckets"));
  *out = std::move(reducer);
  return Status::ok();
}

Status Reducer::buildBuckets(const std::vector<int>& order) {
  std::vector<TensorShape> shapes;
  for (const Gradient& g : gradients_) shapes.push_back(g.shape);
  const BucketCaps caps{options_.firstBucketCapBytes, options_.bucketCapBytes};

  std::vector<Bucket> buckets;
  bucketOf_.assign(gradients_.size(), -1);
  offsetOf_.assign(gradients_.size(), 0);
  size_t largest = 0;
  for (std::vector<int>& members : assignBuckets(shapes, order, caps)) {
    // A bucket lays its gradients out in index order on every rank, whether it is a view
    // or copied: a rank whose buffers happen to be back to back must reduce element k
    // against the same element k as a rank that copies.
    std::sort(members.begin(), members.end());
    Bucket bucket;
    bucket.type = gradients_[members.front()].shape.type;
    bucket.view = true;
    for (int index : members) {
      bucketOf_[index] = static_cast<int>(buckets.size());
      offsetOf_[index] = bucket.count * typeSize(bucket.type);
      bucket.count += gradients_[index].shape.count;
      const auto address = [this](int i) { return reinterpret_cast<uintptr_t>(gradients_[i].data); };
      bucket.view = bucket.view && address(index) == address(members.front()) + offsetOf_[index];
    }
    bucket.gradients = std::move(members);
    if (bucket.view) {
      bucket.data = gradients_[bucket.gradients.front()].data;
    } else {
      LOOM_TRY(ops_->allocate(bucket.count * typeSize(bucket.type), &bucket.storage));
      bucket.data = bucket.storage.get();
    }
    bucket.pending = static_cast<int>(bucket.gradients.size());
    largest = std::max(largest, bucket.count);
    buckets.push_back(std::move(bucket));
  }
  buckets_ = std::move(buckets);
  LOOM_TRY(hook_->reserve(largest));
  LOOM_INFO("ddp: %s", describeBuckets().c_str());
  return Status::ok();
}

std::string Reducer::describeBuckets() const {
  std::string text = format("%zu gradients in %zu buckets%s:", gradients_.size(), buckets_.size(),
                            rebuilds_ > 0 ? " (rebuilt from rank 0's ready order)" : "");
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    text += format(" [%zu: %zu %s (%zu B, %s) gradients", b, bucket.count, typeName(bucket.type),
                   bucket.count * typeSize(bucket.type), bucket.view ? "view" : "copied");
    for (int index : bucket.gradients) text += format(" %d", index);
    text += "]";
  }
  return text;
}

Status Reducer::markReady(int index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (index < 0 || index >= static_cast<int>(gradients_.size())) {
    return error(loomInvalidArgument, "gradient index %d is out of range [0, %zu)", index, gradients_.size());
  }
  if (ready_[index]) {
    return error(loomInvalidUsage, "gradient %d (%s) was marked ready twice in this iteration", index,
                 gradients_[index].name.c_str());
  }
  ready_[index] = true;
  ++readyCount_;
  if (recordingOrder()) readyOrder_.push_back(index);
  if (!sync_) return Status::ok();
  return prepareGradient(index);
}

Status Reducer::prepareGradient(int index) {
  Bucket& bucket = buckets_[bucketOf_[index]];
  const Gradient& g = gradients_[index];
  if (bucket.view) {
    if (divisor_ > 1) LOOM_TRY(ops_->divide(g.data, g.data, g.shape.count, g.shape.type, divisor_));
  } else {
    void* slot = static_cast<unsigned char*>(bucket.data) + offsetOf_[index];
    if (divisor_ > 1) {
      LOOM_TRY(ops_->divide(slot, g.data, g.shape.count, g.shape.type, divisor_));
    } else {
      LOOM_TRY(ops_->copy(slot, g.data, g.bytes()));
    }
  }
  --bucket.pending;
  return launchCompleteBuckets();
}

// Buckets go in index order, so every rank issues the same collectives in the same order
// whatever order its gradients arrive in.
Status Reducer::launchCompleteBuckets() {
  Status status;
  while (nextBucket_ < buckets_.size() && buckets_[nextBucket_].pending == 0) {
    Status s = launch(buckets_[nextBucket_], static_cast<int>(nextBucket_));
    ++nextBucket_;
    if (!s.isOk() && status.isOk()) status = s;
  }
  if (!status.isOk() && firstError_.isOk()) firstError_ = status;
  return status;
}

Status Reducer::launch(Bucket& bucket, int index) {
  const loomDdpBucket_t view{bucket.data, bucket.count, bucket.type, op_, index, nranks_, comm_, ops_->stream()};
  LOOM_TRY(hook_->run(view).withContext(format("bucket %d", index)));
  if (bucket.view) return Status::ok();
  for (int gradient : bucket.gradients) {
    const Gradient& g = gradients_[gradient];
    LOOM_TRY(ops_->copy(g.data, static_cast<unsigned char*>(bucket.data) + offsetOf_[gradient], g.bytes()));
  }
  return Status::ok();
}

Status Reducer::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!sync_) {
    resetIteration();
    return Status::ok();
  }

  // Gradients never marked ready go as zeros, so that peers (which cannot know) still get
  // every collective they wait for.
  std::string missing;
  int nmissing = 0;
  for (size_t i = 0; i < gradients_.size(); ++i) {
    if (ready_[i]) continue;
    const Gradient& g = gradients_[i];
    if (nmissing < 8) missing += format("%s%zu (%s)", nmissing > 0 ? ", " : "", i, g.name.c_str());
    ++nmissing;
    ready_[i] = true;
    if (recordingOrder()) readyOrder_.push_back(static_cast<int>(i));
    Status s = ops_->zero(g.data, g.bytes());
    if (s.isOk()) s = prepareGradient(static_cast<int>(i));
    if (!s.isOk() && firstError_.isOk()) firstError_ = s;
  }
  if (nmissing > 8) missing += format(" and %d more", nmissing - 8);

  Status status = firstError_;
  Status waited = ops_->synchronize().withContext(format("waiting for the %zu buckets", buckets_.size()));
  if (status.isOk()) status = waited;
  const bool rebuild = recordingOrder();
  resetIteration();
  if (!status.isOk()) {
    readyOrder_.clear();  // a failed iteration's order is no guide; record the next one
    return status;
  }
  if (rebuild) LOOM_TRY(rebuildFromRankZero());

  if (nmissing > 0 && options_.unused == loomDdpUnusedError) {
    return error(loomInvalidUsage,
                 "%d gradient(s) were never marked ready in this iteration and were reduced as "
                 "zeros: %s",
                 nmissing, missing.c_str());
  }
  return Status::ok();
}

// torch rebuilds once, after the first iteration, in the order gradients became ready; rank
// 0's order wins so that every rank has the same buckets.
Status Reducer::rebuildFromRankZero() {
  std::vector<int32_t> order(readyOrder_.begin(), readyOrder_.end());
  order.resize(gradients_.size(), -1);
  LOOM_TRY(broadcastBytes(comm_, order.data(), order.size() * sizeof(int32_t), 0)
               .withContext("bucket rebuild"));
  std::vector<bool> seen(gradients_.size(), false);
  for (int32_t index : order) {
    if (index < 0 || index >= static_cast<int32_t>(gradients_.size()) || seen[index]) {
      return error(loomInternalError, "bucket rebuild: rank 0's ready order is not a permutation");
    }
    seen[index] = true;
  }
  readyOrder_.clear();
  rebuilds_ = 1;
  LOOM_TRY(buildBuckets(std::vector<int>(order.begin(), order.end())));
  return hostBarrier(comm_).withContext("bucket rebuild");
}

void Reducer::resetIteration() {
  std::fill(ready_.begin(), ready_.end(), false);
  readyCount_ = 0;
  for (Bucket& bucket : buckets_) bucket.pending = static_cast<int>(bucket.gradients.size());
  nextBucket_ = 0;
  firstError_ = Status();
}

Status Reducer::setSync(bool sync) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (readyCount_ > 0) {
    return error(loomInvalidUsage,
                 "loomDdpSetSync in the middle of an iteration (%d gradient(s) already marked "
                 "ready); call it before the first loomDdpMarkReady or after loomDdpFinish",
                 readyCount_);
  }
  sync_ = sync;
  return Status::ok();
}

void Reducer::buckets(int* bucketOf, int* nbuckets, int* rebuilds) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (bucketOf != nullptr) std::copy(bucketOf_.begin(), bucketOf_.end(), bucketOf);
  if (nbuckets != nullptr) *nbuckets = static_cast<int>(buckets_.size());
  if (rebuilds != nullptr) *rebuilds = rebuilds_;
}

void Reducer::setLastError(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  lastError_ = message;
}

const char* Reducer::lastError() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lastError_.c_str();
}

}  // namespace loom::ddp
