// The loops that move and combine a worker's bytes: every thread of the worker takes every
// threads()-th unit of a range. Used by the FIFO protocol (fifo.h) and the plan interpreter
// (interpreter.h), on the GPU and in the CPU emulation alike.
//
//   byte address:  ...|  16-byte boundary  |                 |...
//   elements:      [ head ][ vector 0       ][ vector 1       ] ... [ tail ]
//                   scalar   16-byte loads/stores                     scalar
//
// The vector body exists when every pointer of the call has the same address mod 16 and that
// offset is a whole number of elements (FIFO slots are 16-byte aligned, and device buffers
// from cudaMalloc 256-byte aligned, so large calls take it). Otherwise every element goes on
// its own, byte by byte where a pointer is not even aligned to its element size.
//
// "Fresh" inputs are FIFO memory a peer writes again and again: on the GPU they are loaded
// past the non-coherent L1 cache (policy's loadFresh).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/element_ops.h"
#include "kernels/hd.h"

namespace loom::device {

struct alignas(16) Vec16 {
  uint64_t lo, hi;
};

template <size_t kBytes>
using RawOf = std::conditional_t<
    kBytes == 1, uint8_t,
    std::conditional_t<kBytes == 2, uint16_t, std::conditional_t<kBytes == 4, uint32_t, uint64_t>>>;

template <class T, bool kFresh, class W>
LOOM_HD T loadElement(W& w, const uint8_t* p) {
  using Raw = RawOf<sizeof(T)>;
  Raw raw;
  if (reinterpret_cast<uintptr_t>(p) % sizeof(T) == 0) {
    raw = kFresh ? w.template loadFresh<Raw>(p) : w.template load<Raw>(p);
  } else {
    memcpy(&raw, p, sizeof raw);
  }
  T v;
  memcpy(&v, &raw, sizeof v);
  return v;
}

template <class T, class W>
LOOM_HD void storeElement(W& w, uint8_t* p, T v) {
  using Raw = RawOf<sizeof(T)>;
  Raw raw;
  memcpy(&raw, &v, sizeof raw);
  if (reinterpret_cast<uintptr_t>(p) % sizeof(T) == 0) {
    w.template store<Raw>(p, raw);
  } else {
    memcpy(p, &raw, sizeof raw);
  }
}

// dst[i] = x[i] (a copy of bytes).
struct CopyJob {
  static constexpr int kInputs = 1;
  LOOM_HD uint8_t operator()(uint8_t v, uint8_t) const { return v; }
};

// dst[i] = job(x[i], y[i]) for i < count elements of T (y only for two-input jobs). dst may
// equal x or y exactly.
template <class T, bool kFreshX, bool kFreshY, class Job, class W>
LOOM_HD_CALLED void elementwise(W& w, uint8_t* dst, const uint8_t* x, const uint8_t* y, uint64_t count, const Job& job) {
  constexpr uint64_t kPerVector = sizeof(Vec16) / sizeof(T);
  const uint64_t thread = static_cast<uint64_t>(w.thread()), stride = static_cast<uint64_t>(w.threads());
  const uintptr_t offset = reinterpret_cast<uintptr_t>(dst) % 16;
  bool together = offset % sizeof(T) == 0 && reinterpret_cast<uintptr_t>(x) % 16 == offset &&
                  (Job::kInputs == 1 || reinterpret_cast<uintptr_t>(y) % 16 == offset);
  uint64_t head = count, vectors = 0;
  if (together) {
    head = (16 - offset) % 16 / sizeof(T);
    if (head > count) head = count;
    vectors = (count - head) / kPerVector;
  }
  const uint64_t bodyAt = head * sizeof(T);
  // kUnroll vectors per thread in flight: every load of a round is issued before the first
  // store, so that one worker keeps enough bytes moving to cover the memory's latency (one
  // 16-byte load per thread at a time held a thread block near 15 GB/s on an H100).
  constexpr uint64_t kUnroll = 4;
  for (uint64_t first = thread; first < vectors; first += stride * kUnroll) {
    Vec16 a[kUnroll]{}, b[kUnroll]{};
    for (uint64_t u = 0; u < kUnroll; ++u) {
      const uint64_t v = first + u * stride;
      if (v >= vectors) break;
      const uint64_t at = bodyAt + v * sizeof(Vec16);
      a[u] = kFreshX ? w.template loadFresh<Vec16>(x + at) : w.template load<Vec16>(x + at);
      if constexpr (Job::kInputs == 2) b[u] = kFreshY ? w.template loadFresh<Vec16>(y + at) : w.template load<Vec16>(y + at);
    }
    for (uint64_t u = 0; u < kUnroll; ++u) {
      const uint64_t v = first + u * stride;
      if (v >= vectors) break;
      T ea[kPerVector], eb[kPerVector], r[kPerVector];
      memcpy(ea, &a[u], sizeof a[u]);
      memcpy(eb, &b[u], sizeof b[u]);
      for (uint64_t k = 0; k < kPerVector; ++k) r[k] = job(ea[k], eb[k]);
      Vec16 out;
      memcpy(&out, r, sizeof out);
      w.template store<Vec16>(dst + bodyAt + v * sizeof(Vec16), out);
    }
  }
  // The head and the tail, numbered together: j < head is element j, the rest the tail.
  const uint64_t tailStart = head + vectors * kPerVector;
  const uint64_t leftovers = head + (count - tailStart);
  for (uint64_t j = thread; j < leftovers; j += stride) {
    const uint64_t at = (j < head ? j : tailStart + (j - head)) * sizeof(T);
    const T a = loadElement<T, kFreshX>(w, x + at);
    T b{};
    if constexpr (Job::kInputs == 2) b = loadElement<T, kFreshY>(w, y + at);
    storeElement<T>(w, dst + at, job(a, b));
  }
}

// dst = src for `bytes` bytes, shared among the worker's threads. dst == src does nothing.
template <bool kFreshSrc, class W>
LOOM_HD void copyBytes(W& w, uint8_t* dst, const uint8_t* src, uint64_t bytes) {
  if (dst == src) return;
  elementwise<uint8_t, kFreshSrc, false>(w, dst, src, nullptr, bytes, CopyJob{});
}

}  // namespace loom::device
