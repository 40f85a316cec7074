// LOOM_P2P_DISABLE in the CPU emulation: every rank of the host puts its FIFOs for every peer in
// pinned host memory (in the emulation that is the memory it had; the flag is what travels,
// in each block's handle), says so in its INFO line for the connection, and every collective
// still matches the references, as threads and as processes. The GPU suite runs the same
// variable on a GPU, where the memory does change (perf/gpu_suite.sh). Its own process, run by
// meson with LOOM_DEBUG=INFO and LOOM_DEBUG_FILE, so that the logs are this test's alone.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/sanitizer.h"
#include "multirank/collective_reference.h"
#include "multirank/harness.h"

namespace {

using loomtest::Mode;
using loomtest::ScopedEnv;

constexpr int kRanks = 3;

// The log files of this test's processes (LOOM_DEBUG_FILE's pattern, any pid): a child rank
// writes its own, or its parent's where the parent had opened it before the fork.
std::vector<std::filesystem::path> logFiles() {
  const std::filesystem::path pattern = std::getenv("LOOM_DEBUG_FILE");
  const std::string name = pattern.filename().string();
  const std::string prefix = name.substr(0, name.find("%p"));
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(pattern.parent_path())) {
    const std::string file = entry.path().filename().string();
    if (entry.is_regular_file() && file.rfind(prefix, 0) == 0 && entry.path().extension() == ".log") {
      files.push_back(entry.path());
    }
  }
  return files;
}

class EmulatedHostFifos : public testing::TestWithParam<Mode> {};

TEST_P(EmulatedHostFifos, EveryPeerOfTheHostGetsThemAndCollectivesMatch) {
  SKIP_PROCESSES_UNDER_TSAN(GetParam() == Mode::kProcesses);
  if (loomtest::debugLogPath().empty() || std::getenv("LOOM_DEBUG") == nullptr) {
    std::printf("skipped: run by meson, which sets LOOM_DEBUG=INFO and LOOM_DEBUG_FILE\n");
    GTEST_SKIP() << "needs LOOM_DEBUG=INFO and LOOM_DEBUG_FILE (meson sets them)";
  }
  // Emptied, not removed: this process may hold its file open (appending) from an earlier case.
  for (const auto& file : logFiles()) std::filesystem::resize_file(file, 0);
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  env.set("LOOM_P2P_DISABLE", "1");
  const std::vector<loomtest::CollectiveCase> cases =
      loomtest::casesAt(loomtest::MatrixScale::kQuick, kRanks, static_cast<unsigned>(GetParam()));
  loomtest::RankOptions options;
  options.device = 0;
  options.timeoutMs = 60000;
  loomtest::runRanks(kRanks, GetParam(), [&](loomComm_t comm, int rank) {
    for (const loomtest::CollectiveCase& c : cases) {
      const loomtest::CaseOutcome outcome = loomtest::runCollectiveCase(c, comm, rank, kRanks);
      ASSERT_TRUE(outcome.error.empty()) << "rank " << rank << ": " << outcome.error;
    }
  }, options);

  static const std::regex connection(R"(rank (\d+): device connection to rank (\d+): (.*))");
  std::set<std::pair<int, int>> pairs;
  for (const auto& file : logFiles()) {
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (!std::regex_search(line, m, connection)) continue;
      EXPECT_NE(m[3].str().find("FIFOs in pinned host memory both ways"), std::string::npos) << line;
      pairs.insert({std::stoi(m[1]), std::stoi(m[2])});
    }
  }
  EXPECT_EQ(pairs.size(), static_cast<size_t>(kRanks * (kRanks - 1))) << "every rank connects every peer once";
}

INSTANTIATE_TEST_SUITE_P(Modes, EmulatedHostFifos, testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& info) { return loomtest::modeName(info.param); });

}  // namespace
