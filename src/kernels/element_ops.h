// The arithmetic of one element, written once for the GPU and the host: the CUDA reduce
// kernels (kernels/cuda/device_reduce.cu) and the device plan interpreter (interpreter.h)
// use it on the GPU, the interpreter's CPU emulation on the host. It gives exactly what the
// host kernels give (kernels/reduce.h): IEEE arithmetic never contracted into FMAs, every NaN
// result the canonical quiet NaN, float max/min NaN if either input is, max(+0, -0) = +0 and
// min(+0, -0) = -0, float16/bfloat16/float8 computed in float32 and rounded once to nearest-even
// (float8 saturating to its largest finite value),
// integer sum and prod wrapping, integer division truncating toward zero.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/hd.h"
#include "loom/loom.h"

#if LOOM_ON_DEVICE || defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

// The host's conversions, from the same file the host kernels use, in a namespace of their
// own (kernels/float16.h is compiled once per instruction set, in that set's namespace).
#define LOOM_KERNELS_ISA element_ops_host
#include "kernels/float16.h"
#include "kernels/float8.h"
#undef LOOM_KERNELS_ISA

namespace loom::device {

// float16, bfloat16 and float8 are stored as bit patterns and computed in float32.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
struct Float8e4m3 {
  uint8_t bits;
};
struct Float8e5m2 {
  uint8_t bits;
};

template <class T>
constexpr bool kFloat8 = std::is_same_v<T, Float8e4m3> || std::is_same_v<T, Float8e5m2>;
// The float8.h format of a float8 type (its exponent bits).
template <class T>
constexpr int kFloat8ExponentBits = std::is_same_v<T, Float8e4m3> ? 4 : 5;

template <class T>
constexpr bool kWidened = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> || kFloat8<T>;

// GPUs of compute capability 8.9 and later convert float8 in one instruction each way
// (cvt ... e4m3x2 / e5m2x2), rounding to nearest-even and saturating as float8.h does.
#if LOOM_ON_DEVICE && __CUDA_ARCH__ >= 890
#define LOOM_FLOAT8_INSTRUCTIONS 1
#else
#define LOOM_FLOAT8_INSTRUCTIONS 0
#endif

template <class T>
using ComputeT = std::conditional_t<kWidened<T>, float, T>;

LOOM_HD float bitsAsFloat(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}
LOOM_HD uint32_t floatBits(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return bits;
}
LOOM_HD double bitsAsDouble(uint64_t bits) {
  double d;
  memcpy(&d, &bits, sizeof d);
  return d;
}

// Exact for every value (NaNs stay NaN; narrow() makes them canonical).
template <class T>
LOOM_HD ComputeT<T> widen(T v) {
  if constexpr (std::is_same_v<T, Half>) {
#if LOOM_ON_DEVICE
    return __half2float(__ushort_as_half(v.bits));
#else
    return kernels::element_ops_host::halfToFloat(v.bits);
#endif
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return bitsAsFloat(static_cast<uint32_t>(v.bits) << 16);
  } else if constexpr (kFloat8<T>) {
#if LOOM_FLOAT8_INSTRUCTIONS
    uint32_t halves;  // the byte widened to float16 (exact) in the low half
    if constexpr (kFloat8ExponentBits<T> == 4) {
      asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(halves) : "h"(static_cast<uint16_t>(v.bits)));
    } else {
      asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(halves) : "h"(static_cast<uint16_t>(v.bits)));
    }
    return __half2float(__ushort_as_half(static_cast<uint16_t>(halves)));
#else
    return kernels::element_ops_host::float8ToFloat<kFloat8ExponentBits<T>>(v.bits);
#endif
  } else {
    return v;
  }
}

// Rounds to the storage type once (nearest-even, overflow to ±inf, or to the largest finite
// value for float8; denormals kept) and writes any NaN as the canonical quiet NaN.
template <class T>
LOOM_HD T narrow(ComputeT<T> v) {
  if constexpr (std::is_same_v<T, Half>) {
    if (v != v) return Half{0x7E00};
#if LOOM_ON_DEVICE
    return Half{__half_as_ushort(__float2half_rn(v))};
#else
    return Half{kernels::element_ops_host::floatToHalf(v)};
#endif
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    const uint32_t x = floatBits(v);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return BFloat16{0x7FC0};
    return BFloat16{static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16)};
  } else if constexpr (kFloat8<T>) {
#if LOOM_FLOAT8_INSTRUCTIONS
    if (v != v) return T{0x7F};
    uint16_t pair;  // v in the low byte
    if constexpr (kFloat8ExponentBits<T> == 4) {
      asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(v));
    } else {
      asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(v));
    }
    return T{static_cast<uint8_t>(pair)};
#else
    return T{kernels::element_ops_host::floatToFloat8<kFloat8ExponentBits<T>>(v)};
#endif
  } else if constexpr (std::is_same_v<T, float>) {
    return v != v ? bitsAsFloat(0x7FC00000u) : v;
  } else if constexpr (std::is_same_v<T, double>) {
    return v != v ? bitsAsDouble(0x7FF8000000000000ull) : v;
  } else {
    return v;
  }
}

// Float arithmetic: on the GPU through the _rn intrinsics, rounded IEEE operations the
// compiler may not fuse into an FMA whatever -fmad says; on the host plain operators, which
// the build compiles with -ffp-contract=off.
LOOM_HD float add(float a, float b) {
#if LOOM_ON_DEVICE
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
LOOM_HD double add(double a, double b) {
#if LOOM_ON_DEVICE
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
LOOM_HD float mul(float a, float b) {
#if LOOM_ON_DEVICE
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
LOOM_HD double mul(double a, double b) {
#if LOOM_ON_DEVICE
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
LOOM_HD float div(float a, float b) {
#if LOOM_ON_DEVICE
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
LOOM_HD double div(double a, double b) {
#if LOOM_ON_DEVICE
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

template <class C>
LOOM_HD bool negative(C x) {
#if LOOM_ON_DEVICE
  return signbit(x);
#else
  return __builtin_signbit(x);
#endif
}

// Integer sum and prod wrap: computed in an unsigned type at least as wide as int, so that
// no promotion to signed int can overflow.
template <class C>
using WrapT = std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;

// Float max/min: NaN if either input is; otherwise decided on values, with -0 < +0, so the
// result has the same bits whichever input comes first.
template <bool kMax, class C>
LOOM_HD C floatExtreme(C a, C b) {
  if (a != a || b != b) return a + b;  // a NaN; narrow() makes it canonical
  if (a == b) return kMax == negative(a) ? b : a;  // equal values differ in bits only for ±0
  return (a > b) == kMax ? a : b;
}

struct Sum {
  template <class C>
  LOOM_HD static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      return static_cast<C>(static_cast<WrapT<C>>(a) + static_cast<WrapT<C>>(b));
    } else {
      return add(a, b);
    }
  }
};
struct Prod {
  template <class C>
  LOOM_HD static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      return static_cast<C>(static_cast<WrapT<C>>(a) * static_cast<WrapT<C>>(b));
    } else {
      return mul(a, b);
    }
  }
};
struct Max {
  template <class C>
  LOOM_HD static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      return a > b ? a : b;
    } else {
      return floatExtreme<true>(a, b);
    }
  }
};
struct Min {
  template <class C>
  LOOM_HD static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      return a < b ? a : b;
    } else {
      return floatExtreme<false>(a, b);
    }
  }
};

// x / divisor as host scale(): integers divide in 64 bits and truncate toward zero, floats
// divide in their own precision (float16/bfloat16 in float32) and round once.
template <class C>
LOOM_HD C divide(C x, int divisor) {
  if constexpr (std::is_integral_v<C>) {
    using Wide = std::conditional_t<std::is_signed_v<C>, long long, unsigned long long>;
    return static_cast<C>(static_cast<Wide>(x) / static_cast<Wide>(divisor));
  } else {
    return div(x, static_cast<C>(divisor));
  }
}

// a op b, rounded to the type; with divisor > 0 then divided and rounded again, exactly as
// host reduce() followed by scale() (float16/bfloat16: the sum is rounded before the division).
template <class T, class Op>
struct ReduceJob {
  static constexpr int kInputs = 2;
  int divisor;
  LOOM_HD T operator()(T a, T b) const {
    T r = narrow<T>(Op::apply(widen(a), widen(b)));
    if (divisor > 0) r = narrow<T>(divide(widen(r), divisor));
    return r;
  }
};

// x / divisor (the end of an average); the second input is unused.
template <class T>
struct ScaleJob {
  static constexpr int kInputs = 1;
  int divisor;
  LOOM_HD T operator()(T x, T) const { return narrow<T>(divide(widen(x), divisor)); }
};

// x * scalar as the product multiplies (a premultiplied sum's first step); the second input
// is unused.
template <class T>
struct MultiplyJob {
  static constexpr int kInputs = 1;
  T scalar;
  LOOM_HD T operator()(T x, T) const { return narrow<T>(Prod::apply(widen(x), widen(scalar))); }
};

// ---- Dispatch on the run-time type and op ----------------------------------------------------

template <class T>
struct Tag {
  using type = T;
};

// f(Tag<T>{}) with T the storage type of `type`; `invalid` for a value outside the enum, and
// for float8 where kWithFloat8 is false. Host and device code both dispatch through these, with
// host-only or device-only f.
LOOM_HD_TEMPLATE
template <bool kWithFloat8 = true, class R, class F>
LOOM_HD R byType(loomDataType_t type, R invalid, F&& f) {
  switch (type) {
    case loomInt8: return f(Tag<int8_t>{});
    case loomUint8: return f(Tag<uint8_t>{});
    case loomInt32: return f(Tag<int32_t>{});
    case loomUint32: return f(Tag<uint32_t>{});
    case loomInt64: return f(Tag<int64_t>{});
    case loomUint64: return f(Tag<uint64_t>{});
    case loomFloat16: return f(Tag<Half>{});
    case loomFloat32: return f(Tag<float>{});
    case loomFloat64: return f(Tag<double>{});
    case loomBfloat16: return f(Tag<BFloat16>{});
    case loomFloat8e4m3:
      if constexpr (kWithFloat8) return f(Tag<Float8e4m3>{});
      return invalid;
    case loomFloat8e5m2:
      if constexpr (kWithFloat8) return f(Tag<Float8e5m2>{});
      return invalid;
    default: return invalid;
  }
}

// Whether the plan interpreter has float8 instances: not in the plan kernel built for GPUs
// without float8 instructions. Communicators on such GPUs refuse float8 reductions at the
// call (DeviceRuntime), as NCCL's do below compute capability 9.0. (The rule came from
// compile time: float8 in software, inlined into every type x op x wire, made ptxas take
// 3.7x as long. Since the receive loops are shared across types, it would cost 29 s of ptxas
// for sm_80 against 22.5 s without, on the Intel Xeon VM.) (Only the interpreter, a device function of the one
// non-template kernel, may depend on the architecture: kernels launched from host code must
// be instantiated alike in every compilation pass.)
constexpr bool kPlanFloat8 = !LOOM_ON_DEVICE || LOOM_FLOAT8_INSTRUCTIONS;

// f(Tag<Op>{}); loomAvg sums (the division is the divisor's business).
LOOM_HD_TEMPLATE
template <class R, class F>
LOOM_HD R byOp(loomRedOp_t op, R invalid, F&& f) {
  switch (op) {
    case loomSum:
    case loomAvg: return f(Tag<Sum>{});
    case loomProd: return f(Tag<Prod>{});
    case loomMax: return f(Tag<Max>{});
    case loomMin: return f(Tag<Min>{});
    default: return invalid;
  }
}

}  // namespace loom::device
