// LOOM_P2P_DISABLE in the CPU emulation: a rank puts its FIFOs for every peer of its host in
// pinned host memory (in the emulation that is the memory it had; what changes is the flag in
// each block's handle and the smaller slots of such blocks), says so in its INFO line for the
// connection, and every collective still matches the references, as threads and as processes,
// also where only one rank sets it. The GPU suite runs the same
// variable on a GPU, where the memory does change (perf/gpu_suite.sh). Its own process, run by
// meson with LOOM_DEBUG=INFO and LOOM_DEBUG_FILE, so that the logs are this test's alone.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
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

// Runs the quick slice of collectives on kRanks ranks of the emulated device (every one must
// match the references), and returns what each rank's INFO line said of its connection to
// each peer: (rank, peer) -> the line's text after the peer's number.
std::map<std::pair<int, int>, std::string> runAndReadConnections(Mode mode, const loomtest::RankOptions& options) {
  // Emptied, not removed: this process may hold its file open (appending) from an earlier case.
  for (const auto& file : logFiles()) std::filesystem::resize_file(file, 0);
  const std::vector<loomtest::CollectiveCase> cases =
      loomtest::casesAt(loomtest::MatrixScale::kQuick, kRanks, static_cast<unsigned>(mode));
  loomtest::runRanks(kRanks, mode, [&](loomComm_t comm, int rank) {
    for (const loomtest::CollectiveCase& c : cases) {
      const loomtest::CaseOutcome outcome = loomtest::runCollectiveCase(c, comm, rank, kRanks);
      ASSERT_TRUE(outcome.error.empty()) << "rank " << rank << ": " << outcome.error;
    }
  }, options);
  static const std::regex connection(R"(rank (\d+): device connection to rank (\d+): (.*))");
  std::map<std::pair<int, int>, std::string> lines;
  for (const auto& file : logFiles()) {
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (std::regex_search(line, m, connection)) lines[{std::stoi(m[1]), std::stoi(m[2])}] = m[3];
    }
  }
  return lines;
}

bool says(const std::string& text, const char* words) { return text.find(words) != std::string::npos; }

bool runByMeson() {
  if (!loomtest::debugLogPath().empty() && std::getenv("LOOM_DEBUG") != nullptr) return true;
  std::printf("skipped: run by meson, which sets LOOM_DEBUG=INFO and LOOM_DEBUG_FILE\n");
  return false;
}

loomtest::RankOptions emulatedDevice() {
  loomtest::RankOptions options;
  options.device = 0;
  options.timeoutMs = 60000;
  return options;
}

class EmulatedHostFifos : public testing::TestWithParam<Mode> {};

TEST_P(EmulatedHostFifos, EveryPeerOfTheHostGetsThemAndCollectivesMatch) {
  SKIP_PROCESSES_UNDER_TSAN(GetParam() == Mode::kProcesses);
  if (!runByMeson()) GTEST_SKIP() << "needs LOOM_DEBUG=INFO and LOOM_DEBUG_FILE (meson sets them)";
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  env.set("LOOM_P2P_DISABLE", "1");
  const auto lines = runAndReadConnections(GetParam(), emulatedDevice());
  EXPECT_EQ(lines.size(), static_cast<size_t>(kRanks * (kRanks - 1))) << "every rank connects every peer";
  for (const auto& [pair, text] : lines) EXPECT_TRUE(says(text, "FIFOs in pinned host memory both ways")) << text;
}

INSTANTIATE_TEST_SUITE_P(Modes, EmulatedHostFifos, testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& info) { return loomtest::modeName(info.param); });

// Each rank decides for the FIFOs it receives into: with LOOM_P2P_DISABLE on rank 1 alone,
// rank 1's blocks are in host memory and its peers' blocks for it in device memory, so each
// direction of a pair with rank 1 takes its own block's shape (smaller slots in host memory),
// and ranks 0 and 2 keep device memory between them.
TEST(EmulatedHostFifos, ARankDecidesForItsOwnFifos) {
  SKIP_PROCESSES_UNDER_TSAN(true);
  if (!runByMeson()) GTEST_SKIP() << "needs LOOM_DEBUG=INFO and LOOM_DEBUG_FILE (meson sets them)";
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  loomtest::RankOptions options = emulatedDevice();
  options.beforeInit = [](int rank) {
    if (rank == 1) ::setenv("LOOM_P2P_DISABLE", "1", 1);
  };
  const auto lines = runAndReadConnections(Mode::kProcesses, options);
  EXPECT_EQ(lines.size(), static_cast<size_t>(kRanks * (kRanks - 1))) << "every rank connects every peer";
  for (const auto& [pair, text] : lines) {
    const auto [rank, peer] = pair;
    if (rank == 1) {
      EXPECT_TRUE(says(text, "this rank's FIFOs for the peer in pinned host memory")) << text;
    } else if (peer == 1) {
      EXPECT_TRUE(says(text, "the peer's FIFOs for this rank in pinned host memory")) << text;
    } else {
      EXPECT_FALSE(says(text, "pinned host memory")) << text;
    }
  }
}

}  // namespace
