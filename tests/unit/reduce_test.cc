// The reduction kernels against references computed here with plain loops, in double for
// floats (rounded to float32 after each step where the kernel computes in float32) and in
// exact modular arithmetic for integers; on every instruction-set path this CPU runs, at
// aligned and misaligned addresses, in place and out of place. Float16/bfloat16 results are
// compared bit for bit with the reference float32 result rounded by a binary search over all
// values of the format, which shares nothing with the kernels' conversions.
#include "kernels/reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

namespace loom::kernels {

// For gtest's "where GetParam() = ..." lines (found by argument-dependent lookup).
void PrintTo(Isa isa, std::ostream* os) { *os << isaName(isa); }

namespace {

// ---- Types, independently of the kernels ----------------------------------------------

enum class Kind { kSigned, kUnsigned, kFloat };

struct TypeInfo {
  loomDataType_t type;
  const char* name;
  size_t size;
  Kind kind;
};

const TypeInfo kTypes[] = {
    {loomInt8, "int8", 1, Kind::kSigned},      {loomUint8, "uint8", 1, Kind::kUnsigned},
    {loomInt32, "int32", 4, Kind::kSigned},    {loomUint32, "uint32", 4, Kind::kUnsigned},
    {loomInt64, "int64", 8, Kind::kSigned},    {loomUint64, "uint64", 8, Kind::kUnsigned},
    {loomFloat16, "float16", 2, Kind::kFloat}, {loomFloat32, "float32", 4, Kind::kFloat},
    {loomFloat64, "float64", 8, Kind::kFloat}, {loomBfloat16, "bfloat16", 2, Kind::kFloat},
    {loomFloat8e4m3, "float8e4m3", 1, Kind::kFloat}, {loomFloat8e5m2, "float8e5m2", 1, Kind::kFloat},
};

const TypeInfo& info(loomDataType_t type) { return kTypes[type]; }

const loomRedOp_t kOps[] = {loomSum, loomProd, loomMax, loomMin, loomAvg};
const char* opName(loomRedOp_t op) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg"};
  return kNames[op];
}

const Isa kIsas[] = {Isa::kPortable, Isa::kAvx2, Isa::kAvx512};

// Canonical quiet NaN bit patterns (reduce.h's promise), little-endian byte order.
uint64_t canonicalNan(loomDataType_t t) {
  switch (t) {
    case loomFloat16:
      return 0x7E00;
    case loomBfloat16:
      return 0x7FC0;
    case loomFloat8e4m3:
    case loomFloat8e5m2:
      return 0x7F;
    case loomFloat32:
      return 0x7FC00000;
    default:
      return 0x7FF8000000000000ull;
  }
}

uint64_t getBits(const uint8_t* p, size_t size) {
  uint64_t v = 0;
  std::memcpy(&v, p, size);  // little-endian
  return v;
}

void putBits(uint8_t* p, size_t size, uint64_t v) { std::memcpy(p, &v, size); }

// float16: 1 sign, 5 exponent, 10 mantissa bits. bfloat16: 1, 8, 7.
double decodeSmallFloat(uint16_t bits, int exponentBits, int mantissaBits) {
  const int bias = (1 << (exponentBits - 1)) - 1;
  const int maxExponent = (1 << exponentBits) - 1;
  const int exponent = (bits >> mantissaBits) & maxExponent;
  const int mantissa = bits & ((1 << mantissaBits) - 1);
  const double sign = (bits >> 15) ? -1.0 : 1.0;
  if (exponent == maxExponent) return mantissa ? std::nan("") : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, 1 - bias - mantissaBits);
  return sign * std::ldexp(mantissa + (1 << mantissaBits), exponent - bias - mantissaBits);
}

// Nearest value of the format, ties to the even pattern, by binary search over the positive
// patterns (their values increase with the pattern). x must be exactly a float32 value.
uint16_t encodeSmallFloat(double x, int exponentBits, int mantissaBits, uint16_t qnan) {
  if (std::isnan(x)) return qnan;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  const uint16_t inf = static_cast<uint16_t>(((1 << exponentBits) - 1) << mantissaBits);
  const uint16_t maxFinite = inf - 1;
  auto value = [&](uint16_t p) { return decodeSmallFloat(p, exponentBits, mantissaBits); };
  // The largest finite value has an odd pattern, so the halfway point to the next power of two
  // rounds (to even) up to infinity.
  const double top = value(maxFinite) + (value(maxFinite) - value(maxFinite - 1));
  if (a >= (value(maxFinite) + top) / 2) return sign | inf;
  uint16_t lo = 0, hi = maxFinite;  // value(lo) <= a < value(hi + 1)
  while (lo < hi) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (value(mid) <= a)
      lo = mid;
    else
      hi = mid - 1;
  }
  if (value(lo) == a || lo == maxFinite) return sign | lo;
  const double below = a - value(lo), above = value(lo + 1) - a;
  if (below < above) return sign | lo;
  if (above < below) return sign | (lo + 1);
  return sign | ((lo & 1) ? lo + 1 : lo);
}

// float8: e4m3 (4 exponent bits, bias 7, no infinity, NaN S.1111.111) or e5m2 (5, bias 15,
// IEEE-like).
double decodeFloat8(uint8_t bits, int exponentBits) {
  const int mantissaBits = 7 - exponentBits, bias = (1 << (exponentBits - 1)) - 1;
  const int exponent = (bits >> mantissaBits) & ((1 << exponentBits) - 1);
  const int mantissa = bits & ((1 << mantissaBits) - 1);
  const double sign = (bits >> 7) ? -1.0 : 1.0;
  if (exponentBits == 4 && (bits & 0x7F) == 0x7F) return std::nan("");
  if (exponentBits == 5 && exponent == 0x1F) return mantissa ? std::nan("") : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, 1 - bias - mantissaBits);
  return sign * std::ldexp(mantissa + (1 << mantissaBits), exponent - bias - mantissaBits);
}

// Nearest float8 value, ties to the even pattern; beyond the largest finite value (infinity
// included) that value, keeping the sign (NCCL's saturation); NaN the canonical 0x7F.
uint8_t encodeFloat8(double x, int exponentBits) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(x);
  const uint8_t maxFinite = exponentBits == 4 ? 0x7E : 0x7B;
  auto value = [&](int p) { return decodeFloat8(static_cast<uint8_t>(p), exponentBits); };
  if (a >= value(maxFinite)) return sign | maxFinite;
  int lo = 0, hi = maxFinite - 1;  // value(lo) <= a < value(hi + 1)
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (value(mid) <= a)
      lo = mid;
    else
      hi = mid - 1;
  }
  const double below = a - value(lo), above = value(lo + 1) - a;
  if (below < above || (below == above && (lo & 1) == 0)) return static_cast<uint8_t>(sign | lo);
  return static_cast<uint8_t>(sign | (lo + 1));
}

double decodeFloat(loomDataType_t t, const uint8_t* p) {
  switch (t) {
    case loomFloat16:
      return decodeSmallFloat(static_cast<uint16_t>(getBits(p, 2)), 5, 10);
    case loomBfloat16:
      return decodeSmallFloat(static_cast<uint16_t>(getBits(p, 2)), 8, 7);
    case loomFloat8e4m3:
      return decodeFloat8(*p, 4);
    case loomFloat8e5m2:
      return decodeFloat8(*p, 5);
    case loomFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
  }
}

// v is exactly representable as a float32 unless t is float64.
void encodeFloat(loomDataType_t t, double v, uint8_t* out) {
  if (std::isnan(v)) return putBits(out, info(t).size, canonicalNan(t));
  switch (t) {
    case loomFloat16:
      return putBits(out, 2, encodeSmallFloat(v, 5, 10, 0x7E00));
    case loomBfloat16:
      return putBits(out, 2, encodeSmallFloat(v, 8, 7, 0x7FC0));
    case loomFloat8e4m3:
      return putBits(out, 1, encodeFloat8(v, 4));
    case loomFloat8e5m2:
      return putBits(out, 1, encodeFloat8(v, 5));
    case loomFloat32: {
      const float f = static_cast<float>(v);
      std::memcpy(out, &f, 4);
      return;
    }
    default:
      std::memcpy(out, &v, 8);
      return;
  }
}

// Integers as their value modulo 2^64 (sign-extended when signed).
uint64_t decodeInt(const TypeInfo& t, const uint8_t* p) {
  uint64_t v = getBits(p, t.size);
  const int bits = static_cast<int>(8 * t.size);
  if (t.kind == Kind::kSigned && bits < 64 && (v >> (bits - 1)) & 1) v |= ~0ull << bits;
  return v;
}

// ---- Reference arithmetic ---------------------------------------------------------------

double refFloatOp(loomRedOp_t op, double a, double b) {
  switch (op) {
    case loomProd:
      return a * b;
    case loomMax:
    case loomMin: {
      if (std::isnan(a) || std::isnan(b)) return NAN;
      if (a == 0 && b == 0) {  // -0 < +0
        const bool negative =
            op == loomMax ? std::signbit(a) && std::signbit(b) : std::signbit(a) || std::signbit(b);
        return negative ? -0.0 : 0.0;
      }
      return op == loomMax ? (a > b ? a : b) : (a < b ? a : b);
    }
    default:
      return a + b;  // sum, avg
  }
}

uint64_t refIntOp(loomRedOp_t op, const TypeInfo& t, uint64_t a, uint64_t b) {
  const bool less =
      t.kind == Kind::kSigned ? static_cast<int64_t>(a) < static_cast<int64_t>(b) : a < b;
  switch (op) {
    case loomProd:
      return a * b;  // exact modulo 2^64, hence modulo 2^bits
    case loomMax:
      return less ? b : a;
    case loomMin:
      return less ? a : b;
    default:
      return a + b;
  }
}

// dst = fold of the inputs, element by element. A single input is copied bit for bit.
std::vector<uint8_t> referenceReduce(const TypeInfo& t, loomRedOp_t op,
                                     const std::vector<const uint8_t*>& inputs, size_t count) {
  std::vector<uint8_t> out(count * t.size);
  for (size_t i = 0; i < count; ++i) {
    const size_t at = i * t.size;
    if (inputs.size() == 1) {
      std::memcpy(&out[at], inputs[0] + at, t.size);
    } else if (t.kind == Kind::kFloat) {
      double acc = decodeFloat(t.type, inputs[0] + at);
      for (size_t k = 1; k < inputs.size(); ++k) {
        acc = refFloatOp(op, acc, decodeFloat(t.type, inputs[k] + at));
        // float32 arithmetic: one double operation on float32 operands, rounded to float32,
        // is the correctly rounded float32 result (53 >= 2 * 24 + 2).
        if (t.type != loomFloat64) acc = static_cast<float>(acc);
      }
      encodeFloat(t.type, acc, &out[at]);
    } else {
      uint64_t acc = decodeInt(t, inputs[0] + at);
      for (size_t k = 1; k < inputs.size(); ++k) {
        acc = refIntOp(op, t, acc, decodeInt(t, inputs[k] + at));
      }
      putBits(&out[at], t.size, acc);
    }
  }
  return out;
}

std::vector<uint8_t> referenceScale(const TypeInfo& t, const uint8_t* src, size_t count,
                                    int divisor) {
  std::vector<uint8_t> out(count * t.size);
  for (size_t i = 0; i < count; ++i) {
    const size_t at = i * t.size;
    if (t.kind == Kind::kFloat) {
      double q = decodeFloat(t.type, src + at) / divisor;
      if (t.type != loomFloat64) q = static_cast<float>(q);
      encodeFloat(t.type, q, &out[at]);
    } else if (t.kind == Kind::kSigned) {
      const int64_t x = static_cast<int64_t>(decodeInt(t, src + at));
      putBits(&out[at], t.size, static_cast<uint64_t>(x / divisor));
    } else {
      putBits(&out[at], t.size, decodeInt(t, src + at) / static_cast<uint64_t>(divisor));
    }
  }
  return out;
}

// ---- Inputs -----------------------------------------------------------------------------

struct Random {
  uint64_t state;
  uint64_t next() {  // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

// A random float of the type with |x| in [2^minExp, 2^(maxExp+1)), or ±0 one time in 32.
// Built from its bit fields, so it is exact in the type.
uint64_t randomFloatBits(loomDataType_t t, Random& rng, int minExp, int maxExp) {
  const uint64_t r = rng.next();
  const int exp = minExp + static_cast<int>((r >> 8) % static_cast<uint64_t>(maxExp - minExp + 1));
  const bool zero = (r & 31) == 0;
  const uint64_t sign = (r >> 5) & 1;
  const uint64_t mantissa = rng.next();
  int expBits = 11, manBits = 52;
  if (t == loomFloat16) expBits = 5, manBits = 10;
  if (t == loomBfloat16) expBits = 8, manBits = 7;
  if (t == loomFloat8e4m3) expBits = 4, manBits = 3;
  if (t == loomFloat8e5m2) expBits = 5, manBits = 2;
  if (t == loomFloat32) expBits = 8, manBits = 23;
  const int totalBits = 1 + expBits + manBits;
  if (zero) return sign << (totalBits - 1);
  const uint64_t biased = static_cast<uint64_t>(exp + (1 << (expBits - 1)) - 1);
  return (sign << (totalBits - 1)) | (biased << manBits) | (mantissa & ((1ull << manBits) - 1));
}

// Values for which no float result overflows, even multiplied eight together (float8 sums of
// eight may pass 448 and saturate, as the reference does too); normal exponents of every type.
std::vector<uint8_t> randomInput(const TypeInfo& t, loomRedOp_t op, size_t count, uint64_t seed) {
  Random rng{seed * 0x100000001B3ull + t.type * 131 + op};
  std::vector<uint8_t> v(count * t.size);
  const int minExp = t.size == 1 ? -5 : -8;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t bits = t.kind == Kind::kFloat
                              ? (op == loomProd ? randomFloatBits(t.type, rng, -2, 0)
                                                : randomFloatBits(t.type, rng, minExp, 5))
                              : rng.next();
    putBits(&v[i * t.size], t.size, bits);
  }
  return v;
}

// Any bit pattern at all: NaNs with payloads, infinities, denormals, overflowing products.
std::vector<uint8_t> randomBits(size_t bytes, uint64_t seed) {
  Random rng{seed};
  std::vector<uint8_t> v(bytes);
  for (auto& b : v) b = static_cast<uint8_t>(rng.next());
  return v;
}

// ---- Buffers ----------------------------------------------------------------------------

// A buffer with guard bytes on both sides, to see writes out of bounds, and the data placed
// at a chosen byte offset, to see misalignment.
class GuardedBuffer {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr uint8_t kPattern = 0xA5;

  GuardedBuffer(const std::vector<uint8_t>& contents, size_t offset)
      : bytes_(kGuard + offset + contents.size() + kGuard, kPattern),
        offset_(kGuard + offset),
        size_(contents.size()) {
    if (!contents.empty()) std::memcpy(data(), contents.data(), size_);
  }
  uint8_t* data() { return bytes_.data() + offset_; }
  std::vector<uint8_t> contents() const {
    return std::vector<uint8_t>(bytes_.begin() + offset_, bytes_.begin() + offset_ + size_);
  }
  bool guardsIntact() const {
    for (size_t i = 0; i < bytes_.size(); ++i) {
      const bool inData = i >= offset_ && i < offset_ + size_;
      if (!inData && bytes_[i] != kPattern) return false;
    }
    return true;
  }

 private:
  std::vector<uint8_t> bytes_;
  size_t offset_;
  size_t size_;
};

// "" when equal, else where and how they first differ.
std::string firstDifference(const TypeInfo& t, const std::vector<uint8_t>& got,
                            const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) return "sizes differ";
  for (size_t at = 0; at < got.size(); at += t.size) {
    if (std::memcmp(&got[at], &want[at], t.size) != 0) {
      char text[160];
      std::snprintf(text, sizeof text, "element %zu of %zu: got 0x%llx, want 0x%llx", at / t.size,
                    got.size() / t.size, static_cast<unsigned long long>(getBits(&got[at], t.size)),
                    static_cast<unsigned long long>(getBits(&want[at], t.size)));
      return text;
    }
  }
  return "";
}

// Where the output goes, relative to the inputs.
enum class Placement { kOutOfPlace, kIntoFirst, kIntoLast };
const Placement kPlacements[] = {Placement::kOutOfPlace, Placement::kIntoFirst,
                                 Placement::kIntoLast};
const char* placementName(Placement p) {
  return p == Placement::kOutOfPlace  ? "out of place"
         : p == Placement::kIntoFirst ? "dst == first input"
                                      : "dst == last input";
}

// Byte offsets of (inputs, dst): aligned, one element in, and odd bytes that also put the
// buffers out of step with each other.
struct Offsets {
  size_t input;
  size_t inputStep;  // input k sits at input + k * inputStep
  size_t dst;
};
std::vector<Offsets> offsetsFor(const TypeInfo& t) {
  return {{0, 0, 0}, {t.size, 0, t.size}, {1, 2, 5}};
}

// Runs reduceN (or reduce for two inputs when useReduce2) with the inputs at the given
// offsets and dst placed as asked; checks the output and the guards of every buffer.
void checkReduce(const TypeInfo& t, loomRedOp_t op, const std::vector<std::vector<uint8_t>>& in,
                 size_t count, const Offsets& off, Placement placement, bool useReduce2,
                 const std::vector<uint8_t>& want) {
  std::vector<GuardedBuffer> buffers;
  for (size_t k = 0; k < in.size(); ++k) buffers.emplace_back(in[k], off.input + k * off.inputStep);
  GuardedBuffer outside(std::vector<uint8_t>(count * t.size, 0x5A), off.dst);
  GuardedBuffer* dst = placement == Placement::kOutOfPlace  ? &outside
                       : placement == Placement::kIntoFirst ? &buffers.front()
                                                            : &buffers.back();
  std::vector<const void*> srcs;
  for (auto& b : buffers) srcs.push_back(b.data());
  if (useReduce2) {
    reduce(dst->data(), srcs[0], srcs[1], count, t.type, op);
  } else {
    reduceN(dst->data(), srcs.data(), static_cast<int>(srcs.size()), count, t.type, op);
  }
  const std::string where = std::string(useReduce2 ? "reduce" : "reduceN") + " " + t.name + " " +
                            opName(op) + " nsrcs=" + std::to_string(in.size()) +
                            " count=" + std::to_string(count) + " " + placementName(placement) +
                            " offsets=" + std::to_string(off.input) + "/" +
                            std::to_string(off.dst) + " isa=" + isaName();
  const std::string diff = firstDifference(t, dst->contents(), want);
  EXPECT_EQ(diff, "") << where;
  for (auto& b : buffers) EXPECT_TRUE(b.guardsIntact()) << "write out of bounds: " << where;
  EXPECT_TRUE(outside.guardsIntact()) << "write out of bounds: " << where;
}

// ---- Fixtures ---------------------------------------------------------------------------

// Selects the instruction-set path for one test and goes back to the default afterwards.
class IsaScope {
 public:
  explicit IsaScope(Isa isa) : ok_(forceIsaForTesting(isa)) {}
  ~IsaScope() { forceIsaForTesting(availableIsas().back()); }
  bool ok() const { return ok_; }

 private:
  bool ok_;
};

#define LOOM_USE_ISA_OR_SKIP(isa)                                                         \
  IsaScope isa_scope_(isa);                                                               \
  if (!isa_scope_.ok()) {                                                                 \
    GTEST_SKIP() << isaName(isa) << " path not available here (not compiled in, or "      \
                 << "this CPU lacks the instructions): it is not tested on this machine"; \
  }

using IsaTypeOp = std::tuple<Isa, int, loomRedOp_t>;

std::string isaTypeOpName(const testing::TestParamInfo<IsaTypeOp>& p) {
  return std::string(isaName(std::get<0>(p.param))) + "_" + kTypes[std::get<1>(p.param)].name +
         "_" + opName(std::get<2>(p.param));
}

class ReduceTest : public testing::TestWithParam<IsaTypeOp> {};

TEST_P(ReduceTest, MatchesReferenceAtEveryCountOffsetAndPlacement) {
  const auto [isa, typeIndex, op] = GetParam();
  LOOM_USE_ISA_OR_SKIP(isa);
  const TypeInfo& t = kTypes[typeIndex];
  for (size_t count : {0, 1, 7, 15, 16, 17, 31, 33, 1023, 65537}) {
    const std::vector<std::vector<uint8_t>> in = {randomInput(t, op, count, 1),
                                                  randomInput(t, op, count, 2)};
    const auto want = referenceReduce(t, op, {in[0].data(), in[1].data()}, count);
    for (const Offsets& off : offsetsFor(t)) {
      for (Placement placement : kPlacements) {
        checkReduce(t, op, in, count, off, placement, /*useReduce2=*/true, want);
      }
    }
  }
}

class ReduceNTest : public testing::TestWithParam<IsaTypeOp> {};

// Counts that end inside a tile and that span several (tiles are 256 elements for 16-bit
// floats, 1 KiB otherwise).
TEST_P(ReduceNTest, MatchesLeftFoldForOneTwoThreeAndEightInputs) {
  const auto [isa, typeIndex, op] = GetParam();
  LOOM_USE_ISA_OR_SKIP(isa);
  const TypeInfo& t = kTypes[typeIndex];
  for (int nsrcs : {1, 2, 3, 8}) {
    for (size_t count : {0, 1, 17, 511, 1025, 4097, 65537}) {
      std::vector<std::vector<uint8_t>> in;
      std::vector<const uint8_t*> ptrs;
      for (int k = 0; k < nsrcs; ++k) in.push_back(randomInput(t, op, count, 10 + k));
      for (auto& v : in) ptrs.push_back(v.data());
      const auto want = referenceReduce(t, op, ptrs, count);
      for (const Offsets& off : {offsetsFor(t)[0], offsetsFor(t)[2]}) {
        for (Placement placement : kPlacements) {
          checkReduce(t, op, in, count, off, placement, /*useReduce2=*/false, want);
        }
      }
    }
  }
}

class ReduceNToTest : public testing::TestWithParam<IsaTypeOp> {};

// reduceN's result (divided by nsrcs for avg, as scale divides) in every output, plain and
// non-temporal, with the first output the first input (in place) or apart, at offsets that
// leave the buffers unaligned; nothing written outside them.
TEST_P(ReduceNToTest, WritesReduceNsResultIntoEveryOutput) {
  const auto [isa, typeIndex, op] = GetParam();
  LOOM_USE_ISA_OR_SKIP(isa);
  const TypeInfo& t = kTypes[typeIndex];
  for (int nsrcs : {1, 2, 3}) {
    for (size_t count : {1, 255, 1025, 4097}) {
      std::vector<std::vector<uint8_t>> in;
      for (int k = 0; k < nsrcs; ++k) in.push_back(randomInput(t, op, count, 30 + k));
      std::vector<const void*> ptrs;
      for (auto& v : in) ptrs.push_back(v.data());
      std::vector<uint8_t> want(count * t.size);
      reduceN(want.data(), ptrs.data(), nsrcs, count, t.type, op);
      const int divisor = op == loomAvg ? nsrcs : 1;
      if (divisor > 1) scale(want.data(), want.data(), count, t.type, divisor);
      for (bool streaming : {false, true}) {
        for (bool inPlace : {false, true}) {
          std::vector<GuardedBuffer> srcs, outs;
          for (size_t k = 0; k < in.size(); ++k) srcs.emplace_back(in[k], 1 + k);
          for (size_t j = 0; j < 3; ++j) outs.emplace_back(std::vector<uint8_t>(count * t.size, 0x5A), 3 + j);
          std::vector<const void*> from;
          for (auto& b : srcs) from.push_back(b.data());
          std::vector<void*> to{inPlace ? srcs[0].data() : outs[0].data(), outs[1].data(), outs[2].data()};
          reduceNTo(to.data(), 3, from.data(), nsrcs, count, t.type, op, divisor, streaming);
          storeFence();
          const std::string where = std::string(t.name) + " " + opName(op) + " nsrcs=" + std::to_string(nsrcs) +
                                    " count=" + std::to_string(count) + (streaming ? " streaming" : " plain") +
                                    (inPlace ? " in place" : " apart") + " isa=" + isaName();
          EXPECT_EQ(firstDifference(t, inPlace ? srcs[0].contents() : outs[0].contents(), want), "") << where;
          EXPECT_EQ(firstDifference(t, outs[1].contents(), want), "") << where;
          EXPECT_EQ(firstDifference(t, outs[2].contents(), want), "") << where;
          for (auto& b : srcs) EXPECT_TRUE(b.guardsIntact()) << "write out of bounds: " << where;
          for (auto& b : outs) EXPECT_TRUE(b.guardsIntact()) << "write out of bounds: " << where;
        }
      }
    }
  }
}

// Outputs aligned alike take the vector loop (reduceNTo's middle, with tiles before and
// after): the same bits as reduceN, in every output, and nothing written around them, for
// every type and op on every path.
TEST(ReduceNTo, OutputsAlignedAlikeMatchReduceN) {
  constexpr size_t kPad = 128;
  const std::vector<Isa> isas = availableIsas();
  for (Isa isa : isas) {
    ASSERT_TRUE(forceIsaForTesting(isa));
    for (const TypeInfo& t : kTypes) {
      for (loomRedOp_t op : {loomSum, loomProd, loomMax, loomMin}) {
        for (size_t count : {1, 15, 16, 17, 100, 4099}) {
          for (size_t shift : {size_t{0}, t.size, 3 * t.size}) {
            const auto a = randomInput(t, op, count, 7), b = randomInput(t, op, count, 8);
            const auto c = randomInput(t, op, count, 9);
            const void* srcs[] = {a.data(), b.data(), c.data()};
            std::vector<uint8_t> want(count * t.size);
            reduceN(want.data(), srcs, 3, count, t.type, op);
            for (bool streaming : {false, true}) {
              std::vector<std::unique_ptr<uint8_t, decltype(&std::free)>> outs;
              void* to[2];
              // aligned_alloc takes whole multiples of the alignment.
              const size_t total = (count * t.size + 2 * kPad + 63) / 64 * 64;
              for (int j = 0; j < 2; ++j) {
                outs.emplace_back(static_cast<uint8_t*>(std::aligned_alloc(64, total)), &std::free);
                std::memset(outs.back().get(), 0xA5, total);
                to[j] = outs.back().get() + kPad + shift;
              }
              reduceNTo(to, 2, srcs, 3, count, t.type, op, 1, streaming);
              storeFence();
              const std::string where = std::string(t.name) + " " + opName(op) + " count=" + std::to_string(count) +
                                        " shift=" + std::to_string(shift) + (streaming ? " streaming" : " plain") +
                                        " isa=" + isaName(isa);
              for (int j = 0; j < 2; ++j) {
                const uint8_t* base = outs[static_cast<size_t>(j)].get();
                std::vector<uint8_t> got(base + kPad + shift, base + kPad + shift + count * t.size);
                EXPECT_EQ(firstDifference(t, got, want), "") << where << " output " << j;
                for (size_t i = 0; i < kPad + shift; ++i) ASSERT_EQ(base[i], 0xA5) << where << " before output " << j;
                for (size_t i = kPad + shift + count * t.size; i < total; ++i) {
                  ASSERT_EQ(base[i], 0xA5) << where << " after output " << j;
                }
              }
            }
          }
        }
      }
    }
  }
  forceIsaForTesting(isas.back());
}

// More inputs than one pass of the kernel takes (64): integer sums and maxima, exact in any
// grouping, agree with reduceN.
TEST(ReduceNTo, FoldsMoreThanSixtyFourInputs) {
  constexpr int kInputs = 70;
  constexpr size_t kCount = 1000;
  for (loomRedOp_t op : {loomSum, loomMax}) {
    std::vector<std::vector<uint8_t>> in;
    std::vector<const void*> ptrs;
    for (int k = 0; k < kInputs; ++k) in.push_back(randomBits(kCount * 4, 500 + static_cast<uint64_t>(k)));
    for (auto& v : in) ptrs.push_back(v.data());
    std::vector<uint8_t> want(kCount * 4), got(kCount * 4);
    reduceN(want.data(), ptrs.data(), kInputs, kCount, loomInt32, op);
    void* to[] = {got.data()};
    reduceNTo(to, 1, ptrs.data(), kInputs, kCount, loomInt32, op, 1, false);
    EXPECT_EQ(firstDifference(info(loomInt32), got, want), "") << opName(op);
  }
}

std::vector<IsaTypeOp> allIsaTypeOps() {
  std::vector<IsaTypeOp> all;
  for (Isa isa : kIsas)
    for (int t = 0; t < loomNumTypes; ++t)
      for (loomRedOp_t op : kOps) all.emplace_back(isa, t, op);
  return all;
}

INSTANTIATE_TEST_SUITE_P(All, ReduceTest, testing::ValuesIn(allIsaTypeOps()), isaTypeOpName);
INSTANTIATE_TEST_SUITE_P(All, ReduceNTest, testing::ValuesIn(allIsaTypeOps()), isaTypeOpName);
INSTANTIATE_TEST_SUITE_P(All, ReduceNToTest, testing::ValuesIn(allIsaTypeOps()), isaTypeOpName);

using IsaType = std::tuple<Isa, int>;

std::string isaTypeName(const testing::TestParamInfo<IsaType>& p) {
  return std::string(isaName(std::get<0>(p.param))) + "_" + kTypes[std::get<1>(p.param)].name;
}

std::vector<IsaType> allIsaTypes() {
  std::vector<IsaType> all;
  for (Isa isa : kIsas)
    for (int t = 0; t < loomNumTypes; ++t) all.emplace_back(isa, t);
  return all;
}

class EdgeTest : public testing::TestWithParam<IsaType> {};

// Special values of the type, bit patterns in the element's width.
std::vector<uint64_t> edgeValues(const TypeInfo& t) {
  switch (t.type) {
    case loomFloat16:  // NaNs, ±inf, ±0, ±max, ±min normal, denormals, 1, ±1.5
      return {0x7E00, 0x7C01, 0xFE00, 0x7C00, 0xFC00, 0x0000, 0x8000, 0x7BFF, 0xFBFF,
              0x0400, 0x8400, 0x0001, 0x8001, 0x03FF, 0x0200, 0x3C00, 0x3E00, 0xBE00};
    case loomBfloat16:
      return {0x7FC0, 0x7F81, 0xFFC0, 0x7F80, 0xFF80, 0x0000, 0x8000, 0x7F7F, 0xFF7F,
              0x0080, 0x8080, 0x0001, 0x8001, 0x007F, 0x3F80, 0x3FC0, 0xBFC0};
    case loomFloat8e4m3:  // NaNs, ±0, ±448, ±min normal, denormals, 1, ±1.5 (no infinity)
      return {0x7F, 0xFF, 0x00, 0x80, 0x7E, 0xFE, 0x08, 0x88, 0x01, 0x81, 0x07, 0x38, 0x3C, 0xBC};
    case loomFloat8e5m2:  // NaNs, ±inf, ±0, ±57344, ±min normal, denormals, 1, ±1.5
      return {0x7F, 0x7D, 0xFE, 0x7C, 0xFC, 0x00, 0x80, 0x7B, 0xFB, 0x04, 0x84, 0x01, 0x81, 0x03, 0x3C, 0x3E, 0xBE};
    case loomFloat32:
      return {0x7FC00000, 0x7F800001, 0xFFC12345, 0x7F800000, 0xFF800000, 0x00000000,
              0x80000000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00800000, 0x80800000, 0x00000001,
              0x807FFFFF, 0x3F800000, 0x3FC00000, 0xBFC00000};
    case loomFloat64:
      return {0x7FF8000000000000, 0x7FF0000000000001, 0xFFF8000000012345,
              0x7FF0000000000000, 0xFFF0000000000000, 0x0,
              0x8000000000000000, 0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF,
              0x0010000000000000, 0x0000000000000001, 0x800FFFFFFFFFFFFF,
              0x3FF0000000000000, 0xBFF8000000000000};
    default: {  // min, min + 1, -1, 0, 1, 2, max - 1, max (as bit patterns of the width)
      const int bits = static_cast<int>(8 * t.size);
      const uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
      const uint64_t top = 1ull << (bits - 1);
      std::vector<uint64_t> v = {0,   1,       2,       mask,    mask - 1,
                                 top, top + 1, top - 1, top - 2, 0x5A5A5A5A5A5A5A5Aull & mask};
      return v;
    }
  }
}

// Every ordered pair of edge values, for every op: reduce, then scale by 1, 3 and 300.
TEST_P(EdgeTest, EveryPairOfSpecialValues) {
  const auto [isa, typeIndex] = GetParam();
  LOOM_USE_ISA_OR_SKIP(isa);
  const TypeInfo& t = kTypes[typeIndex];
  const std::vector<uint64_t> values = edgeValues(t);
  std::vector<uint8_t> a, b;
  for (uint64_t x : values) {
    for (uint64_t y : values) {
      a.resize(a.size() + t.size);
      b.resize(b.size() + t.size);
      putBits(&a[a.size() - t.size], t.size, x);
      putBits(&b[b.size() - t.size], t.size, y);
    }
  }
  const size_t count = a.size() / t.size;
  for (loomRedOp_t op : kOps) {
    const auto want = referenceReduce(t, op, {a.data(), b.data()}, count);
    for (Placement placement : kPlacements) {
      checkReduce(t, op, {a, b}, count, {0, 0, 0}, placement, /*useReduce2=*/true, want);
    }
  }
  for (int divisor : {1, 3, 300}) {
    std::vector<uint8_t> got(a.size());
    scale(got.data(), a.data(), count, t.type, divisor);
    EXPECT_EQ(firstDifference(t, got, referenceScale(t, a.data(), count, divisor)), "")
        << t.name << " scale by " << divisor << " isa=" << isaName();
  }
}

INSTANTIATE_TEST_SUITE_P(All, EdgeTest, testing::ValuesIn(allIsaTypes()), isaTypeName);

class ScaleTest : public testing::TestWithParam<IsaType> {};

TEST_P(ScaleTest, IntegersTruncateTowardZeroFloatsRoundOnce) {
  const auto [isa, typeIndex] = GetParam();
  LOOM_USE_ISA_OR_SKIP(isa);
  const TypeInfo& t = kTypes[typeIndex];
  for (size_t count : {0, 1, 17, 1023, 65537}) {
    const auto in = randomInput(t, loomSum, count, 7);
    for (int divisor : {1, 2, 3, 7, 8, 300}) {
      const auto want = referenceScale(t, in.data(), count, divisor);
      for (size_t offset : {size_t{0}, size_t{1}}) {
        GuardedBuffer out(std::vector<uint8_t>(in.size()), offset);
        scale(out.data(), in.data(), count, t.type, divisor);
        EXPECT_EQ(firstDifference(t, out.contents(), want), "")
            << t.name << " scale by " << divisor << " count=" << count << " isa=" << isaName();
        EXPECT_TRUE(out.guardsIntact());
        GuardedBuffer inPlace(in, offset);
        scale(inPlace.data(), inPlace.data(), count, t.type, divisor);
        EXPECT_EQ(firstDifference(t, inPlace.contents(), want), "") << "in place";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, ScaleTest, testing::ValuesIn(allIsaTypes()), isaTypeName);

// multiply (a premultiplied sum's first step) is the product against the scalar repeated:
// every edge value times every edge value, and random inputs of every length, in place too.
class MultiplyTest : public testing::TestWithParam<IsaType> {};

TEST_P(MultiplyTest, IsTheProductWithTheScalarRepeated) {
  const auto [isa, typeIndex] = GetParam();
  LOOM_USE_ISA_OR_SKIP(isa);
  const TypeInfo& t = kTypes[typeIndex];
  std::vector<uint8_t> edges;
  for (uint64_t x : edgeValues(t)) {
    edges.resize(edges.size() + t.size);
    putBits(&edges[edges.size() - t.size], t.size, x);
  }
  auto check = [&](const std::vector<uint8_t>& in, const uint8_t* scalar, const std::string& what) {
    const size_t count = in.size() / t.size;
    std::vector<uint8_t> repeated(in.size());
    for (size_t i = 0; i < count; ++i) std::memcpy(&repeated[i * t.size], scalar, t.size);
    const auto want = referenceReduce(t, loomProd, {in.data(), repeated.data()}, count);
    for (size_t offset : {size_t{0}, size_t{1}}) {
      GuardedBuffer out(std::vector<uint8_t>(in.size()), offset);
      multiply(out.data(), in.data(), count, t.type, scalar);
      EXPECT_EQ(firstDifference(t, out.contents(), want), "") << t.name << " " << what << " isa=" << isaName();
      EXPECT_TRUE(out.guardsIntact());
      GuardedBuffer inPlace(in, offset);
      multiply(inPlace.data(), inPlace.data(), count, t.type, scalar);
      EXPECT_EQ(firstDifference(t, inPlace.contents(), want), "") << t.name << " " << what << " in place";
    }
  };
  for (size_t k = 0; k < edges.size(); k += t.size) check(edges, &edges[k], "edge values");
  for (size_t count : {0, 1, 17, 1023, 65537}) {
    const auto in = randomInput(t, loomProd, count, 11);
    const auto scalars = randomInput(t, loomProd, 3, 13);
    for (size_t k = 0; k < scalars.size(); k += t.size) check(in, &scalars[k], "count=" + std::to_string(count));
  }
}

INSTANTIATE_TEST_SUITE_P(All, MultiplyTest, testing::ValuesIn(allIsaTypes()), isaTypeName);

// ---- Every path gives the portable path's bits ------------------------------------------

struct Outputs {
  std::vector<uint8_t> ab, ba, many, scaled;
};

// Arbitrary bit patterns (NaN payloads, denormals, infinities, overflow) through reduce in
// both argument orders, reduceN over three inputs and scale: compared between paths, since a
// reference for overflowing products would only repeat the kernels' rules.
Outputs runOnArbitraryBits(const TypeInfo& t, loomRedOp_t op, size_t count) {
  const auto a = randomBits(count * t.size, 100 + t.type);
  const auto b = randomBits(count * t.size, 200 + t.type);
  const auto c = randomBits(count * t.size, 300 + t.type);
  Outputs out{std::vector<uint8_t>(a.size()), std::vector<uint8_t>(a.size()),
              std::vector<uint8_t>(a.size()), std::vector<uint8_t>(a.size())};
  reduce(out.ab.data(), a.data(), b.data(), count, t.type, op);
  reduce(out.ba.data(), b.data(), a.data(), count, t.type, op);
  const void* srcs[] = {a.data(), b.data(), c.data()};
  reduceN(out.many.data(), srcs, 3, count, t.type, op);
  scale(out.scaled.data(), a.data(), count, t.type, 3);
  return out;
}

TEST(ReduceIsas, EveryPathGivesThePortableBitsAndOpsCommute) {
  const std::vector<Isa> isas = availableIsas();
  std::string names;
  for (Isa isa : isas) names += std::string(" ") + isaName(isa);
  std::printf("instruction-set paths tested on this machine:%s\n", names.c_str());
  const size_t count = 4099;
  for (const TypeInfo& t : kTypes) {
    for (loomRedOp_t op : kOps) {
      ASSERT_TRUE(forceIsaForTesting(Isa::kPortable));
      const Outputs portable = runOnArbitraryBits(t, op, count);
      EXPECT_EQ(firstDifference(t, portable.ab, portable.ba), "")
          << t.name << " " << opName(op) << " is not commutative bit for bit";
      for (Isa isa : isas) {
        ASSERT_TRUE(forceIsaForTesting(isa));
        const Outputs got = runOnArbitraryBits(t, op, count);
        const std::string what = std::string(t.name) + " " + opName(op) + " " + isaName(isa);
        EXPECT_EQ(firstDifference(t, got.ab, portable.ab), "") << what << " reduce";
        EXPECT_EQ(firstDifference(t, got.ba, portable.ba), "") << what << " reduce, swapped";
        EXPECT_EQ(firstDifference(t, got.many, portable.many), "") << what << " reduceN";
        EXPECT_EQ(firstDifference(t, got.scaled, portable.scaled), "") << what << " scale";
      }
    }
  }
  forceIsaForTesting(isas.back());
}

// Every float16 and bfloat16 value, against several second operands: every widening, and
// roundings that land on ties, denormals and overflow.
class SixteenBitFloatTest : public testing::TestWithParam<IsaType> {};

TEST_P(SixteenBitFloatTest, EveryValue) {
  const auto [isa, typeIndex] = GetParam();
  LOOM_USE_ISA_OR_SKIP(isa);
  const TypeInfo& t = kTypes[typeIndex];
  std::vector<uint8_t> all(65536 * 2);
  for (uint32_t v = 0; v < 65536; ++v) putBits(&all[2 * v], 2, v);
  // -0, +0, the smallest denormal, 1 + ulp, 3, ~0.1, and large values.
  const uint16_t seconds[] = {0x8000, 0x0000, 0x0001, 0x3C01, 0x4200, 0x2E66, 0x1400, 0x63D0};
  for (uint16_t second : seconds) {
    std::vector<uint8_t> b(all.size());
    for (size_t i = 0; i < 65536; ++i) putBits(&b[2 * i], 2, second);
    for (loomRedOp_t op : {loomSum, loomProd, loomMax, loomMin}) {
      const auto want = referenceReduce(t, op, {all.data(), b.data()}, 65536);
      checkReduce(t, op, {all, b}, 65536, {0, 0, 0}, Placement::kOutOfPlace, true, want);
    }
  }
}

// Every path with each of `types`.
std::vector<IsaType> allIsasWith(std::initializer_list<loomDataType_t> types) {
  std::vector<IsaType> all;
  for (Isa isa : kIsas)
    for (loomDataType_t type : types) all.emplace_back(isa, type);
  return all;
}

const std::vector<IsaType> kSixteenBitFloats = allIsasWith({loomFloat16, loomBfloat16});

INSTANTIATE_TEST_SUITE_P(All, SixteenBitFloatTest, testing::ValuesIn(kSixteenBitFloats),
                         isaTypeName);

// Every pattern of a narrow float type widens through convert() to its exact value (NaNs to
// float32's canonical NaN), read from and written to misaligned addresses.
template <class Decode>
void checkEveryWidening(loomDataType_t type, uint32_t patterns, const Decode& decode) {
  const size_t size = info(type).size;
  std::vector<uint8_t> all(patterns * size + 1), wide(patterns * 4 + 3);
  for (uint32_t v = 0; v < patterns; ++v) putBits(&all[1 + size * v], size, v);
  ASSERT_TRUE(convert(&wide[3], loomFloat32, &all[1], type, patterns));
  for (uint32_t v = 0; v < patterns; ++v) {
    const double want = decode(v);
    const double got = decodeFloat(loomFloat32, &wide[3 + 4 * v]);
    if (std::isnan(want)) {
      ASSERT_EQ(getBits(&wide[3 + 4 * v], 4), canonicalNan(loomFloat32)) << "pattern " << v;
    } else {
      ASSERT_TRUE(got == want && std::signbit(got) == std::signbit(want)) << "pattern " << v;
    }
  }
}

// Every pair of float8 values, for every op: every widening, and roundings that land on ties,
// denormals and saturation.
class Float8Test : public testing::TestWithParam<IsaType> {};

TEST_P(Float8Test, EveryPairOfValues) {
  const auto [isa, typeIndex] = GetParam();
  LOOM_USE_ISA_OR_SKIP(isa);
  const TypeInfo& t = kTypes[typeIndex];
  std::vector<uint8_t> a(65536), b(65536);
  for (size_t i = 0; i < 65536; ++i) {
    a[i] = static_cast<uint8_t>(i);
    b[i] = static_cast<uint8_t>(i >> 8);
  }
  for (loomRedOp_t op : kOps) {
    const auto want = referenceReduce(t, op, {a.data(), b.data()}, 65536);
    checkReduce(t, op, {a, b}, 65536, {0, 0, 0}, Placement::kOutOfPlace, true, want);
  }
}

// Every float8 value widens to its exact value; float32 values (random bits, plus ties,
// saturation and denormals) narrow to the reference's rounding, at misaligned addresses.
TEST_P(Float8Test, ConvertsEveryValueAndFloat32sAsTheReference) {
  const auto [isa, typeIndex] = GetParam();
  LOOM_USE_ISA_OR_SKIP(isa);
  const auto type = static_cast<loomDataType_t>(typeIndex);
  const int exponentBits = type == loomFloat8e4m3 ? 4 : 5;
  checkEveryWidening(type, 256, [&](uint32_t v) { return decodeFloat8(static_cast<uint8_t>(v), exponentBits); });
  std::vector<uint8_t> floats = randomBits(4 * 100003, 13);
  // e4m3: 448, the tie to 480 (464) and past it, 2^-9 (smallest denormal), half of it (a tie
  // to zero), 3/4 of it; e5m2: 57344, its tie 61440, 2^-16; both: 1 + half an ulp, ±inf, NaN.
  const float specials[] = {448.0f,   464.0f,   464.5f,   480.0f,   0x1p-9f, 0x1p-10f, 0x1.8p-10f,
                            57344.0f, 61440.0f, 0x1p-16f, 0x1p-17f, 1.0625f, 1.125f,   -1.1875f,
                            INFINITY, -INFINITY, NAN,     -0.0f,    1e30f,   -1e-30f};
  std::memcpy(floats.data(), specials, sizeof(specials));
  const size_t n = floats.size() / 4;
  std::vector<uint8_t> narrow(n + 1);
  ASSERT_TRUE(convert(&narrow[1], type, floats.data(), loomFloat32, n));
  for (size_t i = 0; i < n; ++i) {
    const double x = decodeFloat(loomFloat32, &floats[4 * i]);
    ASSERT_EQ(narrow[1 + i], encodeFloat8(x, exponentBits)) << "float32 " << x << " at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(All, Float8Test, testing::ValuesIn(allIsasWith({loomFloat8e4m3, loomFloat8e5m2})),
                         isaTypeName);

// float32 <-> float16 / bfloat16 (the DDP layer's compression): every 16-bit pattern widens to
// its exact value, and float32 values (random bits, plus ties, overflow and denormals) narrow
// to the reference's rounding, at a misaligned address too.
class ConvertTest : public testing::TestWithParam<IsaType> {};

TEST_P(ConvertTest, EveryWideningAndReferenceNarrowing) {
  const auto [isa, typeIndex] = GetParam();
  LOOM_USE_ISA_OR_SKIP(isa);
  const auto type = static_cast<loomDataType_t>(typeIndex);
  const int exponentBits = type == loomFloat16 ? 5 : 8, mantissaBits = type == loomFloat16 ? 10 : 7;

  checkEveryWidening(type, 65536, [&](uint32_t v) {
    return decodeSmallFloat(static_cast<uint16_t>(v), exponentBits, mantissaBits);
  });

  std::vector<uint8_t> floats = randomBits(4 * 100003, 11);
  const float specials[] = {65504.0f, 65520.0f, 65519.99f, 1e-8f, -5.960464477539063e-08f, 2.9802322e-08f,
                            1.00390625f, 1.01171875f, 0.1f, -0.0f, INFINITY, -INFINITY, NAN};
  std::memcpy(floats.data(), specials, sizeof(specials));
  const size_t n = floats.size() / 4;
  std::vector<uint8_t> narrow(2 * n + 1);
  ASSERT_TRUE(convert(&narrow[1], type, floats.data(), loomFloat32, n));
  const uint16_t qnan = static_cast<uint16_t>(canonicalNan(type));
  for (size_t i = 0; i < n; ++i) {
    const double x = decodeFloat(loomFloat32, &floats[4 * i]);
    const uint16_t want = encodeSmallFloat(x, exponentBits, mantissaBits, qnan);
    ASSERT_EQ(getBits(&narrow[1 + 2 * i], 2), want) << "float32 " << x << " at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(All, ConvertTest, testing::ValuesIn(kSixteenBitFloats), isaTypeName);

TEST(Convert, EqualTypesCopyOtherPairsAreRefused) {
  auto src = randomBits(800, 6);
  std::vector<uint8_t> dst(800);
  EXPECT_TRUE(convert(dst.data(), loomFloat64, src.data(), loomFloat64, 100));
  EXPECT_EQ(dst, src);
  EXPECT_FALSE(convert(dst.data(), loomFloat16, src.data(), loomFloat64, 100));
  EXPECT_FALSE(convert(dst.data(), loomInt32, src.data(), loomFloat32, 100));
  EXPECT_FALSE(convert(dst.data(), loomFloat16, src.data(), loomBfloat16, 100));
  EXPECT_TRUE(convert(nullptr, loomFloat16, nullptr, loomFloat32, 0));
}

TEST(Copy, CopiesAndAcceptsTheSamePointer) {
  auto src = randomBits(1000, 5);
  std::vector<uint8_t> dst(1000);
  copy(dst.data(), src.data(), 1000);
  EXPECT_EQ(dst, src);
  copy(src.data(), src.data(), 1000);
  EXPECT_EQ(dst, src);
  copy(nullptr, nullptr, 0);
}

TEST(Isa, NamesAndForcing) {
  const std::vector<Isa> isas = availableIsas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::kPortable);
  for (Isa isa : isas) {
    EXPECT_TRUE(forceIsaForTesting(isa));
    EXPECT_STREQ(isaName(), isaName(isa));
  }
  for (Isa isa : kIsas) {
    bool available = false;
    for (Isa a : isas) available = available || a == isa;
    if (!available) {
      EXPECT_FALSE(forceIsaForTesting(isa));
      std::printf("%s: not available here, so not tested\n", isaName(isa));
    }
  }
  forceIsaForTesting(isas.back());
}

}  // namespace
}  // namespace loom::kernels

// The non-temporal copy of every instruction set (16-, 32- and 64-byte stores) handles every
// alignment of either side and every length.
TEST(CopyStreaming, MatchesMemcpyAtEveryOffsetAndLengthOnEveryInstructionSet) {
  using namespace loom::kernels;
  std::vector<unsigned char> src(4096 + 128), dst(4096 + 128);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  const std::vector<size_t> offsets = {0, 1, 2, 7, 8, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65};
  for (Isa isa : availableIsas()) {
    ASSERT_TRUE(forceIsaForTesting(isa));
    for (size_t srcOff : offsets) {
      for (size_t dstOff : offsets) {
        for (size_t len : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{31}, size_t{32}, size_t{63}, size_t{64},
                           size_t{65}, size_t{127}, size_t{128}, size_t{129}, size_t{1000}, size_t{4000}}) {
          std::fill(dst.begin(), dst.end(), 0xEE);
          copyStreaming(dst.data() + dstOff, src.data() + srcOff, len);
          ASSERT_EQ(std::memcmp(dst.data() + dstOff, src.data() + srcOff, len), 0)
              << isaName(isa) << " " << srcOff << " " << dstOff << " " << len;
          for (size_t i = 0; i < dstOff; ++i) ASSERT_EQ(dst[i], 0xEE);
          for (size_t i = dstOff + len; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xEE);
        }
      }
    }
  }
  forceIsaForTesting(availableIsas().back());
}
