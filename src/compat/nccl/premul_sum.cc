// ncclRedOpCreatePreMulSum's ops: their table and the multiplication of an input.
#include "compat/nccl/premul_sum.h"

#include <cstring>

#include "algorithms/plan.h"
#include "kernels/element_ops.h"

namespace loom::nccl {
namespace {

// scalar * x as a reduction's product: widened, multiplied and rounded once as the kernels do.
template <typename T>
void multiplyAll(const void* scalarBytes, const void* in, size_t count, unsigned char* out) {
  T scalar;
  std::memcpy(&scalar, scalarBytes, sizeof scalar);
  const unsigned char* src = static_cast<const unsigned char*>(in);
  for (size_t i = 0; i < count; ++i) {
    T x;
    std::memcpy(&x, src + i * sizeof(T), sizeof x);  // inputs need not be aligned
    const T y = device::narrow<T>(device::Prod::apply(device::widen(scalar), device::widen(x)));
    std::memcpy(out + i * sizeof(T), &y, sizeof y);
  }
}

}  // namespace

Status PreMulSumOps::create(loomDataType_t type, const void* scalar, bool immediate, int* op) {
  PreMulSum entry{type, immediate, {}, scalar};
  if (immediate) std::memcpy(entry.value, scalar, typeSize(type));
  std::lock_guard<std::mutex> lock(mutex_);
  size_t slot = 0;
  while (slot < ops_.size() && ops_[slot].has_value()) ++slot;
  if (slot == ops_.size()) ops_.emplace_back();
  ops_[slot] = entry;
  *op = kFirstOp + static_cast<int>(slot);
  return Status::ok();
}

Status PreMulSumOps::destroy(int op) {
  std::lock_guard<std::mutex> lock(mutex_);
  const long slot = static_cast<long>(op) - kFirstOp;
  if (slot < 0 || static_cast<size_t>(slot) >= ops_.size() || !ops_[static_cast<size_t>(slot)]) {
    return error(loomInvalidArgument, "op %d is not an op created by ncclRedOpCreatePreMulSum on this communicator",
                 op);
  }
  ops_[static_cast<size_t>(slot)].reset();
  return Status::ok();
}

Status PreMulSumOps::find(int op, PreMulSum* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  const long slot = static_cast<long>(op) - kFirstOp;
  if (slot < 0 || static_cast<size_t>(slot) >= ops_.size() || !ops_[static_cast<size_t>(slot)]) {
    return error(loomInvalidArgument,
                 "op %d is neither an ncclRedOp_t (0..%d) nor a live op from ncclRedOpCreatePreMulSum on this "
                 "communicator",
                 op, loomNumOps - 1);
  }
  *out = *ops_[static_cast<size_t>(slot)];
  return Status::ok();
}

void preMultiply(const PreMulSum& op, const void* in, size_t count, std::vector<unsigned char>* out) {
  out->resize(count * typeSize(op.type));
  const void* scalar = op.immediate ? static_cast<const void*>(op.value) : op.scalar;
  unsigned char* dst = out->data();
  device::byType(op.type, 0, [&](auto tag) {
    multiplyAll<typename decltype(tag)::type>(scalar, in, count, dst);
    return 0;
  });
}

}  // namespace loom::nccl
