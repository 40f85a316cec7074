// ProcessGroupLoom: each torch.distributed operation as Loom calls, queued on the Runner.
#include "compat/torch/process_group_loom.h"

#ifdef LOOM_TORCH_CUDA
#include "compat/torch/device_calls.h"
#endif
#include "compat/torch/loom_error.h"
#include "compat/torch/mapped_tensors.h"
#include "compat/torch/rendezvous.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace loom::torch_backend {
namespace {

const char kUniqueIdKey[] = "loom/unique_id";

[[noreturn]] void fail(const std::string& message) { throw std::runtime_error("loom: " + message); }

// Loom's element type for a tensor's dtype; bool travels as uint8 (only MIN, MAX and PRODUCT
// keep it 0 or 1, so reductions refuse the others).
loomDataType_t typeOf(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kChar: return loomInt8;
    case at::kByte: return loomUint8;
    case at::kBool: return loomUint8;
    case at::kInt: return loomInt32;
    case at::kLong: return loomInt64;
    case at::kHalf: return loomFloat16;
    case at::kFloat: return loomFloat32;
    case at::kDouble: return loomFloat64;
    case at::kBFloat16: return loomBfloat16;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
    case at::ScalarType::Float8_e4m3fn: return loomFloat8e4m3;
    case at::ScalarType::Float8_e5m2: return loomFloat8e5m2;
#endif
    default: fail(std::string("dtype ") + c10::toString(t.scalar_type()) + " is not supported by Loom");
  }
}

// A ReduceOp as Loom calls take it: one of Loom's ops, or PREMUL_SUM
// (torch.distributed._make_nccl_premul_sum), made on the communicator for each call as a
// loomRedOpCreatePreMulSum op. Its factor is a number (copied in the tensor's dtype) or a
// one-element tensor (read when the call runs, on the tensor's device: kept alive here).
// PREMUL_SUM's factor tensor; undefined where the factor is a number (torch 1.13 keeps a list
// of them, one per device).
at::Tensor factorTensor(const c10d::NCCLPreMulSumSupplement& supplement) {
#if TORCH_VERSION_MAJOR >= 2
  return supplement.tensor_factor;
#else
  return supplement.tensor_factors.empty() ? at::Tensor() : supplement.tensor_factors[0];
#endif
}

class Reduction {
 public:
  Reduction(const c10d::ReduceOp& op, const at::Tensor& t) {
    switch (op.op_) {
      case c10d::ReduceOp::SUM: op_ = loomSum; break;
      case c10d::ReduceOp::AVG: op_ = loomAvg; break;
      case c10d::ReduceOp::PRODUCT: op_ = loomProd; break;
      case c10d::ReduceOp::MIN: op_ = loomMin; break;
      case c10d::ReduceOp::MAX: op_ = loomMax; break;
      case c10d::ReduceOp::PREMUL_SUM: takeFactor(op, t); break;
      default:
        fail("reduce op " + std::to_string(static_cast<int>(op.op_)) +
             " (BAND, BOR, BXOR) is not supported by Loom: its ops are SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM");
    }
    if (t.scalar_type() == at::kBool && (op_ == loomSum || op_ == loomAvg || factor_.defined())) {
      fail("SUM, AVG and PREMUL_SUM of bool tensors are not supported by Loom (use MAX for a logical or, MIN for an "
           "and)");
    }
  }

  // call(op) with this reduction's op on comm.
  template <class Call>
  loomResult_t on(loomComm_t comm, Call call) const {
    if (!factor_.defined()) return call(op_);
    loomRedOp_t op = loomSum;
    loomResult_t r = loomRedOpCreatePreMulSum(&op, factor_.data_ptr(), type_, residence_, comm);
    if (r != loomSuccess) return r;
    r = call(op);
    // As soon as the call returns: a call still queued or in a group took the scalar along.
    const loomResult_t destroyed = loomRedOpDestroy(op, comm);
    return r != loomSuccess ? r : destroyed;
  }

 private:
  void takeFactor(const c10d::ReduceOp& op, const at::Tensor& t) {
    const auto* supplement = dynamic_cast<const c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
    if (supplement == nullptr) fail("PREMUL_SUM without its factor (make it with _make_nccl_premul_sum)");
    op_ = loomSum;
    type_ = typeOf(t);
    const at::Tensor factor = factorTensor(*supplement);
    if (!factor.defined()) {
      factor_ = at::scalar_tensor(supplement->double_factor, at::TensorOptions().dtype(t.scalar_type()));
      residence_ = loomScalarHostImmediate;
      return;
    }
    if (factor.numel() != 1 || factor.device() != t.device()) {
      fail("PREMUL_SUM's factor tensor must hold one element on the input's device");
    }
    factor_ = factor.to(t.scalar_type()).contiguous();
    residence_ = loomScalarDevice;
  }

  loomRedOp_t op_ = loomSum;
  loomDataType_t type_ = loomFloat32;
  loomScalarResidence_t residence_ = loomScalarHostImmediate;
  at::Tensor factor_;  // PREMUL_SUM only
};

#ifdef LOOM_TORCH_CUDA
constexpr bool kCudaTensors = true;
#else
constexpr bool kCudaTensors = false;
#endif

// A tensor Loom can take: dense, on the host, or on a CUDA device where built with CUDA.
void checkTensor(const at::Tensor& t, const char* what) {
  if (!t.defined()) fail(std::string(what) + " is an undefined tensor");
  if (!t.device().is_cpu() && !(kCudaTensors && t.device().is_cuda())) {
    fail(std::string(what) + " is on " + t.device().str() + "; this loom backend takes CPU tensors" +
         (kCudaTensors ? " and CUDA ones" : " (it was built against a torch without CUDA)"));
  }
  if (t.layout() != at::kStrided) fail(std::string(what) + " is not a dense (strided) tensor");
}

void checkSameDevice(const at::Tensor& a, const at::Tensor& b, const char* what) {
  if (a.device() != b.device()) {
    fail(std::string(what) + ": tensors on " + a.device().str() + " and " + b.device().str() + " in one call");
  }
}

void checkSingle(const std::vector<at::Tensor>& tensors, const char* what) {
  if (tensors.size() != 1) {
    fail(std::string(what) + ": the loom backend takes one tensor per call, got " + std::to_string(tensors.size()));
  }
  checkTensor(tensors[0], what);
}

void checkSame(const at::Tensor& a, const at::Tensor& b, const char* what) {
  checkSameDevice(a, b, what);
  if (a.scalar_type() != b.scalar_type()) {
    fail(std::string(what) + ": dtypes differ (" + c10::toString(a.scalar_type()) + " and " +
         c10::toString(b.scalar_type()) + ")");
  }
}

// The memory Loom works on: the tensor itself when contiguous, else a contiguous copy that
// copyBack() writes into it afterwards.
struct Buffer {
  at::Tensor tensor;  // the caller's
  at::Tensor data;    // contiguous
  explicit Buffer(const at::Tensor& t) : tensor(t), data(t.is_contiguous() ? t : t.contiguous()) {}
  void* ptr() const { return data.data_ptr(); }
  size_t count() const { return static_cast<size_t>(data.numel()); }
  void copyBack() const {
    if (!data.is_same(tensor)) tensor.copy_(data);
  }
};

// Makes `calls(keep)` between loomGroupStart and loomGroupEnd, every call even after one
// failed (so the group always closes); keep(result) records the first failure.
template <typename Calls>
loomResult_t grouped(Calls calls) {
  loomResult_t first = loomGroupStart();
  auto keep = [&first](loomResult_t r) {
    if (first == loomSuccess) first = r;
  };
  calls(keep);
  keep(loomGroupEnd());
  return first;
}

// Gather and scatter, one the mirror of the other: the root exchanges block p (count elements
// of `flat`) with rank p, and every rank `mine` with the root; a gather receives at the root,
// a scatter sends from it.
loomResult_t rootedBlocks(loomComm_t c, loomStream_t s, bool gather, const at::Tensor& flat, void* mine, size_t count,
                          loomDataType_t type, size_t elementSize, int root, int me, int n) {
  return grouped([&](auto keep) {
    auto move = [&](void* buf, int peer, bool receive) {
      keep(receive ? loomRecv(buf, count, type, peer, c, s) : loomSend(buf, count, type, peer, c, s));
    };
    if (me == root) {
      for (int p = 0; p < n; ++p) move(static_cast<char*>(flat.data_ptr()) + p * count * elementSize, p, gather);
    }
    move(mine, root, !gather);
  });
}

// The first tensor of a list, or none (which runs on the host).
at::Tensor first(const std::vector<at::Tensor>& tensors) { return tensors.empty() ? at::Tensor() : tensors[0]; }

// A new contiguous tensor of n blocks of `count` elements of like's dtype.
at::Tensor flatLike(const at::Tensor& like, int64_t count, int64_t n) { return at::empty({count * n}, like.options()); }

// The tensor forms' pair: two dense CPU tensors of one dtype, `whole` holding n times the
// elements of `part`.
void checkWholeAndPart(const at::Tensor& whole, const char* wholeName, const at::Tensor& part, const char* partName,
                       int n, const std::string& what) {
  checkTensor(whole, (what + " " + wholeName).c_str());
  checkTensor(part, (what + " " + partName).c_str());
  checkSame(whole, part, what.c_str());
  if (whole.numel() != part.numel() * n) {
    fail(what + ": the " + wholeName + " has " + std::to_string(whole.numel()) + " elements, not " +
         std::to_string(part.numel() * n));
  }
}

// all_gather_into_tensor of `n` ranks: output holds every rank's input, in rank order.
LoomOp allgatherIntoTensor(at::Tensor& output, at::Tensor& input, int n) {
  checkWholeAndPart(output, "output", input, "input", n, "all_gather_into_tensor");
  const at::Tensor in = input.contiguous();
  Buffer out(output);
  const loomDataType_t type = typeOf(in);
  return {[in, out, type](loomComm_t c, loomStream_t s) {
            return loomAllGather(in.data_ptr(), out.ptr(), static_cast<size_t>(in.numel()), type, c, s);
          },
          [out] { out.copyBack(); }, {output}, c10d::OpType::_ALLGATHER_BASE};
}

// reduce_scatter_tensor of `n` ranks: output gets this rank's block of the reduced input.
LoomOp reduceScatterTensor(at::Tensor& output, at::Tensor& input, const c10d::ReduceOp& reduceOp, int n) {
  checkWholeAndPart(input, "input", output, "output", n, "reduce_scatter_tensor");
  const at::Tensor in = input.contiguous();
  Buffer out(output);
  const loomDataType_t type = typeOf(in);
  const Reduction op(reduceOp, in);
  return {[in, out, type, op](loomComm_t c, loomStream_t s) {
            return op.on(c, [&](loomRedOp_t o) {
              return loomReduceScatter(in.data_ptr(), out.ptr(), out.count(), type, o, c, s);
            });
          },
          [out] { out.copyBack(); }, {output}, c10d::OpType::_REDUCE_SCATTER_BASE};
}

// Several operations as one: their calls in one group, then each one's finish.
LoomOp coalesced(std::vector<LoomOp> ops, c10d::OpType type) {
  std::vector<at::Tensor> outputs;
  for (const LoomOp& op : ops) outputs.insert(outputs.end(), op.outputs.begin(), op.outputs.end());
  auto shared = std::make_shared<std::vector<LoomOp>>(std::move(ops));
  return {[shared](loomComm_t c, loomStream_t s) {
            return grouped([&](auto keep) {
              for (LoomOp& op : *shared) keep(op.launch(c, s));
            });
          },
          [shared] {
            for (LoomOp& op : *shared) {
              if (op.finish) op.finish();
            }
          },
          std::move(outputs), type};
}

// Set by loom_torch's wrappers of torch.distributed's collectives while one issues its
// operation: whether its caller waits for it (setCallerWaits).
thread_local bool tCallerWaits = false;

// Whether an options type says itself whether the caller waits (asyncOp: torch 2.6 has it on
// some types and sets it for broadcast only; 2.8 on more).
template <typename Options, typename = void>
struct HasAsyncOp : std::false_type {};
template <typename Options>
struct HasAsyncOp<Options, std::void_t<decltype(std::declval<const Options&>().asyncOp)>> : std::true_type {};

// Whether the caller returns only once the operation has run (a plain `dist.all_reduce(t)`):
// the wrappers say so, or the options do (asyncOp, true unless torch set it false), for a
// call made past the wrappers.
template <typename Options>
bool waits([[maybe_unused]] const Options& opts) {
  if constexpr (HasAsyncOp<Options>::value) {
    if (!opts.asyncOp) return true;
  }
  return tCallerWaits;
}

// LOOM_TORCH_MAPPED_MIN_BYTES (nothing where unset): declared in src/base/env.cc's table, read
// here (libloom's readers are not exported).
std::optional<size_t> mappedMinBytesSetting() {
  const char* value = std::getenv("LOOM_TORCH_MAPPED_MIN_BYTES");
  if (value == nullptr || *value == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long bytes = std::strtoull(value, &end, 10);
  if (*end != '\0' || errno != 0 || value[0] == '-') {
    fail(std::string("LOOM_TORCH_MAPPED_MIN_BYTES=") + value + " is not a number of bytes");
  }
  return static_cast<size_t>(bytes);
}

}  // namespace

bool setCallerWaits(bool callerWaits) { return std::exchange(tCallerWaits, callerWaits); }

c10::intrusive_ptr<ProcessGroupBase> ProcessGroupLoom::create(const c10::intrusive_ptr<c10d::Store>& store,
                                                              int rank, int size,
                                                              std::chrono::duration<float> timeout) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
  const int timeoutMs = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(ms, INT32_MAX)));
  const std::optional<size_t> setting = mappedMinBytesSetting();  // refused before any thread starts
  auto group = c10::make_intrusive<ProcessGroupLoom>(store, rank, size, timeoutMs);
  // From here on, tensors made for this group's collectives (DDP's buckets) are placed where
  // the peers map them, if its allreduces can run mapped at all (every rank on this host):
  // from the size where they start to, unless the setting says otherwise.
  size_t groupMin = 0;
  const loomComm_t comm = group->runner_->comm();
  if (loomCommMappedMinBytes(comm, &groupMin) != loomSuccess) throw loomError(comm);
  const size_t minBytes = groupMin == 0 ? 0 : setting.value_or(groupMin);
  if (minBytes > 0) mapCpuTensorsFrom(minBytes);
  return group;
}

// ---- The process group ----------------------------------------------------------------------

ProcessGroupLoom::ProcessGroupLoom(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, int timeoutMs)
    : ProcessGroupBase(rank, size),
      runner_(std::make_shared<Runner>(makeCommunicator(*store, kUniqueIdKey, rank, size, timeoutMs, -1))),
      worker_([runner = runner_] { runner->work(); }) {
#ifdef LOOM_TORCH_CUDA
  device_ = std::make_shared<DeviceCalls>(store, rank, size, timeoutMs);
#endif
  init();
}

ProcessGroupLoom::~ProcessGroupLoom() {
  // The last reference may go with the GIL held (a DDP Reducer freed by Python) while the
  // worker needs the GIL: to complete a Future whose callbacks are Python (DDP's comm hooks),
  // or to free a finished batch's tensors. Stopping or joining with it held would wait forever.
  std::optional<pybind11::gil_scoped_release> noGil;
  if (Py_IsInitialized() && PyGILState_Check()) noGil.emplace();
  runner_->stop();
  worker_.join();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::enqueue(const at::Tensor& on, LoomOp op, bool callerWaits) {
#ifdef LOOM_TORCH_CUDA
  if (on.defined() && on.is_cuda()) return device_->run(std::move(op), on.device());
#endif
  return runner_->enqueue(runner_, rank_, std::move(op), callerWaits);
}

void ProcessGroupLoom::startCoalescing() {
  runner_->startCoalescing();
#ifdef LOOM_TORCH_CUDA
  device_->startCoalescing();
#endif
}

// torch 1.13's Works of the coalesced operations are those each call returned.
void ProcessGroupLoom::endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>&) { endCoalescing(); }

// A block holds one device type's operations (torch 2 coalesces per device): its Work is theirs.
c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::endCoalescing() {
  c10::intrusive_ptr<c10d::Work> host = runner_->endCoalescing();
#ifdef LOOM_TORCH_CUDA
  if (c10::intrusive_ptr<c10d::Work> device = device_->endCoalescing()) return device;
#endif
  return host;
}

// ---- Operations ----------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  checkSingle(tensors, "broadcast");
  Buffer b(tensors[0]);
  const loomDataType_t type = typeOf(b.data);
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(tensors[0], {[b, type, root](loomComm_t c, loomStream_t s) {
                                return loomBroadcast(b.ptr(), b.ptr(), b.count(), type, root, c, s);
                              },
                  [b] { b.copyBack(); }, tensors, c10d::OpType::BROADCAST}, waits(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  checkSingle(tensors, "allreduce");
  Buffer b(tensors[0]);
  const loomDataType_t type = typeOf(b.data);
  const Reduction op(opts.reduceOp, b.data);
  return enqueue(tensors[0], {[b, type, op](loomComm_t c, loomStream_t s) {
                                return op.on(c, [&](loomRedOp_t o) {
                                  return loomAllReduce(b.ptr(), b.ptr(), b.count(), type, o, c, s);
                                });
                              },
                  [b] { b.copyBack(); }, tensors, c10d::OpType::ALLREDUCE}, waits(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                     const c10d::AllreduceCoalescedOptions& opts) {
  std::vector<Buffer> buffers;
  std::vector<loomDataType_t> types;
  for (const at::Tensor& t : tensors) {
    checkTensor(t, "allreduce_coalesced");
    checkSameDevice(t, tensors[0], "allreduce_coalesced");
    buffers.emplace_back(t);
    types.push_back(typeOf(t));
  }
  std::vector<Reduction> ops;
  for (const at::Tensor& t : tensors) ops.emplace_back(opts.reduceOp, t);
  return enqueue(first(tensors), {[buffers, types, ops](loomComm_t c, loomStream_t s) {
                    return grouped([&](auto keep) {
                      for (size_t i = 0; i < buffers.size(); ++i) {
                        keep(ops[i].on(c, [&](loomRedOp_t o) {
                          return loomAllReduce(buffers[i].ptr(), buffers[i].ptr(), buffers[i].count(), types[i], o, c,
                                               s);
                        }));
                      }
                    });
                  },
                  [buffers] {
                    for (const Buffer& b : buffers) b.copyBack();
                  },
                  tensors, c10d::OpType::ALLREDUCE_COALESCED}, waits(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  checkSingle(tensors, "reduce");
  Buffer b(tensors[0]);
  const loomDataType_t type = typeOf(b.data);
  const Reduction op(opts.reduceOp, b.data);
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(tensors[0], {[b, type, op, root](loomComm_t c, loomStream_t s) {
                    return op.on(c, [&](loomRedOp_t o) {
                      return loomReduce(b.ptr(), b.ptr(), b.count(), type, o, root, c, s);
                    });
                  },
                  [b] { b.copyBack(); }, tensors, c10d::OpType::REDUCE}, waits(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllgatherOptions& opts) {
  checkSingle(inputs, "allgather");
  if (outputs.size() != 1 || outputs[0].size() != static_cast<size_t>(size_)) {
    fail("allgather: the output must be one list of " + std::to_string(size_) + " tensors");
  }
  const at::Tensor input = inputs[0].contiguous();
  for (const at::Tensor& o : outputs[0]) {
    checkTensor(o, "allgather output");
    checkSame(o, input, "allgather");
    if (o.numel() != input.numel()) fail("allgather: an output tensor's size differs from the input's");
  }
  const at::Tensor flat = flatLike(input, input.numel(), size_);
  const loomDataType_t type = typeOf(input);
  const std::vector<at::Tensor> outs = outputs[0];
  const int64_t n = input.numel();
  return enqueue(input, {[input, flat, type](loomComm_t c, loomStream_t s) {
                    return loomAllGather(input.data_ptr(), flat.data_ptr(), static_cast<size_t>(input.numel()), type,
                                         c, s);
                  },
                  [flat, outs, n] {
                    for (size_t r = 0; r < outs.size(); ++r) {
                      outs[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view(outs[r].sizes()));
                    }
                  },
                  outs, c10d::OpType::ALLGATHER}, waits(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::AllgatherOptions& opts) {
  return enqueue(input, allgatherIntoTensor(output, input, size_), waits(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                 std::vector<at::Tensor>& inputs,
                                                                                 const c10d::AllgatherOptions& opts) {
  if (outputs.size() != inputs.size()) fail("allgather_into_tensor_coalesced: as many outputs as inputs are needed");
  for (const at::Tensor& t : inputs) checkSameDevice(t, inputs[0], "allgather_into_tensor_coalesced");
  std::vector<LoomOp> ops;
  for (size_t i = 0; i < inputs.size(); ++i) ops.push_back(allgatherIntoTensor(outputs[i], inputs[i], size_));
  return enqueue(first(inputs), coalesced(std::move(ops), c10d::OpType::ALLGATHER_COALESCED), waits(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                     std::vector<at::Tensor>& inputs,
                                                                     const c10d::AllgatherOptions& opts) {
  if (outputs.size() != static_cast<size_t>(size_)) {
    fail("allgather_coalesced: the output must hold one list per rank (" + std::to_string(size_) + ")");
  }
  // outputs[r][i] receives rank r's inputs[i].
  std::vector<at::Tensor> ins, flats;
  std::vector<loomDataType_t> types;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(inputs[i], "allgather_coalesced input");
    checkSameDevice(inputs[i], inputs[0], "allgather_coalesced");
    ins.push_back(inputs[i].contiguous());
    flats.push_back(flatLike(ins.back(), ins.back().numel(), size_));
    types.push_back(typeOf(ins.back()));
    for (int r = 0; r < size_; ++r) {
      if (outputs[static_cast<size_t>(r)].size() != inputs.size() ||
          outputs[static_cast<size_t>(r)][i].numel() != inputs[i].numel()) {
        fail("allgather_coalesced: output list " + std::to_string(r) + " does not match the inputs");
      }
      checkSame(outputs[static_cast<size_t>(r)][i], inputs[i], "allgather_coalesced");
    }
  }
  std::vector<at::Tensor> all;
  for (const auto& list : outputs) all.insert(all.end(), list.begin(), list.end());
  const std::vector<std::vector<at::Tensor>> outs = outputs;
  return enqueue(first(ins), {[ins, flats, types](loomComm_t c, loomStream_t s) {
                    return grouped([&](auto keep) {
                      for (size_t i = 0; i < ins.size(); ++i) {
                        keep(loomAllGather(ins[i].data_ptr(), flats[i].data_ptr(), static_cast<size_t>(ins[i].numel()),
                                           types[i], c, s));
                      }
                    });
                  },
                  [ins, flats, outs] {
                    for (size_t i = 0; i < ins.size(); ++i) {
                      const int64_t n = ins[i].numel();
                      for (size_t r = 0; r < outs.size(); ++r) {
                        outs[r][i].copy_(flats[i].narrow(0, static_cast<int64_t>(r) * n, n).view(outs[r][i].sizes()));
                      }
                    }
                  },
                  all, c10d::OpType::ALLGATHER_COALESCED}, waits(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::GatherOptions& opts) {
  checkSingle(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  if (root < 0 || root >= size_) fail("gather: root " + std::to_string(root) + " is out of range");
  const at::Tensor input = inputs[0].contiguous();
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    if (outputs.size() != 1 || outputs[0].size() != static_cast<size_t>(size_)) {
      fail("gather: the root's output must be one list of " + std::to_string(size_) + " tensors");
    }
    outs = outputs[0];
    for (const at::Tensor& o : outs) {
      checkTensor(o, "gather output");
      checkSame(o, input, "gather");
      if (o.numel() != input.numel()) fail("gather: an output tensor's size differs from the input's");
    }
  } else if (!outputs.empty() && !outputs[0].empty()) {
    fail("gather: only the root passes output tensors");
  }
  const at::Tensor flat = rank_ == root ? flatLike(input, input.numel(), size_) : at::Tensor();
  const loomDataType_t type = typeOf(input);
  const int me = rank_, n = size_;
  return enqueue(input, {[input, flat, type, root, me, n](loomComm_t c, loomStream_t s) {
                    return rootedBlocks(c, s, true, flat, input.data_ptr(), static_cast<size_t>(input.numel()), type,
                                        input.element_size(), root, me, n);
                  },
                  [flat, outs] {
                    for (size_t p = 0; p < outs.size(); ++p) {
                      const int64_t k = outs[p].numel();
                      outs[p].copy_(flat.narrow(0, static_cast<int64_t>(p) * k, k).view(outs[p].sizes()));
                    }
                  },
                  outs, c10d::OpType::GATHER}, waits(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& inputs,
                                                         const c10d::ScatterOptions& opts) {
  checkSingle(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  if (root < 0 || root >= size_) fail("scatter: root " + std::to_string(root) + " is out of range");
  Buffer out(outputs[0]);
  at::Tensor flat;
  if (rank_ == root) {
    if (inputs.size() != 1 || inputs[0].size() != static_cast<size_t>(size_)) {
      fail("scatter: the root's input must be one list of " + std::to_string(size_) + " tensors");
    }
    for (const at::Tensor& t : inputs[0]) {
      checkTensor(t, "scatter input");
      checkSame(t, out.data, "scatter");
      if (t.numel() != out.data.numel()) fail("scatter: an input tensor's size differs from the output's");
    }
    std::vector<at::Tensor> pieces;
    for (const at::Tensor& t : inputs[0]) pieces.push_back(t.reshape({-1}));
    flat = at::cat(pieces);
  } else if (!inputs.empty() && !inputs[0].empty()) {
    fail("scatter: only the root passes input tensors");
  }
  const loomDataType_t type = typeOf(out.data);
  const int me = rank_, n = size_;
  return enqueue(outputs[0], {[out, flat, type, root, me, n](loomComm_t c, loomStream_t s) {
                    return rootedBlocks(c, s, false, flat, out.ptr(), out.count(), type, out.data.element_size(), root,
                                        me, n);
                  },
                  [out] { out.copyBack(); }, outputs, c10d::OpType::SCATTER}, waits(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                                const c10d::ReduceScatterOptions& opts) {
  checkSingle(outputs, "reduce_scatter");
  if (inputs.size() != 1 || inputs[0].size() != static_cast<size_t>(size_)) {
    fail("reduce_scatter: the input must be one list of " + std::to_string(size_) + " tensors");
  }
  Buffer out(outputs[0]);
  std::vector<at::Tensor> pieces;
  for (const at::Tensor& t : inputs[0]) {
    checkTensor(t, "reduce_scatter input");
    checkSame(t, out.data, "reduce_scatter");
    if (t.numel() != out.data.numel()) fail("reduce_scatter: an input tensor's size differs from the output's");
    pieces.push_back(t.reshape({-1}));
  }
  const at::Tensor flat = at::cat(pieces);
  const loomDataType_t type = typeOf(out.data);
  const Reduction op(opts.reduceOp, out.data);
  return enqueue(outputs[0], {[out, flat, type, op](loomComm_t c, loomStream_t s) {
                    return op.on(c, [&](loomRedOp_t o) {
                      return loomReduceScatter(flat.data_ptr(), out.ptr(), out.count(), type, o, c, s);
                    });
                  },
                  [out] { out.copyBack(); }, outputs, c10d::OpType::REDUCE_SCATTER}, waits(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                      const c10d::ReduceScatterOptions& opts) {
  return enqueue(input, reduceScatterTensor(output, input, opts.reduceOp, size_), waits(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  if (outputs.size() != inputs.size()) fail("reduce_scatter_tensor_coalesced: as many outputs as inputs are needed");
  for (const at::Tensor& t : inputs) checkSameDevice(t, inputs[0], "reduce_scatter_tensor_coalesced");
  std::vector<LoomOp> ops;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ops.push_back(reduceScatterTensor(outputs[i], inputs[i], opts.reduceOp, size_));
  }
  return enqueue(first(inputs), coalesced(std::move(ops), c10d::OpType::_REDUCE_SCATTER_BASE), waits(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                               std::vector<int64_t>& outputSplitSizes,
                                                               std::vector<int64_t>& inputSplitSizes,
                                                               const c10d::AllToAllOptions& opts) {
  checkTensor(input, "all_to_all_single input");
  checkTensor(output, "all_to_all_single output");
  checkSame(output, input, "all_to_all_single");
  const at::Tensor in = input.contiguous();
  Buffer out(output);
  const loomDataType_t type = typeOf(in);
  if (outputSplitSizes.empty() && inputSplitSizes.empty()) {
    if (in.numel() % size_ != 0 || out.data.numel() != in.numel()) {
      fail("all_to_all_single: without split sizes input and output must hold the same multiple of " +
           std::to_string(size_) + " elements");
    }
    const size_t count = static_cast<size_t>(in.numel() / size_);
    return enqueue(in, {[in, out, type, count](loomComm_t c, loomStream_t s) {
                      return loomAllToAll(in.data_ptr(), out.ptr(), count, type, c, s);
                    },
                    [out] { out.copyBack(); }, {output}, c10d::OpType::ALLTOALL_BASE}, waits(opts));
  }
  // Split sizes count rows of dimension 0; every peer gets its rows as one send.
  auto splits = [this](std::vector<int64_t> s, const at::Tensor& t, const char* what) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    if (s.empty()) s.assign(static_cast<size_t>(size_), rows / size_);
    if (s.size() != static_cast<size_t>(size_)) {
      fail(std::string("all_to_all_single: ") + what + " needs one size per rank");
    }
    int64_t sum = 0;
    for (int64_t v : s) sum += v;
    if (sum != rows) fail(std::string("all_to_all_single: ") + what + " sizes add up to " + std::to_string(sum) +
                          ", not the " + std::to_string(rows) + " rows of dimension 0");
    return s;
  };
  const std::vector<int64_t> sendRows = splits(inputSplitSizes, in, "input split");
  const std::vector<int64_t> recvRows = splits(outputSplitSizes, out.data, "output split");
  const int64_t rowElems = in.dim() == 0 || in.size(0) == 0 ? 1 : in.numel() / in.size(0);
  const int64_t outRowElems = out.data.dim() == 0 || out.data.size(0) == 0 ? 1 : out.data.numel() / out.data.size(0);
  if (rowElems != outRowElems) fail("all_to_all_single: input and output rows differ in size");
  return enqueue(in, {[in, out, type, sendRows, recvRows, rowElems](loomComm_t c, loomStream_t s) {
                    const size_t es = in.element_size();
                    return grouped([&](auto keep) {
                      int64_t sendAt = 0, recvAt = 0;
                      for (size_t p = 0; p < sendRows.size(); ++p) {
                        const int peer = static_cast<int>(p);
                        keep(loomSend(static_cast<const char*>(in.data_ptr()) + sendAt * rowElems * es,
                                      static_cast<size_t>(sendRows[p] * rowElems), type, peer, c, s));
                        keep(loomRecv(static_cast<char*>(out.ptr()) + recvAt * rowElems * es,
                                      static_cast<size_t>(recvRows[p] * rowElems), type, peer, c, s));
                        sendAt += sendRows[p];
                        recvAt += recvRows[p];
                      }
                    });
                  },
                  [out] { out.copyBack(); }, {output}, c10d::OpType::ALLTOALL_BASE}, waits(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& opts) {
  if (outputs.size() != static_cast<size_t>(size_) || inputs.size() != static_cast<size_t>(size_)) {
    fail("all_to_all: input and output must be lists of " + std::to_string(size_) + " tensors");
  }
  std::vector<at::Tensor> ins;
  std::vector<Buffer> outs;
  for (int p = 0; p < size_; ++p) {
    checkTensor(inputs[static_cast<size_t>(p)], "all_to_all input");
    checkSameDevice(inputs[static_cast<size_t>(p)], inputs[0], "all_to_all");
    checkTensor(outputs[static_cast<size_t>(p)], "all_to_all output");
    checkSame(inputs[static_cast<size_t>(p)], outputs[static_cast<size_t>(p)], "all_to_all");
    ins.push_back(inputs[static_cast<size_t>(p)].contiguous());
    outs.emplace_back(outputs[static_cast<size_t>(p)]);
  }
  const loomDataType_t type = typeOf(ins[0]);
  return enqueue(ins[0], {[ins, outs, type](loomComm_t c, loomStream_t s) {
                    return grouped([&](auto keep) {
                      for (size_t p = 0; p < ins.size(); ++p) {
                        keep(loomSend(ins[p].data_ptr(), static_cast<size_t>(ins[p].numel()), type,
                                      static_cast<int>(p), c, s));
                        keep(loomRecv(outs[p].ptr(), outs[p].count(), type, static_cast<int>(p), c, s));
                      }
                    });
                  },
                  [outs] {
                    for (const Buffer& b : outs) b.copyBack();
                  },
                  outputs, c10d::OpType::ALLTOALL}, waits(opts));
}

// Tags are not matched: messages between a pair of ranks are matched in the order they were
// issued, as Loom's are (docs/COMPAT_TORCH.md).
c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::send(std::vector<at::Tensor>& tensors, int dstRank, int) {
  checkSingle(tensors, "send");
  const at::Tensor t = tensors[0].contiguous();
  const loomDataType_t type = typeOf(t);
  return enqueue(t, {[t, type, dstRank](loomComm_t c, loomStream_t s) {
                    return loomSend(t.data_ptr(), static_cast<size_t>(t.numel()), type, dstRank, c, s);
                  },
                  nullptr, tensors, c10d::OpType::SEND}, false);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::recv(std::vector<at::Tensor>& tensors, int srcRank, int) {
  checkSingle(tensors, "recv");
  Buffer b(tensors[0]);
  const loomDataType_t type = typeOf(b.data);
  return enqueue(tensors[0], {[b, type, srcRank](loomComm_t c, loomStream_t s) {
                                return loomRecv(b.ptr(), b.count(), type, srcRank, c, s);
                              },
                  [b] { b.copyBack(); }, tensors, c10d::OpType::RECV}, false);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::recvAnysource(std::vector<at::Tensor>&, int) {
  fail("recv from any source is not supported by Loom: name the source rank");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::barrier(const c10d::BarrierOptions& opts) {
  return enqueue(at::Tensor(), {[](loomComm_t c, loomStream_t s) { return loomBarrier(c, s); }, nullptr, {},
                                c10d::OpType::BARRIER}, waits(opts));
}

}  // namespace loom::torch_backend
