// The DDP layer (include/loom/ddp.h) over a device communicator in the CPU emulation
// (LOOM_DEVICE_EMULATION=1): buckets of gradients averaged by plan-kernel allreduces, as views
// of the gradients and as copies, with and without compression, on the NULL stream and on a
// Loom host stream; parameters broadcast from a rank other than 0.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/sanitizer.h"
#include "loom/ddp.h"
#include "multirank/harness.h"

namespace {

using loomtest::Mode;
using loomtest::ScopedEnv;

loomtest::RankOptions emulatedDevice() {
  loomtest::RankOptions options;
  options.device = 0;
  return options;
}

struct Case {
  Mode mode;
  loomDdpCompression_t compression;
  size_t gap;        // elements between gradients: 0 lets buckets be views of them
  bool hostStream;
  double tolerance;  // relative to the mean
};

class EmulatedDeviceDdp : public testing::TestWithParam<Case> {};

TEST_P(EmulatedDeviceDdp, BucketsAverageTheGradients) {
  const Case c = GetParam();
  SKIP_PROCESSES_UNDER_TSAN(c.mode == Mode::kProcesses);
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  constexpr size_t kCounts[3] = {3000, 17, 70000};
  loomtest::runRanks(2, c.mode, [&](loomComm_t comm, int rank) {
    size_t offsets[3], total = 0;
    for (int g = 0; g < 3; ++g) {
      offsets[g] = total;
      total += kCounts[g] + c.gap;
    }
    std::vector<float> grads(total);
    for (size_t i = 0; i < total; ++i) grads[i] = static_cast<float>((i % 13) * (rank + 1));
    loomStream_t stream = nullptr;
    if (c.hostStream) LOOM_ASSERT_OK(loomStreamCreate(&stream), nullptr);
    std::vector<loomDdpTensor_t> tensors;
    for (int g = 0; g < 3; ++g) tensors.push_back({grads.data() + offsets[g], kCounts[g], loomFloat32, nullptr});
    loomDdpOptions_t ddp = LOOM_DDP_OPTIONS_INITIALIZER;
    ddp.firstBucketCapBytes = 4096;
    ddp.bucketCapBytes = 16384;
    ddp.compression = c.compression;
    ddp.stream = stream;
    loomDdpReducer_t reducer = nullptr;
    LOOM_ASSERT_OK(loomDdpReducerCreate(&reducer, comm, tensors.data(), 3, &ddp), nullptr);
    for (int iteration = 0; iteration < 2; ++iteration) {
      if (iteration == 1) {
        for (size_t i = 0; i < total; ++i) grads[i] = static_cast<float>((i % 13) * (rank + 1));
      }
      for (int g : {2, 1, 0}) LOOM_ASSERT_OK(loomDdpMarkReady(reducer, g), nullptr);
      LOOM_ASSERT_OK(loomDdpFinish(reducer), nullptr);
      if (stream != nullptr) LOOM_ASSERT_OK(loomStreamSynchronize(stream), nullptr);
      for (int g = 0; g < 3; ++g) {
        for (size_t i = 0; i < kCounts[g]; ++i) {
          const double want = ((offsets[g] + i) % 13) * 1.5;  // the mean of x and 2x
          ASSERT_NEAR(grads[offsets[g] + i], want, c.tolerance * (1 + want))
              << "iteration " << iteration << " gradient " << g << " element " << i;
        }
      }
    }
    EXPECT_EQ(loomDdpReducerDestroy(reducer), loomSuccess);
    if (stream != nullptr) LOOM_EXPECT_OK(loomStreamDestroy(stream), nullptr);
  }, emulatedDevice());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, EmulatedDeviceDdp,
    testing::Values(Case{Mode::kThreads, loomDdpAllReduce, 0, false, 1e-6},
                    Case{Mode::kThreads, loomDdpAllReduce, 5, true, 1e-6},
                    Case{Mode::kProcesses, loomDdpFp16Compress, 0, false, 2e-3},
                    Case{Mode::kProcesses, loomDdpBf16Compress, 3, true, 1.6e-2}),
    [](const auto& info) {
      const Case& c = info.param;
      const char* compression = c.compression == loomDdpAllReduce      ? "plain"
                                : c.compression == loomDdpFp16Compress ? "fp16"
                                                                       : "bf16";
      return loomtest::modeName(c.mode) + "_" + compression + (c.gap ? "_copied" : "_views") +
             (c.hostStream ? "_hoststream" : "_nullstream");
    });

TEST(EmulatedDeviceDdpBroadcast, TensorsComeFromRankOne) {
  SKIP_PROCESSES_UNDER_TSAN(true);
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  loomtest::runRanks(3, Mode::kProcesses, [&](loomComm_t comm, int rank) {
    constexpr size_t kCount = 5000;
    std::vector<float> w(kCount);
    for (size_t i = 0; i < kCount; ++i) w[i] = static_cast<float>(rank * 1000 + i % 7);
    loomDdpTensor_t tensor{w.data(), kCount, loomFloat32, "w"};
    LOOM_ASSERT_OK(loomDdpBroadcastTensors(comm, &tensor, 1, 1), nullptr);
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(w[i], static_cast<float>(1000 + i % 7)) << i;
  }, emulatedDevice());
}

}  // namespace
