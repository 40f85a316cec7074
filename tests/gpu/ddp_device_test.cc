// The DDP reducer on device communicators: two ranks (threads) sharing GPU 0, gradients in
// device memory, buckets reduced on each rank's CUDA stream; averaging, compression, copied
// and view buckets, parameter broadcast. Without a device every test prints why it skipped.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gpu/gpu_test.h"
#include "loom/ddp.h"
#include "multirank/harness.h"

namespace {

using loomtest::Mode;

bool haveDevice() { return cudaDevicePresent(); }

// One rank's device state, made before any collective (a device-wide synchronisation while
// another rank's stream waits on Loom would never return): a stream, the gradients in one
// allocation (back to back, or with gaps so buckets are copied), pinned host staging.
struct RankState {
  cudaStream_t stream = nullptr;
  float* device = nullptr;
  float* host = nullptr;
  ~RankState() {
    if (stream) cudaStreamDestroy(stream);
    if (device) cudaFree(device);
    if (host) cudaFreeHost(host);
  }
};

constexpr size_t kCounts[3] = {3000, 17, 70000};

void runAverage(loomDdpCompression_t compression, size_t gap, double tolerance) {
  loomtest::RankOptions options;
  options.device = 0;
  AllocatedMeeting allocated(2, true);
  loomtest::runRanks(2, Mode::kThreads, [&](loomComm_t comm, int rank) {
    RankState s;
    size_t offsets[3], total = 0;
    for (int g = 0; g < 3; ++g) {
      offsets[g] = total;
      total += kCounts[g] + gap;
    }
    CUDA_ASSERT(cudaSetDevice(0));
    CUDA_ASSERT(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    CUDA_ASSERT(cudaMalloc(reinterpret_cast<void**>(&s.device), total * sizeof(float)));
    CUDA_ASSERT(cudaMallocHost(reinterpret_cast<void**>(&s.host), total * sizeof(float)));
    for (size_t i = 0; i < total; ++i) s.host[i] = static_cast<float>((i % 13) * (rank + 1));
    CUDA_ASSERT(cudaMemcpyAsync(s.device, s.host, total * sizeof(float), cudaMemcpyHostToDevice, s.stream));
    allocated.arrive();

    std::vector<loomDdpTensor_t> tensors;
    for (int g = 0; g < 3; ++g) tensors.push_back({s.device + offsets[g], kCounts[g], loomFloat32, nullptr});
    loomDdpOptions_t ddp = LOOM_DDP_OPTIONS_INITIALIZER;
    ddp.firstBucketCapBytes = 4096;
    ddp.bucketCapBytes = 16384;
    ddp.compression = compression;
    ddp.stream = s.stream;
    loomDdpReducer_t reducer = nullptr;
    LOOM_ASSERT_OK(loomDdpReducerCreate(&reducer, comm, tensors.data(), 3, &ddp), nullptr);
    for (int g : {2, 1, 0}) LOOM_ASSERT_OK(loomDdpMarkReady(reducer, g), nullptr);
    LOOM_ASSERT_OK(loomDdpFinish(reducer), nullptr);
    CUDA_ASSERT(cudaMemcpyAsync(s.host, s.device, total * sizeof(float), cudaMemcpyDeviceToHost, s.stream));
    CUDA_ASSERT(cudaStreamSynchronize(s.stream));
    for (int g = 0; g < 3; ++g) {
      for (size_t i = 0; i < kCounts[g]; ++i) {
        const double want = ((offsets[g] + i) % 13) * 1.5;  // mean of x and 2x
        ASSERT_NEAR(s.host[offsets[g] + i], want, tolerance * (1 + want)) << "gradient " << g << " element " << i;
      }
    }
    EXPECT_EQ(loomDdpReducerDestroy(reducer), loomSuccess);
  }, options);
}

TEST(DeviceDdp, ViewBucketsAverage) {
  SKIP_WITHOUT_DEVICE();
  runAverage(loomDdpAllReduce, 0, 1e-6);
}

TEST(DeviceDdp, CopiedBucketsAverage) {
  SKIP_WITHOUT_DEVICE();
  runAverage(loomDdpAllReduce, 5, 1e-6);
}

TEST(DeviceDdp, Fp16AndBf16CompressionAverage) {
  SKIP_WITHOUT_DEVICE();
  runAverage(loomDdpFp16Compress, 0, 2e-3);
  runAverage(loomDdpBf16Compress, 3, 1.6e-2);
}

TEST(DeviceDdp, BroadcastTensorsFromRankOne) {
  SKIP_WITHOUT_DEVICE();
  loomtest::RankOptions options;
  options.device = 0;
  AllocatedMeeting allocated(2, true);
  loomtest::runRanks(2, Mode::kThreads, [&](loomComm_t comm, int rank) {
    RankState s;
    constexpr size_t kCount = 5000;
    CUDA_ASSERT(cudaSetDevice(0));
    CUDA_ASSERT(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    CUDA_ASSERT(cudaMalloc(reinterpret_cast<void**>(&s.device), kCount * sizeof(float)));
    CUDA_ASSERT(cudaMallocHost(reinterpret_cast<void**>(&s.host), kCount * sizeof(float)));
    for (size_t i = 0; i < kCount; ++i) s.host[i] = static_cast<float>(rank * 1000 + i % 7);
    CUDA_ASSERT(cudaMemcpyAsync(s.device, s.host, kCount * sizeof(float), cudaMemcpyHostToDevice, s.stream));
    CUDA_ASSERT(cudaStreamSynchronize(s.stream));
    allocated.arrive();
    loomDdpTensor_t tensor{s.device, kCount, loomFloat32, "w"};
    LOOM_ASSERT_OK(loomDdpBroadcastTensors(comm, &tensor, 1, 1), nullptr);
    CUDA_ASSERT(cudaMemcpyAsync(s.host, s.device, kCount * sizeof(float), cudaMemcpyDeviceToHost, s.stream));
    CUDA_ASSERT(cudaStreamSynchronize(s.stream));
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(s.host[i], static_cast<float>(1000 + i % 7)) << i;
  }, options);
}

}  // namespace
