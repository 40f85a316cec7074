// The device communicator's sizing rules that need no GPU: how many channels fit the blocks a
// rank may keep resident, and when thread ranks on one device share CUDA's hardware queues
// (the warning that names CUDA_DEVICE_MAX_CONNECTIONS).
#include "core/device_comm.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace {

TEST(ChannelsWithin, KeepsOneBlockForLocalCopiesAndStaysInRange) {
  EXPECT_EQ(loom::channelsWithin(0, 2, 8), 8);   // no budget known: as many as asked
  EXPECT_EQ(loom::channelsWithin(17, 2, 8), 8);  // 16 blocks for channels, 8 of 2 fit
  EXPECT_EQ(loom::channelsWithin(9, 2, 8), 4);   // 8 blocks: 4 channels
  EXPECT_EQ(loom::channelsWithin(2, 4, 8), 1);   // too few for one: still one
}

TEST(SharedQueues, TwoStreamsARankAgainstTheQueues) {
  EXPECT_FALSE(loom::threadRanksShareQueues(4, 8));
  EXPECT_TRUE(loom::threadRanksShareQueues(5, 8));
  EXPECT_TRUE(loom::threadRanksShareQueues(8, 8));  // the stall seen on an H200
  EXPECT_FALSE(loom::threadRanksShareQueues(8, 32));
  EXPECT_FALSE(loom::threadRanksShareQueues(16, 32));
  EXPECT_TRUE(loom::threadRanksShareQueues(17, 32));
}

TEST(SharedQueues, QueuesAsTheDriverTakesTheVariable) {
  ::unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  EXPECT_EQ(loom::cudaHardwareQueues(), 8);
  ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);
  EXPECT_EQ(loom::cudaHardwareQueues(), 32);
  ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1);
  EXPECT_EQ(loom::cudaHardwareQueues(), 1);
  for (const char* ignored : {"0", "33", "many"}) {  // the driver keeps its default
    ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", ignored, 1);
    EXPECT_EQ(loom::cudaHardwareQueues(), 8) << ignored;
  }
  ::unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
}

}  // namespace
