// Cache lines taken ahead of the stores that will need them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom {

constexpr size_t kCacheLineBytes = 64;

// Asks for the lines of [p, p + bytes) in a state this core may write, without waiting for
// them. A store to a line another core holds waits in the store buffer until the line comes
// over, and so does the next locked instruction after it; taking the line early moves that
// trip off the path of whatever writes it later. A hint only: nothing is read or written.
inline void prefetchForWriting(const void* p, size_t bytes) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~(kCacheLineBytes - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  for (uintptr_t line = first; line < end; line += kCacheLineBytes) {
#if defined(__x86_64__) || defined(__i386__)
    // PREFETCHW: GCC emits it for __builtin_prefetch(p, 1) only with -mprfchw, and the CPUs
    // without it (Intel before Broadwell) execute it as a NOP.
    asm volatile("prefetchw %0" : : "m"(*reinterpret_cast<const char*>(line)));
#else
    __builtin_prefetch(reinterpret_cast<const void*>(line), 1, 3);
#endif
  }
}

}  // namespace loom
