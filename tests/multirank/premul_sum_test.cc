// Premultiplied sums (loomRedOpCreatePreMulSum) beyond the reference matrix, which runs them
// with immediate scalars (collective_reference.h): a scalar read through its pointer at each
// call, ops destroyed and their numbers given again while calls that used them wait in a
// group or on a host stream, the one-shot allreduce and the mapped allreduce. On host
// communicators and on the emulated device (LOOM_DEVICE_EMULATION=1), as threads and as
// processes.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "multirank/harness.h"

namespace {

using loomtest::Mode;
using loomtest::ScopedEnv;

struct Where {
  Mode mode;
  bool device;  // an emulated device communicator
};

std::string whereName(const testing::TestParamInfo<Where>& info) {
  return loomtest::modeName(info.param.mode) + (info.param.device ? "_emulated_device" : "_host");
}

class PreMulSum : public testing::TestWithParam<Where> {
 protected:
  void run(int nranks, const std::function<void(loomComm_t, int)>& body) {
    ScopedEnv env;
    if (!algo_.empty()) env.set("LOOM_ALGO", algo_);
    loomtest::RankOptions options;
    if (GetParam().device) {
      env.set("LOOM_DEVICE_EMULATION", "1");
      options.device = 0;
    }
    loomtest::runRanks(nranks, GetParam().mode, body, options);
  }
  std::string algo_;  // LOOM_ALGO while run() runs ("": unset)
};

// Every element of `values` equals `want`; else the first that does not.
void expectAll(const std::vector<float>& values, float want, const char* what) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] != want) {
      ADD_FAILURE() << what << ": element " << i << " is " << values[i] << ", expected " << want;
      return;
    }
  }
}

// 1 + 2 + ... + n, each rank's ones times rank + 1.
float sumOfRanksPlusOne(int n) { return static_cast<float>(n * (n + 1) / 2); }

// loomScalarDevice: the scalar is read when the call runs, so a new value counts from the next call.
TEST_P(PreMulSum, ADeviceResidentScalarIsReadAtEachCall) {
  run(3, [](loomComm_t comm, int rank) {
    float scalar = static_cast<float>(rank + 1);
    loomRedOp_t op = loomSum;
    LOOM_ASSERT_OK(loomRedOpCreatePreMulSum(&op, &scalar, loomFloat32, loomScalarDevice, comm), comm);
    EXPECT_GE(static_cast<int>(op), static_cast<int>(loomNumOps));
    std::vector<float> values(5000, 1.0f);
    LOOM_ASSERT_OK(loomAllReduce(values.data(), values.data(), values.size(), loomFloat32, op, comm, nullptr), comm);
    expectAll(values, sumOfRanksPlusOne(3), "first allreduce");
    scalar = 0.5f;
    std::vector<float> out(values.size());
    values.assign(values.size(), 2.0f);
    LOOM_ASSERT_OK(loomAllReduce(values.data(), out.data(), values.size(), loomFloat32, op, comm, nullptr), comm);
    expectAll(out, 3.0f, "after the scalar changed");
    expectAll(values, 2.0f, "the input of an out-of-place call");
    LOOM_EXPECT_OK(loomRedOpDestroy(op, comm), comm);
  });
}

// A group's calls keep the scalar they were made with: the op is destroyed and its number
// made again with another scalar before the group ends.
TEST_P(PreMulSum, GroupedCallsKeepTheirScalarAfterTheOpIsGone) {
  run(2, [](loomComm_t comm, int rank) {
    const int n = 2;
    std::vector<float> all(4096, 1.0f), scattered(2048), reduced(4096, -1.0f);
    const float byTwo = 2.0f, byRank = static_cast<float>(rank + 1);
    loomRedOp_t first = loomSum, second = loomSum;
    LOOM_ASSERT_OK(loomGroupStart(), comm);
    LOOM_EXPECT_OK(loomRedOpCreatePreMulSum(&first, const_cast<float*>(&byTwo), loomFloat32,
                                            loomScalarHostImmediate, comm), comm);
    LOOM_EXPECT_OK(loomAllReduce(all.data(), all.data(), all.size(), loomFloat32, first, comm, nullptr), comm);
    LOOM_EXPECT_OK(loomRedOpDestroy(first, comm), comm);
    LOOM_EXPECT_OK(loomRedOpCreatePreMulSum(&second, const_cast<float*>(&byRank), loomFloat32,
                                            loomScalarHostImmediate, comm), comm);
    EXPECT_EQ(first, second) << "a destroyed op's number is given again";
    std::vector<float> input(4096, 1.0f);
    LOOM_EXPECT_OK(loomReduceScatter(input.data(), scattered.data(), scattered.size(), loomFloat32, second, comm,
                                     nullptr), comm);
    LOOM_EXPECT_OK(loomReduce(input.data(), reduced.data(), reduced.size(), loomFloat32, second, 1, comm, nullptr),
                   comm);
    LOOM_EXPECT_OK(loomRedOpDestroy(second, comm), comm);
    LOOM_ASSERT_OK(loomGroupEnd(), comm);
    expectAll(all, 2.0f * n, "allreduce by 2");
    expectAll(scattered, sumOfRanksPlusOne(n), "reduce-scatter by rank + 1");
    expectAll(input, 1.0f, "the reduce-scatter's input");
    expectAll(reduced, rank == 1 ? sumOfRanksPlusOne(n) : -1.0f, rank == 1 ? "reduce's root" : "a non-root's recvbuff");
  });
}

// Calls for the one-shot allreduce on the shared-memory board, which multiplies each rank's part
// straight into its slot: alone (no plan) and grouped (a plan's board step), in place and out
// of place, with an immediate scalar and one read through its pointer.
TEST_P(PreMulSum, SmallCallsOnTheBoard) {
  algo_ = "oneshot";
  run(3, [](loomComm_t comm, int rank) {
    const float byRank = static_cast<float>(rank + 1);
    float byTwo = 2.0f;
    loomRedOp_t immediate = loomSum, pointed = loomSum;
    LOOM_ASSERT_OK(loomRedOpCreatePreMulSum(&immediate, const_cast<float*>(&byRank), loomFloat32,
                                            loomScalarHostImmediate, comm), comm);
    LOOM_ASSERT_OK(loomRedOpCreatePreMulSum(&pointed, &byTwo, loomFloat32, loomScalarDevice, comm), comm);
    for (size_t count : {1, 7, 1000}) {
      std::vector<float> in(count, 1.0f), out(count, -1.0f);
      LOOM_ASSERT_OK(loomAllReduce(in.data(), out.data(), count, loomFloat32, immediate, comm, nullptr), comm);
      expectAll(out, sumOfRanksPlusOne(3), "alone, out of place");
      expectAll(in, 1.0f, "alone, its input");
      std::vector<float> a(count, 1.0f), b(count, 3.0f);
      LOOM_ASSERT_OK(loomGroupStart(), comm);
      LOOM_EXPECT_OK(loomAllReduce(a.data(), a.data(), count, loomFloat32, immediate, comm, nullptr), comm);
      LOOM_EXPECT_OK(loomAllReduce(b.data(), b.data(), count, loomFloat32, pointed, comm, nullptr), comm);
      LOOM_ASSERT_OK(loomGroupEnd(), comm);
      expectAll(a, sumOfRanksPlusOne(3), "grouped, in place, immediate scalar");
      expectAll(b, 3 * 3.0f * 2.0f, "grouped, in place, scalar through its pointer");
    }
    LOOM_EXPECT_OK(loomRedOpDestroy(immediate, comm), comm);
    LOOM_EXPECT_OK(loomRedOpDestroy(pointed, comm), comm);
  });
}

// Large enough for the mapped allreduce where ranks are threads (each reads the others'
// premultiplied copies), the ring between processes; integers wrap as products do.
TEST_P(PreMulSum, LargeCallsInPlaceAndOutOfPlace) {
  run(2, [](loomComm_t comm, int rank) {
    const int32_t scalar = rank == 0 ? 3 : -7;
    loomRedOp_t op = loomSum;
    LOOM_ASSERT_OK(loomRedOpCreatePreMulSum(&op, const_cast<int32_t*>(&scalar), loomInt32, loomScalarHostImmediate,
                                            comm), comm);
    std::vector<int32_t> values(1 << 20), out(values.size());
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int32_t>(i) + rank;
    auto want = [](size_t i) {
      const uint32_t x = static_cast<uint32_t>(i);
      return static_cast<int32_t>(x * 3u + (x + 1u) * static_cast<uint32_t>(-7));
    };
    LOOM_ASSERT_OK(loomAllReduce(values.data(), out.data(), values.size(), loomInt32, op, comm, nullptr), comm);
    LOOM_ASSERT_OK(loomAllReduce(values.data(), values.data(), values.size(), loomInt32, op, comm, nullptr), comm);
    for (size_t i = 0; i < values.size(); ++i) {
      if (out[i] != want(i) || values[i] != want(i)) {
        FAIL() << "element " << i << ": out of place " << out[i] << ", in place " << values[i] << ", expected "
               << want(i);
      }
    }
    LOOM_EXPECT_OK(loomRedOpDestroy(op, comm), comm);
  });
}

INSTANTIATE_TEST_SUITE_P(All, PreMulSum,
                         testing::Values(Where{Mode::kThreads, false}, Where{Mode::kProcesses, false},
                                         Where{Mode::kThreads, true}, Where{Mode::kProcesses, true}),
                         whereName);

// A call queued on a host stream keeps its scalar when the op is destroyed before it runs.
TEST(PreMulSumOnAHostStream, QueuedCallsKeepTheirScalar) {
  loomtest::runRanks(2, Mode::kThreads, [](loomComm_t comm, int rank) {
    loomStream_t stream = nullptr;
    LOOM_ASSERT_OK(loomStreamCreate(&stream), comm);
    std::vector<std::vector<float>> buffers(8, std::vector<float>(20000, 1.0f));
    for (size_t k = 0; k < buffers.size(); ++k) {
      const float scalar = static_cast<float>(k + rank);
      loomRedOp_t op = loomSum;
      LOOM_ASSERT_OK(loomRedOpCreatePreMulSum(&op, const_cast<float*>(&scalar), loomFloat32,
                                              loomScalarHostImmediate, comm), comm);
      LOOM_EXPECT_OK(loomAllReduce(buffers[k].data(), buffers[k].data(), buffers[k].size(), loomFloat32, op, comm,
                                   stream), comm);
      LOOM_EXPECT_OK(loomRedOpDestroy(op, comm), comm);
    }
    LOOM_EXPECT_OK(loomStreamSynchronize(stream), comm);
    for (size_t k = 0; k < buffers.size(); ++k) expectAll(buffers[k], static_cast<float>(2 * k + 1), "queued call");
    LOOM_EXPECT_OK(loomStreamDestroy(stream), comm);
  });
}

}  // namespace
