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
  // Mantissa bits float32 has beyond this format's.
  static constexpr int kShift = 23 - kMantissaBits;
  // Added to a float8 exponent field in float32's position, it becomes float32's.
  static constexpr uint32_t kRebias = static_cast<uint32_t>(127 - kBias) << 23;
  // The float32 bits of the format's smallest normal value.
  static constexpr uint32_t kSmallestNormal = static_cast<uint32_t>(127 + 1 - kBias) << 23;
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

// Both conversions are branch-free (every case computed, the right one selected) so that a
// loop over elements vectorises on the host; the cases cost a few integer operations each.
// (The kernels build with -fno-trapping-math: otherwise GCC keeps a ?: over a float
// operation's result as a branch around it, vectorised only with AVX-512's masked operations.)

template <int kExponentBits>
LOOM_HD float float8ToFloat(uint8_t v) {
  using F = Float8Format<kExponentBits>;
  constexpr int kShift = F::kShift;
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t shifted = static_cast<uint32_t>(v & 0x7Fu) << kShift;  // exponent and mantissa
  constexpr uint32_t kExponentMask = ((1u << kExponentBits) - 1u) << 23;
  const uint32_t exponent = shifted & kExponentMask;
  // A normal: rebias the exponent.
  const uint32_t normal = shifted + F::kRebias;
  // ±0 or a denormal: read as a float of the smallest normal exponent, that float is the
  // smallest normal plus the value; subtracting the smallest normal leaves it, exactly.
  const uint32_t denormal =
      float8FloatToBits(float8BitsToFloat(shifted + F::kSmallestNormal) - float8BitsToFloat(F::kSmallestNormal));
  uint32_t magnitude = exponent == 0 ? denormal : normal;
  if constexpr (kExponentBits == 4) {  // no infinity; S.1111.111 is NaN
    magnitude = shifted == kExponentMask + (7u << kShift) ? 0x7FC00000u : magnitude;
  } else {  // IEEE-like: the top exponent is ±inf, or a NaN (made the quiet one)
    magnitude = shifted == kExponentMask ? 0x7F800000u : shifted > kExponentMask ? 0x7FC00000u : magnitude;
  }
  return float8BitsToFloat(sign | magnitude);
}

template <int kExponentBits>
LOOM_HD uint8_t floatToFloat8(float f) {
  using F = Float8Format<kExponentBits>;
  constexpr int kShift = F::kShift;
  const uint32_t bits = float8FloatToBits(f);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t x = bits & 0x7FFFFFFFu;
  // A denormal (or zero) in steps of 2^(1 - bias - mantissa bits): adding the float32 whose
  // ulp is that step makes the FPU round to nearest-even, and the step count is then the low
  // bits. A count that reaches the smallest normal gives its code, as it should.
  const float magic = float8BitsToFloat(F::kSmallestNormal + (static_cast<uint32_t>(kShift) << 23));
  const uint32_t denormal = float8FloatToBits(float8BitsToFloat(x) + magic) - float8FloatToBits(magic);
  // A normal: rebias the exponent and drop mantissa bits, rounding half to even; a carry out
  // of the mantissa bumps the exponent. Infinity and huge values land beyond the largest
  // finite. (Wraps around for denormals, whose result is not the one selected.)
  const uint32_t odd = (x >> kShift) & 1u;
  const uint32_t normal =
      (x - F::kRebias + ((1u << (kShift - 1)) - 1u) + odd) >> kShift;
  uint32_t code = x < F::kSmallestNormal ? denormal : normal;
  code = code > F::kLargestFinite ? F::kLargestFinite : code;
  return static_cast<uint8_t>(x > 0x7F800000u ? F::kCanonicalNan : sign | code);
}

}  // namespace loom::kernels::LOOM_KERNELS_ISA
