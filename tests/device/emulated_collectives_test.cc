// Device communicators in the CPU emulation (LOOM_DEVICE_EMULATION=1): the plan kernel's own
// source (src/device/interpreter.h, fifo.h) runs on host threads over host memory, and every
// collective must match the references of the multi-rank suite (collective_reference.h), as
// threads and as processes, for each forced algorithm and wire (LOOM_PROTO simple or ll),
// with one, two or eight channels and FIFOs small enough to wrap around within a call. This
// is what keeps the device path honest between GPU sessions (docs/TESTING.md).
//
// By default a slice runs (each configuration sees every collective x type x op once, with
// rotating counts, roots and in-place); LOOM_TEST_FULL=1 runs the full matrix and
// LOOM_TEST_QUICK=1 (the sanitizer runs) fewer configurations and cases.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <vector>

#include "common/sanitizer.h"
#include "multirank/collective_reference.h"
#include "multirank/harness.h"

namespace {

using loomtest::CaseOutcome;
using loomtest::CollectiveCase;
using loomtest::Mode;
using loomtest::ScopedEnv;

using loomtest::MatrixScale;
using loomtest::matrixScale;

struct Config {
  Mode mode;
  int nranks;
  std::string algo;      // LOOM_ALGO; "" = the tuner's choice
  std::string protocol;  // LOOM_PROTO; "" = the tuner's choice
  std::string channels;  // LOOM_CHANNELS; "" = the default (8)
  std::string fifoBytes; // LOOM_DEVICE_FIFO_BYTES; "" = the default
  unsigned rotation = 0;
};

std::string configName(const Config& c) {
  auto part = [](const std::string& value, const char* unset) { return value.empty() ? std::string(unset) : value; };
  return loomtest::modeName(c.mode) + "_" + std::to_string(c.nranks) + "_" + part(c.algo, "defaultalgo") + "_" +
         part(c.protocol, "defaultproto") + "_ch" + part(c.channels, "default") +
         (c.fifoBytes.empty() ? "" : "_fifo" + c.fifoBytes);
}

const char* const kAlgos[] = {"", "ring", "tree", "rd", "pairwise"};

// Whether the quick slice (LOOM_TEST_QUICK=1, the sanitizer runs) keeps a configuration: in
// each mode one rank alone, and each algorithm on each wire once, the rank count rotating
// through {2, 3, 4, 5, 8} (under TSan an emulation of 8 ranks costs a minute whatever its
// cases: its workers poll on 2 cores).
bool inQuickSlice(Mode mode, int nranks, size_t algoIndex, bool ll) {
  if (nranks == 1) return algoIndex == 0 && !ll;
  return nranks == loomtest::quickRankCount(2 * algoIndex + (ll ? 1 : 0) + (mode == Mode::kProcesses ? 2 : 0));
}

// Every mode x rank count x algorithm, the wire alternating between simple and ll (full:
// both; quick: those inQuickSlice keeps), channels rotating through 1, 2 and 8, and every
// simple configuration on 16 KiB FIFOs (the smallest: slots of 2 KiB, so most calls wrap
// around the ring of slots several times).
std::vector<Config> configs(MatrixScale scale) {
  std::vector<Config> out;
  unsigned rotation = 0;
  const char* const channels[] = {"1", "2", ""};
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    for (int nranks : {1, 2, 3, 4, 5, 8}) {
      for (size_t a = 0; a < std::size(kAlgos); ++a) {
        for (const char* protocol : {"simple", "ll"}) {
          const bool ll = std::string(protocol) == "ll";
          const bool keep = scale == MatrixScale::kFull ||
                            (scale == MatrixScale::kQuick ? inQuickSlice(mode, nranks, a, ll) : (rotation % 2 == 1) == ll);
          if (keep) {
            const char* fifo = rotation % 2 == 0 ? "16384" : "";
            out.push_back({mode, nranks, kAlgos[a], protocol, channels[rotation % 3], fifo, rotation});
          }
          ++rotation;
        }
      }
    }
  }
  return out;
}

constexpr int kMaxReportedPerRank = 5;

void runCases(const std::vector<CollectiveCase>& cases, loomComm_t comm, int rank, int nranks) {
  int wrong = 0;
  for (const CollectiveCase& c : cases) {
    CaseOutcome outcome = loomtest::runCollectiveCase(c, comm, rank, nranks);
    if (!outcome.error.empty() && ++wrong <= kMaxReportedPerRank) ADD_FAILURE() << "rank " << rank << ": " << outcome.error;
    if (outcome.callFailed) {
      ADD_FAILURE() << "rank " << rank << ": stopped at the failed call: " << loomGetLastError(comm);
      return;
    }
  }
  if (wrong > kMaxReportedPerRank) {
    ADD_FAILURE() << "rank " << rank << ": " << wrong << " of " << cases.size() << " cases were wrong";
  }
}

loomtest::RankOptions emulatedDevice(bool full) {
  loomtest::RankOptions options;
  options.device = 0;
  options.timeoutMs = 60000;
  options.deadlineMs = full ? 1800000 : 300000;
  return options;
}

class EmulatedDeviceCollectives : public testing::TestWithParam<Config> {};

TEST_P(EmulatedDeviceCollectives, EveryCollectiveTypeAndOpAgainstTheReference) {
  const Config& config = GetParam();
  SKIP_PROCESSES_UNDER_TSAN(config.mode == Mode::kProcesses);
  const MatrixScale scale = matrixScale();
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  env.set("LOOM_ALGO", config.algo).set("LOOM_PROTO", config.protocol).set("LOOM_CHANNELS", config.channels);
  env.set("LOOM_DEVICE_FIFO_BYTES", config.fifoBytes);
  const std::vector<CollectiveCase> cases = loomtest::casesAt(scale, config.nranks, config.rotation);
  const auto start = std::chrono::steady_clock::now();
  loomtest::runRanks(config.nranks, config.mode,
                     [&](loomComm_t comm, int rank) { runCases(cases, comm, rank, config.nranks); },
                     emulatedDevice(scale == MatrixScale::kFull));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %zu cases in %.1f s\n", configName(config).c_str(), cases.size(), seconds);
}

INSTANTIATE_TEST_SUITE_P(Matrix, EmulatedDeviceCollectives, testing::ValuesIn(configs(matrixScale())),
                         [](const auto& info) { return configName(info.param); });

// Local copies of 256 KiB or more run on several workers, each doing its part of every copy
// (plan_lowering.h): out-of-place calls whose own data is copied (one rank alone, in one step,
// the root of a broadcast, an allgather's own block), an average's scaled copy (one rank's), odd byte counts that cut
// parts off 16-byte multiples, on 1, 2 and 3 ranks, and twice in a row (the parts' count of
// each step starts again at every launch).
TEST(EmulatedLocalParts, LargeLocalCopiesSplitAmongWorkers) {
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  for (int nranks : {1, 2, 3}) {
    std::vector<CollectiveCase> cases;
    uint64_t seed = 7000;
    for (size_t count : {size_t{1} << 20, (size_t{1} << 20) + 3}) {
      for (int repeat = 0; repeat < 2; ++repeat) {
        CollectiveCase c;
        c.count = count;
        c.seed = ++seed;
        c.collective = loomtest::Collective::kAllReduce;
        c.op = nranks == 1 ? loomAvg : loomSum;
        cases.push_back(c);
        c.collective = loomtest::Collective::kBroadcast;
        c.type = loomBfloat16;
        c.root = nranks - 1;
        c.seed = ++seed;
        cases.push_back(c);
        c.collective = loomtest::Collective::kAllGather;
        c.type = loomInt8;
        c.count = count / 4;
        c.seed = ++seed;
        cases.push_back(c);
      }
    }
    loomtest::runRanks(nranks, Mode::kThreads, [&](loomComm_t comm, int rank) { runCases(cases, comm, rank, nranks); },
                       emulatedDevice(false));
  }
}

}  // namespace
