// ncclRedOpCreatePreMulSum's ops: their table and the multiplication of an input.
#include "compat/nccl/premul_sum.h"

#include <cstring>
#include <type_traits>

#include "algorithms/plan.h"

#define LOOM_KERNELS_ISA nccl_premul_sum
#include "kernels/float16.h"
#undef LOOM_KERNELS_ISA

namespace loom::nccl {
namespace {

namespace f16 = loom::kernels::nccl_premul_sum;

struct Half { uint16_t bits; };
struct Bfloat16 { uint16_t bits; };

template <typename T>
T multiply(T scalar, T x) {
  if constexpr (std::is_same_v<T, Half>) {
    return Half{f16::floatToHalf(f16::halfToFloat(scalar.bits) * f16::halfToFloat(x.bits))};
  } else if constexpr (std::is_same_v<T, Bfloat16>) {
    return Bfloat16{f16::floatToBfloat16(f16::bfloat16ToFloat(scalar.bits) * f16::bfloat16ToFloat(x.bits))};
  } else if constexpr (std::is_integral_v<T>) {
    // Unsigned arithmetic wraps where signed overflow would be undefined.
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(scalar) * static_cast<U>(x)));
  } else {
    return scalar * x;
  }
}

template <typename T>
void multiplyAll(const void* scalarBytes, const void* in, size_t count, unsigned char* out) {
  T scalar;
  std::memcpy(&scalar, scalarBytes, sizeof scalar);
  const unsigned char* src = static_cast<const unsigned char*>(in);
  for (size_t i = 0; i < count; ++i) {
    T x;
    std::memcpy(&x, src + i * sizeof(T), sizeof x);  // inputs need not be aligned
    const T y = multiply(scalar, x);
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
  switch (op.type) {
    case loomInt8: multiplyAll<int8_t>(scalar, in, count, dst); break;
    case loomUint8: multiplyAll<uint8_t>(scalar, in, count, dst); break;
    case loomInt32: multiplyAll<int32_t>(scalar, in, count, dst); break;
    case loomUint32: multiplyAll<uint32_t>(scalar, in, count, dst); break;
    case loomInt64: multiplyAll<int64_t>(scalar, in, count, dst); break;
    case loomUint64: multiplyAll<uint64_t>(scalar, in, count, dst); break;
    case loomFloat16: multiplyAll<Half>(scalar, in, count, dst); break;
    case loomFloat32: multiplyAll<float>(scalar, in, count, dst); break;
    case loomFloat64: multiplyAll<double>(scalar, in, count, dst); break;
    case loomBfloat16: multiplyAll<Bfloat16>(scalar, in, count, dst); break;
    default: break;  // create() accepts only the types above
  }
}

}  // namespace loom::nccl
