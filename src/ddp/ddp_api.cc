// The C entry points of include/loom/ddp.h: validate, call the reducer, turn a Status into a
// result code and a message loomDdpGetLastError can return.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/plan.h"
#include "base/log.h"
#include "core/registry.h"
#include "ddp/exchange.h"
#include "ddp/reducer.h"
#include "ddp/shape_check.h"
#include "loom/ddp.h"

#define LOOM_API extern "C" __attribute__((visibility("default")))

using loom::Status;
using loom::ddp::Reducer;

struct loomDdpReducer {
  std::unique_ptr<Reducer> reducer;
};

namespace {

thread_local std::string tLastError;

loomResult_t report(const Status& s, const char* call, Reducer* reducer = nullptr) {
  if (s.isOk()) return loomSuccess;
  const std::string message = std::string(call) + ": " + s.message();
  tLastError = message;
  if (reducer != nullptr) reducer->setLastError(message);
  LOOM_WARN("%s (%s)", message.c_str(), loomGetErrorString(s.code()));
  return s.code();
}

Status lookup(loomDdpReducer_t handle, Reducer** out) {
  if (handle == nullptr) return loom::error(loomInvalidArgument, "reducer is NULL");
  if (!loom::Registry::instance().reducers().contains(handle)) {
    return loom::error(loomInvalidUsage, "reducer %p is not a live reducer (destroyed, or never created)",
                       static_cast<void*>(handle));
  }
  *out = handle->reducer.get();
  return Status::ok();
}

bool isFloat(int type) {
  return type == loomFloat16 || type == loomBfloat16 || type == loomFloat32 || type == loomFloat64;
}

// Validates the tensor list; `floatsOnly` for gradients (they are averaged).
Status readTensors(const loomDdpTensor_t* tensors, int n, bool floatsOnly,
                   std::vector<loom::ddp::Gradient>* out) {
  if (n < 0) return loom::error(loomInvalidArgument, "tensor count %d is negative", n);
  if (n > 0 && tensors == nullptr) return loom::error(loomInvalidArgument, "tensors is NULL with count %d", n);
  for (int i = 0; i < n; ++i) {
    const loomDdpTensor_t& t = tensors[i];
    loom::ddp::Gradient g;
    g.name = t.name != nullptr ? std::string(t.name) : loom::format("tensor %d", i);
    int type = 0;
    static_assert(sizeof(type) == sizeof(t.type));
    std::memcpy(&type, &t.type, sizeof(type));  // a C caller may pass any int
    if (type < 0 || type >= loomNumTypes || (floatsOnly && !isFloat(type))) {
      return loom::error(loomInvalidArgument, "%d (%s): type %d is not %s", i, g.name.c_str(), type,
                         floatsOnly ? "a floating-point loomDataType_t (float16, bfloat16, float32, float64)"
                                    : "a loomDataType_t");
    }
    g.shape = {t.count, static_cast<loomDataType_t>(type)};
    if (t.count > SIZE_MAX / loom::typeSize(g.shape.type)) {
      return loom::error(loomInvalidArgument, "%d (%s): count %zu overflows size_t in bytes", i, g.name.c_str(), t.count);
    }
    if (t.data == nullptr && t.count > 0) {
      return loom::error(loomInvalidArgument, "%d (%s): data is NULL with count %zu", i, g.name.c_str(), t.count);
    }
    g.data = t.data;
    out->push_back(std::move(g));
  }
  // Overlapping buffers would be reduced twice (or read after being overwritten).
  std::vector<const loom::ddp::Gradient*> byAddress;
  for (const auto& g : *out) {
    if (g.shape.count > 0) byAddress.push_back(&g);
  }
  std::sort(byAddress.begin(), byAddress.end(), [](auto* a, auto* b) { return a->data < b->data; });
  for (size_t k = 1; k < byAddress.size(); ++k) {
    const auto* end = static_cast<const unsigned char*>(byAddress[k - 1]->data) + byAddress[k - 1]->bytes();
    if (end > byAddress[k]->data) {
      return loom::error(loomInvalidArgument, "tensors %s and %s overlap in memory",
                         byAddress[k - 1]->name.c_str(), byAddress[k]->name.c_str());
    }
  }
  return Status::ok();
}

Status readOptions(const loomDdpOptions_t* user, loomDdpOptions_t* out) {
  *out = LOOM_DDP_OPTIONS_INITIALIZER;
  if (user == nullptr) return Status::ok();
  *out = *user;
  if (out->bucketCapBytes == 0) return loom::error(loomInvalidArgument, "options.bucketCapBytes is 0");
  if (out->firstBucketCapBytes == 0) return loom::error(loomInvalidArgument, "options.firstBucketCapBytes is 0");
  if (out->unused != loomDdpUnusedZero && out->unused != loomDdpUnusedError) {
    return loom::error(loomInvalidArgument, "options.unused %d is not a loomDdpUnused_t", out->unused);
  }
  if (out->averaging != loomDdpPreDivide && out->averaging != loomDdpAvgOp) {
    return loom::error(loomInvalidArgument, "options.averaging %d is not a loomDdpAveraging_t", out->averaging);
  }
  if (out->compression < loomDdpAllReduce || out->compression > loomDdpBf16Compress) {
    return loom::error(loomInvalidArgument, "options.compression %d is not a loomDdpCompression_t",
                       out->compression);
  }
  return Status::ok();
}

template <typename Body>
loomResult_t withReducer(loomDdpReducer_t handle, const char* call, Body body) {
  Reducer* reducer = nullptr;
  Status found = lookup(handle, &reducer);
  if (!found.isOk()) return report(found, call);
  loom::log::RankScope scope(reducer->rank());
  return report(body(*reducer), call, reducer);
}

}  // namespace

LOOM_API loomResult_t loomDdpReducerCreate(loomDdpReducer_t* out, loomComm_t comm,
                                           const loomDdpTensor_t* gradients, int ngradients,
                                           const loomDdpOptions_t* options) {
  const char* call = "loomDdpReducerCreate";
  if (out == nullptr) return report(loom::error(loomInvalidArgument, "reducer (the output pointer) is NULL"), call);
  *out = nullptr;
  std::vector<loom::ddp::Gradient> list;
  loomDdpOptions_t resolved;
  Status s = readTensors(gradients, ngradients, true, &list);
  if (s.isOk()) s = readOptions(options, &resolved);
  int rank = -1;
  if (comm != nullptr) loomCommUserRank(comm, &rank);  // for the log prefix; errors come below
  loom::log::RankScope scope(rank);
  auto handle = std::make_unique<loomDdpReducer>();
  if (s.isOk()) s = Reducer::create(comm, std::move(list), resolved, &handle->reducer);
  if (!s.isOk()) return report(s, call);
  *out = handle.release();
  loom::Registry::instance().reducers().add(*out);
  return loomSuccess;
}

LOOM_API loomResult_t loomDdpReducerDestroy(loomDdpReducer_t handle) {
  Reducer* reducer = nullptr;
  Status found = lookup(handle, &reducer);
  if (!found.isOk()) return report(found, "loomDdpReducerDestroy");
  loom::Registry::instance().reducers().remove(handle);
  std::unique_ptr<loomDdpReducer> owned(handle);  // Create released it to the caller
  return loomSuccess;
}

LOOM_API loomResult_t loomDdpMarkReady(loomDdpReducer_t handle, int index) {
  return withReducer(handle, "loomDdpMarkReady", [&](Reducer& r) { return r.markReady(index); });
}

LOOM_API loomResult_t loomDdpFinish(loomDdpReducer_t handle) {
  return withReducer(handle, "loomDdpFinish", [&](Reducer& r) { return r.finish(); });
}

LOOM_API loomResult_t loomDdpSetSync(loomDdpReducer_t handle, int sync) {
  return withReducer(handle, "loomDdpSetSync", [&](Reducer& r) { return r.setSync(sync != 0); });
}

LOOM_API loomResult_t loomDdpGetBuckets(loomDdpReducer_t handle, int* bucketOf, int* nbuckets,
                                        int* rebuilds) {
  return withReducer(handle, "loomDdpGetBuckets", [&](Reducer& r) {
    r.buckets(bucketOf, nbuckets, rebuilds);
    return Status::ok();
  });
}

LOOM_API loomResult_t loomDdpBroadcastTensors(loomComm_t comm, const loomDdpTensor_t* tensors,
                                              int ntensors, int root) {
  const char* call = "loomDdpBroadcastTensors";
  std::vector<loom::ddp::Gradient> list;
  Status s = readTensors(tensors, ntensors, false, &list);
  int nranks = 0;
  if (s.isOk()) s = loom::ddp::fromLoom(loomCommCount(comm, &nranks), comm, "comm");
  if (s.isOk() && (root < 0 || root >= nranks)) {
    s = loom::error(loomInvalidArgument, "root %d is out of range [0, %d)", root, nranks);
  }
  std::unique_ptr<loom::ddp::StreamOps> ops;
  if (s.isOk()) s = loom::ddp::makeOpsFor(comm, nullptr, &ops);
  std::vector<loom::ddp::TensorShape> shapes;
  std::vector<std::string> names;
  for (const auto& t : list) {
    shapes.push_back(t.shape);
    names.push_back(t.name);
  }
  if (s.isOk()) s = loom::ddp::checkSameShapes(comm, shapes, names).withContext("the tensors");
  if (s.isOk()) {
    // One group: the broadcasts go out together instead of one round trip each.
    loomGroupStart();
    for (const auto& t : list) {
      Status b = loom::ddp::fromLoom(loomBroadcast(t.data, t.data, t.shape.count, t.shape.type, root,
                                                   comm, ops->stream()),
                                     comm, "loomBroadcast");
      if (s.isOk()) s = b;
    }
    Status g = loom::ddp::fromLoom(loomGroupEnd(), comm, "loomGroupEnd");
    if (s.isOk()) s = g;
    Status w = ops->synchronize();
    if (s.isOk()) s = w;
  }
  return report(s, call);
}

LOOM_API const char* loomDdpGetLastError(loomDdpReducer_t handle) {
  Reducer* reducer = nullptr;
  if (handle != nullptr && lookup(handle, &reducer).isOk()) return reducer->lastError();
  return tLastError.c_str();
}
