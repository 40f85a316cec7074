// LOOM_DEVICE_TIMELINE in the CPU emulation: every worker of every launch is timed, and the
// communicator logs each worker's steps with their means when it ends. Its own process, run
// by meson with LOOM_DEBUG=INFO and LOOM_DEBUG_FILE, so that the log is this test's alone.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "multirank/harness.h"

namespace {

using loomtest::Mode;
using loomtest::ScopedEnv;

constexpr int kRanks = 2;
constexpr int kCalls = 12;

struct WorkerLine {
  int rank;
  long launches;
  double end;
  std::vector<std::string> stepWords;
  std::vector<std::pair<double, double>> readyDone;
};

std::vector<WorkerLine> workerLines(const std::string& path) {
  static const std::regex worker(R"(rank (\d+) worker \d+: (\d+) launches, started [-0-9.]+ us after the first;(.*) end ([0-9.]+))");
  static const std::regex step(R"( step \d+ \(([^)]*)\) ready ([0-9.]+) done ([0-9.]+);)");
  std::vector<WorkerLine> lines;
  std::ifstream in(path);
  for (std::string text; std::getline(in, text);) {
    std::smatch m;
    if (!std::regex_search(text, m, worker)) continue;
    WorkerLine w{std::stoi(m[1]), std::stol(m[2]), std::stod(m[4]), {}, {}};
    const std::string steps = m[3];
    for (auto it = std::sregex_iterator(steps.begin(), steps.end(), step); it != std::sregex_iterator(); ++it) {
      w.stepWords.push_back((*it)[1]);
      w.readyDone.emplace_back(std::stod((*it)[2]), std::stod((*it)[3]));
    }
    lines.push_back(std::move(w));
  }
  return lines;
}

TEST(EmulatedTimeline, EveryWorkerOfEveryLaunchIsTimedAndLogged) {
  const std::string path = loomtest::debugLogPath();
  if (path.empty() || std::getenv("LOOM_DEBUG") == nullptr) {
    std::printf("skipped: run by meson, which sets LOOM_DEBUG=INFO and LOOM_DEBUG_FILE\n");
    GTEST_SKIP() << "needs LOOM_DEBUG=INFO and LOOM_DEBUG_FILE (meson sets them)";
  }
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  env.set("LOOM_DEVICE_TIMELINE", "1");
  loomtest::RankOptions options;
  options.device = 0;
  loomtest::runRanks(kRanks, Mode::kThreads, [&](loomComm_t comm, int rank) {
    std::vector<float> data(1000, static_cast<float>(rank + 1));
    for (int call = 0; call < kCalls; ++call) {
      LOOM_ASSERT_OK(loomAllReduce(data.data(), data.data(), data.size(), loomFloat32, loomSum, comm, nullptr), comm);
    }
  }, options);

  const std::vector<WorkerLine> lines = workerLines(path);
  std::remove(path.c_str());
  std::map<int, int> workersOf;
  for (const WorkerLine& w : lines) {
    ++workersOf[w.rank];
    EXPECT_EQ(w.launches, kCalls) << "rank " << w.rank;
    ASSERT_FALSE(w.stepWords.empty()) << "rank " << w.rank;
    double last = 0;
    for (size_t k = 0; k < w.stepWords.size(); ++k) {
      EXPECT_NE(w.stepWords[k], "?") << "a step the communicator's notes should name";
      EXPECT_LE(last, w.readyDone[k].first);
      EXPECT_LE(w.readyDone[k].first, w.readyDone[k].second);
      last = w.readyDone[k].second;
    }
    EXPECT_LE(last, w.end);
  }
  EXPECT_EQ(workersOf.size(), static_cast<size_t>(kRanks)) << "every rank logs its workers";
}

}  // namespace
