// The memory-ordering policy of the CPU emulation (see worker_context.h for what a policy
// supplies): a worker is one or more host threads, the protocol's words are moved with GCC's
// __atomic builtins (acquire/release, which ThreadSanitizer follows), and data with plain
// memcpy, ordered by those words. A low-latency line is two 8-byte atomics, each a data half
// beside its own flag, which is all the protocol asks of the GPU's 16-byte stores too; they
// are release/acquire here where the GPU's are relaxed (the data travels in them), so that
// ThreadSanitizer sees the order that the chain of lines carries between ranks (on x86 the
// two cost the same).
#pragma once

#include <sched.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "device/fifo.h"

namespace loom::device {

// What the threads of one worker share: a barrier (sense-reversing, yielding while it waits)
// and the flags of syncAny. One thread per worker needs none of it.
class HostWorkerGroup {
 public:
  explicit HostWorkerGroup(int threads) : threads_(threads) {}
  int threads() const { return threads_; }

  void arrive(bool* sense) {
    *sense = !*sense;
    if (waiting_.fetch_add(1, std::memory_order_acq_rel) == threads_ - 1) {
      waiting_.store(0, std::memory_order_relaxed);
      released_.store(*sense, std::memory_order_release);
      return;
    }
    while (released_.load(std::memory_order_acquire) != *sense) sched_yield();
  }
  std::atomic<bool>& anyFlag(int phase) { return any_[phase]; }

 private:
  const int threads_;
  std::atomic<int> waiting_{0};
  std::atomic<bool> released_{false};
  std::atomic<bool> any_[2] = {false, false};
};

class HostWorker {
 public:
  static constexpr uint32_t kChecksEvery = 64;

  HostWorker(HostWorkerGroup* group, int thread) : group_(group), thread_(thread) {}

  int thread() const { return thread_; }
  int threads() const { return group_ != nullptr ? group_->threads() : 1; }

  void sync() {
    if (group_ != nullptr) group_->arrive(&sense_);
  }
  bool syncAny(bool mine) {
    if (group_ == nullptr) return mine;
    // Two flags used in turn: thread 0 clears one while the others may already set the other.
    std::atomic<bool>& any = group_->anyFlag(phase_);
    phase_ ^= 1;
    if (mine) any.store(true, std::memory_order_relaxed);
    sync();
    const bool result = any.load(std::memory_order_relaxed);
    sync();
    if (thread_ == 0) any.store(false, std::memory_order_relaxed);
    return result;
  }

  uint64_t acquire(const uint64_t* p) const { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
  uint32_t acquire32(const uint32_t* p) const { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
  void release(uint64_t* p, uint64_t v) const { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
  void release32(uint32_t* p, uint32_t v) const { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
  // One set of workers shares these threads' memory: the device-scope forms are the same.
  uint64_t acquireLocal(const uint64_t* p) const { return acquire(p); }
  void releaseLocal(uint64_t* p, uint64_t v) const { release(p, v); }
  // A release store each (ThreadSanitizer does not follow a fence).
  void fence() const {}
  void fenceLocal() const {}
  void publish(uint64_t* p, uint64_t v) const { release(p, v); }
  uint32_t fetchAdd32(uint32_t* p, uint32_t v) const { return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL); }
  uint32_t cas32(uint32_t* p, uint32_t expected, uint32_t desired) const {
    __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return expected;
  }

  void storeLine(LLLine* line, uint32_t lo, uint32_t hi, uint32_t flag) const {
    auto* words = reinterpret_cast<uint64_t*>(line);
    __atomic_store_n(&words[0], lo | static_cast<uint64_t>(flag) << 32, __ATOMIC_RELEASE);
    __atomic_store_n(&words[1], hi | static_cast<uint64_t>(flag) << 32, __ATOMIC_RELEASE);
  }
  bool loadLine(const LLLine* line, uint32_t flag, uint32_t* lo, uint32_t* hi) const {
    const auto* words = reinterpret_cast<const uint64_t*>(line);
    const uint64_t a = __atomic_load_n(&words[0], __ATOMIC_ACQUIRE);
    const uint64_t b = __atomic_load_n(&words[1], __ATOMIC_ACQUIRE);
    if (static_cast<uint32_t>(a >> 32) != flag || static_cast<uint32_t>(b >> 32) != flag) return false;
    *lo = static_cast<uint32_t>(a);
    *hi = static_cast<uint32_t>(b);
    return true;
  }

  template <class U>
  U load(const void* p) const {
    U v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  template <class U>
  U loadFresh(const void* p) const {
    return load<U>(p);
  }
  template <class U>
  void store(void* p, U v) const {
    std::memcpy(p, &v, sizeof v);
  }

  // The monotonic clock (ns): wait deadlines and LOOM_DEVICE_TIMELINE.
  uint64_t now() const {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
  }

  // A few quick looks, then short sleeps: the emulation runs many workers on few cores, and a
  // waiting worker must leave them to the ones that will end its wait.
  void pause(uint32_t spins) const {
    if (spins < 256) {
      sched_yield();
      return;
    }
    const timespec nap{0, 20000};
    nanosleep(&nap, nullptr);
  }

 private:
  HostWorkerGroup* group_;
  int thread_;
  bool sense_ = false;
  int phase_ = 0;
};

}  // namespace loom::device
