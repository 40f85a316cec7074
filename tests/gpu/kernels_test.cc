// The CUDA kernels (kernels/cuda/device_reduce.h) against the host kernels (kernels/reduce.h),
// bit for bit: both promise the same bytes for the same inputs, and the host kernels have
// their own tests against independent references (tests/unit/reduce_test.cc).
//
// Inputs are random bit patterns with special values mixed in for the float types (NaNs of
// both signs, quiet and signalling, with payloads; ±0; ±inf; the largest finite value;
// denormals). Every type × op, counts around the 16-byte vector and a large one, every byte
// misalignment 1..15 of dst, a and b (together, which takes the vector path after a scalar
// head, and apart, which does not), in place, the fused second output, averages, scale and
// copy. Every device buffer has guard bytes on both sides, checked after each call.
//
// Without a CUDA device (or driver) each test prints `skipped: no CUDA device` and skips,
// except NeedsNoDevice, which checks that the library loads and answers without one.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_test.h"
#include "kernels/cuda/device_reduce.h"
#include "kernels/reduce.h"

namespace {

// ---- Types ------------------------------------------------------------------------------

struct TypeInfo {
  loomDataType_t type;
  const char* name;
  size_t size;
  bool isFloat;
};

const TypeInfo kTypes[] = {
    {loomInt8, "int8", 1, false},      {loomUint8, "uint8", 1, false},     {loomInt32, "int32", 4, false},
    {loomUint32, "uint32", 4, false},  {loomInt64, "int64", 8, false},     {loomUint64, "uint64", 8, false},
    {loomFloat16, "float16", 2, true}, {loomFloat32, "float32", 4, true},  {loomFloat64, "float64", 8, true},
    {loomBfloat16, "bfloat16", 2, true}, {loomFloat8e4m3, "float8e4m3", 1, true},
    {loomFloat8e5m2, "float8e5m2", 1, true},
};

const loomRedOp_t kOps[] = {loomSum, loomProd, loomMax, loomMin, loomAvg};
const char* opName(loomRedOp_t op) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg"};
  return kNames[op];
}

// Avg is checked as the device does it in one call: sum, then divide by 3.
int divisorFor(loomRedOp_t op) { return op == loomAvg ? 3 : 0; }

// Special values by format, as bit patterns.
const std::vector<uint64_t>& specials(loomDataType_t type) {
  static const std::vector<uint64_t> kHalf = {0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0x7E01, 0x7C01, 0xFE00,
                                              0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xBC00};
  static const std::vector<uint64_t> kBf16 = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7FC1, 0x7F81, 0xFFC0,
                                              0x7F7F, 0xFF7F, 0x0001, 0x8001, 0x007F, 0x0080, 0x3F80, 0xBF80};
  static const std::vector<uint64_t> kF32 = {0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7FC00001,
                                             0x7F800001, 0xFFC00000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00000001, 0x80000001,
                                             0x007FFFFF, 0x00800000, 0x3F800000, 0xBF800000};
  static const std::vector<uint64_t> kF64 = {
      0x0000000000000000, 0x8000000000000000, 0x7FF0000000000000, 0xFFF0000000000000,
      0x7FF8000000000000, 0x7FF8000000000001, 0x7FF0000000000001, 0xFFF8000000000000,
      0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF, 0x0000000000000001, 0x8000000000000001,
      0x000FFFFFFFFFFFFF, 0x0010000000000000, 0x3FF0000000000000, 0xBFF0000000000000};
  static const std::vector<uint64_t> kE4m3 = {0x00, 0x80, 0x7F, 0xFF, 0x7E, 0xFE, 0x01, 0x81, 0x07, 0x08, 0x38, 0xB8};
  static const std::vector<uint64_t> kE5m2 = {0x00, 0x80, 0x7C, 0xFC, 0x7E, 0x7F, 0x7D, 0xFE,
                                              0x7B, 0xFB, 0x01, 0x81, 0x03, 0x04, 0x3C, 0xBC};
  static const std::vector<uint64_t> kNone;
  switch (type) {
    case loomFloat16: return kHalf;
    case loomBfloat16: return kBf16;
    case loomFloat32: return kF32;
    case loomFloat64: return kF64;
    case loomFloat8e4m3: return kE4m3;
    case loomFloat8e5m2: return kE5m2;
    default: return kNone;
  }
}

// count elements of random bits; for floats about one in four is a special value, so that
// pairs of specials (+0 with -0, NaN with inf, ...) meet at the same index of two inputs.
std::vector<unsigned char> randomElements(const TypeInfo& t, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> out(count * t.size);
  for (size_t i = 0; i < out.size(); i += 8) {
    const uint64_t bits = rng();
    std::memcpy(&out[i], &bits, out.size() - i < 8 ? out.size() - i : 8);
  }
  const std::vector<uint64_t>& special = specials(t.type);
  if (!special.empty()) {
    for (size_t i = 0; i < count; ++i) {
      const uint64_t r = rng();
      if (r % 4 == 0) std::memcpy(&out[i * t.size], &special[(r >> 8) % special.size()], t.size);  // little-endian
    }
  }
  return out;
}

// ---- Device memory with guards ----------------------------------------------------------

bool haveDevice() { return cudaDevicePresent(); }

constexpr size_t kGuard = 64;  // bytes on each side of a region (offsets go up to 15 into it)
constexpr unsigned char kGuardByte = 0xA5;

// A device buffer holding one region of up to `capacity` bytes at a chosen offset, with
// guard bytes around it.
class GuardedBuffer {
 public:
  explicit GuardedBuffer(size_t capacity) : size_(capacity + 2 * kGuard + 16) {
    EXPECT_EQ(cudaMalloc(&base_, size_), cudaSuccess);
  }
  ~GuardedBuffer() { cudaFree(base_); }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  // Fills the buffer with guard bytes, then puts `bytes` at `offset` into the region.
  unsigned char* place(const std::vector<unsigned char>& bytes, size_t offset) {
    EXPECT_EQ(cudaMemset(base_, kGuardByte, size_), cudaSuccess);
    unsigned char* p = at(offset);
    if (!bytes.empty()) {
      EXPECT_EQ(cudaMemcpy(p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
    }
    return p;
  }

  unsigned char* at(size_t offset) const { return static_cast<unsigned char*>(base_) + kGuard + offset; }

  // "" if the region at offset holds `want` and every other byte is still a guard byte;
  // otherwise what differs first.
  std::string check(const std::vector<unsigned char>& want, size_t offset, size_t elementSize) const {
    std::vector<unsigned char> all(size_);
    if (cudaMemcpy(all.data(), base_, size_, cudaMemcpyDeviceToHost) != cudaSuccess) return "cudaMemcpy failed";
    const size_t begin = kGuard + offset, end = begin + want.size();
    for (size_t i = 0; i < size_; ++i) {
      if (i >= begin && i < end) {
        const size_t e = (i - begin) / elementSize;
        if (std::memcmp(&all[begin + e * elementSize], &want[e * elementSize], elementSize) != 0) {
          return "element " + std::to_string(e) + ": got " + hex(&all[begin + e * elementSize], elementSize) +
                 ", want " + hex(&want[e * elementSize], elementSize);
        }
        i = begin + (e + 1) * elementSize - 1;
      } else if (all[i] != kGuardByte) {
        return "byte " + std::to_string(static_cast<long long>(i) - static_cast<long long>(begin)) +
               " outside the region was written";
      }
    }
    return "";
  }

 private:
  static std::string hex(const unsigned char* p, size_t n) {
    std::string s = "0x";
    char digits[3];
    for (size_t i = n; i-- > 0;) {  // little-endian: the most significant byte is the last
      std::snprintf(digits, sizeof digits, "%02X", p[i]);
      s += digits;
    }
    return s;
  }

  void* base_ = nullptr;
  size_t size_;
};

// ---- One reduce, checked ------------------------------------------------------------------

enum class Place { kApart, kDstIsA, kDstIsB };

struct ReduceCase {
  size_t count;
  size_t offDst = 0, offA = 0, offB = 0;
  Place place = Place::kApart;
  bool second = false;  // also write dst2 ...
  size_t offDst2 = 0;   // ... at this offset
};

std::string describe(const TypeInfo& t, loomRedOp_t op, const ReduceCase& c) {
  static const char* const kPlaces[] = {"", ", dst == a", ", dst == b"};
  std::string s = std::string(t.name) + " " + opName(op) + " count " + std::to_string(c.count) + ", offsets dst/a/b " +
                  std::to_string(c.offDst) + "/" + std::to_string(c.offA) + "/" + std::to_string(c.offB) +
                  kPlaces[static_cast<int>(c.place)];
  if (c.second) s += ", dst2 at offset " + std::to_string(c.offDst2);
  return s;
}

// Buffers for a test's reduces, reused from case to case.
struct ReduceBuffers {
  explicit ReduceBuffers(size_t capacity) : a(capacity), b(capacity), dst(capacity), dst2(capacity) {}
  GuardedBuffer a, b, dst, dst2;
};

void checkReduce(ReduceBuffers& buf, const TypeInfo& t, loomRedOp_t op, const ReduceCase& c) {
  SCOPED_TRACE(describe(t, op, c));
  const int divisor = divisorFor(op);
  const uint64_t seed = c.count * 1000003 + t.type * 101 + op * 11 + c.offDst * 7 + c.offA * 3 + c.offB;
  const std::vector<unsigned char> a = randomElements(t, c.count, seed);
  const std::vector<unsigned char> b = randomElements(t, c.count, seed ^ 0x9E3779B97F4A7C15ull);
  std::vector<unsigned char> want(a.size());
  loom::kernels::reduce(want.data(), a.data(), b.data(), c.count, t.type, op);
  if (divisor > 0) loom::kernels::scale(want.data(), want.data(), c.count, t.type, divisor);

  unsigned char* pa = buf.a.place(a, c.offA);
  unsigned char* pb = buf.b.place(b, c.offB);
  unsigned char* pd = c.place == Place::kDstIsA ? pa : c.place == Place::kDstIsB ? pb : buf.dst.place({}, c.offDst);
  unsigned char* pd2 = c.second ? buf.dst2.place({}, c.offDst2) : nullptr;
  ASSERT_EQ(loom::cuda::reduce(pd, pd2, pa, pb, c.count, t.type, op, divisor, nullptr), 0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  EXPECT_EQ(buf.a.check(c.place == Place::kDstIsA ? want : a, c.offA, t.size), "") << "in a";
  EXPECT_EQ(buf.b.check(c.place == Place::kDstIsB ? want : b, c.offB, t.size), "") << "in b";
  if (c.place == Place::kApart) {
    EXPECT_EQ(buf.dst.check(want, c.offDst, t.size), "") << "in dst";
  }
  if (c.second) {
    EXPECT_EQ(buf.dst2.check(want, c.offDst2, t.size), "") << "in dst2";
  }
}

// ---- Tests, one instance per type -----------------------------------------------------------

class CudaKernels : public ::testing::TestWithParam<TypeInfo> {};

constexpr size_t kLarge = 1000003;
const size_t kCounts[] = {0, 1, 7, 15, 16, 17, 33, 4099, kLarge};

TEST_P(CudaKernels, ReduceMatchesHostForEveryOpAndCount) {
  SKIP_WITHOUT_DEVICE();
  const TypeInfo& t = GetParam();
  ReduceBuffers buf(kLarge * t.size);
  for (loomRedOp_t op : kOps) {
    for (size_t count : kCounts) checkReduce(buf, t, op, ReduceCase{count});
  }
}

// Every byte offset 1..15: all pointers together (scalar head, then vectors where the offset
// is a whole element; element by element otherwise), and each pointer alone off the others.
TEST_P(CudaKernels, ReduceAtEveryMisalignment) {
  SKIP_WITHOUT_DEVICE();
  const TypeInfo& t = GetParam();
  const size_t count = 1003;
  ReduceBuffers buf(count * t.size);
  for (loomRedOp_t op : kOps) {
    for (size_t off = 1; off < 16; ++off) {
      ReduceCase together{count, off, off, off};
      checkReduce(buf, t, op, together);
      checkReduce(buf, t, op, ReduceCase{count, off, 0, 0});
      checkReduce(buf, t, op, ReduceCase{count, 0, off, 0});
      checkReduce(buf, t, op, ReduceCase{count, 0, 0, off});
      checkReduce(buf, t, op, ReduceCase{7, off, off, 15 - off});
    }
  }
}

TEST_P(CudaKernels, ReduceInPlace) {
  SKIP_WITHOUT_DEVICE();
  const TypeInfo& t = GetParam();
  ReduceBuffers buf(kLarge * t.size);
  for (loomRedOp_t op : kOps) {
    for (size_t count : {size_t{7}, size_t{4099}, kLarge}) {
      for (size_t off : {size_t{0}, size_t{3}, t.size}) {
        for (Place place : {Place::kDstIsA, Place::kDstIsB}) {
          if (count == kLarge && off != 0) continue;
          ReduceCase c{count, off, off, off};
          c.place = place;
          checkReduce(buf, t, op, c);
          // The other input out of step: no vectors.
          (place == Place::kDstIsA ? c.offB : c.offA) = (off + 5) % 16;
          checkReduce(buf, t, op, c);
        }
      }
    }
  }
}

// The fused recvReduceCopy step: dst and dst2 get the same bytes, dst2 aligned with the rest
// (vectors) or not, out of place and in place.
TEST_P(CudaKernels, ReduceWithSecondOutput) {
  SKIP_WITHOUT_DEVICE();
  const TypeInfo& t = GetParam();
  ReduceBuffers buf(kLarge * t.size);
  for (loomRedOp_t op : kOps) {
    for (size_t count : {size_t{1}, size_t{17}, size_t{4099}, kLarge}) {
      for (size_t offDst2 : {size_t{0}, size_t{8}, size_t{1}}) {
        for (Place place : {Place::kApart, Place::kDstIsA}) {
          ReduceCase c{count};
          c.place = place;
          c.second = true;
          c.offDst2 = offDst2;
          checkReduce(buf, t, op, c);
        }
      }
    }
  }
}

TEST_P(CudaKernels, ScaleMatchesHost) {
  SKIP_WITHOUT_DEVICE();
  const TypeInfo& t = GetParam();
  GuardedBuffer src(kLarge * t.size), dst(kLarge * t.size);
  for (int divisor : {1, 2, 3, 7, 1000, 65537}) {
    for (size_t count : kCounts) {
      for (size_t off : {size_t{0}, size_t{1}, t.size, size_t{8}}) {
        for (bool inPlace : {false, true}) {
          if (count == kLarge && off > 1) continue;
          SCOPED_TRACE(std::string(t.name) + " scale by " + std::to_string(divisor) + ", count " +
                       std::to_string(count) + ", offset " + std::to_string(off) + (inPlace ? ", in place" : ""));
          const std::vector<unsigned char> in = randomElements(t, count, count * 31 + divisor + off + t.type);
          std::vector<unsigned char> want(in.size());
          loom::kernels::scale(want.data(), in.data(), count, t.type, divisor);
          unsigned char* ps = src.place(in, off);
          unsigned char* pd = inPlace ? ps : dst.place({}, (off + 4) % 16);
          ASSERT_EQ(loom::cuda::scale(pd, ps, count, t.type, divisor, nullptr), 0);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          if (inPlace) {
            EXPECT_EQ(src.check(want, off, t.size), "");
          } else {
            EXPECT_EQ(src.check(in, off, t.size), "") << "in src";
            EXPECT_EQ(dst.check(want, (off + 4) % 16, t.size), "");
          }
        }
      }
    }
  }
}

std::string typeParamName(const ::testing::TestParamInfo<TypeInfo>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaKernels, ::testing::ValuesIn(kTypes), typeParamName);

// Copy: every pair of offsets mod 16 (each word width from 16 bytes down to single bytes),
// sizes around the words, against host copy(); and dst == src leaves the bytes alone.
TEST(CudaCopy, MatchesHostAtEveryOffset) {
  SKIP_WITHOUT_DEVICE();
  const TypeInfo& bytesType = kTypes[loomUint8];
  GuardedBuffer src(kLarge), dst(kLarge);
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{100}, kLarge}) {
    const std::vector<unsigned char> in = randomElements(bytesType, bytes, bytes);
    std::vector<unsigned char> want(bytes);
    if (bytes > 0) loom::kernels::copy(want.data(), in.data(), bytes);
    for (size_t offSrc = 0; offSrc < 16; ++offSrc) {
      for (size_t offDst = 0; offDst < 16; ++offDst) {
        if (bytes == kLarge && offSrc % 5 != 0) continue;  // large: a sample of the pairs
        SCOPED_TRACE("copy " + std::to_string(bytes) + " bytes, offsets src/dst " + std::to_string(offSrc) + "/" +
                     std::to_string(offDst));
        unsigned char* ps = src.place(in, offSrc);
        unsigned char* pd = dst.place({}, offDst);
        ASSERT_EQ(loom::cuda::copy(pd, ps, bytes, nullptr), 0);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_EQ(dst.check(want, offDst, 1), "");
        EXPECT_EQ(src.check(in, offSrc, 1), "") << "in src";
      }
    }
  }
  const std::vector<unsigned char> in = randomElements(bytesType, 4099, 1);
  unsigned char* p = src.place(in, 3);
  ASSERT_EQ(loom::cuda::copy(p, p, in.size(), nullptr), 0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(src.check(in, 3, 1), "") << "dst == src";
}

// float32 <-> float16 / bfloat16 / float8 against the host's convert,
// bit for bit, at aligned and misaligned addresses; unsupported pairs are refused.
TEST(CudaConvert, MatchesHostBothWays) {
  SKIP_WITHOUT_DEVICE();
  GuardedBuffer src(kLarge * 4), dst(kLarge * 4);
  for (loomDataType_t narrow : {loomFloat16, loomBfloat16, loomFloat8e4m3, loomFloat8e5m2}) {
    const size_t bytes = kTypes[narrow].size;
    for (size_t count : {size_t{0}, size_t{1}, size_t{17}, size_t{1000}, kLarge}) {
      for (size_t off : {size_t{0}, size_t{1}, size_t{2}}) {
        SCOPED_TRACE(std::string(kTypes[narrow].name) + " count " + std::to_string(count) + " offset " + std::to_string(off));
        const std::vector<unsigned char> wide = randomElements(kTypes[loomFloat32], count, count + off + narrow);
        std::vector<unsigned char> want(count * bytes);
        ASSERT_TRUE(loom::kernels::convert(want.data(), narrow, wide.data(), loomFloat32, count));
        ASSERT_EQ(loom::cuda::convert(dst.place({}, off), narrow, src.place(wide, off), loomFloat32, count, nullptr), 0);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_EQ(dst.check(want, off, bytes), "") << "narrowing";

        const std::vector<unsigned char> half = randomElements(kTypes[narrow], count, count * 3 + off);
        std::vector<unsigned char> back(count * 4);
        ASSERT_TRUE(loom::kernels::convert(back.data(), loomFloat32, half.data(), narrow, count));
        ASSERT_EQ(loom::cuda::convert(dst.place({}, off), loomFloat32, src.place(half, off), narrow, count, nullptr), 0);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_EQ(dst.check(back, off, 4), "") << "widening";
      }
    }
  }
  unsigned char* p = dst.place({}, 0);
  EXPECT_EQ(loom::cuda::convert(p, loomFloat16, p, loomBfloat16, 4, nullptr), static_cast<int>(cudaErrorInvalidValue));
}

TEST(CudaKernelsApi, InvalidTypeOrOpIsRefused) {
  SKIP_WITHOUT_DEVICE();
  GuardedBuffer buf(64);
  unsigned char* p = buf.place({}, 0);
  const int invalid = static_cast<int>(cudaErrorInvalidValue);
  EXPECT_EQ(loom::cuda::reduce(p, nullptr, p, p, 4, loomNumTypes, loomSum, 0, nullptr), invalid);
  EXPECT_EQ(loom::cuda::reduce(p, nullptr, p, p, 4, loomFloat32, loomNumOps, 0, nullptr), invalid);
  EXPECT_EQ(loom::cuda::scale(p, p, 4, loomNumTypes, 1, nullptr), invalid);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(buf.check({}, 0, 1), "");
}

// Runs on any machine: the library links, loads without a driver, names its architectures,
// and empty calls enqueue nothing (so touch no CUDA state).
TEST(CudaKernelsApi, NeedsNoDevice) {
  const std::string archs = loom::cuda::architectures();
  EXPECT_NE(archs.find("sm_80"), std::string::npos) << archs;
  EXPECT_NE(archs.find("sm_90"), std::string::npos) << archs;
  EXPECT_EQ(loom::cuda::reduce(nullptr, nullptr, nullptr, nullptr, 0, loomFloat32, loomSum, 0, nullptr), 0);
  EXPECT_EQ(loom::cuda::scale(nullptr, nullptr, 0, loomFloat32, 3, nullptr), 0);
  EXPECT_EQ(loom::cuda::copy(nullptr, nullptr, 0, nullptr), 0);
  int dummy = 0;
  EXPECT_EQ(loom::cuda::copy(&dummy, &dummy, sizeof dummy, nullptr), 0);
}

}  // namespace
