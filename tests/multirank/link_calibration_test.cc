// The machine calibration's shared-memory link and one-shot board, measured by two thread
// ranks (core/link_calibration.h): what it measures, and that the job's own settings do not
// change what it measures for the machine.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "algorithms/select.h"
#include "base/env.h"
#include "core/link_calibration.h"
#include "multirank/harness.h"

namespace {

using loom::LinkFigures;
using loom::Status;

TEST(LinkCalibration, MeasuresTheFifoLineAndTheBoard) {
  cpu_set_t before, after;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  LinkFigures figures;
  Status status = loom::measureSharedMemoryLinks(&figures);
  ASSERT_TRUE(status.isOk()) << status.message();
  const size_t expected[] = {8, 1024, 8192, 32768, 131072, 262144};
  ASSERT_EQ(figures.exchangeUs.size(), std::size(expected));
  for (size_t i = 0; i < figures.exchangeUs.size(); ++i) {
    const auto& [bytes, us] = figures.exchangeUs[i];
    std::printf("exchange %6zu B both ways: %7.2f us\n", bytes, us);
    EXPECT_EQ(bytes, expected[i]);
    EXPECT_GT(us, 0);
  }
  // 32768 times the bytes cannot be as quick, whatever the machine.
  EXPECT_GT(figures.exchangeUs.back().second, figures.exchangeUs.front().second);
  std::printf("one-shot 8 B allreduce: %.2f us; %.3f s in all\n", figures.oneShotUs, figures.seconds);
  EXPECT_GT(figures.oneShotUs, 0);
  EXPECT_GT(figures.seconds, 0);
  // Every collective timed at every size, both ways, and a limit among the sizes timed (or
  // half the smallest).
  ASSERT_EQ(figures.board.size(), std::size(loom::kBoardTimedKinds));
  for (const LinkFigures::BoardTiming& timing : figures.board) {
    ASSERT_EQ(timing.bytes.size(), std::size(loom::kBoardTimedBytes));
    std::printf("%s:", loom::collectiveName(timing.kind));
    for (size_t i = 0; i < timing.bytes.size(); ++i) {
      std::printf(" %zu B %.2f / %.2f", timing.bytes[i], timing.boardUs[i], timing.fifoUs[i]);
      EXPECT_GT(timing.boardUs[i], 0);
      EXPECT_GT(timing.fifoUs[i], 0);
    }
    const size_t max = loom::boardTimedMax(timing);
    std::printf(": the board to %zu B\n", max);
    EXPECT_TRUE(max == timing.bytes[0] / 2 ||
                std::find(timing.bytes.begin(), timing.bytes.end(), max) != timing.bytes.end());
  }
  // The ranks ran on threads of their own: the caller's CPUs are as they were.
  ASSERT_EQ(sched_getaffinity(0, sizeof after, &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
}

// The result is kept for the machine, so the job's settings must not shape it: the thread
// ranks take shared memory, built-in sizes and the one-shot board whatever they say.
TEST(LinkCalibration, TheJobsSettingsDoNotApply) {
  loomtest::ScopedEnv env;
  env.set("LOOM_TRANSPORTS", "socket")
      .set("LOOM_ALGO", "allreduce=ring")
      .set("LOOM_PROTO", "ll")
      .set("LOOM_CHECK", "1")
      .set("LOOM_CHUNK_SIZE", "8192")
      .set("LOOM_SHM_FIFO_BYTES", "65536")
      .set("LOOM_CHANNELS", "4")
      .set("LOOM_MAPPED_MIN_BYTES", "0");
  loom::CommConfig config, offBoard;
  Status status = loom::linkCalibrationConfig(false, &offBoard);
  ASSERT_TRUE(status.isOk()) << status.message();
  for (loom::CallInfo::Kind kind : loom::kBoardTimedKinds) {
    EXPECT_FALSE(offBoard.algorithms.allows(kind, loom::Algorithm::kOneShot));
    EXPECT_TRUE(offBoard.algorithms.allows(kind, loom::Algorithm::kRing) ||
                offBoard.algorithms.allows(kind, loom::Algorithm::kPairwise));
  }
  status = loom::linkCalibrationConfig(true, &config);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_TRUE(config.shm);
  for (loom::CallInfo::Kind kind : loom::kBoardTimedKinds) {
    EXPECT_EQ(config.algorithms.forced(kind), loom::Algorithm::kOneShot);
  }
  EXPECT_TRUE(config.protocols.allows(loom::Protocol::kSimple));
  EXPECT_FALSE(config.check);
  EXPECT_FALSE(config.machineCalibration);
  EXPECT_TRUE(config.tuningFile.empty());
  EXPECT_EQ(config.sliceBytes, size_t{512} << 10);
  EXPECT_EQ(config.shmFifoBytes, size_t{1} << 20);
  EXPECT_EQ(config.channels, 0);
  EXPECT_EQ(config.mappedMinBytes, -1);
  EXPECT_EQ(config.timeoutMs, 10000);

  LinkFigures figures;
  status = loom::measureSharedMemoryLinks(&figures);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(figures.exchangeUs.size(), 6u);
}

// builtInConfig reads no variable at all: with every declared one set to a value none of them
// accepts, it still succeeds and gives what it gives in a clean environment. A setting read
// from the environment by mistake (a new variable, say) fails here.
TEST(LinkCalibration, TheBuiltInConfigReadsNoVariable) {
  loom::CommConfig clean, junk;
  {
    loomtest::ScopedEnv env;
    for (const loom::env::Variable& v : loom::env::variables()) env.set(v.name, "");
    Status status = loom::builtInConfig(&clean);
    ASSERT_TRUE(status.isOk()) << status.message();
  }
  {
    loomtest::ScopedEnv env;
    for (const loom::env::Variable& v : loom::env::variables()) env.set(v.name, "not-a-value");
    Status status = loom::builtInConfig(&junk);
    ASSERT_TRUE(status.isOk()) << status.message();
  }
  EXPECT_TRUE(junk.tuningFile.empty());
  EXPECT_EQ(junk.timeoutMs, clean.timeoutMs);
  EXPECT_EQ(junk.initTimeoutMs, clean.initTimeoutMs);
  EXPECT_EQ(junk.shm, clean.shm);
  EXPECT_EQ(junk.socket, clean.socket);
  EXPECT_EQ(junk.networkAuto, clean.networkAuto);
  EXPECT_EQ(junk.sliceBytes, clean.sliceBytes);
  EXPECT_EQ(junk.shmFifoBytes, clean.shmFifoBytes);
  EXPECT_EQ(junk.socketSendBuffer, clean.socketSendBuffer);
  EXPECT_EQ(junk.streamingMinBytes, clean.streamingMinBytes);
  EXPECT_EQ(junk.mappedMinBytes, clean.mappedMinBytes);
  EXPECT_EQ(junk.reductionStores, clean.reductionStores);
  EXPECT_EQ(junk.deviceChannels, clean.deviceChannels);
  EXPECT_TRUE(junk.algorithms.allowed == clean.algorithms.allowed);
  EXPECT_EQ(junk.protocols.allowed, clean.protocols.allowed);
  EXPECT_EQ(junk.machineCalibration, clean.machineCalibration);
}

// Exchanges that threads would read straight from each other's memory are not the FIFO's:
// they are left out, and too few left is an error rather than a line through direct reads.
TEST(LinkCalibration, SizesReadDirectlyAreLeftOut) {
  loomtest::ScopedEnv env("LOOM_SHM_DIRECT_MIN_BYTES", "65536");
  LinkFigures figures;
  Status status = loom::measureSharedMemoryLinks(&figures);
  ASSERT_TRUE(status.isOk()) << status.message();
  ASSERT_EQ(figures.exchangeUs.size(), 4u);
  EXPECT_EQ(figures.exchangeUs.back().first, 32768u);

  env.set("LOOM_SHM_DIRECT_MIN_BYTES", "4096");
  status = loom::measureSharedMemoryLinks(&figures);
  EXPECT_EQ(status.code(), loomInvalidUsage);
  EXPECT_NE(status.message().find("LOOM_SHM_DIRECT_MIN_BYTES=4096"), std::string::npos) << status.message();

  // Where threads read nothing directly, every size is the FIFO's.
  env.set("LOOM_SHM_DIRECT", "none");
  status = loom::measureSharedMemoryLinks(&figures);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(figures.exchangeUs.size(), 6u);
}

}  // namespace
