// Hand-offs ThreadSanitizer cannot see. Ranks that are threads of one process agree through
// shared-memory segments that each rank maps at its own address, so the release on one
// mapping and the acquire on the other look unrelated to TSan; the buffers they hand over
// (a rank's send buffer, a peer's output) are at one address in every thread. The owner
// calls tsanRelease(buffer) before the atomic store that hands it over and the taker
// tsanAcquire(buffer) after the atomic load that sees it. Without TSan both are nothing.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define LOOM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LOOM_TSAN 1
#endif
#endif
#ifdef LOOM_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace loom {

inline void tsanRelease(const void* p) {
#ifdef LOOM_TSAN
  __tsan_release(const_cast<void*>(p));
#else
  (void)p;
#endif
}

inline void tsanAcquire(const void* p) {
#ifdef LOOM_TSAN
  __tsan_acquire(const_cast<void*>(p));
#else
  (void)p;
#endif
}

}  // namespace loom
