// The device kernels behind device_reduce.h: one grid-stride kernel template, elementwise(),
// instantiated per job (reduce with an op, scale, copy) and element type from small tables,
// never written out per type.
//
// Layout of one call's elements, decided on the host (planLayout):
//
//     byte address:  ...|  16-byte boundary  |                 |                 |...
//     elements:      [ head ][ vector 0       ][ vector 1       ] ... [ tail ]
//                      scalar   uint4 loads/stores, every pointer aligned   scalar
//
// The body exists only when every pointer has the same address mod 16 and that offset is a
// whole number of elements, so that one head length aligns them all (cudaMalloc gives 256-byte
// alignment, and Loom's slices keep it). Otherwise the whole call is the "head": one element
// per thread, through byte-wise loads and stores when a pointer is not even aligned to its
// element size (any byte address is valid, as for the host kernels).
//
// A copy uses the same kernel on bytes, with the widest word (16, 8, 4 or 2 bytes) that both
// pointers can be aligned to together.
//
// Grid: one thread per vector (or leftover element), 512 threads per block, at most
// kBlocksPerSm blocks per multiprocessor: 2048 resident threads per SM on sm_80 and sm_90,
// so a large message fills the GPU once and the grid-stride loop walks the rest, and a small
// one launches only the blocks it needs.
#include "kernels/cuda/device_reduce.h"

#include "kernels/element_ops.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#ifndef LOOM_CUDA_ARCHITECTURES
#error "the build defines LOOM_CUDA_ARCHITECTURES, the -gencode targets (src/kernels/meson.build)"
#endif

namespace loom::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kBlocksPerSm = 4;
constexpr int kMaxDevices = 64;
constexpr int kFallbackSms = 132;  // used only if the attribute query fails

// ---- Jobs: what one output element is (kernels/element_ops.h has the arithmetic) ----------

using device::BFloat16;
using device::Float8e4m3;
using device::Float8e5m2;
using device::Half;
using device::ReduceJob;
using device::ScaleJob;
using device::Tag;
using device::narrow;
using device::widen;

struct CopyJob {
  static constexpr int kInputs = 1;
  __device__ unsigned char operator()(unsigned char x, unsigned char) const { return x; }
};

// ---- The kernel -----------------------------------------------------------------------------

struct Buffers {
  unsigned char* dst;
  unsigned char* dst2;  // null: no second output
  const unsigned char* src[2];
};

// Elements [0, head) and [head + vectors * per-vector, count) one by one, the vectors between.
struct Layout {
  size_t count = 0;
  size_t head = 0;
  size_t vectors = 0;
  bool bytewise = false;  // a pointer is not aligned to the element size
};

// The value at p as T; byte-wise when p may be misaligned for T.
template <class T, bool kBytewise>
__device__ __forceinline__ T loadElement(const unsigned char* p) {
  if constexpr (kBytewise) {
    T v;
    memcpy(&v, p, sizeof(T));
    return v;
  } else {
    return *reinterpret_cast<const T*>(p);
  }
}

template <class T, bool kBytewise>
__device__ __forceinline__ void storeElement(unsigned char* p, T v) {
  if constexpr (kBytewise) {
    memcpy(p, &v, sizeof(T));
  } else {
    *reinterpret_cast<T*>(p) = v;
  }
}

// V is the vector word (uint4 for 16 bytes), holding sizeof(V) / sizeof(T) elements.
template <class T, class V>
union Vector {
  V raw;
  T e[sizeof(V) / sizeof(T)];
};

// No __restrict__: dst may be one of the inputs (each element is read before it is written,
// by the same thread).
template <class T, class V, bool kBytewise, class Job>
__global__ void __launch_bounds__(kThreads) elementwise(Buffers io, Layout layout, Job job) {
  constexpr size_t kPerVector = sizeof(V) / sizeof(T);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;

  const size_t bodyOffset = layout.head * sizeof(T);
  for (size_t v = first; v < layout.vectors; v += stride) {
    const size_t offset = bodyOffset + v * sizeof(V);
    Vector<T, V> x, y{}, r;  // y stays zero for one-input jobs
    x.raw = *reinterpret_cast<const V*>(io.src[0] + offset);
    if constexpr (Job::kInputs == 2) y.raw = *reinterpret_cast<const V*>(io.src[1] + offset);
#pragma unroll
    for (size_t k = 0; k < kPerVector; ++k) r.e[k] = job(x.e[k], Job::kInputs == 2 ? y.e[k] : T{});
    *reinterpret_cast<V*>(io.dst + offset) = r.raw;
    if (io.dst2 != nullptr) *reinterpret_cast<V*>(io.dst2 + offset) = r.raw;
  }

  // The head and the tail, numbered together: j < head is element j, the rest the tail.
  const size_t tailStart = layout.head + layout.vectors * kPerVector;
  const size_t leftovers = layout.head + (layout.count - tailStart);
  for (size_t j = first; j < leftovers; j += stride) {
    const size_t offset = (j < layout.head ? j : tailStart + (j - layout.head)) * sizeof(T);
    const T x = loadElement<T, kBytewise>(io.src[0] + offset);
    const T y = Job::kInputs == 2 ? loadElement<T, kBytewise>(io.src[1] + offset) : T{};
    const T r = job(x, y);
    storeElement<T, kBytewise>(io.dst + offset, r);
    if (io.dst2 != nullptr) storeElement<T, kBytewise>(io.dst2 + offset, r);
  }
}

// float32 <-> float16 / bfloat16, one element per thread and step: the element sizes differ,
// so the vector layout of elementwise() does not apply (the conversion is not on a hot path).
template <class From, class To, bool kBytewise>
__global__ void __launch_bounds__(kThreads) convertElements(unsigned char* dst, const unsigned char* src,
                                                            size_t count) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const From x = loadElement<From, kBytewise>(src + i * sizeof(From));
    storeElement<To, kBytewise>(dst + i * sizeof(To), narrow<To>(widen(x)));
  }
}

// ---- Launch ---------------------------------------------------------------------------------

// Multiprocessors of the current device, asked once per device (any thread may ask first; a
// race only asks twice for the same number).
int multiprocessors() {
  static std::atomic<int> known[kMaxDevices];  // zero: not asked yet
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) return kFallbackSms;
  int sms = known[device].load(std::memory_order_relaxed);
  if (sms == 0) {
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) {
      sms = kFallbackSms;
    }
    known[device].store(sms, std::memory_order_relaxed);
  }
  return sms;
}

unsigned blocksFor(size_t units) {
  const size_t most = static_cast<size_t>(multiprocessors()) * kBlocksPerSm;
  const size_t blocks = (units + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > most ? most : blocks));
}

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Where the vector body of `count` elements of T starts and how long it is: the pointers in
// use (not null) must all be vector-aligned together (see the top of the file).
template <class T, class V>
Layout planLayout(const Buffers& io, size_t count) {
  Layout layout;
  layout.count = count;
  layout.head = count;
  const uintptr_t offset = address(io.dst) % sizeof(V);
  bool together = offset % sizeof(T) == 0;
  for (const void* p : {static_cast<const void*>(io.dst), static_cast<const void*>(io.dst2),
                        static_cast<const void*>(io.src[0]), static_cast<const void*>(io.src[1])}) {
    if (p == nullptr) continue;
    together = together && address(p) % sizeof(V) == offset;
    layout.bytewise = layout.bytewise || address(p) % alignof(T) != 0;
  }
  if (together) {
    const size_t head = (sizeof(V) - offset) % sizeof(V) / sizeof(T);
    layout.head = head < count ? head : count;
    layout.vectors = (count - layout.head) / (sizeof(V) / sizeof(T));
  }
  return layout;
}

template <class T, class V, class Job>
int launch(const Buffers& io, size_t count, const Job& job, cudaStream_t stream) {
  const Layout layout = planLayout<T, V>(io, count);
  const size_t units = layout.vectors + (count - layout.vectors * (sizeof(V) / sizeof(T)));
  const unsigned blocks = blocksFor(units);
  if (layout.bytewise) {
    elementwise<T, V, true, Job><<<blocks, kThreads, 0, stream>>>(io, layout, job);
  } else {
    elementwise<T, V, false, Job><<<blocks, kThreads, 0, stream>>>(io, layout, job);
  }
  return static_cast<int>(cudaGetLastError());
}

// ---- Dispatch on the run-time type and op -----------------------------------------------------

template <class F>
int byType(loomDataType_t type, F&& f) {
  return device::byType(type, static_cast<int>(cudaErrorInvalidValue), f);
}

// loomAvg sums (the division is the divisor's business).
template <class F>
int byOp(loomRedOp_t op, F&& f) {
  return device::byOp(op, static_cast<int>(cudaErrorInvalidValue), f);
}

}  // namespace

int reduce(void* dst, void* dst2, const void* a, const void* b, size_t count, loomDataType_t type, loomRedOp_t op,
           int divisor, void* stream) {
  if (count == 0) return 0;
  const Buffers io{static_cast<unsigned char*>(dst), static_cast<unsigned char*>(dst2),
                   {static_cast<const unsigned char*>(a), static_cast<const unsigned char*>(b)}};
  return byType(type, [&](auto typeTag) {
    using T = typename decltype(typeTag)::type;
    return byOp(op, [&](auto opTag) {
      using Op = typename decltype(opTag)::type;
      return launch<T, uint4>(io, count, ReduceJob<T, Op>{divisor}, static_cast<cudaStream_t>(stream));
    });
  });
}

int scale(void* dst, const void* src, size_t count, loomDataType_t type, int divisor, void* stream) {
  if (count == 0) return 0;
  const Buffers io{static_cast<unsigned char*>(dst), nullptr, {static_cast<const unsigned char*>(src), nullptr}};
  return byType(type, [&](auto typeTag) {
    using T = typename decltype(typeTag)::type;
    return launch<T, uint4>(io, count, ScaleJob<T>{divisor}, static_cast<cudaStream_t>(stream));
  });
}

namespace {

// Returns f(Tag<V>{}) with V the widest word that two pointers `apart` bytes apart (mod 16)
// can both be aligned to. uint16_t for an odd distance: no word fits, and planLayout leaves
// every byte to the one-by-one loop.
template <class F>
int byCopyWord(uintptr_t apart, F&& f) {
  if (apart == 0) return f(Tag<uint4>{});
  if (apart % 8 == 0) return f(Tag<uint2>{});
  if (apart % 4 == 0) return f(Tag<uint32_t>{});
  return f(Tag<uint16_t>{});
}

// Returns f(Tag<From>{}, Tag<To>{}) for the conversions between different types that the
// kernels implement, cudaErrorInvalidValue for any other pair.
template <class F>
int byConversion(loomDataType_t dstType, loomDataType_t srcType, F&& f) {
  if (srcType == loomFloat32 && dstType == loomFloat16) return f(Tag<float>{}, Tag<Half>{});
  if (srcType == loomFloat32 && dstType == loomBfloat16) return f(Tag<float>{}, Tag<BFloat16>{});
  if (srcType == loomFloat16 && dstType == loomFloat32) return f(Tag<Half>{}, Tag<float>{});
  if (srcType == loomBfloat16 && dstType == loomFloat32) return f(Tag<BFloat16>{}, Tag<float>{});
  if (srcType == loomFloat32 && dstType == loomFloat8e4m3) return f(Tag<float>{}, Tag<Float8e4m3>{});
  if (srcType == loomFloat32 && dstType == loomFloat8e5m2) return f(Tag<float>{}, Tag<Float8e5m2>{});
  if (srcType == loomFloat8e4m3 && dstType == loomFloat32) return f(Tag<Float8e4m3>{}, Tag<float>{});
  if (srcType == loomFloat8e5m2 && dstType == loomFloat32) return f(Tag<Float8e5m2>{}, Tag<float>{});
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace

int copy(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0 || dst == src) return 0;
  const Buffers io{static_cast<unsigned char*>(dst), nullptr, {static_cast<const unsigned char*>(src), nullptr}};
  return byCopyWord((address(dst) - address(src)) % 16, [&](auto word) {
    return launch<unsigned char, typename decltype(word)::type>(io, bytes, CopyJob{}, static_cast<cudaStream_t>(stream));
  });
}

namespace {

template <class From, class To>
int launchConvert(void* dst, const void* src, size_t count, cudaStream_t stream) {
  auto* d = static_cast<unsigned char*>(dst);
  auto* s = static_cast<const unsigned char*>(src);
  const unsigned blocks = blocksFor(count);
  if (address(d) % alignof(To) != 0 || address(s) % alignof(From) != 0) {
    convertElements<From, To, true><<<blocks, kThreads, 0, stream>>>(d, s, count);
  } else {
    convertElements<From, To, false><<<blocks, kThreads, 0, stream>>>(d, s, count);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int convert(void* dst, loomDataType_t dstType, const void* src, loomDataType_t srcType, size_t count,
            void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (dstType == srcType) {
    return byType(srcType, [&](auto typeTag) {
      return copy(dst, src, count * sizeof(typename decltype(typeTag)::type), stream);
    });
  }
  if (count == 0) return 0;
  return byConversion(dstType, srcType, [&](auto from, auto to) {
    return launchConvert<typename decltype(from)::type, typename decltype(to)::type>(dst, src, count, s);
  });
}

namespace {

// Asks for each kernel's attributes, which makes the runtime load it if it has not yet.
class KernelLoader {
 public:
  template <class Kernel>
  void load(Kernel kernel) {
    cudaFuncAttributes attributes;
    const cudaError_t e = cudaFuncGetAttributes(&attributes, kernel);
    if (first_ == cudaSuccess) first_ = e;
  }
  template <class T, class V, class Job>
  void loadElementwise() {
    load(elementwise<T, V, true, Job>);
    load(elementwise<T, V, false, Job>);
  }
  template <class From, class To>
  void loadConvert() {
    load(convertElements<From, To, true>);
    load(convertElements<From, To, false>);
  }
  cudaError_t result() const { return first_; }

 private:
  cudaError_t first_ = cudaSuccess;
};

}  // namespace

// Every kernel a call can launch, found through the same dispatch the calls take.
int loadKernels() {
  KernelLoader loader;
  for (int t = 0; t < loomNumTypes; ++t) {
    byType(static_cast<loomDataType_t>(t), [&](auto typeTag) {
      using T = typename decltype(typeTag)::type;
      for (int op = 0; op < loomNumOps; ++op) {
        byOp(static_cast<loomRedOp_t>(op), [&](auto opTag) {
          loader.loadElementwise<T, uint4, ReduceJob<T, typename decltype(opTag)::type>>();
          return 0;
        });
      }
      loader.loadElementwise<T, uint4, ScaleJob<T>>();
      return 0;
    });
    for (int from = 0; from < loomNumTypes; ++from) {
      byConversion(static_cast<loomDataType_t>(t), static_cast<loomDataType_t>(from), [&](auto src, auto dst) {
        loader.loadConvert<typename decltype(src)::type, typename decltype(dst)::type>();
        return 0;
      });
    }
  }
  for (uintptr_t apart = 0; apart < 16; ++apart) {
    byCopyWord(apart, [&](auto word) {
      loader.loadElementwise<unsigned char, typename decltype(word)::type, CopyJob>();
      return 0;
    });
  }
  return static_cast<int>(loader.result());
}

const char* architectures() { return LOOM_CUDA_ARCHITECTURES; }

}  // namespace loom::cuda
