// What every GPU test needs: the skip with its printed reason, and CUDA calls as assertions.
// Each test file defines `bool haveDevice()` (the processes build asks in a child, so that
// the parent never initialises CUDA before forking ranks).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#define SKIP_WITHOUT_DEVICE()                  \
  if (!haveDevice()) {                         \
    std::printf("skipped: no CUDA device\n");  \
    std::fflush(stdout);                       \
    GTEST_SKIP() << "skipped: no CUDA device"; \
  }

#define CUDA_ASSERT(call)                                                  \
  do {                                                                     \
    cudaError_t e_ = (call);                                               \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorString(e_); \
  } while (0)

// Ranks that are threads of one process on one GPU need two CUDA hardware queues each, or one
// can queue behind a peer's kernel that waits for it (docs/ARCHITECTURE.md, "Thread ranks on
// one GPU"). CUDA reads the variable when the process first uses it: set here, before main.
inline const bool kHardwareQueuesForThreadRanks = ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0) == 0;

// Whether this process sees a CUDA device (initialises CUDA).
inline bool cudaDevicePresent() {
  static const bool have = [] {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  }();
  return have;
}

// Where ranks that are threads of one process meet after allocating their buffers and before
// their first call. CUDA runs no kernel launched after a device or pinned allocation beside
// one launched before it in the same context, so a rank that allocated while a thread peer's
// kernel already waited for it would hold its own launch until the timeout (docs/
// ARCHITECTURE.md, "Thread ranks on one GPU"). Ranks as processes (each its own context, and
// its own copy of this object after fork) pass straight through. A rank that never arrives
// (it failed first) holds the others a minute at most.
class AllocatedMeeting {
 public:
  AllocatedMeeting(int ranks, bool threads) : left_(threads ? ranks : 0) {}
  void arrive() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (left_ == 0) return;
    if (--left_ == 0) {
      all_.notify_all();
      return;
    }
    all_.wait_for(lock, std::chrono::minutes(1), [this] { return left_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable all_;
  int left_;
};
