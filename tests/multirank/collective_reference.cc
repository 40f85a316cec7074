#include "multirank/collective_reference.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>

namespace loomtest {
namespace {

// ---- Deterministic bits ------------------------------------------------------------------

// splitmix64's finaliser over a linear mix of the three inputs: cheap, and every bit of
// every input reaches every bit of the output.
uint64_t mix(uint64_t seed, int64_t rank, uint64_t index) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(rank + 7) * 0xD1B54A32D192ED03ull +
               index * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

// Random bytes for byte movers: element `index` of rank `rank` is the low bytes of one hash.
void fillBytes(unsigned char* dst, size_t count, size_t elemSize, uint64_t seed, int rank,
               size_t first) {
  for (size_t e = 0; e < count; ++e) {
    uint64_t h = mix(seed, rank, first + e);
    std::memcpy(dst + e * elemSize, &h, elemSize);  // little-endian: the low bytes
  }
}

// What a buffer holds before the call: random bytes, different from any data.
constexpr uint64_t kSentinelSalt = 0x5E771E15A1E5ull;
void fillSentinel(unsigned char* dst, size_t bytes, uint64_t seed, int salt) {
  for (size_t p = 0; p < bytes; p += 8) {
    uint64_t h = mix(seed ^ kSentinelSalt, -1000 - salt, p / 8);
    std::memcpy(dst + p, &h, std::min<size_t>(8, bytes - p));
  }
}

// ---- Float formats, written independently of src/kernels --------------------------------

struct FloatFormat {
  int precision;    // significand bits, the leading one included
  int minExponent;  // exponent of the smallest normal number
  int fracBits;     // generated values are multiples of 2^-fracBits
};

FloatFormat formatOf(loomDataType_t type) {
  switch (type) {
    case loomFloat16: return {11, -14, 3};
    case loomBfloat16: return {8, -126, 1};
    case loomFloat8e4m3: return {4, -6, 2};
    case loomFloat8e5m2: return {3, -14, 2};
    case loomFloat32: return {24, -126, 8};
    default: return {53, -1022, 20};
  }
}

// v rounded to `format`'s precision, to nearest-even (nearbyint in the default rounding
// mode); subnormals keep the smallest normal's quantum. Exact in double for our formats.
double roundToFormat(double v, const FloatFormat& format) {
  if (v == 0 || !std::isfinite(v)) return v;
  int e = 0;
  std::frexp(v, &e);  // |v| = m * 2^e, m in [0.5, 1): the leading bit is 2^(e-1)
  int quantum = std::max(e - 1, format.minExponent) - (format.precision - 1);
  return std::ldexp(std::nearbyint(std::ldexp(v, -quantum)), quantum);
}

// Exact value -> IEEE binary16 bits (the value must be representable).
uint16_t encodeHalf(double v) {
  uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  double a = std::fabs(v);
  if (a == 0) return sign;
  if (std::isnan(v)) return 0x7E00;
  if (std::isinf(a) || a >= 65520.0) return static_cast<uint16_t>(sign | 0x7C00);
  int e = 0;
  std::frexp(a, &e);
  int exponent = e - 1;
  if (exponent < -14) return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::ldexp(a, 24)));
  auto mantissa = static_cast<uint16_t>(std::ldexp(a, 10 - exponent) - 1024);
  return static_cast<uint16_t>(sign | ((exponent + 15) << 10) | mantissa);
}

double decodeHalf(uint16_t h) {
  int exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0x1F) return mantissa ? NAN : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// bfloat16 is the top half of a float32; the value must be representable.
uint16_t encodeBfloat16(double v) {
  float f = static_cast<float>(v);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}

double decodeBfloat16(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Exact value -> float8 bits (the value must be representable): e4m3 (exponent bits 4,
// bias 7) or e5m2 (5, bias 15).
uint8_t encodeFloat8(double v, int exponentBits) {
  const int mantissaBits = 7 - exponentBits, bias = (1 << (exponentBits - 1)) - 1;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const double a = std::fabs(v);
  if (a == 0) return sign;
  int e = 0;
  std::frexp(a, &e);
  const int exponent = e - 1;
  if (exponent < 1 - bias) {
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(std::ldexp(a, bias - 1 + mantissaBits)));
  }
  const auto mantissa = static_cast<unsigned>(std::ldexp(a, mantissaBits - exponent)) - (1u << mantissaBits);
  return static_cast<uint8_t>(sign | ((exponent + bias) << mantissaBits) | mantissa);
}

double decodeFloat8(uint8_t b, int exponentBits) {
  const int mantissaBits = 7 - exponentBits, bias = (1 << (exponentBits - 1)) - 1;
  const int exponent = (b >> mantissaBits) & ((1 << exponentBits) - 1), mantissa = b & ((1 << mantissaBits) - 1);
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  if (exponentBits == 4 && (b & 0x7F) == 0x7F) return NAN;
  if (exponentBits == 5 && exponent == 0x1F) return mantissa ? NAN : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, 1 - bias - mantissaBits);
  return sign * std::ldexp((1 << mantissaBits) + mantissa, exponent - bias - mantissaBits);
}

void storeFloat(unsigned char* dst, loomDataType_t type, double v) {
  switch (type) {
    case loomFloat16: {
      uint16_t h = encodeHalf(v);
      std::memcpy(dst, &h, 2);
      break;
    }
    case loomBfloat16: {
      uint16_t b = encodeBfloat16(v);
      std::memcpy(dst, &b, 2);
      break;
    }
    case loomFloat32: {
      float f = static_cast<float>(v);
      std::memcpy(dst, &f, 4);
      break;
    }
    case loomFloat8e4m3: *dst = encodeFloat8(v, 4); break;
    case loomFloat8e5m2: *dst = encodeFloat8(v, 5); break;
    default: std::memcpy(dst, &v, 8); break;
  }
}

double loadFloat(const unsigned char* src, loomDataType_t type) {
  uint16_t h;
  float f;
  double d;
  switch (type) {
    case loomFloat16: std::memcpy(&h, src, 2); return decodeHalf(h);
    case loomBfloat16: std::memcpy(&h, src, 2); return decodeBfloat16(h);
    case loomFloat32: std::memcpy(&f, src, 4); return f;
    case loomFloat8e4m3: return decodeFloat8(*src, 4);
    case loomFloat8e5m2: return decodeFloat8(*src, 5);
    default: std::memcpy(&d, src, 8); return d;
  }
}

// ---- Values of the reducing collectives --------------------------------------------------

// A premultiplied sum's scalar on `rank` (floats; integers multiply by rank + 3): a power of two,
// so the products are exact, and not the same on every rank.
double preMulFactor(int rank) { return rank % 2 == 0 ? 0.5 : 1.0; }

// The exact value rank `rank` contributes at element `index` (floats), chosen per op so that
// every partial result is exact (see the header).
double floatValue(loomDataType_t type, loomRedOp_t op, bool preMul, int nranks, uint64_t seed, int rank,
                  size_t index) {
  uint64_t h = mix(seed, rank, index);
  if (op == loomProd) {
    static const double kFactors[8] = {1, 1, 1, 1, -1, 2, 0.5, -2};
    return kFactors[h % 8];
  }
  FloatFormat format = formatOf(type);
  if ((op == loomMax || op == loomMin) && (h >> 60) == 0) {
    return ((h >> 59) & 1) ? -0.0 : 0.0;
  }
  int64_t bound = std::min<int64_t>((int64_t{1} << format.precision) / nranks, int64_t{1} << 40);
  // Premultiplied by 0.5 on some ranks, a sum has one bit more below: half the range keeps it exact.
  if (preMul) bound /= 2;
  auto k = static_cast<int64_t>(h % static_cast<uint64_t>(2 * bound + 1)) - bound;
  return std::ldexp(static_cast<double>(k), -format.fracBits);
}

// max/min as src/kernels/reduce.h defines them on ±0 (no NaNs are generated).
double floatMax(double a, double b) {
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
double floatMin(double a, double b) {
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

template <typename T>
void fillIntegers(unsigned char* dst, size_t count, uint64_t seed, int rank, size_t first) {
  for (size_t e = 0; e < count; ++e) {
    T v = static_cast<T>(mix(seed, rank, first + e));
    std::memcpy(dst + e * sizeof(T), &v, sizeof(T));
  }
}

template <typename T>
void expectedIntegers(unsigned char* dst, size_t count, loomRedOp_t op, bool preMul, int nranks,
                      uint64_t seed, size_t first) {
  using U = std::make_unsigned_t<T>;
  // Rank r's input, premultiplied (wrapping) where the call is a premultiplied sum.
  auto input = [&](int r, size_t e) {
    const U v = static_cast<U>(mix(seed, r, first + e));
    return preMul ? static_cast<U>(v * static_cast<U>(r + 3)) : v;
  };
  for (size_t e = 0; e < count; ++e) {
    U acc = input(0, e);
    for (int r = 1; r < nranks; ++r) {
      U v = input(r, e);
      switch (op) {
        case loomSum:
        case loomAvg: acc = static_cast<U>(acc + v); break;
        case loomProd: acc = static_cast<U>(acc * v); break;
        case loomMax: acc = static_cast<T>(v) > static_cast<T>(acc) ? v : acc; break;
        case loomMin: acc = static_cast<T>(v) < static_cast<T>(acc) ? v : acc; break;
        default: break;
      }
    }
    T result = static_cast<T>(acc);  // two's complement wrap
    if (op == loomAvg) result = static_cast<T>(result / static_cast<T>(nranks));
    std::memcpy(dst + e * sizeof(T), &result, sizeof(T));
  }
}

void fillReduceInput(unsigned char* dst, loomDataType_t type, loomRedOp_t op, bool preMul, int nranks,
                     uint64_t seed, int rank, size_t first, size_t count) {
  switch (type) {
    case loomInt8: return fillIntegers<int8_t>(dst, count, seed, rank, first);
    case loomUint8: return fillIntegers<uint8_t>(dst, count, seed, rank, first);
    case loomInt32: return fillIntegers<int32_t>(dst, count, seed, rank, first);
    case loomUint32: return fillIntegers<uint32_t>(dst, count, seed, rank, first);
    case loomInt64: return fillIntegers<int64_t>(dst, count, seed, rank, first);
    case loomUint64: return fillIntegers<uint64_t>(dst, count, seed, rank, first);
    default: break;
  }
  size_t size = typeSize(type);
  for (size_t e = 0; e < count; ++e) {
    storeFloat(dst + e * size, type, floatValue(type, op, preMul, nranks, seed, rank, first + e));
  }
}

// op over ranks of the inputs at elements [first, first + count).
void fillReduceExpected(unsigned char* dst, loomDataType_t type, loomRedOp_t op, bool preMul, int nranks,
                        uint64_t seed, size_t first, size_t count) {
  switch (type) {
    case loomInt8: return expectedIntegers<int8_t>(dst, count, op, preMul, nranks, seed, first);
    case loomUint8: return expectedIntegers<uint8_t>(dst, count, op, preMul, nranks, seed, first);
    case loomInt32: return expectedIntegers<int32_t>(dst, count, op, preMul, nranks, seed, first);
    case loomUint32: return expectedIntegers<uint32_t>(dst, count, op, preMul, nranks, seed, first);
    case loomInt64: return expectedIntegers<int64_t>(dst, count, op, preMul, nranks, seed, first);
    case loomUint64: return expectedIntegers<uint64_t>(dst, count, op, preMul, nranks, seed, first);
    default: break;
  }
  size_t size = typeSize(type);
  FloatFormat format = formatOf(type);
  // Rank r's input, premultiplied (exactly: by 0.5 or 1) where the call is a premultiplied sum.
  auto input = [&](int r, size_t e) {
    const double v = floatValue(type, op, preMul, nranks, seed, r, first + e);
    return preMul ? v * preMulFactor(r) : v;
  };
  for (size_t e = 0; e < count; ++e) {
    double acc = input(0, e);
    for (int r = 1; r < nranks; ++r) {
      double v = input(r, e);
      switch (op) {
        case loomSum:
        case loomAvg: acc += v; break;  // exact: see floatValue
        case loomProd: acc *= v; break;
        case loomMax: acc = floatMax(acc, v); break;
        case loomMin: acc = floatMin(acc, v); break;
        default: break;
      }
    }
    if (op == loomAvg) {
      // One division, in the type's precision (float32 for the 16- and 8-bit types, then one
      // rounding to nearest-even).
      if (type == loomFloat64) {
        acc = acc / static_cast<double>(nranks);
      } else {
        float q = static_cast<float>(acc) / static_cast<float>(nranks);
        acc = type == loomFloat32 ? q : roundToFormat(q, format);
      }
    }
    storeFloat(dst + e * size, type, acc);
  }
}

// ---- Comparing ---------------------------------------------------------------------------

template <class T>
std::string integerText(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return std::to_string(v);
}

std::string formatElement(const unsigned char* p, loomDataType_t type) {
  switch (type) {
    case loomInt8: return integerText<int8_t>(p);
    case loomUint8: return integerText<uint8_t>(p);
    case loomInt32: return integerText<int32_t>(p);
    case loomUint32: return integerText<uint32_t>(p);
    case loomInt64: return integerText<int64_t>(p);
    case loomUint64: return integerText<uint64_t>(p);
    default: {
      char text[96];
      uint64_t bits = 0;
      std::memcpy(&bits, p, typeSize(type));
      std::snprintf(text, sizeof text, "%.17g (0x%0*" PRIx64 ")", loadFloat(p, type),
                    static_cast<int>(2 * typeSize(type)), bits);
      return text;
    }
  }
}

// "" when equal; else how many elements differ and the first one, with `explain(index)`
// appended (the ranks' inputs, for reductions).
template <typename Explain>
std::string compareElements(const char* what, const unsigned char* got,
                            const unsigned char* want, size_t count, loomDataType_t type,
                            const Explain& explain) {
  size_t size = typeSize(type);
  if (count == 0 || std::memcmp(got, want, count * size) == 0) return "";
  size_t first = SIZE_MAX, wrong = 0;
  for (size_t e = 0; e < count; ++e) {
    if (std::memcmp(got + e * size, want + e * size, size) != 0) {
      if (first == SIZE_MAX) first = e;
      ++wrong;
    }
  }
  return std::string(what) + ": " + std::to_string(wrong) + " of " + std::to_string(count) +
         " elements differ; first at element " + std::to_string(first) + ": got " +
         formatElement(got + first * size, type) + ", expected " +
         formatElement(want + first * size, type) + explain(first);
}

std::string compareElements(const char* what, const unsigned char* got,
                            const unsigned char* want, size_t count, loomDataType_t type) {
  return compareElements(what, got, want, count, type, [](size_t) { return std::string(); });
}

// Bytes a buffer has in front of and behind the region a call may touch; they must keep
// their sentinel bytes.
constexpr size_t kGuardBytes = 64;

std::string append(std::string a, const std::string& b) {
  if (b.empty()) return a;
  return a.empty() ? b : a + "; " + b;
}

}  // namespace

// ---- Names -------------------------------------------------------------------------------

const char* collectiveName(Collective collective) {
  switch (collective) {
    case Collective::kAllReduce: return "allreduce";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kAllGather: return "allgather";
    case Collective::kReduceScatter: return "reducescatter";
    case Collective::kAllToAll: return "alltoall";
  }
  return "?";
}

const char* typeName(loomDataType_t type) {
  static const char* const kNames[] = {"int8",    "uint8",   "int32",    "uint32",     "int64",     "uint64",
                                       "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  return type >= 0 && type < loomNumTypes ? kNames[type] : "?";
}

const char* opName(loomRedOp_t op) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < loomNumOps ? kNames[op] : "?";
}

size_t typeSize(loomDataType_t type) {
  switch (type) {
    case loomInt8:
    case loomUint8:
    case loomFloat8e4m3:
    case loomFloat8e5m2: return 1;
    case loomFloat16:
    case loomBfloat16: return 2;
    case loomInt32:
    case loomUint32:
    case loomFloat32: return 4;
    default: return 8;
  }
}

void preMulScalar(loomDataType_t type, int rank, unsigned char* out) {
  switch (type) {
    case loomInt8:
    case loomUint8:
    case loomInt32:
    case loomUint32:
    case loomInt64:
    case loomUint64: {
      // Little-endian: the low bytes of a uint64 are the value in every integer width.
      const uint64_t v = static_cast<uint64_t>(rank) + 3;
      std::memcpy(out, &v, typeSize(type));
      return;
    }
    default: storeFloat(out, type, preMulFactor(rank));
  }
}

bool isReducing(Collective collective) {
  return collective == Collective::kAllReduce || collective == Collective::kReduce ||
         collective == Collective::kReduceScatter;
}

bool hasInPlace(Collective collective) { return collective != Collective::kAllToAll; }

std::string CollectiveCase::describe() const {
  std::string text = std::string(collectiveName(collective)) + " " + typeName(type);
  if (isReducing(collective)) text += std::string(" ") + (preMulSum ? "premulsum" : opName(op));
  if (collective == Collective::kBroadcast || collective == Collective::kReduce) {
    text += " root=" + std::to_string(root);
  }
  text += " count=" + std::to_string(count);
  text += inPlace ? " in-place" : " out-of-place";
  text += " seed=" + std::to_string(seed);
  return text;
}

// ---- One call ----------------------------------------------------------------------------

CollectiveRun::CollectiveRun(const CollectiveCase& c, int rank, int nranks)
    : case_(c), rank_(rank), nranks_(nranks) {
  if (!hasInPlace(case_.collective)) case_.inPlace = false;
  const CollectiveCase& k = case_;
  const size_t es = typeSize(k.type), n = static_cast<size_t>(nranks), me = static_cast<size_t>(rank);
  // Elements of the send side and the receive side of the call.
  size_t sendCount = k.count, recvCount = k.count;
  if (k.collective == Collective::kAllGather) recvCount = n * k.count;
  if (k.collective == Collective::kReduceScatter) sendCount = n * k.count;
  if (k.collective == Collective::kAllToAll) sendCount = recvCount = n * k.count;

  auto makeBuffer = [&](std::vector<unsigned char>& buf, size_t elements, int salt) {
    buf.assign(2 * kGuardBytes + elements * es, 0);
    fillSentinel(buf.data(), buf.size(), k.seed, rank * 4 + salt);
    return buf.data() + kGuardBytes;
  };
  auto input = [&](unsigned char* dst, size_t first, size_t count) {
    if (isReducing(k.collective)) {
      fillReduceInput(dst, k.type, k.op, k.preMulSum, nranks, k.seed, rank, first, count);
    } else {
      fillBytes(dst, count, es, k.seed, rank, first);
    }
  };

  if (k.inPlace) {
    // Everything lives in one buffer of the larger size.
    unsigned char* buf = makeBuffer(recv_, std::max(sendCount, recvCount), 0);
    switch (k.collective) {
      case Collective::kAllGather:
        input(buf + me * k.count * es, 0, k.count);
        sendPtr_ = buf + me * k.count * es;
        recvPtr_ = buf;
        break;
      case Collective::kReduceScatter:
        input(buf, 0, sendCount);
        sendPtr_ = buf;
        recvPtr_ = buf + me * k.count * es;
        break;
      case Collective::kBroadcast:
        if (rank == k.root) input(buf, 0, k.count);  // others: sentinel until it arrives
        sendPtr_ = recvPtr_ = buf;
        break;
      default:
        input(buf, 0, k.count);
        sendPtr_ = recvPtr_ = buf;
        break;
    }
  } else {
    unsigned char* send = makeBuffer(send_, sendCount, 1);
    unsigned char* recv = makeBuffer(recv_, recvCount, 2);
    // Broadcast: a non-root's sendbuff keeps its sentinel bytes (it must not be read or written).
    if (k.collective != Collective::kBroadcast || rank == k.root) input(send, 0, sendCount);
    sendPtr_ = send;
    recvPtr_ = recv;
  }
}

CollectiveRun::CollectiveRun(const CollectiveCase& c, int rank, int nranks, void* untouchable)
    : CollectiveRun(c, rank, nranks) {
  if (case_.inPlace || rank == case_.root) return;
  if (case_.collective == Collective::kBroadcast) {
    sendPtr_ = untouchable;
    untouchable_ = true;
  } else if (case_.collective == Collective::kReduce) {
    recvPtr_ = untouchable;
    untouchable_ = true;
  }
}

loomResult_t CollectiveRun::launch(loomComm_t comm, loomStream_t stream) {
  return launchWith(comm, stream, sendPtr_, recvPtr_);
}

loomResult_t CollectiveRun::launchMirrored(loomComm_t comm, loomStream_t stream, void* deviceSend, void* deviceRecv) {
  auto mirror = [&](const void* p) -> void* {
    auto* c = static_cast<const unsigned char*>(p);
    if (!send_.empty() && c >= send_.data() && c < send_.data() + send_.size()) {
      return static_cast<unsigned char*>(deviceSend) + (c - send_.data());
    }
    if (!recv_.empty() && c >= recv_.data() && c < recv_.data() + recv_.size()) {
      return static_cast<unsigned char*>(deviceRecv) + (c - recv_.data());
    }
    return const_cast<void*>(p);  // null, or the untouchable page
  };
  return launchWith(comm, stream, mirror(sendPtr_), mirror(recvPtr_));
}

loomResult_t CollectiveRun::launchWith(loomComm_t comm, loomStream_t stream, const void* send, void* recv) const {
  if (!case_.preMulSum) return launchOp(comm, stream, send, recv, case_.op);
  unsigned char scalar[8];
  preMulScalar(case_.type, rank_, scalar);
  loomRedOp_t op = loomSum;
  loomResult_t r = loomRedOpCreatePreMulSum(&op, scalar, case_.type, loomScalarHostImmediate, comm);
  if (r != loomSuccess) return r;
  r = launchOp(comm, stream, send, recv, op);
  // As early as NCCL allows: the call (queued, or in a group) took the scalar with it.
  const loomResult_t destroyed = loomRedOpDestroy(op, comm);
  return r != loomSuccess ? r : destroyed;
}

loomResult_t CollectiveRun::launchOp(loomComm_t comm, loomStream_t stream, const void* send, void* recv,
                                     loomRedOp_t op) const {
  const CollectiveCase& k = case_;
  switch (k.collective) {
    case Collective::kAllReduce:
      return loomAllReduce(send, recv, k.count, k.type, op, comm, stream);
    case Collective::kBroadcast:
      return loomBroadcast(send, recv, k.count, k.type, k.root, comm, stream);
    case Collective::kReduce:
      return loomReduce(send, recv, k.count, k.type, op, k.root, comm, stream);
    case Collective::kAllGather:
      return loomAllGather(send, recv, k.count, k.type, comm, stream);
    case Collective::kReduceScatter:
      return loomReduceScatter(send, recv, k.count, k.type, op, comm, stream);
    case Collective::kAllToAll:
      return loomAllToAll(send, recv, k.count, k.type, comm, stream);
  }
  return loomInternalError;
}

std::string CollectiveRun::check() const {
  const CollectiveCase& k = case_;
  const size_t es = typeSize(k.type), n = static_cast<size_t>(nranks_), me = static_cast<size_t>(rank_);
  const auto* recv = static_cast<const unsigned char*>(recvPtr_);
  const auto* send = static_cast<const unsigned char*>(sendPtr_);
  std::string wrong;
  std::vector<unsigned char> want;

  auto reduced = [&](size_t first, size_t count) {
    want.assign(count * es, 0);
    fillReduceExpected(want.data(), k.type, k.op, k.preMulSum, nranks_, k.seed, first, count);
    return want.data();
  };
  auto bytesOf = [&](int rank, size_t first, size_t count) {
    want.assign(count * es, 0);
    fillBytes(want.data(), count, es, k.seed, rank, first);
    return want.data();
  };
  auto inputOf = [&](size_t count) {
    want.assign(count * es, 0);
    if (isReducing(k.collective)) {
      fillReduceInput(want.data(), k.type, k.op, k.preMulSum, nranks_, k.seed, rank_, 0, count);
    } else {
      fillBytes(want.data(), count, es, k.seed, rank_, 0);
    }
    return want.data();
  };
  // The ranks' inputs at element `first + index`, for a reduction that came out wrong.
  auto inputsAt = [&](size_t first) {
    return [this, first, es, &k](size_t index) {
      std::string text = "; inputs by rank:";
      std::vector<unsigned char> one(es);
      for (int r = 0; r < nranks_; ++r) {
        fillReduceInput(one.data(), k.type, k.op, k.preMulSum, nranks_, k.seed, r, first + index, 1);
        text += " " + formatElement(one.data(), k.type);
      }
      return text;
    };
  };
  auto sentinelOf = [&](const std::vector<unsigned char>& buf, int salt) {
    want.assign(buf.size(), 0);
    fillSentinel(want.data(), want.size(), k.seed, rank_ * 4 + salt);
    return want.data();
  };

  switch (k.collective) {
    case Collective::kAllReduce:
      wrong = compareElements("result", recv, reduced(0, k.count), k.count, k.type, inputsAt(0));
      break;
    case Collective::kBroadcast:
      wrong = compareElements("result", recv, bytesOf(k.root, 0, k.count), k.count, k.type);
      break;
    case Collective::kReduce:
      if (rank_ == k.root) {
        wrong = compareElements("result on the root", recv, reduced(0, k.count), k.count, k.type,
                                inputsAt(0));
      } else if (k.inPlace) {
        wrong = compareElements("non-root's in-place buffer (must be left alone)", recv,
                                inputOf(k.count), k.count, k.type);
      } else if (!untouchable_) {
        wrong = compareElements("non-root's recvbuff (must not be written)", recv,
                                sentinelOf(recv_, 2) + kGuardBytes, k.count, k.type);
      }
      break;
    case Collective::kAllGather:
      for (size_t j = 0; j < n && wrong.empty(); ++j) {
        std::string what = "block from rank " + std::to_string(j);
        wrong = compareElements(what.c_str(), recv + j * k.count * es,
                                bytesOf(static_cast<int>(j), 0, k.count), k.count, k.type);
      }
      break;
    case Collective::kReduceScatter:
      wrong = compareElements("result", recv, reduced(me * k.count, k.count), k.count, k.type,
                              inputsAt(me * k.count));
      break;
    case Collective::kAllToAll:
      for (size_t j = 0; j < n && wrong.empty(); ++j) {
        std::string what = "block from rank " + std::to_string(j);
        wrong = compareElements(what.c_str(), recv + j * k.count * es,
                                bytesOf(static_cast<int>(j), me * k.count, k.count), k.count,
                                k.type);
      }
      break;
  }

  if (!k.inPlace) {
    // The call must not have written its sendbuff.
    size_t sendCount = k.count;
    if (k.collective == Collective::kReduceScatter || k.collective == Collective::kAllToAll) {
      sendCount = n * k.count;
    }
    if (k.collective == Collective::kBroadcast && rank_ != k.root) {
      if (!untouchable_) wrong = append(wrong, compareElements("non-root's sendbuff (must not be touched)", send,
                                            sentinelOf(send_, 1) + kGuardBytes, k.count, k.type));
    } else {
      wrong = append(wrong, compareElements("sendbuff (must not be written)", send,
                                            inputOf(sendCount), sendCount, k.type));
    }
  }

  // Nothing outside the buffers was written.
  auto guards = [&](const std::vector<unsigned char>& buf, int salt, const char* name) {
    if (buf.empty()) return;
    const unsigned char* image = sentinelOf(buf, salt);
    size_t tail = buf.size() - kGuardBytes;
    if (std::memcmp(buf.data(), image, kGuardBytes) != 0 ||
        std::memcmp(buf.data() + tail, image + tail, kGuardBytes) != 0) {
      wrong = append(wrong, std::string("bytes just outside ") + name + " were overwritten");
    }
  };
  if (k.inPlace) {
    guards(recv_, 0, "the buffer");
  } else {
    guards(send_, 1, "sendbuff");
    guards(recv_, 2, "recvbuff");
  }
  return wrong;
}

CaseOutcome runCollectiveCase(const CollectiveCase& c, loomComm_t comm, int rank, int nranks,
                              loomStream_t stream) {
  CaseOutcome outcome;
  CollectiveRun run(c, rank, nranks);
  loomResult_t result = run.launch(comm, stream);
  const char* call = "the call";
  if (result == loomSuccess && stream != nullptr) {
    result = loomStreamSynchronize(stream);
    call = "loomStreamSynchronize";
  }
  if (result != loomSuccess) {
    outcome.callFailed = true;
    outcome.error = c.describe() + ": " + call + " returned " + loomGetErrorString(result) +
                    ": " + loomGetLastError(stream != nullptr ? nullptr : comm);
    return outcome;
  }
  std::string wrong = run.check();
  if (!wrong.empty()) outcome.error = c.describe() + ": " + wrong;
  return outcome;
}

// ---- Determinism -------------------------------------------------------------------------

CaseOutcome runDeterminismCase(loomDataType_t type, loomRedOp_t op, size_t count,
                               uint64_t seed, loomComm_t comm, int rank, int nranks) {
  CaseOutcome outcome;
  std::string what = std::string("determinism: allreduce ") + typeName(type) + " " +
                     opName(op) + " count=" + std::to_string(count) + " seed=" +
                     std::to_string(seed);
  const size_t es = typeSize(type);
  const FloatFormat format = formatOf(type);
  // Random significands over a range of exponents: sums round, in an order-dependent way.
  const int spread = typeSize(type) == 1 ? 3 : typeSize(type) == 2 ? 6 : 20;
  auto value = [&](int r, size_t i) {
    uint64_t h = mix(seed, r, i);
    double significand = 1.0 + static_cast<double>(h & 0xFFFFF) * 0x1p-20;
    int exponent = static_cast<int>((h >> 20) % static_cast<uint64_t>(2 * spread + 1)) - spread;
    double v = std::ldexp(significand, exponent) * ((h >> 40) & 1 ? -1.0 : 1.0);
    return roundToFormat(v, format);
  };
  std::vector<unsigned char> send(count * es), first(count * es), second(count * es);
  for (size_t i = 0; i < count; ++i) storeFloat(send.data() + i * es, type, value(rank, i));

  auto fail = [&](loomResult_t r, const char* call) {
    outcome.callFailed = true;
    outcome.error = what + ": " + call + " returned " + loomGetErrorString(r) + ": " +
                    loomGetLastError(comm);
    return outcome;
  };
  loomResult_t r = loomAllReduce(send.data(), first.data(), count, type, op, comm, nullptr);
  if (r != loomSuccess) return fail(r, "loomAllReduce");
  second = send;  // the same call again, in place this time
  r = loomAllReduce(second.data(), second.data(), count, type, op, comm, nullptr);
  if (r != loomSuccess) return fail(r, "loomAllReduce (again)");
  std::vector<unsigned char> all(static_cast<size_t>(nranks) * count * es);
  r = loomAllGather(first.data(), all.data(), count * es, loomUint8, comm, nullptr);
  if (r != loomSuccess) return fail(r, "loomAllGather of the results");

  std::string wrong = compareElements("second identical call", second.data(), first.data(),
                                      count, type);
  for (int j = 0; j < nranks && wrong.empty(); ++j) {
    std::string block = "result on rank " + std::to_string(j) + " vs this rank's";
    wrong = compareElements(block.c_str(), all.data() + static_cast<size_t>(j) * count * es,
                            first.data(), count, type);
  }
  // And close to the exact answer: each of at most nranks - 1 roundings (plus the division)
  // is within half an ulp of a partial sum, itself at most the sum of magnitudes.
  const double ulp = std::ldexp(1.0, 1 - format.precision);
  for (size_t i = 0; i < count && wrong.empty(); ++i) {
    double exact = 0, magnitude = 0;
    for (int q = 0; q < nranks; ++q) {
      exact += value(q, i);
      magnitude += std::fabs(value(q, i));
    }
    double got = loadFloat(first.data() + i * es, type);
    if (op == loomAvg) {
      exact /= nranks;
      magnitude /= nranks;
    }
    double tolerance = (nranks + 1) * ulp * magnitude + std::ldexp(1.0, format.minExponent);
    if (!(std::fabs(got - exact) <= tolerance)) {
      wrong = "element " + std::to_string(i) + " is " + formatElement(first.data() + i * es, type) +
              ", far from the exact " + std::to_string(exact);
    }
  }
  if (!wrong.empty()) outcome.error = what + ": " + wrong;
  return outcome;
}

// ---- Case lists --------------------------------------------------------------------------

namespace {

// The case lists' ops: kAllOps, then a premultiplied sum.
constexpr int kOpsAndPreMul = 6;
void setOp(CollectiveCase& c, int index) {
  c.preMulSum = index == 5;
  c.op = c.preMulSum ? loomSum : kAllOps[index];
}

}  // namespace

std::vector<CollectiveCase> sliceCases(int nranks, unsigned rotation) {
  static const size_t kCounts[] = {1, 7, 1023};
  std::vector<CollectiveCase> cases;
  uint64_t seed = 1000003ull * (rotation + 1);
  unsigned k = rotation;
  for (int ci = 0; ci < 6; ++ci) {
    Collective coll = kAllCollectives[ci];
    CollectiveCase zero;
    zero.collective = coll;
    zero.type = kAllTypes[(rotation + ci) % kTypeCount];
    zero.root = static_cast<int>(rotation % static_cast<unsigned>(nranks));
    zero.count = 0;
    zero.seed = ++seed;
    cases.push_back(zero);
    for (int ti = 0; ti < kTypeCount; ++ti) {
      // Two types per collective also get a 65537-element case (one op of them).
      bool big = ti == static_cast<int>((rotation + ci) % kTypeCount) ||
                 ti == static_cast<int>((rotation + ci + kTypeCount / 2) % kTypeCount);
      int nops = isReducing(coll) ? kOpsAndPreMul : 1;
      for (int oi = 0; oi < nops; ++oi) {
        CollectiveCase c;
        c.collective = coll;
        c.type = kAllTypes[ti];
        setOp(c, oi);
        c.count = kCounts[k % 3];
        c.inPlace = hasInPlace(coll) && (k / 3) % 2 == 1;
        c.root = static_cast<int>(k % static_cast<unsigned>(nranks));
        if (big && oi == static_cast<int>((rotation + static_cast<unsigned>(ti)) % static_cast<unsigned>(nops))) {
          c.count = 65537;
        }
        c.seed = ++seed;
        ++k;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

std::vector<CollectiveCase> quickCases(int nranks, unsigned rotation) {
  std::vector<CollectiveCase> cases;
  unsigned others = 0;
  for (const CollectiveCase& c : sliceCases(nranks, rotation)) {
    if (c.count == 0 || c.count == 65537 || others++ % 7 == rotation % 7) cases.push_back(c);
  }
  return cases;
}

int quickRankCount(size_t index) {
  static const int kRanks[] = {2, 3, 4, 5, 8};
  return kRanks[index % 5];
}

std::vector<CollectiveCase> casesAt(MatrixScale scale, int nranks, unsigned rotation) {
  switch (scale) {
    case MatrixScale::kQuick: return quickCases(nranks, rotation);
    case MatrixScale::kFull: return fullCases(nranks, rotation);
    default: return sliceCases(nranks, rotation);
  }
}

std::vector<CollectiveCase> fullCases(int nranks, unsigned rotation) {
  static const size_t kCounts[] = {0, 1, 7, 1023, 65537};
  std::vector<CollectiveCase> cases;
  uint64_t seed = 7000003ull * (rotation + 1);
  unsigned k = rotation;
  for (Collective coll : kAllCollectives) {
    for (loomDataType_t type : kAllTypes) {
      int nops = isReducing(coll) ? kOpsAndPreMul : 1;
      for (int oi = 0; oi < nops; ++oi) {
        for (size_t count : kCounts) {
          for (int inPlace = 0; inPlace < (hasInPlace(coll) ? 2 : 1); ++inPlace) {
            CollectiveCase c;
            c.collective = coll;
            c.type = type;
            setOp(c, oi);
            c.count = count;
            c.inPlace = inPlace == 1;
            c.root = static_cast<int>(k++ % static_cast<unsigned>(nranks));
            c.seed = ++seed;
            cases.push_back(c);
          }
        }
      }
    }
  }
  int index = 0;
  for (Collective coll : kAllCollectives) {
    CollectiveCase c;
    c.collective = coll;
    c.type = loomFloat32;
    c.op = loomSum;
    bool blocked = coll == Collective::kAllGather || coll == Collective::kReduceScatter ||
                   coll == Collective::kAllToAll;
    c.count = blocked ? kLargeCount / static_cast<size_t>(nranks) : kLargeCount;
    c.inPlace = hasInPlace(coll) && index % 2 == 1;
    c.root = nranks - 1;
    c.seed = ++seed;
    ++index;
    cases.push_back(c);
  }
  return cases;
}

}  // namespace loomtest
