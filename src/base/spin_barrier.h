// A barrier whose waiters spin: threads that meet around a timed part (the machine
// calibration's) hold no wake-up inside it, which on a virtual machine costs as long as the
// copies being timed.
#pragma once

#include <atomic>
#include <cstddef>
#include <thread>

#include "base/spin_lock.h"

namespace loom {

class SpinBarrier {
 public:
  explicit SpinBarrier(size_t threads) : threads_(threads) {}

  // Returns once all `threads` have arrived; the last to arrive lets the others go.
  void arriveAndWait() {
    const unsigned phase = phase_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == threads_) {
      arrived_.store(0, std::memory_order_relaxed);
      phase_.store(phase + 1, std::memory_order_release);
      return;
    }
    for (int spins = 0; phase_.load(std::memory_order_acquire) == phase; ++spins) {
      // More threads than CPUs: the one still working needs this one's CPU.
      if (spins > 10000) std::this_thread::yield();
      cpuRelax();
    }
  }

 private:
  const size_t threads_;
  std::atomic<size_t> arrived_{0};
  std::atomic<unsigned> phase_{0};
};

}  // namespace loom
