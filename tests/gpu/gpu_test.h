// What every GPU test needs: the skip with its printed reason, and CUDA calls as assertions.
// Each test file defines `bool haveDevice()` (the processes build asks in a child, so that
// the parent never initialises CUDA before forking ranks).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>

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

// Whether this process sees a CUDA device (initialises CUDA).
inline bool cudaDevicePresent() {
  static const bool have = [] {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  }();
  return have;
}
