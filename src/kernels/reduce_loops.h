// The reduction kernels, written once as plain loops over elements and compiled once per
// instruction set: reduce_isa.cc, built once per set with -DLOOM_KERNELS_ISA=<set>, includes
// this file and fills a KernelTable from makeTable().
//
// Why plain loops: with -O3 the compiler vectorises every (type, op) loop below for the
// target it is given (AVX2 or AVX-512, including the 8-bit and 64-bit multiplies that have no
// single instruction), and the scalar tail runs the very same expression, so vector and
// scalar lanes cannot disagree. Explicit intrinsics are used only where the compiler cannot
// vectorise: float16 <-> float32 (F16C), which also widens e5m2 (float16's top byte). The
// other float8 conversions are float8.h's branch-free arithmetic, which GCC vectorises.
//
// Why a namespace per instruction set: inline functions and template instances are shared by
// name across translation units, and the linker keeps one copy. Without the namespace it
// could keep the AVX-512 copy for everybody, and the portable path would crash on a CPU
// without AVX-512. So nothing in here may call an inline function from outside it (no
// std::min, no std::isnan): only builtins and this namespace's own code.
//
// Layout of the element loops:
//
//   reduce, int8 .. uint64, float32, float64:   d[i] = Op(a[i], b[i])        one pass
//   reduceN over 3+ inputs, same types:         per tile of 1 KiB:
//                                                 acc[] = Op(s0, s1)
//                                                 acc[] = Op(acc, sK)        K = 2 .. n-2
//                                                 d     = Op(acc, s(n-1))
//   float16, bfloat16, float8 (reduce, reduceN): per tile of kTileElems:
//                                                 acc[] = widen(s0)          float32
//                                                 acc[] = Op(acc, widen(sK)) K = 1 .. n-1
//                                                 d     = narrow(acc)        one rounding
//
// The tiles live on the stack and stay in L1, so each input is still read from memory once.
// Integer scale() stays scalar: x86 has no vector integer division (it runs once per avg).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "kernels/float16.h"
#include "kernels/float8.h"
#include "kernels/kernel_table.h"

#ifndef LOOM_KERNELS_ISA
#error "define LOOM_KERNELS_ISA (the namespace for this instruction set) before including"
#endif

namespace loom::kernels::LOOM_KERNELS_ISA {

// ---- Element types ---------------------------------------------------------------------

// The 16- and 8-bit float formats, as tags: they are stored as bit patterns and computed in
// float32.
struct Half {};
struct BFloat16 {};
struct Float8e4m3 {};
struct Float8e5m2 {};

template <class T>
constexpr bool kWidened = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> || std::is_same_v<T, Float8e4m3> ||
                          std::is_same_v<T, Float8e5m2>;

// Bytes of one stored element of a widened format.
template <class H>
constexpr size_t kStoredBytes = std::is_same_v<H, Float8e4m3> || std::is_same_v<H, Float8e5m2> ? 1 : 2;

// Loads and stores go through memcpy, which the compiler turns into plain (unaligned) vector
// moves: any byte address is fine, and there is no aliasing question.
template <class T>
inline T load(const unsigned char* p, size_t i) {
  T v;
  __builtin_memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

template <class T>
inline void storeRaw(unsigned char* p, size_t i, T v) {
  __builtin_memcpy(p + i * sizeof(T), &v, sizeof(T));
}

template <class T>
inline T quietNan() {
  return static_cast<T>(__builtin_nan(""));
}

// Every NaN result is written as +qNaN, whatever the payloads (and whichever operand x86
// would have propagated): see the determinism notes in reduce.h.
//
// A note for every select on floats in this file: each arm must be computed on every path
// (a constant, or a value already computed). The compiler will not compute a float operation
// such as a + b for only some lanes, since it could raise an FP exception flag, and leaves
// such a loop scalar.
template <class T>
inline T canonical(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v ? quietNan<T>() : v;
  } else {
    return v;
  }
}

template <class T>
inline void store(unsigned char* p, size_t i, T v) {
  storeRaw<T>(p, i, canonical(v));
}

// ---- Operations ------------------------------------------------------------------------
// Each takes and returns the compute type: the element type itself, or float for float16
// and bfloat16. Integer sum and prod go through the unsigned type, where wrapping is defined.

struct Sum {
  template <class T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};

struct Prod {
  template <class T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // 8-bit operands are promoted to int; 255 * 255 fits, so there is no signed overflow.
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};

// Float max/min: NaN if either is NaN, and the two zeros ordered -0 < +0. x86's max returns
// its second operand for NaNs and for ±0, which would make max(a, b) and max(b, a) differ in
// bits; taking it both ways and combining the bit patterns (AND for max, OR for min) picks
// +0 / -0 and changes nothing else, since the two results are otherwise the same value.

// Combines the bit patterns of two floats with f (AND or OR).
template <class T, class F>
inline T combineBits(T x, T y, F f) {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  U ux, uy;
  __builtin_memcpy(&ux, &x, sizeof x);
  __builtin_memcpy(&uy, &y, sizeof y);
  const U r = f(ux, uy);
  T out;
  __builtin_memcpy(&out, &r, sizeof out);
  return out;
}

struct Max {
  template <class T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return a > b ? a : b;
    } else {
      const T ab = a > b ? a : b;
      const T ba = b > a ? b : a;
      const T r = combineBits(ab, ba, [](auto x, auto y) { return x & y; });  // +0 wins
      return __builtin_isunordered(a, b) ? quietNan<T>() : r;
    }
  }
};

struct Min {
  template <class T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return a < b ? a : b;
    } else {
      const T ab = a < b ? a : b;
      const T ba = b < a ? b : a;
      const T r = combineBits(ab, ba, [](auto x, auto y) { return x | y; });  // -0 wins
      return __builtin_isunordered(a, b) ? quietNan<T>() : r;
    }
  }
};

// ---- float16 / bfloat16 tiles ----------------------------------------------------------

// 256 float32 per tile (1 KiB): small enough that all the inputs stream at once, which keeps
// the hardware prefetchers busy on every input (measured: 1024 was ~20% slower on 64 MiB).
constexpr size_t kTileElems = 256;

// n <= kTileElems.
template <class H>
inline void widen(float* out, const unsigned char* in, size_t n) {
  size_t i = 0;
  if constexpr (std::is_same_v<H, Half>) {
#if defined(__AVX512F__)
    // The maskz forms with a full mask are the plain instructions; the plain intrinsics make
    // GCC 12 warn about their undefined pass-through operand (GCC bug 105593).
    for (; i + 16 <= n; i += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * i));
      _mm512_storeu_ps(out + i, _mm512_maskz_cvtph_ps(0xFFFF, h));
    }
#elif defined(__F16C__)
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    }
#endif
    for (; i < n; ++i) out[i] = halfToFloat(load<uint16_t>(in, i));
  } else if constexpr (std::is_same_v<H, BFloat16>) {
    for (; i < n; ++i) out[i] = bfloat16ToFloat(load<uint16_t>(in, i));
  } else {
#if defined(__F16C__)
    if constexpr (std::is_same_v<H, Float8e5m2>) {
      // e5m2 is float16's top byte: through float16, one conversion instruction per 8 or 16
      // elements where float8.h takes a dozen operations (2.5-5x faster; measured with
      // perf/kernel_bench). NaNs keep a payload, which narrow() and canonical() drop.
      uint16_t half[kTileElems];
      for (size_t j = 0; j < n; ++j) half[j] = static_cast<uint16_t>(in[j] << 8);
      widen<Half>(out, reinterpret_cast<const unsigned char*>(half), n);
      return;
    }
#endif
    for (; i < n; ++i) out[i] = float8ToFloat<std::is_same_v<H, Float8e4m3> ? 4 : 5>(in[i]);
  }
}

// Rounds to nearest-even, NaN to the canonical NaN.
template <class H>
inline void narrow(unsigned char* out, const float* in, size_t n) {
  size_t i = 0;
  if constexpr (std::is_same_v<H, Half>) {
#if defined(__AVX512F__)  // maskz: see widen()
    const __m512 qnan = _mm512_set1_ps(__builtin_nanf(""));
    for (; i + 16 <= n; i += 16) {
      const __m512 v = _mm512_loadu_ps(in + i);
      const __m512 c = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v, qnan);
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(out + 2 * i),
          _mm512_maskz_cvtps_ph(0xFFFF, c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
#elif defined(__F16C__)
    const __m256 qnan = _mm256_set1_ps(__builtin_nanf(""));
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps(in + i);
      const __m256 c = _mm256_blendv_ps(v, qnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i),
                       _mm256_cvtps_ph(c, _MM_FROUND_TO_NEAREST_INT));
    }
#endif
    for (; i < n; ++i) storeRaw<uint16_t>(out, i, floatToHalf(canonical(in[i])));
  } else if constexpr (std::is_same_v<H, BFloat16>) {
    for (; i < n; ++i) storeRaw<uint16_t>(out, i, floatToBfloat16(in[i]));
  } else {
    for (; i < n; ++i) out[i] = floatToFloat8<std::is_same_v<H, Float8e4m3> ? 4 : 5>(in[i]);
  }
}

// ---- Kernels ---------------------------------------------------------------------------

inline const unsigned char* bytes(const void* p) { return static_cast<const unsigned char*>(p); }
inline unsigned char* bytes(void* p) { return static_cast<unsigned char*>(p); }
inline size_t smaller(size_t a, size_t b) { return a < b ? a : b; }

template <class H, class Op>
void reduceManyWidened(void* dst, const void* const* srcs, int nsrcs, size_t count) {
  float acc[kTileElems];
  float in[kTileElems];
  for (size_t base = 0; base < count; base += kTileElems) {
    const size_t n = smaller(kTileElems, count - base);
    const size_t offset = base * kStoredBytes<H>;
    widen<H>(acc, bytes(srcs[0]) + offset, n);
    for (int k = 1; k < nsrcs; ++k) {
      widen<H>(in, bytes(srcs[k]) + offset, n);
      for (size_t i = 0; i < n; ++i) acc[i] = Op::apply(acc[i], in[i]);
    }
    narrow<H>(bytes(dst) + offset, acc, n);
  }
}

template <class T, class Op>
void reduceTwo(void* dst, const void* a, const void* b, size_t count) {
  if constexpr (kWidened<T>) {
    const void* srcs[2] = {a, b};
    reduceManyWidened<T, Op>(dst, srcs, 2, count);
  } else {
    unsigned char* d = bytes(dst);
    const unsigned char* pa = bytes(a);
    const unsigned char* pb = bytes(b);
    // When d equals pa or pb, the compiler's run-time overlap check still picks the vector
    // loop (same index in and out); any other overlap falls back to its scalar loop.
    for (size_t i = 0; i < count; ++i) {
      store<T>(d, i, Op::apply(load<T>(pa, i), load<T>(pb, i)));
    }
  }
}

// Folds nsrcs >= 2 inputs tile by tile. The last input's pass writes dst directly, so dst may
// be any one of the inputs: every input's element i is read before dst's element i is written.
template <class T, class Op>
void reduceMany(void* dst, const void* const* srcs, int nsrcs, size_t count) {
  if constexpr (kWidened<T>) {
    reduceManyWidened<T, Op>(dst, srcs, nsrcs, count);
  } else {
    if (nsrcs == 2) return reduceTwo<T, Op>(dst, srcs[0], srcs[1], count);
    constexpr size_t kTile = kTileElems * sizeof(float) / sizeof(T);
    T acc[kTile];
    for (size_t base = 0; base < count; base += kTile) {
      const size_t n = smaller(kTile, count - base);
      const size_t offset = base * sizeof(T);
      const unsigned char* s0 = bytes(srcs[0]) + offset;
      const unsigned char* s1 = bytes(srcs[1]) + offset;
      for (size_t i = 0; i < n; ++i) acc[i] = Op::apply(load<T>(s0, i), load<T>(s1, i));
      for (int k = 2; k < nsrcs - 1; ++k) {
        const unsigned char* sk = bytes(srcs[k]) + offset;
        for (size_t i = 0; i < n; ++i) acc[i] = Op::apply(acc[i], load<T>(sk, i));
      }
      const unsigned char* last = bytes(srcs[nsrcs - 1]) + offset;
      unsigned char* d = bytes(dst) + offset;
      for (size_t i = 0; i < n; ++i) store<T>(d, i, Op::apply(acc[i], load<T>(last, i)));
    }
  }
}

// Integers divide in 64 bits (so a divisor above the type's range still works) and truncate
// toward zero; floats divide in their own precision, the narrow formats in float32.
template <class T>
void scaleBy(void* dst, const void* src, size_t count, int divisor) {
  if constexpr (kWidened<T>) {
    float acc[kTileElems];
    const float d = static_cast<float>(divisor);
    for (size_t base = 0; base < count; base += kTileElems) {
      const size_t n = smaller(kTileElems, count - base);
      const size_t offset = base * kStoredBytes<T>;
      widen<T>(acc, bytes(src) + offset, n);
      for (size_t i = 0; i < n; ++i) acc[i] = acc[i] / d;
      narrow<T>(bytes(dst) + offset, acc, n);
    }
  } else if constexpr (std::is_integral_v<T>) {
    using Wide = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
    const Wide d = static_cast<Wide>(divisor);
    for (size_t i = 0; i < count; ++i) {
      storeRaw<T>(bytes(dst), i, static_cast<T>(static_cast<Wide>(load<T>(bytes(src), i)) / d));
    }
  } else {
    const T d = static_cast<T>(divisor);
    for (size_t i = 0; i < count; ++i) store<T>(bytes(dst), i, load<T>(bytes(src), i) / d);
  }
}

// dst[i] = scalar * src[i], as the product kernels multiply: the narrow formats widened and
// rounded once, integers wrapping.
template <class T>
void multiplyBy(void* dst, const void* src, size_t count, const void* scalar) {
  if constexpr (kWidened<T>) {
    float s;
    widen<T>(&s, bytes(scalar), 1);
    float acc[kTileElems];
    for (size_t base = 0; base < count; base += kTileElems) {
      const size_t n = smaller(kTileElems, count - base);
      const size_t offset = base * kStoredBytes<T>;
      widen<T>(acc, bytes(src) + offset, n);
      for (size_t i = 0; i < n; ++i) acc[i] = Prod::apply(acc[i], s);
      narrow<T>(bytes(dst) + offset, acc, n);
    }
  } else {
    const T s = load<T>(bytes(scalar), 0);
    for (size_t i = 0; i < count; ++i) store<T>(bytes(dst), i, Prod::apply(load<T>(bytes(src), i), s));
  }
}

// float32 <-> float16 / bfloat16 / float8 through an L1-sized tile (the float32 side may sit at any
// byte address, which widen() and narrow() do not take).
template <class H>
void narrowFromFloat32(void* dst, const void* src, size_t count) {
  float tile[kTileElems];
  for (size_t base = 0; base < count; base += kTileElems) {
    const size_t n = smaller(kTileElems, count - base);
    __builtin_memcpy(tile, bytes(src) + base * sizeof(float), n * sizeof(float));
    narrow<H>(bytes(dst) + base * kStoredBytes<H>, tile, n);
  }
}

template <class H>
void widenToFloat32(void* dst, const void* src, size_t count) {
  float tile[kTileElems];
  for (size_t base = 0; base < count; base += kTileElems) {
    const size_t n = smaller(kTileElems, count - base);
    widen<H>(tile, bytes(src) + base * kStoredBytes<H>, n);
    for (size_t i = 0; i < n; ++i) tile[i] = canonical(tile[i]);  // widening keeps NaN payloads
    __builtin_memcpy(bytes(dst) + base * sizeof(float), tile, n * sizeof(float));
  }
}

// ---- Streaming copy ----------------------------------------------------------------------

// dst = src with non-temporal stores as wide as this set's vectors: on the AMD EPYC VM a
// reduction's output streamed 16 bytes at a time ran at 0.6-0.8 of the same bytes streamed 32
// or 64 at a time (docs/KERNELS.md). No fence: reduce.cc's copyStreaming ends with one.
#if defined(__AVX512F__)
constexpr size_t kStreamBytes = 64;
inline void streamVector(unsigned char* d, const unsigned char* s) {
  _mm512_stream_si512(reinterpret_cast<__m512i*>(d), _mm512_loadu_si512(s));
}
#elif defined(__AVX2__)
constexpr size_t kStreamBytes = 32;
inline void streamVector(unsigned char* d, const unsigned char* s) {
  _mm256_stream_si256(reinterpret_cast<__m256i*>(d), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
}
#elif defined(__SSE2__)
constexpr size_t kStreamBytes = 16;
inline void streamVector(unsigned char* d, const unsigned char* s) {
  _mm_stream_si128(reinterpret_cast<__m128i*>(d), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
}
#else
constexpr size_t kStreamBytes = 16;  // no non-temporal stores here: plain ones
inline void streamVector(unsigned char* d, const unsigned char* s) { __builtin_memcpy(d, s, kStreamBytes); }
#endif

inline void copyStreaming(void* dst, const void* src, size_t bytes) {
  unsigned char* d = static_cast<unsigned char*>(dst);
  const unsigned char* s = static_cast<const unsigned char*>(src);
  size_t i = 0;
#if defined(__SSE2__)
  // Plain copies up to dst's vector alignment and after the last whole vector.
  i = smaller(bytes, (kStreamBytes - reinterpret_cast<uintptr_t>(d) % kStreamBytes) % kStreamBytes);
  __builtin_memcpy(d, s, i);
  for (; i + kStreamBytes <= bytes; i += kStreamBytes) streamVector(d + i, s + i);
#endif
  __builtin_memcpy(d + i, s + i, bytes - i);
}

// ---- Reduce into several outputs ---------------------------------------------------------

// reduceNTo's loop for the types computed in their own precision: each vector of the result
// goes into every output as soon as it is computed, so one core's loads of the inputs and its
// stores to the outputs overlap all the way (a 1 KiB tile computed first, then stored, lost
// 10-25 % of that in a C program on the AMD EPYC VM). count: whole vectors; every dst as
// aligned as dsts[0], which is aligned to kStreamBytes where `streaming`; nsrcs >= 2.
template <class T, class Op>
void reduceToMany(void* const* dsts, int ndsts, const void* const* srcs, int nsrcs, size_t count, bool streaming) {
  constexpr size_t kLanes = kStreamBytes / sizeof(T);
  alignas(64) T acc[kLanes];
  for (size_t base = 0; base < count; base += kLanes) {
    const size_t offset = base * sizeof(T);
    const unsigned char* s0 = bytes(srcs[0]) + offset;
    const unsigned char* s1 = bytes(srcs[1]) + offset;
    for (size_t i = 0; i < kLanes; ++i) acc[i] = Op::apply(load<T>(s0, i), load<T>(s1, i));
    for (int k = 2; k < nsrcs; ++k) {
      const unsigned char* sk = bytes(srcs[k]) + offset;
      for (size_t i = 0; i < kLanes; ++i) acc[i] = Op::apply(acc[i], load<T>(sk, i));
    }
    const unsigned char* result = reinterpret_cast<const unsigned char*>(acc);
    for (int j = 0; j < ndsts; ++j) {
      unsigned char* d = bytes(dsts[j]) + offset;
      if (streaming) {
        streamVector(d, result);
      } else {
        __builtin_memcpy(d, result, kStreamBytes);
      }
    }
  }
}

// ---- The table -------------------------------------------------------------------------

template <class T, class Op>
constexpr void addOp(KernelTable& table, loomDataType_t type, loomRedOp_t op) {
  table.reduce[type][op] = &reduceTwo<T, Op>;
  table.reduceN[type][op] = &reduceMany<T, Op>;
  if constexpr (!kWidened<T>) table.reduceTo[type][op] = &reduceToMany<T, Op>;
}

template <class T>
constexpr void addType(KernelTable& table, loomDataType_t type) {
  addOp<T, Sum>(table, type, loomSum);
  addOp<T, Prod>(table, type, loomProd);
  addOp<T, Max>(table, type, loomMax);
  addOp<T, Min>(table, type, loomMin);
  addOp<T, Sum>(table, type, loomAvg);  // avg sums; scale() divides at the end
  table.scale[type] = &scaleBy<T>;
  table.multiply[type] = &multiplyBy<T>;
}

constexpr KernelTable makeTable() {
  KernelTable table{};
  table.copyStreaming = &copyStreaming;
  table.streamBytes = kStreamBytes;
  addType<int8_t>(table, loomInt8);
  addType<uint8_t>(table, loomUint8);
  addType<int32_t>(table, loomInt32);
  addType<uint32_t>(table, loomUint32);
  addType<int64_t>(table, loomInt64);
  addType<uint64_t>(table, loomUint64);
  addType<Half>(table, loomFloat16);
  table.fromFloat32[loomFloat16] = &narrowFromFloat32<Half>;
  table.toFloat32[loomFloat16] = &widenToFloat32<Half>;
  addType<float>(table, loomFloat32);
  addType<double>(table, loomFloat64);
  addType<BFloat16>(table, loomBfloat16);
  table.fromFloat32[loomBfloat16] = &narrowFromFloat32<BFloat16>;
  table.toFloat32[loomBfloat16] = &widenToFloat32<BFloat16>;
  addType<Float8e4m3>(table, loomFloat8e4m3);
  table.fromFloat32[loomFloat8e4m3] = &narrowFromFloat32<Float8e4m3>;
  table.toFloat32[loomFloat8e4m3] = &widenToFloat32<Float8e4m3>;
  addType<Float8e5m2>(table, loomFloat8e5m2);
  table.fromFloat32[loomFloat8e5m2] = &narrowFromFloat32<Float8e5m2>;
  table.toFloat32[loomFloat8e5m2] = &widenToFloat32<Float8e5m2>;
  return table;
}

}  // namespace loom::kernels::LOOM_KERNELS_ISA
