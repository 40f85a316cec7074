// float16 (IEEE binary16) and bfloat16 <-> float32, in plain integer and float32 arithmetic.
//
// These give exactly the bits that F16C's vcvtph2ps / vcvtps2ph (round to nearest-even)
// give, so the portable path and the tails of the vector paths agree with the vector bodies
// bit for bit (reduce_test checks every float16 value). They do not depend on the FTZ/DAZ
// flags either: the only float arithmetic they do is on normal numbers.
//
// Like reduce_loops.h this is compiled once per instruction set, inside that set's namespace,
// so that no inline function compiled with -mavx512f can be picked by the linker for the
// portable path.
#pragma once

#include <cstdint>

#ifndef LOOM_KERNELS_ISA
#error "define LOOM_KERNELS_ISA (the namespace for this instruction set) before including"
#endif

namespace loom::kernels::LOOM_KERNELS_ISA {

inline float bitsToFloat(uint32_t bits) {
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint32_t floatToBits(float f) {
  uint32_t bits;
  __builtin_memcpy(&bits, &f, sizeof bits);
  return bits;
}

// Exact: every binary16 value is a float32 value. NaNs come back quiet, as from vcvtph2ps.
inline float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) {  // inf, or NaN made quiet
    return bitsToFloat(sign | 0x7F800000u | (mantissa != 0 ? 0x400000u : 0u) | (mantissa << 13));
  }
  if (exponent == 0) {  // ±0 or a denormal: mantissa * 2^-24, exact and a normal float32
    return bitsToFloat(sign | floatToBits(static_cast<float>(mantissa) * 0x1p-24f));
  }
  return bitsToFloat(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

// Round to nearest-even; overflow gives ±inf. NaN gives the quiet NaN that vcvtps2ph gives
// (sign, quiet bit, top 9 payload bits), so canonicalise first if that matters.
inline uint16_t floatToHalf(float f) {
  uint32_t x = floatToBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7FFFFFFFu;
  if (x > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((x >> 13) & 0x3FFu));
  if (x >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 rounds to inf
  if (x < 0x38800000u) {
    // Below 2^-14: the result is a denormal (or zero) in steps of 2^-24. Adding 0.5, whose
    // float32 ulp is 2^-24, makes the FPU do the rounding, to nearest-even; the step count
    // is then the low bits. (A float32 denormal input is zero either way, even under DAZ.)
    const uint32_t rounded = floatToBits(bitsToFloat(x) + 0.5f) - 0x3F000000u;
    return static_cast<uint16_t>(sign | rounded);
  }
  // Normal: rebias the exponent (127 -> 15) and drop 13 mantissa bits, rounding half to even.
  // A carry out of the mantissa correctly bumps the exponent.
  const uint32_t odd = (x >> 13) & 1u;
  x += ((15u - 127u) << 23) + 0xFFFu + odd;
  return static_cast<uint16_t>(sign | (x >> 13));
}

// bfloat16 is the top half of a float32.
inline float bfloat16ToFloat(uint16_t b) { return bitsToFloat(static_cast<uint32_t>(b) << 16); }

// Round to nearest-even; overflow gives ±inf; any NaN gives the canonical 0x7FC0.
// (Not vcvtneps2bf16: that one flushes denormals to zero.)
inline uint16_t floatToBfloat16(float f) {
  const uint32_t x = floatToBits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u;
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace loom::kernels::LOOM_KERNELS_ISA
