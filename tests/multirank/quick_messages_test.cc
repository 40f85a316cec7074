// Small messages moved without a plan (core/quick_messages.h), as threads and as processes:
// which groups take that path, the order of messages where some of a link's go through the
// executor, and the errors of what the path leaves to the executor.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "core/communicator.h"
#include "core/quick_messages.h"
#include "multirank/harness.h"

namespace {

using loomtest::Mode;

class QuickMessages : public testing::TestWithParam<Mode> {};

std::string lastError(loomComm_t comm) { return loomGetLastError(comm); }

int32_t pattern(int message, size_t i) { return static_cast<int32_t>(message * 7919 + static_cast<int>(i) + 1); }

// One exchange between ranks 0 and 1, so that their link exists (the path takes made links).
void exchange(loomComm_t comm, int rank) {
  int32_t out = rank, in = -1;
  LOOM_EXPECT_OK(loomGroupStart(), comm);
  LOOM_EXPECT_OK(loomSend(&out, 1, loomInt32, 1 - rank, comm, nullptr), comm);
  LOOM_EXPECT_OK(loomRecv(&in, 1, loomInt32, 1 - rank, comm, nullptr), comm);
  LOOM_EXPECT_OK(loomGroupEnd(), comm);
  EXPECT_EQ(in, 1 - rank);
}

loom::Communicator& internal(loomComm_t handle) {
  loom::Communicator* comm = nullptr;
  EXPECT_TRUE(loom::lookupComm(handle, &comm).isOk());
  return *comm;
}

// The path takes small messages over made shared-memory links (up to 32 KiB); not one to this
// rank, nor a larger one, nor one the receiver would read directly, nor one over a link not
// made yet, nor one over a socket.
TEST_P(QuickMessages, TakesSmallMessagesOverMadeSharedMemoryLinks) {
  // The sizes as built in, whatever this machine's calibration (which may read 32 KiB directly
  // between processes) or a tuning file would choose.
  loomtest::ScopedEnv env("LOOM_TRANSPORTS", "shm");
  env.set("LOOM_SHM_FIFO_BYTES", "1048576").set("LOOM_SHM_DIRECT_MIN_BYTES", "1048576");
  env.set("LOOM_MACHINE_CALIBRATION", "0");
  loomtest::runRanks(3, GetParam(), [](loomComm_t handle, int rank) {
    loom::Communicator& comm = internal(handle);
    std::vector<char> buffer(40000);
    auto op = [&](int peer, size_t bytes) {
      return loom::P2POp{loom::P2POp::Direction::kSend, &comm, peer, buffer.data(), bytes};
    };
    if (rank < 2) {
      const loom::P2POp before[] = {op(1 - rank, 8)};
      EXPECT_FALSE(loom::quickMessages(before, 1)) << "the link is not made yet";
      exchange(handle, rank);
      const loom::P2POp small[] = {op(1 - rank, 0), op(1 - rank, 8), op(1 - rank, 200), op(1 - rank, 32768)};
      EXPECT_TRUE(loom::quickMessages(small, 4));
      const loom::P2POp large[] = {op(1 - rank, 8), op(1 - rank, 40000)};
      EXPECT_FALSE(loom::quickMessages(large, 2));
      const loom::P2POp self[] = {op(rank, 8)};
      EXPECT_FALSE(loom::quickMessages(self, 1));
      const loom::P2POp unmade[] = {op(2, 8)};
      EXPECT_FALSE(loom::quickMessages(unmade, 1)) << "no link to rank 2";
    }
    LOOM_EXPECT_OK(loomBarrier(handle, nullptr), handle);
  });
  // Where the receiver reads a send directly (the header in the ring, the rest posted), the
  // send never lies whole in the link: such sizes take the executor's path.
  loomtest::ScopedEnv direct("LOOM_SHM_DIRECT", "all");
  direct.set("LOOM_SHM_DIRECT_MIN_BYTES", "1024");
  loomtest::runRanks(2, GetParam(), [](loomComm_t handle, int rank) {
    exchange(handle, rank);
    std::vector<char> buffer(2000);
    const loom::P2POp below{loom::P2POp::Direction::kSend, &internal(handle), 1 - rank, buffer.data(), 900};
    const loom::P2POp above{loom::P2POp::Direction::kSend, &internal(handle), 1 - rank, buffer.data(), 2000};
    EXPECT_TRUE(loom::quickMessages(&below, 1));
    EXPECT_FALSE(loom::quickMessages(&above, 1)) << "read directly from 1024 bytes";
  });
  loomtest::ScopedEnv sockets("LOOM_TRANSPORTS", "socket");
  loomtest::runRanks(2, GetParam(), [](loomComm_t handle, int rank) {
    exchange(handle, rank);
    int32_t x = 0;
    const loom::P2POp op{loom::P2POp::Direction::kSend, &internal(handle), 1 - rank, &x, sizeof x};
    EXPECT_FALSE(loom::quickMessages(&op, 1)) << "a socket moves no message whole";
  });
}

// Rank 0 sends 48 lone messages (0 bytes to 40 KB) before rank 1 receives any: the mail slots
// fill, so the later small ones go whole into the ring, beside those past a mail slot and the
// 40 KB ones, which the executor sends, and the receiver takes each in order wherever it lies;
// then groups of messages of up to 4 KB both ways, several a link.
TEST_P(QuickMessages, MessagesKeepTheirOrderWhereSomeGoThroughTheExecutor) {
  loomtest::runRanks(2, GetParam(), [](loomComm_t comm, int rank) {
    exchange(comm, rank);
    const size_t counts[] = {0, 1, 2, 13, 48, 75, 1000, 10000};  // int32s; from 75 past a mail slot
    constexpr int kMessages = 48;
    auto countOf = [&](int m, size_t kinds) { return counts[static_cast<size_t>(m) % kinds]; };
    if (rank == 0) {
      for (int m = 0; m < kMessages; ++m) {
        std::vector<int32_t> out(countOf(m, 8));
        for (size_t i = 0; i < out.size(); ++i) out[i] = pattern(m, i);
        LOOM_EXPECT_OK(loomSend(out.data(), out.size(), loomInt32, 1, comm, nullptr), comm);
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // until rank 0's sends are in
      for (int m = 0; m < kMessages; ++m) {
        std::vector<int32_t> in(countOf(m, 8), -1);
        LOOM_EXPECT_OK(loomRecv(in.data(), in.size(), loomInt32, 0, comm, nullptr), comm);
        for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(in[i], pattern(m, i)) << "message " << m << " at " << i;
      }
    }
    for (int round = 0; round < 200; ++round) {
      std::vector<std::vector<int32_t>> out(4), in(4);
      LOOM_EXPECT_OK(loomGroupStart(), comm);
      for (int m = 0; m < 4; ++m) {
        const int mine = round * 8 + m + 4 * rank, theirs = round * 8 + m + 4 * (1 - rank);
        out[m].resize(countOf(mine, 7));
        for (size_t i = 0; i < out[m].size(); ++i) out[m][i] = pattern(mine, i);
        in[m].assign(countOf(theirs, 7), -1);
        LOOM_EXPECT_OK(loomRecv(in[m].data(), in[m].size(), loomInt32, 1 - rank, comm, nullptr), comm);
        LOOM_EXPECT_OK(loomSend(out[m].data(), out[m].size(), loomInt32, 1 - rank, comm, nullptr), comm);
      }
      LOOM_EXPECT_OK(loomGroupEnd(), comm);
      for (int m = 0; m < 4; ++m) {
        const int theirs = round * 8 + m + 4 * (1 - rank);
        for (size_t i = 0; i < in[m].size(); ++i) ASSERT_EQ(in[m][i], pattern(theirs, i)) << "round " << round;
      }
    }
  });
}

// A receive whose message is there but not the size it expects: the same error as from the
// executor, for a message larger than expected and for a smaller one.
TEST_P(QuickMessages, AMismatchedSizeIsAnErrorOnTheReceiver) {
  for (size_t expected : {1, 4}) {
    loomtest::RankOptions options;
    options.timeoutMs = 3000;
    loomtest::runRanks(2, GetParam(), [expected](loomComm_t comm, int rank) {
      exchange(comm, rank);
      int32_t buf[4] = {};
      if (rank == 0) {
        LOOM_EXPECT_OK(loomSend(buf, 2, loomInt32, 1, comm, nullptr), comm);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the message is there whole
      EXPECT_EQ(loomRecv(buf, expected, loomInt32, 0, comm, nullptr), loomInvalidUsage);
      const std::string m = lastError(comm);
      const std::string want = "rank 0 sent 8 bytes but this rank's loomRecv expects " + std::to_string(4 * expected);
      EXPECT_NE(m.find(want), std::string::npos) << m;
    }, options);
  }
}

// A peer that sends nothing: the receive times out naming it, as from the executor.
TEST_P(QuickMessages, ASilentPeerIsATimeoutNamingTheReceive) {
  loomtest::RankOptions options;
  options.timeoutMs = 1000;
  loomtest::runRanks(2, GetParam(), [](loomComm_t comm, int rank) {
    exchange(comm, rank);
    if (rank == 1) {  // alive but silent
      std::this_thread::sleep_for(std::chrono::milliseconds(2000));
      return;
    }
    int32_t x = 0;
    EXPECT_EQ(loomRecv(&x, 1, loomInt32, 1, comm, nullptr), loomTimeout);
    const std::string m = lastError(comm);
    EXPECT_NE(m.find("loomRecv from rank 1 (0 of 4 bytes received) timed out after 1000 ms"), std::string::npos)
        << m;
  }, options);
}

// A peer that dies after the links are made: a remote error, long before the timeout.
TEST(QuickMessagesProcesses, ADeadPeerIsARemoteError) {
  loomtest::RankOptions options;
  options.timeoutMs = 60000;
  loomtest::runRanks(2, Mode::kProcesses, [](loomComm_t comm, int rank) {
    exchange(comm, rank);
    if (rank == 1) ::_exit(0);
    int32_t x = 0;
    EXPECT_EQ(loomRecv(&x, 1, loomInt32, 1, comm, nullptr), loomRemoteError);
    EXPECT_NE(lastError(comm).find("rank 1"), std::string::npos) << lastError(comm);
  }, options);
}

INSTANTIATE_TEST_SUITE_P(Modes, QuickMessages, testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& info) { return loomtest::modeName(info.param); });

}  // namespace
