// A lock for critical sections of a few instructions that every call enters (the handle
// registry, a communicator's call log). Unlocking is a plain store where a
// std::mutex needs a second locked instruction to look for sleepers; on a small allreduce,
// which takes a fraction of a microsecond, those instructions are a visible share. Waiters
// spin, so nothing that can wait (I/O, another lock, a long computation) runs under it.
#pragma once

#include <atomic>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace loom {

// What a spinning waiter does between looks: lets the other hyperthread of its core run.
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

class SpinLock {
 public:
  void lock() {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) cpuRelax();
    }
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

// The lock of a communicator's execution, held for a whole collective: a NULL-stream call
// and the communicator's host streams take turns. It nearly never has a waiter, so taking
// it is one locked instruction and releasing it a plain store, as with SpinLock (a
// std::mutex costs a small allreduce a second locked instruction and ~70 more); a waiter,
// which may wait a whole collective, gives up its core between looks.
class YieldingLock {
 public:
  void lock() {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) std::this_thread::yield();
    }
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace loom
