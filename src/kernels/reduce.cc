// Picks one instruction-set path (the widest this CPU runs) at first use and forwards every
// call to that path's KernelTable.
#include "kernels/reduce.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if LOOM_KERNELS_HAVE_AVX2 || LOOM_KERNELS_HAVE_AVX512
#include <cpuid.h>
#endif

#include "kernels/kernel_table.h"

namespace loom::kernels {
namespace {

struct IsaPath {
  Isa isa;
  const KernelTable& (*table)();
  bool (*cpuRuns)();
};

// __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 registers.
// F16C is checked too, as the AVX2 and AVX-512 paths convert float16 with it; by CPUID,
// since clang's __builtin_cpu_supports does not know it.
#if LOOM_KERNELS_HAVE_AVX2 || LOOM_KERNELS_HAVE_AVX512
bool cpuHasF16c() {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}
#endif
#if LOOM_KERNELS_HAVE_AVX2
bool cpuRunsAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && cpuHasF16c();
}
#endif
#if LOOM_KERNELS_HAVE_AVX512
bool cpuRunsAvx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && cpuHasF16c();
}
#endif
bool always() { return true; }

// Narrowest first; the default is the last one the CPU runs.
const IsaPath kPaths[] = {
    {Isa::kPortable, &portableKernels, &always},
#if LOOM_KERNELS_HAVE_AVX2
    {Isa::kAvx2, &avx2Kernels, &cpuRunsAvx2},
#endif
#if LOOM_KERNELS_HAVE_AVX512
    {Isa::kAvx512, &avx512Kernels, &cpuRunsAvx512},
#endif
};

const IsaPath* widestPath() {
  const IsaPath* best = &kPaths[0];
  for (const IsaPath& path : kPaths) {
    if (path.cpuRuns()) best = &path;
  }
  return best;
}

// Set once; racing first calls all compute the same answer, so a relaxed store is enough.
std::atomic<const IsaPath*> activePath{nullptr};

const IsaPath& active() {
  const IsaPath* path = activePath.load(std::memory_order_relaxed);
  if (path == nullptr) {
    path = widestPath();
    activePath.store(path, std::memory_order_relaxed);
  }
  return *path;
}

bool valid(loomDataType_t type) { return type >= 0 && type < loomNumTypes; }
bool valid(loomRedOp_t op) { return op >= 0 && op < loomNumOps; }

// reduceNTo's tile: small enough that its inputs and outputs stream at once (see reduce.h);
// 512 B and 2 KiB ran slower out of place at 16 and 128 MiB on the AMD EPYC VM.
constexpr size_t kTileBytes = 1024;

size_t elementSize(loomDataType_t type) {
  switch (type) {
    case loomInt8:
    case loomUint8:
    case loomFloat8e4m3:
    case loomFloat8e5m2:
      return 1;
    case loomFloat16:
    case loomBfloat16:
      return 2;
    case loomInt32:
    case loomUint32:
    case loomFloat32:
      return 4;
    default:
      return 8;
  }
}

}  // namespace

void reduce(void* dst, const void* a, const void* b, size_t count, loomDataType_t type,
            loomRedOp_t op) {
  if (!valid(type) || !valid(op) || count == 0) return;
  active().table().reduce[type][op](dst, a, b, count);
}

void reduceN(void* dst, const void* const* srcs, int nsrcs, size_t count, loomDataType_t type,
             loomRedOp_t op) {
  if (!valid(type) || !valid(op) || nsrcs < 1 || count == 0) return;
  if (nsrcs == 1) return copy(dst, srcs[0], count * elementSize(type));
  active().table().reduceN[type][op](dst, srcs, nsrcs, count);
}

namespace {

// reduceNTo a tile at a time (see reduce.h): any type, divisor, number of inputs, alignment.
void reduceNToByTiles(const KernelTable& table, void* const* dsts, int ndsts, const void* const* srcs, int nsrcs,
                      size_t first, size_t count, loomDataType_t type, loomRedOp_t op, int divisor, bool streaming) {
  const size_t es = elementSize(type), tileElems = kTileBytes / es;
  alignas(64) unsigned char tile[kTileBytes];
  constexpr int kMaxSrcs = 64;
  const void* at[kMaxSrcs];
  for (size_t base = first; base < first + count; base += tileElems) {
    const size_t n = std::min(tileElems, first + count - base), offset = base * es, bytes = n * es;
    // Inputs beyond kMaxSrcs fold in further passes over the tile (ranks of one host rarely
    // number more).
    for (int folded = 0; folded < nsrcs;) {
      int k = 0;
      if (folded > 0) at[k++] = tile;
      while (k < kMaxSrcs && folded < nsrcs) at[k++] = static_cast<const unsigned char*>(srcs[folded++]) + offset;
      if (k == 1) {
        std::memcpy(tile, at[0], bytes);
      } else {
        table.reduceN[type][op](tile, at, k, n);
      }
    }
    if (divisor > 1) table.scale[type](tile, tile, n, divisor);
    for (int j = 0; j < ndsts; ++j) {
      unsigned char* d = static_cast<unsigned char*>(dsts[j]) + offset;
      if (streaming) {
        table.copyStreaming(d, tile, bytes);
      } else {
        std::memcpy(d, tile, bytes);
      }
    }
  }
}

}  // namespace

void reduceNTo(void* const* dsts, int ndsts, const void* const* srcs, int nsrcs, size_t count, loomDataType_t type,
               loomRedOp_t op, int divisor, bool streaming) {
  if (!valid(type) || !valid(op) || nsrcs < 1 || ndsts < 1 || count == 0) return;
  const KernelTable& table = active().table();
  const size_t es = elementSize(type), vector = table.streamBytes;
  // The vector loop where it can run: two inputs or more, no division, outputs aligned alike
  // from some whole element on (the ones before and the last partial vector go by tiles).
  const uintptr_t misalign = reinterpret_cast<uintptr_t>(dsts[0]) % vector;
  bool vectors = table.reduceTo[type][op] != nullptr && divisor == 1 && nsrcs >= 2 && misalign % es == 0;
  for (int j = 1; j < ndsts && vectors; ++j) vectors = reinterpret_cast<uintptr_t>(dsts[j]) % vector == misalign;
  if (!vectors) return reduceNToByTiles(table, dsts, ndsts, srcs, nsrcs, 0, count, type, op, divisor, streaming);
  const size_t head = std::min(count, (vector - misalign) % vector / es);
  const size_t lanes = vector / es, middle = (count - head) / lanes * lanes;
  reduceNToByTiles(table, dsts, ndsts, srcs, nsrcs, 0, head, type, op, divisor, streaming);
  if (middle > 0) {
    // The vector loop takes its buffers where its first whole vector starts.
    constexpr int kMaxPointers = 64;
    if (nsrcs <= kMaxPointers && ndsts <= kMaxPointers) {
      const void* from[kMaxPointers];
      void* to[kMaxPointers];
      for (int k = 0; k < nsrcs; ++k) from[k] = static_cast<const unsigned char*>(srcs[k]) + head * es;
      for (int j = 0; j < ndsts; ++j) to[j] = static_cast<unsigned char*>(dsts[j]) + head * es;
      table.reduceTo[type][op](to, ndsts, from, nsrcs, middle / lanes * lanes, streaming);
    } else {
      reduceNToByTiles(table, dsts, ndsts, srcs, nsrcs, head, middle, type, op, divisor, streaming);
    }
  }
  reduceNToByTiles(table, dsts, ndsts, srcs, nsrcs, head + middle, count - head - middle, type, op, divisor,
                   streaming);
}

void scale(void* dst, const void* src, size_t count, loomDataType_t type, int divisor) {
  if (!valid(type) || divisor < 1 || count == 0) return;
  active().table().scale[type](dst, src, count, divisor);
}

void multiply(void* dst, const void* src, size_t count, loomDataType_t type, const void* scalar) {
  if (!valid(type) || count == 0) return;
  active().table().multiply[type](dst, src, count, scalar);
}

bool convert(void* dst, loomDataType_t dstType, const void* src, loomDataType_t srcType,
             size_t count) {
  if (!valid(dstType) || !valid(srcType)) return false;
  if (dstType == srcType) {
    copy(dst, src, count * elementSize(srcType));
    return true;
  }
  const KernelTable& table = active().table();
  KernelTable::ConvertFn fn = nullptr;
  if (srcType == loomFloat32) fn = table.fromFloat32[dstType];
  if (dstType == loomFloat32) fn = table.toFloat32[srcType];
  if (fn == nullptr) return false;
  if (count > 0) fn(dst, src, count);
  return true;
}

// glibc's memcpy already picks the best copy for this CPU (ERMS, AVX, non-temporal stores
// for large sizes); a loop of ours would only match it.
void copy(void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return;
  std::memcpy(dst, src, bytes);
}

void copyStreaming(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  active().table().copyStreaming(dst, src, bytes);
  storeFence();
}

void storeFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

const char* isaName() { return isaName(active().isa); }

const char* isaName(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return "portable";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

std::vector<Isa> availableIsas() {
  std::vector<Isa> isas;
  for (const IsaPath& path : kPaths) {
    if (path.cpuRuns()) isas.push_back(path.isa);
  }
  return isas;
}

bool forceIsaForTesting(Isa isa) {
  for (const IsaPath& path : kPaths) {
    if (path.isa == isa && path.cpuRuns()) {
      activePath.store(&path, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

}  // namespace loom::kernels
