// The DDP reducer (include/loom/ddp.h) on 1-4 ranks, as threads and as processes: training
// equals single-process full-batch training, no-sync accumulation equals a large batch, the
// one bucket rebuild follows rank 0's observed order, averaging and compression against
// references computed here in double, and every error the header promises.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/registry.h"
#include "ddp/stream_ops.h"
#include "loom/ddp.h"
#include "mlp/dataset.h"
#include "mlp/model.h"
#include "multirank/harness.h"

namespace {

using loomtest::Mode;

// ---- Helpers ------------------------------------------------------------------------------

std::vector<loomDdpTensor_t> gradientsOf(mlp::Model& model) {
  std::vector<loomDdpTensor_t> list;
  for (size_t t = 0; t < model.tensors().size(); ++t) {
    list.push_back({model.grad(t), model.tensors()[t].count, loomFloat32, model.tensors()[t].name.c_str()});
  }
  return list;
}

// Small caps, so that even the test model has several buckets.
loomDdpOptions_t smallBuckets() {
  loomDdpOptions_t options = LOOM_DDP_OPTIONS_INITIALIZER;
  options.firstBucketCapBytes = 128;
  options.bucketCapBytes = 400;
  return options;
}

// Every rank's copy of `data` has the same bits as rank 0's.
void expectSameBitsOnEveryRank(loomComm_t comm, const std::vector<float>& data, const char* what) {
  int nranks = 0, rank = 0;
  ASSERT_EQ(loomCommCount(comm, &nranks), loomSuccess);
  ASSERT_EQ(loomCommUserRank(comm, &rank), loomSuccess);
  std::vector<float> all(data.size() * nranks);
  LOOM_ASSERT_OK(loomAllGather(data.data(), all.data(), data.size(), loomFloat32, comm, nullptr), comm);
  for (int r = 1; r < nranks; ++r) {
    EXPECT_EQ(std::memcmp(all.data(), all.data() + r * data.size(), data.size() * sizeof(float)), 0)
        << what << ": rank " << r << " differs from rank 0 (seen on rank " << rank << ")";
  }
}

void expectClose(const std::vector<float>& got, const std::vector<float>& want, double tolerance,
                 const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance * (1.0 + std::fabs(want[i]))) << what << " element " << i;
  }
}

const std::vector<int> kWidths{6, 16, 12, 3};
constexpr int kGlobalBatch = 24;  // divisible by 1, 2, 3, 4

// ---- Training equals full-batch training --------------------------------------------------

class TrainingTest : public testing::TestWithParam<std::tuple<Mode, int, bool>> {};

// K steps where each rank takes its slice of every global batch and the reducer averages:
// parameters match one process training on the whole batches, and are bitwise identical on
// every rank. `copied` puts gaps between gradients, so buckets are copied instead of views.
TEST_P(TrainingTest, MatchesSingleProcessFullBatch) {
  const auto [mode, nranks, copied] = GetParam();
  loomtest::runRanks(nranks, mode, [nranks = nranks, copied = copied](loomComm_t comm, int rank) {
    const mlp::Dataset data = mlp::makeClusters(kGlobalBatch * 5, kWidths[0], kWidths.back(), 1.0f, 1, 2);
    mlp::Model model(kWidths, 3, copied ? 5 : 0);
    mlp::Model reference(kWidths, 3);
    mlp::Optimizer optimizer(mlp::Optimizer::Kind::kSgd, 0.05f, model.parameterCount());
    mlp::Optimizer referenceOptimizer(mlp::Optimizer::Kind::kSgd, 0.05f, reference.parameterCount());

    const auto gradients = gradientsOf(model);
    const loomDdpOptions_t options = smallBuckets();
    loomDdpReducer_t reducer = nullptr;
    LOOM_ASSERT_OK(loomDdpReducerCreate(&reducer, comm, gradients.data(), static_cast<int>(gradients.size()), &options),
                   nullptr);
    int nbuckets = 0;
    ASSERT_EQ(loomDdpGetBuckets(reducer, nullptr, &nbuckets, nullptr), loomSuccess);
    EXPECT_GE(nbuckets, 3);

    const int local = kGlobalBatch / nranks;
    for (int step = 0; step < 5; ++step) {
      const int start = step * kGlobalBatch;
      model.zeroGradients();
      model.forwardBackward(data.row(start + rank * local), data.y.data() + start + rank * local, local, 1.0f,
                            [&](int t) { LOOM_EXPECT_OK(loomDdpMarkReady(reducer, t), nullptr); });
      LOOM_ASSERT_OK(loomDdpFinish(reducer), nullptr);
      optimizer.step(model);

      reference.zeroGradients();
      reference.forwardBackward(data.row(start), data.y.data() + start, kGlobalBatch, 1.0f, [](int) {});
      referenceOptimizer.step(reference);
    }
    int rebuilds = 0;
    ASSERT_EQ(loomDdpGetBuckets(reducer, nullptr, nullptr, &rebuilds), loomSuccess);
    EXPECT_EQ(rebuilds, 1);
    EXPECT_EQ(loomDdpReducerDestroy(reducer), loomSuccess);
    expectClose(model.params(), reference.params(), 2e-5, "parameters after 5 steps");
    expectSameBitsOnEveryRank(comm, model.params(), "parameters");
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, TrainingTest,
                         testing::Combine(testing::Values(Mode::kThreads, Mode::kProcesses),
                                          testing::Values(1, 2, 4), testing::Bool()),
                         [](const testing::TestParamInfo<TrainingTest::ParamType>& info) {
                           return loomtest::modeName(std::get<0>(info.param)) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks_" +
                                  (std::get<2>(info.param) ? "copied" : "views");
                         });

// Rank 0's gradients are views into one flat buffer, rank 1's separate vectors (and rank 2's
// flat buffer holds them in the opposite order, so its buckets are copied too): every rank
// must still reduce the same elements against each other.
TEST(Layout, ViewsAndCopiedBucketsMixAcrossRanks) {
  loomtest::runRanks(3, Mode::kThreads, [](loomComm_t comm, int rank) {
    const size_t counts[3] = {40, 24, 8};
    std::vector<float> flat(72);
    std::vector<std::vector<float>> separate(3);
    float* data[3];
    for (int g = 0; g < 3; ++g) {
      separate[g].resize(counts[g]);
      const size_t forward = g == 0 ? 0 : g == 1 ? 40 : 64, backward = g == 0 ? 32 : g == 1 ? 8 : 0;
      data[g] = rank == 0 ? flat.data() + forward : rank == 1 ? separate[g].data() : flat.data() + backward;
      for (size_t i = 0; i < counts[g]; ++i) data[g][i] = static_cast<float>(3 * (100 * g + i) * (rank + 1));
    }
    std::vector<loomDdpTensor_t> tensors;
    for (int g = 0; g < 3; ++g) tensors.push_back({data[g], counts[g], loomFloat32, nullptr});
    loomDdpReducer_t reducer = nullptr;
    LOOM_ASSERT_OK(loomDdpReducerCreate(&reducer, comm, tensors.data(), 3, nullptr), nullptr);
    for (int g : {2, 1, 0}) LOOM_ASSERT_OK(loomDdpMarkReady(reducer, g), nullptr);
    LOOM_ASSERT_OK(loomDdpFinish(reducer), nullptr);
    for (int g = 0; g < 3; ++g) {
      for (size_t i = 0; i < counts[g]; ++i) {
        ASSERT_EQ(data[g][i], static_cast<float>(6 * (100 * g + i))) << "gradient " << g << " element " << i;
      }
    }
    EXPECT_EQ(loomDdpReducerDestroy(reducer), loomSuccess);
  });
}

// ---- No-sync accumulation -----------------------------------------------------------------

// Three micro-batches, the first two under no-sync, each with loss scale 1/3: one step equal
// to a step on the three micro-batches at once.
TEST(NoSync, AccumulationOverMicroBatchesEqualsOneLargeBatchStep) {
  loomtest::runRanks(2, Mode::kProcesses, [](loomComm_t comm, int rank) {
    constexpr int kMicro = 3, kLocal = 4, kRanks = 2;
    const mlp::Dataset data = mlp::makeClusters(kMicro * kLocal * kRanks, kWidths[0], kWidths.back(), 1.0f, 1, 4);
    mlp::Model model(kWidths, 9);
    mlp::Model reference(kWidths, 9);
    const auto gradients = gradientsOf(model);
    const loomDdpOptions_t options = smallBuckets();
    loomDdpReducer_t reducer = nullptr;
    LOOM_ASSERT_OK(loomDdpReducerCreate(&reducer, comm, gradients.data(), static_cast<int>(gradients.size()), &options),
                   nullptr);
    model.zeroGradients();
    for (int micro = 0; micro < kMicro; ++micro) {
      LOOM_ASSERT_OK(loomDdpSetSync(reducer, micro == kMicro - 1), nullptr);
      const int start = (micro * kRanks + rank) * kLocal;
      model.forwardBackward(data.row(start), data.y.data() + start, kLocal, 1.0f / kMicro,
                            [&](int t) { LOOM_EXPECT_OK(loomDdpMarkReady(reducer, t), nullptr); });
      LOOM_ASSERT_OK(loomDdpFinish(reducer), nullptr);
    }
    EXPECT_EQ(loomDdpReducerDestroy(reducer), loomSuccess);

    // The reference sees the same rows as one batch of kMicro * kLocal * kRanks.
    reference.zeroGradients();
    reference.forwardBackward(data.row(0), data.y.data(), kMicro * kLocal * kRanks, 1.0f, [](int) {});
    for (size_t t = 0; t < model.tensors().size(); ++t) {
      const size_t n = model.tensors()[t].count;
      std::vector<float> got(model.grad(t), model.grad(t) + n), want(reference.grad(t), reference.grad(t) + n);
      expectClose(got, want, 1e-5, model.tensors()[t].name.c_str());
      expectSameBitsOnEveryRank(comm, got, model.tensors()[t].name.c_str());
    }
  });
}

// ---- The bucket rebuild -------------------------------------------------------------------

// Sizes (floats) and caps chosen so the assignment can be worked out by hand:
//   first cap 256 B, later caps 512 B; gradients 0..5 are 64, 64, 128, 32, 64, 64 floats.
//   Reverse order 5 4 3 2 1 0:  {5} (256 B: first cap)  {4 3 2} (896 B)  {1 0} (512 B)
//   Rank 0's order 2 0 5 1 4 3: {2} (512 B)  {0 5} (512 B)  {1 4} (512 B)  {3}
TEST(Rebuild, HappensOnceAndFollowsRankZerosObservedOrder) {
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    loomtest::runRanks(2, mode, [](loomComm_t comm, int rank) {
      const size_t counts[6] = {64, 64, 128, 32, 64, 64};
      std::vector<std::vector<float>> grads(6);
      std::vector<loomDdpTensor_t> tensors;
      for (int g = 0; g < 6; ++g) {
        grads[g].resize(counts[g]);
        tensors.push_back({grads[g].data(), counts[g], loomFloat32, nullptr});
      }
      loomDdpOptions_t options = LOOM_DDP_OPTIONS_INITIALIZER;
      options.firstBucketCapBytes = 256;
      options.bucketCapBytes = 512;
      loomDdpReducer_t reducer = nullptr;
      LOOM_ASSERT_OK(loomDdpReducerCreate(&reducer, comm, tensors.data(), 6, &options), nullptr);
      std::vector<int> bucketOf(6);
      int nbuckets = 0, rebuilds = -1;
      ASSERT_EQ(loomDdpGetBuckets(reducer, bucketOf.data(), &nbuckets, &rebuilds), loomSuccess);
      EXPECT_EQ(bucketOf, (std::vector<int>{2, 2, 1, 1, 1, 0}));
      EXPECT_EQ(nbuckets, 3);
      EXPECT_EQ(rebuilds, 0);

      const std::vector<int> orders[2][2] = {{{2, 0, 5, 1, 4, 3}, {0, 1, 2, 3, 4, 5}},
                                             {{5, 3, 1, 0, 2, 4}, {4, 2, 0, 1, 3, 5}}};
      for (int iteration = 0; iteration < 2; ++iteration) {
        for (int g = 0; g < 6; ++g) {
          for (size_t i = 0; i < counts[g]; ++i) grads[g][i] = static_cast<float>((rank + 1) * (g + 1) + i);
        }
        for (int g : orders[iteration][rank]) LOOM_EXPECT_OK(loomDdpMarkReady(reducer, g), nullptr);
        LOOM_ASSERT_OK(loomDdpFinish(reducer), nullptr);
        for (int g = 0; g < 6; ++g) {
          for (size_t i = 0; i < counts[g]; ++i) {
            // ((1*(g+1)+i) + (2*(g+1)+i)) / 2, exact in float32.
            ASSERT_EQ(grads[g][i], (3.0f * (g + 1) + 2.0f * i) / 2.0f) << "gradient " << g << " element " << i;
          }
        }
        ASSERT_EQ(loomDdpGetBuckets(reducer, bucketOf.data(), &nbuckets, &rebuilds), loomSuccess);
        EXPECT_EQ(bucketOf, (std::vector<int>{1, 2, 0, 3, 2, 1})) << "after iteration " << iteration;
        EXPECT_EQ(nbuckets, 4);
        EXPECT_EQ(rebuilds, 1);
      }
      EXPECT_EQ(loomDdpReducerDestroy(reducer), loomSuccess);
    });
  }
}

// ---- Averaging and compression ------------------------------------------------------------

using AverageParam = std::tuple<loomDataType_t, loomDdpAveraging_t, loomDdpCompression_t>;
class AverageTest : public testing::TestWithParam<AverageParam> {};

// Value of element i of gradient g on rank r, exactly representable in every float type.
double gradientValue(int rank, int g, size_t i) {
  return static_cast<double>(static_cast<int>((i * 7 + g * 3 + rank * 5) % 29) - 14) * 0.125;
}

// Store/load through the float type's bits (float16 and bfloat16 of the exact values above).
void storeAs(loomDataType_t type, void* p, double v) {
  switch (type) {
    case loomFloat64: std::memcpy(p, &v, 8); break;
    case loomFloat32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
    case loomBfloat16: {  // exact: the values have few mantissa bits
      float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      uint16_t top = static_cast<uint16_t>(bits >> 16);
      std::memcpy(p, &top, 2);
      break;
    }
    default: {  // float16, exact for these values
      uint16_t h = 0;
      if (v != 0.0) {
        const int e = std::ilogb(v);
        const double m = std::fabs(v) / std::ldexp(1.0, e) - 1.0;
        h = static_cast<uint16_t>((v < 0 ? 0x8000 : 0) | ((e + 15) << 10) | static_cast<int>(m * 1024));
      }
      std::memcpy(p, &h, 2);
    }
  }
}

double loadAs(loomDataType_t type, const void* p) {
  switch (type) {
    case loomFloat64: { double d; std::memcpy(&d, p, 8); return d; }
    case loomFloat32: { float f; std::memcpy(&f, p, 4); return f; }
    case loomBfloat16: {
      uint16_t top;
      std::memcpy(&top, p, 2);
      uint32_t bits = static_cast<uint32_t>(top) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    default: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
      const double sign = (h & 0x8000) ? -1.0 : 1.0;
      if (e == 0) return sign * std::ldexp(m, -24);
      return sign * std::ldexp(1024 + m, e - 25);
    }
  }
}

size_t sizeOf(loomDataType_t type) {
  return type == loomFloat64 ? 8 : type == loomFloat32 ? 4 : 2;
}

// Relative error each form may add: the type's own rounding, or the wire type's.
double tolerance(loomDataType_t type, loomDdpCompression_t compression) {
  double t = type == loomFloat64 ? 1e-12 : type == loomFloat32 ? 1e-6 : type == loomFloat16 ? 2e-3 : 1.6e-2;
  if (type == loomFloat32 && compression == loomDdpFp16Compress) t = 2e-3;
  if (type == loomFloat32 && compression == loomDdpBf16Compress) t = 1.6e-2;
  return t;
}

TEST_P(AverageTest, GradientsHoldTheMeanOverRanksOnEveryRank) {
  const auto [type, averaging, compression] = GetParam();
  loomtest::runRanks(3, Mode::kThreads, [type = type, averaging = averaging, compression = compression](loomComm_t comm, int rank) {
    const size_t counts[4] = {1000, 1, 33, 5000};
    std::vector<std::vector<unsigned char>> grads(4);
    std::vector<loomDdpTensor_t> tensors;
    for (int g = 0; g < 4; ++g) {
      grads[g].resize(counts[g] * sizeOf(type));
      for (size_t i = 0; i < counts[g]; ++i) storeAs(type, grads[g].data() + i * sizeOf(type), gradientValue(rank, g, i));
      tensors.push_back({grads[g].data(), counts[g], type, nullptr});
    }
    loomDdpOptions_t options = smallBuckets();
    options.averaging = averaging;
    options.compression = compression;
    loomDdpReducer_t reducer = nullptr;
    LOOM_ASSERT_OK(loomDdpReducerCreate(&reducer, comm, tensors.data(), 4, &options), nullptr);
    for (int g = 3; g >= 0; --g) LOOM_ASSERT_OK(loomDdpMarkReady(reducer, g), nullptr);
    LOOM_ASSERT_OK(loomDdpFinish(reducer), nullptr);
    EXPECT_EQ(loomDdpReducerDestroy(reducer), loomSuccess);
    const double tol = tolerance(type, compression);
    for (int g = 0; g < 4; ++g) {
      for (size_t i = 0; i < counts[g]; ++i) {
        const double want = (gradientValue(0, g, i) + gradientValue(1, g, i) + gradientValue(2, g, i)) / 3.0;
        const double got = loadAs(type, grads[g].data() + i * sizeOf(type));
        ASSERT_NEAR(got, want, tol * std::max(1.0, std::fabs(want)) + 1e-30) << "gradient " << g << " element " << i;
      }
      std::vector<float> asFloats;
      for (size_t i = 0; i < counts[g]; ++i) asFloats.push_back(static_cast<float>(loadAs(type, grads[g].data() + i * sizeOf(type))));
      expectSameBitsOnEveryRank(comm, asFloats, "averaged gradient");
    }
  });
}

std::vector<AverageParam> averageParams() {
  std::vector<AverageParam> all;
  for (loomDataType_t type : {loomFloat32, loomFloat64, loomFloat16, loomBfloat16}) {
    for (loomDdpAveraging_t averaging : {loomDdpPreDivide, loomDdpAvgOp}) {
      for (loomDdpCompression_t compression : {loomDdpAllReduce, loomDdpFp16Compress, loomDdpBf16Compress}) {
        all.emplace_back(type, averaging, compression);
      }
    }
  }
  return all;
}

std::string averageName(const testing::TestParamInfo<AverageParam>& info) {
  const auto [type, averaging, compression] = info.param;
  const char* compressions[] = {"allreduce", "fp16", "bf16"};
  return std::string(type == loomFloat16 ? "float16" : type == loomFloat32 ? "float32" : type == loomFloat64 ? "float64" : "bfloat16") +
         (averaging == loomDdpPreDivide ? "_predivide_" : "_avgop_") + compressions[compression];
}

INSTANTIATE_TEST_SUITE_P(All, AverageTest, testing::ValuesIn(averageParams()), averageName);

// ---- Hooks and streams --------------------------------------------------------------------

struct HookRecord {
  std::vector<int> indices;
  std::vector<size_t> counts;
};

// A user hook that takes the max over ranks instead of the sum.
loomResult_t maxHook(void* state, const loomDdpBucket_t* bucket) {
  auto* record = static_cast<HookRecord*>(state);
  record->indices.push_back(bucket->index);
  record->counts.push_back(bucket->count);
  return loomAllReduce(bucket->data, bucket->data, bucket->count, bucket->type, loomMax, bucket->comm, bucket->stream);
}

TEST(Hooks, UserHookRunsOncePerBucketInOrderOnTheUsersHostStream) {
  loomtest::runRanks(2, Mode::kThreads, [](loomComm_t comm, int rank) {
    std::vector<float> a(100, 2.0f * (rank + 1)), b(300, -4.0f * (rank + 1)), c(10, 8.0f);
    std::vector<loomDdpTensor_t> tensors{{a.data(), a.size(), loomFloat32, "a"},
                                         {b.data(), b.size(), loomFloat32, "b"},
                                         {c.data(), c.size(), loomFloat32, "c"}};
    HookRecord record;
    loomStream_t stream = nullptr;
    ASSERT_EQ(loomStreamCreate(&stream), loomSuccess);
    loomDdpOptions_t options = LOOM_DDP_OPTIONS_INITIALIZER;
    options.firstBucketCapBytes = 40;  // {c} then {b}, then {a}
    options.bucketCapBytes = 400;
    options.commHook = &maxHook;
    options.commHookState = &record;
    options.stream = stream;
    options.rebuildBuckets = 0;
    loomDdpReducer_t reducer = nullptr;
    LOOM_ASSERT_OK(loomDdpReducerCreate(&reducer, comm, tensors.data(), 3, &options), nullptr);
    for (int iteration = 0; iteration < 2; ++iteration) {
      for (int g : {0, 1, 2}) LOOM_EXPECT_OK(loomDdpMarkReady(reducer, g), nullptr);  // not the bucket order
      LOOM_ASSERT_OK(loomDdpFinish(reducer), nullptr);
    }
    EXPECT_EQ(record.indices, (std::vector<int>{0, 1, 2, 0, 1, 2}));
    EXPECT_EQ(record.counts, (std::vector<size_t>{10, 300, 100, 10, 300, 100}));
    // The max over ranks of the pre-divided values, twice: a is 2 and 4, divided 1 and 2, so
    // max 2; then 2 on both ranks, divided 1. b: -4 and -8 -> max(-2, -4) = -2 -> -1. c: 8 -> 4 -> 2.
    EXPECT_EQ(a[0], 1.0f);
    EXPECT_EQ(b[0], -1.0f);
    EXPECT_EQ(c[0], 2.0f);
    EXPECT_EQ(loomDdpReducerDestroy(reducer), loomSuccess);
    EXPECT_EQ(loomStreamDestroy(stream), loomSuccess);
  });
}

// ---- Where buckets live ---------------------------------------------------------------------

// Host buckets come from loomMemAlloc exactly where the mapped allreduce needs it: ranks that
// are processes of one host, from the size its calls run mapped (loomCommMappedMinBytes).
TEST(BucketMemory, LoomMemAllocWhereTheMappedAllreduceNeedsIt) {
  struct Where {
    const char* name;
    Mode mode;
    const char* minBytes;  // LOOM_MAPPED_MIN_BYTES ("": unset)
    bool twoHosts;
    size_t mappedFrom;  // 0: nothing
  };
  const Where cases[] = {
      {"processes", Mode::kProcesses, "", false, 1 << 20},
      {"processes, LOOM_MAPPED_MIN_BYTES=4096", Mode::kProcesses, "4096", false, 4096},
      {"processes on two hosts", Mode::kProcesses, "", true, 0},
      {"threads", Mode::kThreads, "", false, 0},
  };
  for (const Where& w : cases) {
    SCOPED_TRACE(w.name);
    loomtest::ScopedEnv env("LOOM_MAPPED_MIN_BYTES", w.minBytes);
    loomtest::RankOptions options;
    if (w.twoHosts) options.beforeInit = [](int rank) { ::setenv("LOOM_HOSTID", rank == 0 ? "host-a" : "host-b", 1); };
    loomtest::runRanks(2, w.mode, [&](loomComm_t comm, int rank) {
      std::unique_ptr<loom::ddp::StreamOps> ops;
      ASSERT_TRUE(loom::ddp::makeOpsFor(comm, nullptr, &ops).isOk());
      for (size_t bytes : {size_t{4096}, size_t{4095}, size_t{1} << 20, (size_t{1} << 20) - 1, size_t{1} << 22}) {
        loom::ddp::StreamOps::Memory memory{nullptr, nullptr};
        ASSERT_TRUE(ops->allocate(bytes, &memory).isOk());
        ASSERT_NE(memory.get(), nullptr);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(memory.get()) % 64, 0u);
        std::memset(memory.get(), rank + 1, bytes);
        loom::MappedRange range;
        const bool mapped = loom::Registry::instance().mappedAllocations().find(memory.get(), bytes, &range);
        EXPECT_EQ(mapped, w.mappedFrom > 0 && bytes >= w.mappedFrom) << bytes << " bytes, rank " << rank;
      }
    }, options);
  }
}

// ---- Broadcast of parameters --------------------------------------------------------------

TEST(BroadcastTensors, EveryRankGetsTheRootsValues) {
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    loomtest::runRanks(3, mode, [](loomComm_t comm, int rank) {
      std::vector<float> w(1000, static_cast<float>(rank));
      std::vector<int32_t> steps(1, rank * 10);
      std::vector<loomDdpTensor_t> tensors{{w.data(), w.size(), loomFloat32, "w"},
                                           {steps.data(), 1, loomInt32, "steps"}};
      LOOM_ASSERT_OK(loomDdpBroadcastTensors(comm, tensors.data(), 2, 1), nullptr);
      EXPECT_EQ(w, std::vector<float>(1000, 1.0f));
      EXPECT_EQ(steps[0], 10);
      EXPECT_EQ(loomDdpBroadcastTensors(comm, tensors.data(), 2, 3), loomInvalidArgument);
      EXPECT_NE(std::string(loomDdpGetLastError(nullptr)).find("root 3"), std::string::npos);
    });
  }
}

TEST(BroadcastTensors, DifferentShapesAreAnErrorNamingTheTensorAndRanks) {
  loomtest::runRanks(2, Mode::kProcesses, [](loomComm_t comm, int rank) {
    std::vector<float> w(rank == 0 ? 11 : 10);
    std::vector<loomDdpTensor_t> tensors{{w.data(), w.size(), loomFloat32, "layer.weight"}};
    EXPECT_EQ(loomDdpBroadcastTensors(comm, tensors.data(), 1, 0), loomInvalidUsage);
    const std::string message = loomDdpGetLastError(nullptr);
    EXPECT_NE(message.find("tensor 0 (layer.weight here)"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 0 has 11 x float32, rank 1 has 10 x float32"), std::string::npos) << message;
  });
}

// ---- Errors -------------------------------------------------------------------------------

TEST(Errors, ShapesThatDifferAcrossRanksAreRefusedAtCreate) {
  loomtest::runRanks(3, Mode::kProcesses, [](loomComm_t comm, int rank) {
    std::vector<float> a(8), b(rank == 2 ? 5 : 6);
    std::vector<loomDdpTensor_t> tensors{{a.data(), 8, loomFloat32, "a"}, {b.data(), b.size(), loomFloat32, "b"}};
    loomDdpReducer_t reducer = nullptr;
    EXPECT_EQ(loomDdpReducerCreate(&reducer, comm, tensors.data(), 2, nullptr), loomInvalidUsage);
    EXPECT_EQ(reducer, nullptr);
    std::string message = loomDdpGetLastError(nullptr);
    EXPECT_NE(message.find("rank 0 has 6 x float32, rank 2 has 5 x float32"), std::string::npos) << message;

    // A different number of gradients.
    EXPECT_EQ(loomDdpReducerCreate(&reducer, comm, tensors.data(), rank == 1 ? 1 : 2, nullptr), loomInvalidUsage);
    message = loomDdpGetLastError(nullptr);
    EXPECT_NE(message.find("rank 0 registered 2 tensors and rank 1 registered 1"), std::string::npos) << message;
  });
}

TEST(Errors, ReadyTwiceIsRefusedAndChangesNothing) {
  loomtest::runRanks(2, Mode::kThreads, [](loomComm_t comm, int rank) {
    std::vector<float> a(16, static_cast<float>(rank)), b(16, 2.0f);
    std::vector<loomDdpTensor_t> tensors{{a.data(), 16, loomFloat32, "fc.weight"}, {b.data(), 16, loomFloat32, "fc.bias"}};
    loomDdpReducer_t reducer = nullptr;
    LOOM_ASSERT_OK(loomDdpReducerCreate(&reducer, comm, tensors.data(), 2, nullptr), nullptr);
    LOOM_ASSERT_OK(loomDdpMarkReady(reducer, 1), nullptr);
    EXPECT_EQ(loomDdpMarkReady(reducer, 1), loomInvalidUsage);
    EXPECT_NE(std::string(loomDdpGetLastError(reducer)).find("gradient 1 (fc.bias) was marked ready twice"),
              std::string::npos)
        << loomDdpGetLastError(reducer);
    LOOM_ASSERT_OK(loomDdpMarkReady(reducer, 0), nullptr);
    LOOM_ASSERT_OK(loomDdpFinish(reducer), nullptr);
    EXPECT_EQ(a, std::vector<float>(16, 0.5f));
    EXPECT_EQ(b, std::vector<float>(16, 2.0f));
    EXPECT_EQ(loomDdpReducerDestroy(reducer), loomSuccess);
  });
}

// Rank 1 never marks fc.bias ready. Zero: it counts as zeros. Error: rank 1's finish also
// names it. Either way rank 0, which cannot know, gets its collectives and does not hang.
TEST(Errors, GradientsNeverMarkedReadyAreZerosAndReportedOnRequest) {
  for (loomDdpUnused_t unused : {loomDdpUnusedZero, loomDdpUnusedError}) {
    loomtest::runRanks(2, Mode::kProcesses, [unused](loomComm_t comm, int rank) {
      std::vector<float> w(16, 4.0f), bias(16, 6.0f);
      std::vector<loomDdpTensor_t> tensors{{w.data(), 16, loomFloat32, "fc.weight"},
                                           {bias.data(), 16, loomFloat32, "fc.bias"}};
      loomDdpOptions_t options = LOOM_DDP_OPTIONS_INITIALIZER;
      options.unused = unused;
      loomDdpReducer_t reducer = nullptr;
      LOOM_ASSERT_OK(loomDdpReducerCreate(&reducer, comm, tensors.data(), 2, &options), nullptr);
      LOOM_ASSERT_OK(loomDdpMarkReady(reducer, 0), nullptr);
      if (rank == 0) LOOM_ASSERT_OK(loomDdpMarkReady(reducer, 1), nullptr);
      const loomResult_t result = loomDdpFinish(reducer);
      if (rank == 1 && unused == loomDdpUnusedError) {
        EXPECT_EQ(result, loomInvalidUsage);
        const std::string message = loomDdpGetLastError(reducer);
        EXPECT_NE(message.find("1 gradient(s) were never marked ready"), std::string::npos) << message;
        EXPECT_NE(message.find("1 (fc.bias)"), std::string::npos) << message;
      } else {
        EXPECT_EQ(result, loomSuccess) << loomDdpGetLastError(reducer);
      }
      EXPECT_EQ(w, std::vector<float>(16, 4.0f));
      EXPECT_EQ(bias, std::vector<float>(16, 3.0f));  // (6 + 0) / 2
      EXPECT_EQ(loomDdpReducerDestroy(reducer), loomSuccess);
    });
  }
}

TEST(Errors, BadArgumentsAreRefusedWithAMessage) {
  loomtest::runRanks(1, Mode::kThreads, [](loomComm_t comm, int) {
    std::vector<float> a(8), b(8);
    std::vector<int32_t> ints(8);
    loomDdpReducer_t reducer = nullptr;
    auto expectError = [&](loomResult_t got, loomResult_t want, const char* words) {
      EXPECT_EQ(got, want) << words;
      EXPECT_NE(std::string(loomDdpGetLastError(nullptr)).find(words), std::string::npos)
          << loomDdpGetLastError(nullptr);
    };
    loomDdpTensor_t good{a.data(), 8, loomFloat32, "a"};
    expectError(loomDdpReducerCreate(nullptr, comm, &good, 1, nullptr), loomInvalidArgument, "output pointer");
    loomDdpTensor_t integer{ints.data(), 8, loomInt32, "steps"};
    expectError(loomDdpReducerCreate(&reducer, comm, &integer, 1, nullptr), loomInvalidArgument,
                "0 (steps): type 2 is not a floating-point");
    loomDdpTensor_t null{nullptr, 8, loomFloat32, "w"};
    expectError(loomDdpReducerCreate(&reducer, comm, &null, 1, nullptr), loomInvalidArgument, "data is NULL with count 8");
    loomDdpTensor_t overlapping[2] = {{a.data(), 8, loomFloat32, "x"}, {a.data() + 4, 4, loomFloat32, "y"}};
    expectError(loomDdpReducerCreate(&reducer, comm, overlapping, 2, nullptr), loomInvalidArgument,
                "tensors x and y overlap");
    expectError(loomDdpReducerCreate(&reducer, comm, &good, -1, nullptr), loomInvalidArgument, "negative");
    loomDdpOptions_t options = LOOM_DDP_OPTIONS_INITIALIZER;
    options.compression = 7;
    expectError(loomDdpReducerCreate(&reducer, comm, &good, 1, &options), loomInvalidArgument, "options.compression 7");
    options = LOOM_DDP_OPTIONS_INITIALIZER;
    options.bucketCapBytes = 0;
    expectError(loomDdpReducerCreate(&reducer, comm, &good, 1, &options), loomInvalidArgument, "bucketCapBytes is 0");
    options = LOOM_DDP_OPTIONS_INITIALIZER;
    options.stream = &options;  // not a host stream
    expectError(loomDdpReducerCreate(&reducer, comm, &good, 1, &options), loomInvalidUsage, "not a live host stream");
    expectError(loomDdpReducerCreate(&reducer, nullptr, &good, 1, nullptr), loomInvalidArgument, "comm is NULL");
    EXPECT_EQ(reducer, nullptr);

    loomDdpTensor_t two[2] = {{a.data(), 8, loomFloat32, "a"}, {b.data(), 8, loomFloat32, "b"}};
    LOOM_ASSERT_OK(loomDdpReducerCreate(&reducer, comm, two, 2, nullptr), nullptr);
    expectError(loomDdpMarkReady(reducer, 2), loomInvalidArgument, "gradient index 2 is out of range [0, 2)");
    LOOM_ASSERT_OK(loomDdpMarkReady(reducer, 0), nullptr);
    expectError(loomDdpSetSync(reducer, 0), loomInvalidUsage, "in the middle of an iteration");
    LOOM_ASSERT_OK(loomDdpMarkReady(reducer, 1), nullptr);
    LOOM_ASSERT_OK(loomDdpFinish(reducer), nullptr);
    LOOM_ASSERT_OK(loomDdpSetSync(reducer, 0), nullptr);
    EXPECT_EQ(loomDdpReducerDestroy(reducer), loomSuccess);
    expectError(loomDdpMarkReady(reducer, 0), loomInvalidUsage, "not a live reducer");
    expectError(loomDdpFinish(nullptr), loomInvalidArgument, "reducer is NULL");
  });
}

// A peer that leaves without finishing turns into an error on the survivor within the
// communicator's deadline, not a hang.
TEST(Errors, APeerThatLeavesMidIterationIsAnErrorNotAHang) {
  loomtest::RankOptions rankOptions;
  rankOptions.timeoutMs = 3000;
  loomtest::runRanks(2, Mode::kProcesses, [](loomComm_t comm, int rank) {
    std::vector<float> a(1 << 16, 1.0f);
    loomDdpTensor_t tensor{a.data(), a.size(), loomFloat32, "a"};
    loomDdpReducer_t reducer = nullptr;
    LOOM_ASSERT_OK(loomDdpReducerCreate(&reducer, comm, &tensor, 1, nullptr), nullptr);
    if (rank == 1) return;  // the harness destroys the communicator: this rank is gone
    LOOM_ASSERT_OK(loomDdpMarkReady(reducer, 0), nullptr);
    const loomResult_t result = loomDdpFinish(reducer);
    EXPECT_TRUE(result == loomRemoteError || result == loomTimeout) << loomGetErrorString(result) << ": "
                                                                     << loomDdpGetLastError(reducer);
    const std::string message = loomDdpGetLastError(reducer);
    EXPECT_NE(message.find("waiting for the 1 buckets"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
    loomDdpReducerDestroy(reducer);
  }, rankOptions);
}

}  // namespace
