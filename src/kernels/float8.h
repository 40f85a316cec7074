// The two 8-bit float formats (OCP FP8) <-> float32, in integer and float32 arithmetic that
// runs alike on the host and the GPU (LOOM_HD), so host kernels, the device interpreter and
// its CPU emulation give the same bits.
//
//   e4m3: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinity, NaN is S.1111.111;
//         largest finite 448 (0x7E).
//   e5m2: sign, 5 exponent bits (bias 15), 2 mantissa bits; IEEE-like, with ±inf (0x7C) and
//         NaNs; largest finite 57344 (0x7B).
//
// Narrowing rounds to nearest-even and saturates what is beyond the largest finite value
// (infinities included) to it, keeping the sign, as NCCL's conversions do (__NV_SATFINITE);
// any NaN becomes the canonical 0x7F. Widening is exact.
//
// Compiled inside the includer's namespace, like float16.h (see there why). On GPUs with
// float8 conversion instructions (compute capability 8.9 and later) element_ops.h uses those
// instead, which give the same bits: this code inlined into every type x op x wire of the
// plan kernel made ptxas take 3.7x as long (element_ops.h's byType).
#pragma once

#include <cstdint>

#include "kernels/hd.h"

#ifndef LOOM_KERNELS_ISA
#error "define LOOM_KERNELS_ISA (the namespace for this instruction set) before including"
#endif

namespace loom::kernels::LOOM_KERNELS_ISA {

// kExponentBits 4: e4m3; 5: e5m2.
template <int kExponentBits>
struct Float8Format {
  static constexpr int kMantissaBits = 7 - kExponentBits;
  static constexpr int kBias = (1 << (kExponentBits - 1)) - 1;
  static constexpr uint32_t kLargestFinite = kExponentBits == 4 ? 0x7Eu : 0x7Bu;
  static constexpr uint8_t kCanonicalNan = 0x7Fu;
};

LOOM_HD float float8BitsToFloat(uint32_t bits) {
#if LOOM_ON_DEVICE
  return __uint_as_float(bits);
#else
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

LOOM_HD uint32_t float8FloatToBits(float f) {
#if LOOM_ON_DEVICE
  return __float_as_uint(f);
#else
  uint32_t bits;
  __builtin_memcpy(&bits, &f, sizeof bits);
  return bits;
#endif
}

template <int kExponentBits>
LOOM_HD float float8ToFloat(uint8_t v) {
  using F = Float8Format<kExponentBits>;
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exponent = (v >> F::kMantissaBits) & ((1u << kExponentBits) - 1u);
  const uint32_t mantissa = v & ((1u << F::kMantissaBits) - 1u);
  if constexpr (kExponentBits == 4) {
    if ((v & 0x7Fu) == 0x7Fu) return float8BitsToFloat(sign | 0x7FC00000u);
  } else if (exponent == 0x1Fu) {
    return float8BitsToFloat(sign | 0x7F800000u | (mantissa != 0 ? 0x400000u : 0u));
  }
  if (exponent == 0) {  // ±0 or a denormal: mantissa steps of 2^(1 - bias - mantissa bits)
    const float step = float8BitsToFloat(static_cast<uint32_t>(127 + 1 - F::kBias - F::kMantissaBits) << 23);
    return float8BitsToFloat(sign | float8FloatToBits(static_cast<float>(mantissa) * step));
  }
  return float8BitsToFloat(sign | ((exponent + 127u - F::kBias) << 23) | (mantissa << (23 - F::kMantissaBits)));
}

template <int kExponentBits>
LOOM_HD uint8_t floatToFloat8(float f) {
  using F = Float8Format<kExponentBits>;
  uint32_t x = float8FloatToBits(f);
  const uint32_t sign = (x >> 24) & 0x80u;
  x &= 0x7FFFFFFFu;
  if (x > 0x7F800000u) return F::kCanonicalNan;
  constexpr uint32_t kSmallestNormal = static_cast<uint32_t>(127 + 1 - F::kBias) << 23;
  uint32_t code;
  if (x < kSmallestNormal) {
    // A denormal (or zero) in steps of 2^(1 - bias - mantissa bits): adding the float32 whose
    // ulp is that step makes the FPU round to nearest-even, and the step count is then the
    // low bits. A count that reaches the smallest normal gives its code, as it should.
    const float magic = float8BitsToFloat(static_cast<uint32_t>(127 + 1 - F::kBias - F::kMantissaBits + 23) << 23);
    code = float8FloatToBits(float8BitsToFloat(x) + magic) - float8FloatToBits(magic);
  } else {
    // Rebias the exponent and drop mantissa bits, rounding half to even; a carry out of the
    // mantissa bumps the exponent. Infinity and huge values land beyond the largest finite.
    constexpr int kShift = 23 - F::kMantissaBits;
    const uint32_t odd = (x >> kShift) & 1u;
    x = x - (static_cast<uint32_t>(127 - F::kBias) << 23) + ((1u << (kShift - 1)) - 1u) + odd;
    code = x >> kShift;
  }
  if (code > F::kLargestFinite) code = F::kLargestFinite;
  return static_cast<uint8_t>(sign | code);
}

}  // namespace loom::kernels::LOOM_KERNELS_ISA
