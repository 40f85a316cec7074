// The gradient reducer behind include/loom/ddp.h: buckets, readiness, launch order, the
// one-time rebuild, no-sync iterations and unused gradients. The contract is the header's.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "ddp/bucket_assignment.h"
#include "ddp/comm_hook.h"
#include "ddp/stream_ops.h"
#include "loom/ddp.h"

namespace loom::ddp {

struct Gradient {
  void* data = nullptr;
  TensorShape shape;
  std::string name;
  size_t bytes() const;
};

class Reducer {
 public:
  // Collective over comm (the shape check). Arguments are validated by the caller.
  static Status create(loomComm_t comm, std::vector<Gradient> gradients,
                       const loomDdpOptions_t& options, std::unique_ptr<Reducer>* out);
  // Waits for what is in flight.
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  int rank() const { return rank_; }
  Status markReady(int index);
  Status finish();
  Status setSync(bool sync);
  void buckets(int* bucketOf, int* nbuckets, int* rebuilds) const;

  // The last error of a call on this reducer (for loomDdpGetLastError).
  void setLastError(const std::string& message);
  const char* lastError() const;

 private:
  struct Bucket {
    std::vector<int> gradients;  // in index order, which is also their order in data
    loomDataType_t type = loomFloat32;
    size_t count = 0;            // elements
    void* data = nullptr;        // where the bucket is reduced
    bool view = false;           // data is the gradients themselves, back to back
    StreamOps::Memory storage{nullptr, nullptr};  // copy mode
    int pending = 0;             // gradients of this iteration not yet ready
  };

  Reducer(loomComm_t comm, int rank, int nranks, std::vector<Gradient> gradients,
          const loomDdpOptions_t& options);

  // (Re)builds buckets from an expected ready order. Nothing may be in flight.
  Status buildBuckets(const std::vector<int>& order);
  Status rebuildFromRankZero();
  // Moves gradient `index` into its bucket (dividing it), then launches what is complete.
  Status prepareGradient(int index);
  Status launchCompleteBuckets();
  Status launch(Bucket& bucket, int index);
  void resetIteration();
  // Ready order is recorded in synchronised iterations until the one rebuild.
  bool recordingOrder() const { return sync_ && options_.rebuildBuckets && rebuilds_ == 0; }
  std::string describeBuckets() const;

  loomComm_t comm_;
  int rank_;
  int nranks_;
  std::vector<Gradient> gradients_;
  loomDdpOptions_t options_;
  loomRedOp_t op_;
  int divisor_;  // 1: no pre-division

  // The reducer's own host stream when the options gave none (released after ops_).
  struct OwnedHostStream {
    loomStream_t handle = nullptr;
    ~OwnedHostStream();
  } ownedStream_;
  std::unique_ptr<StreamOps> ops_;
  std::unique_ptr<CommHook> hook_;

  mutable std::mutex mutex_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucketOf_;
  std::vector<size_t> offsetOf_;  // byte offset of each gradient in its bucket (copy mode)
  std::vector<bool> ready_;
  std::vector<int> readyOrder_;  // recorded until the rebuild
  int readyCount_ = 0;
  size_t nextBucket_ = 0;        // buckets before it are launched
  bool sync_ = true;
  int rebuilds_ = 0;
  Status firstError_;            // of this iteration's launches
  std::string lastError_;
};

}  // namespace loom::ddp
