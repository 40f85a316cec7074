// A device communicator's tuner takes the device.* keys of LOOM_TUNING_FILE (what
// `loom-perf --calibrate --device cuda` writes) and a host communicator the host keys of the
// same file. Its own process, run by meson with LOOM_DEBUG=INFO and LOOM_DEBUG_FILE, so that
// the log it reads back is this test's alone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "multirank/harness.h"

namespace {

using loomtest::Mode;
using loomtest::ScopedEnv;

// The log lines that contain `needle`.
std::vector<std::string> linesWith(const std::string& needle) {
  std::vector<std::string> found;
  std::ifstream in(loomtest::debugLogPath());
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) != std::string::npos) found.push_back(line);
  }
  return found;
}

// An allreduce of 8 floats on every rank, checked.
void allReduceOnce(loomComm_t comm, int rank, int nranks) {
  std::vector<float> data(8, static_cast<float>(rank + 1));
  LOOM_EXPECT_OK(loomAllReduce(data.data(), data.data(), data.size(), loomFloat32, loomSum, comm, nullptr), comm);
  EXPECT_EQ(data[7], static_cast<float>(nranks * (nranks + 1) / 2));
}

TEST(EmulatedTuning, DeviceCommunicatorsTakeTheDeviceKeysAndHostOnesTheHostKeys) {
  ASSERT_FALSE(loomtest::debugLogPath().empty()) << "meson sets LOOM_DEBUG_FILE for this binary";
  const std::string file = ::testing::TempDir() + "emulated_tuning_" + std::to_string(getpid()) + ".txt";
  // A low-latency wire far cheaper than the simple one, so that the choice shows the file.
  std::ofstream(file) << "# loom tuning file v1\n"
                         "intra.gbps = 9.5\n"
                         "device.simple.latency_us = 75\n"
                         "device.ll.latency_us = 0.25\n"
                         "device.ll.gbps = 123\n";
  ScopedEnv env;
  env.set("LOOM_DEVICE_EMULATION", "1").set("LOOM_TUNING_FILE", file.c_str());
  constexpr int kRanks = 2;
  loomtest::RankOptions device;
  device.device = 0;
  loomtest::runRanks(kRanks, Mode::kThreads, [](loomComm_t comm, int rank) { allReduceOnce(comm, rank, kRanks); },
                     device);
  loomtest::runRanks(kRanks, Mode::kThreads, [](loomComm_t comm, int rank) { allReduceOnce(comm, rank, kRanks); });
  std::remove(file.c_str());

  // Rank 0's line of each communicator names the layers (a host one's machine calibration
  // comes first where it runs).
  const std::string fromFile = "LOOM_TUNING_FILE (" + file + "): ";
  std::string deviceLine, hostLine;
  for (const std::string& line : linesWith("tuner constants: ")) {
    (line.find("device.") != std::string::npos ? deviceLine : hostLine) = line;
  }
  EXPECT_NE(deviceLine.find(fromFile + "device.simple.latency_us = 75, device.ll.latency_us = 0.25, "
                                       "device.ll.gbps = 123;"),
            std::string::npos)
      << deviceLine;
  EXPECT_EQ(deviceLine.find("intra.gbps"), std::string::npos) << deviceLine;
  EXPECT_NE(hostLine.find(fromFile + "intra.gbps = 9.5;"), std::string::npos) << hostLine;
  EXPECT_EQ(hostLine.find("device."), std::string::npos) << hostLine;
  // The device communicator's 32-byte allreduce runs on the wire the file made cheap.
  std::ostringstream choices;
  bool lowLatency = false;
  for (const std::string& line : linesWith("loomAllReduce(count 8, float32, sum) uses ")) {
    choices << line << "\n";
    lowLatency = lowLatency || line.find("/ll ") != std::string::npos;
  }
  EXPECT_TRUE(lowLatency) << choices.str();
}

}  // namespace
