// Ranks that share a device wait on each other's workers, so all of their workers must be
// resident on it at once, and a GPU holds only so many thread blocks. The emulation models
// that limit: meson runs this binary with LOOM_DEVICE_EMULATION_BLOCKS=48, one pool of
// resident blocks for the whole process, from which every worker takes one for its life.
// A plan that asks for more than fits beside its peers' waits forever for a block (here:
// until the timeout), so every call below fails unless the channels were chosen to fit.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/sanitizer.h"
#include "multirank/collective_reference.h"
#include "multirank/harness.h"

namespace {

using loomtest::CaseOutcome;
using loomtest::CollectiveCase;
using loomtest::Mode;
using loomtest::ScopedEnv;

constexpr int kRanks = 4;

loomtest::RankOptions emulated() {
  loomtest::RankOptions options;
  options.device = 0;
  options.timeoutMs = 20000;  // a plan that does not fit ends here, as a failure
  options.deadlineMs = 240000;
  return options;
}

// The emulation, with small slices so that calls of 65537 elements use every channel the
// budget allows.
void emulateWithSmallSlices(ScopedEnv& env) {
  env.set("LOOM_DEVICE_EMULATION", "1").set("LOOM_DEVICE_SLICE_BYTES", "4096").set("LOOM_DEVICE_FIFO_BYTES", "16384");
}

struct Forced {
  Mode mode;
  const char* algo;  // LOOM_ALGO; all-to-all is pairwise whatever it says
};

std::string forcedName(const Forced& f) {
  return std::string(f.mode == Mode::kThreads ? "threads_" : "processes_") + (*f.algo ? f.algo : "tuner");
}

class EmulatedResidency : public testing::TestWithParam<Forced> {};

// 48 blocks among 4 ranks: 12 each. Unlimited, a 4-rank all-to-all would run 8 channels x 6
// connections + 1 = 49 workers per rank, 196 in all; ring and tree plans 17 and 49.
TEST_P(EmulatedResidency, EveryCollectiveFitsTheBlocksItShares) {
  const Forced& forced = GetParam();
  SKIP_PROCESSES_UNDER_TSAN(forced.mode == Mode::kProcesses);
  ASSERT_STREQ(std::getenv("LOOM_DEVICE_EMULATION_BLOCKS"), "48") << "meson sets it for this binary";
  ScopedEnv env;
  emulateWithSmallSlices(env);
  env.set("LOOM_ALGO", forced.algo);
  const auto start = std::chrono::steady_clock::now();
  loomtest::runRanks(kRanks, forced.mode, [](loomComm_t comm, int rank) {
    uint64_t seed = 1;
    for (loomtest::Collective collective : loomtest::kAllCollectives) {
      for (size_t count : {size_t{65537}, size_t{7}}) {
        CollectiveCase c;
        c.collective = collective;
        c.type = loomFloat32;
        c.op = loomSum;
        c.root = 1;
        c.count = count;
        c.seed = seed++;
        const CaseOutcome outcome = loomtest::runCollectiveCase(c, comm, rank, kRanks);
        EXPECT_EQ(outcome.error, "") << "rank " << rank << ": " << c.describe();
        if (outcome.callFailed) {
          ADD_FAILURE() << "rank " << rank << ": " << c.describe() << ": " << loomGetLastError(comm);
          return;
        }
      }
    }
  }, emulated());
  std::printf("%s: every collective in %.1f s\n", forcedName(forced).c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

INSTANTIATE_TEST_SUITE_P(Algorithms, EmulatedResidency,
                         testing::Values(Forced{Mode::kThreads, "ring"}, Forced{Mode::kThreads, "tree"},
                                         Forced{Mode::kThreads, ""}, Forced{Mode::kProcesses, ""}),
                         [](const auto& info) { return forcedName(info.param); });

// Channels forced beyond what fits (LOOM_CHANNELS=8): every rank's call fails at once with a
// message that names the way out, instead of waiting for blocks that never come.
TEST(EmulatedResidencyLimit, ForcedChannelsThatDoNotFitAreRefused) {
  ScopedEnv env;
  emulateWithSmallSlices(env);
  env.set("LOOM_CHANNELS", "8");
  const auto start = std::chrono::steady_clock::now();
  loomtest::runRanks(kRanks, Mode::kThreads, [](loomComm_t comm, int rank) {
    std::vector<float> send(65536 * kRanks, 1.0f), recv(send.size());
    const loomResult_t r = loomAllToAll(send.data(), recv.data(), 65536, loomFloat32, comm, nullptr);
    EXPECT_EQ(r, loomInvalidUsage) << "rank " << rank << ": " << loomGetLastError(comm);
    const std::string text = loomGetLastError(comm);
    EXPECT_NE(text.find("LOOM_CHANNELS"), std::string::npos) << text;
    std::printf("rank %d: %s\n", rank, text.c_str());
  }, emulated());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 15.0) << "the refusal waited for the timeout";
}

}  // namespace

// Thread ranks on one device must not allocate while a peer's kernel waits for them (CUDA
// serialises kernels around allocations in one context: docs/ARCHITECTURE.md, "Thread ranks
// on one GPU"). A call whose plan needs more scratch than the communicator made at creation
// (16 MiB) still runs, and each rank says once that it allocated in the call; a call within
// what was made says nothing.
TEST(EmulatedDeviceMemory, ACallBeyondWhatCreationMadeWarnsOncePerRank) {
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  env.set("LOOM_ALGO", "rd");  // in place, recursive doubling parks what it receives in scratch
  std::vector<loomComm_t> comms(2);
  const int devices[2] = {0, 0};
  LOOM_ASSERT_OK(loomCommInitAll(comms.data(), 2, devices), nullptr);
  const std::string warning = "beyond what the communicator made at creation";
  auto allreduceInPlace = [&](size_t count) {
    std::vector<std::vector<float>> data(2, std::vector<float>(count));
    for (int r = 0; r < 2; ++r) std::fill(data[r].begin(), data[r].end(), static_cast<float>(r + 1));
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&, r] {
        LOOM_EXPECT_OK(loomAllReduce(data[r].data(), data[r].data(), count, loomFloat32, loomSum, comms[r], nullptr),
                       comms[r]);
      });
    }
    for (std::thread& t : ranks) t.join();
    for (int r = 0; r < 2; ++r) EXPECT_EQ(data[r][count - 1], 3.0f) << "rank " << r;
  };
  auto countOf = [](const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  testing::internal::CaptureStderr();
  allreduceInPlace(size_t{1} << 20);  // 4 MiB: within the scratch made at creation
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(countOf(log, warning), 0) << log;
  testing::internal::CaptureStderr();
  allreduceInPlace(size_t{8} << 20);  // 32 MiB
  allreduceInPlace(size_t{8} << 20);
  log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(countOf(log, warning), 2) << log;
  EXPECT_NE(log.find("scratch for its plan"), std::string::npos) << log;
  for (loomComm_t c : comms) LOOM_EXPECT_OK(loomCommDestroy(c), nullptr);
}
