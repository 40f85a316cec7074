// loomCommShrink: the ranks left out do not call (alive or dead), the others get a working
// communicator numbered in their old order; ranks that lost a peer carry on without it;
// LOOM_SHRINK_ABORT ends a call still waiting on the lost rank; ranks that disagree on who
// is left out fail (or time out) instead of hanging. loomCommRevoke ends a waiting call too,
// and the revoked communicator splits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/ucx_version.h"
#include "multirank/harness.h"

namespace {

using loomtest::Mode;
using Clock = std::chrono::steady_clock;

std::string lastError(loomComm_t comm) { return loomGetLastError(comm); }

// A left-out thread rank stays alive (and silent) until `others` ranks are done, at most 20 s.
void stayUntilDone(const std::atomic<int>& finished, int others) {
  const auto until = Clock::now() + std::chrono::seconds(20);
  while (finished.load() < others && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

// An allreduce on comm from a thread of its own, which waits for a rank that does not call;
// made, it has had 300 ms to start waiting. join() gives its result and how long it took.
struct WaitingCall {
  loomResult_t result = loomSuccess;
  double seconds = 0;
  std::thread thread;

  explicit WaitingCall(loomComm_t comm) {
    thread = std::thread([this, comm] {
      std::vector<float> values(1000, 1.0f);
      const auto start = Clock::now();
      result = loomAllReduce(values.data(), values.data(), values.size(), loomFloat32, loomSum, comm, nullptr);
      seconds = std::chrono::duration<double>(Clock::now() - start).count();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  void join() { thread.join(); }
};

// The survivors' new communicator: its size and rank, and an allreduce of the parent ranks.
void expectWorks(loomComm_t sub, const std::vector<int>& survivors, int parentRank) {
  int size = 0, subRank = -1;
  LOOM_EXPECT_OK(loomCommCount(sub, &size), sub);
  LOOM_EXPECT_OK(loomCommUserRank(sub, &subRank), sub);
  EXPECT_EQ(size, static_cast<int>(survivors.size()));
  int expectedRank = 0, expectedSum = 0;
  for (int r : survivors) {
    expectedRank += r < parentRank ? 1 : 0;
    expectedSum += r;
  }
  EXPECT_EQ(subRank, expectedRank);
  std::vector<int> values(1000, parentRank);
  LOOM_EXPECT_OK(loomAllReduce(values.data(), values.data(), values.size(), loomInt32, loomSum, sub, nullptr), sub);
  EXPECT_EQ(values.front(), expectedSum);
  EXPECT_EQ(values.back(), expectedSum);
}

class Shrink : public testing::TestWithParam<Mode> {};

// Ranks 1 and 3 of 5 are left out while alive; they make no call. The list's order is free.
TEST_P(Shrink, LeftOutRanksDoNotCall) {
  loomtest::runRanks(5, GetParam(), [](loomComm_t comm, int rank) {
    if (rank == 1 || rank == 3) return;
    const int excluded[] = {3, 1};
    loomComm_t sub = nullptr;
    LOOM_ASSERT_OK(loomCommShrink(comm, excluded, 2, &sub, nullptr, LOOM_SHRINK_DEFAULT), comm);
    ASSERT_NE(sub, nullptr);
    expectWorks(sub, {0, 2, 4}, rank);
    LOOM_EXPECT_OK(loomCommDestroy(sub), nullptr);
  });
}

// Rank 2 of 4 dies without a word; the others' next allreduce fails naming it, and they go on
// in a communicator of three. Over the default transports and over UCX, whose shared-memory
// lanes on one host tell rank 0 nothing: its links lead to ranks 1 and 3, alive, which give up
// on rank 2 and force-close their endpoints; rank 0 hears of it from their failure notices.
// (Processes only: a rank dies by _exit.)
class ShrinkDeadRank : public testing::TestWithParam<const char*> {};

TEST_P(ShrinkDeadRank, SurvivorsCarryOn) {
  const std::string transports = GetParam();
  if (transports == "ucx" && std::getenv("LOOM_TEST_UCX") == nullptr) {
    GTEST_SKIP() << "skipped: this Loom was built without UCX";
  }
  loomtest::ScopedEnv env;
  if (!transports.empty()) env.set("LOOM_TRANSPORTS", transports.c_str());
  loomtest::RankOptions options;
  options.timeoutMs = 60000;  // the error must come from the dead peer, not a timeout
  // Rank 0's call still waits on its links to ranks 1 and 3 alone when rank 2 dies.
  const bool linksFirst = transports == "ucx" && loomtest::ucxAbortsInWireup();
  if (linksFirst) {
    std::printf("UCX before 1.14: a call like the failing one made before rank 2 dies, so its links are set up "
                "(common/ucx_version.h)\n");
  }
  loomtest::runRanks(4, Mode::kProcesses, [linksFirst](loomComm_t comm, int rank) {
    LOOM_EXPECT_OK(loomBarrier(comm, nullptr), comm);
    std::vector<float> values(1 << 16, 1.0f);
    if (linksFirst) {  // the failing call's links, each set up for messages of its size
      LOOM_ASSERT_OK(loomAllReduce(values.data(), values.data(), values.size(), loomFloat32, loomSum, comm, nullptr),
                     comm);
    }
    if (rank == 2) ::_exit(0);  // as kill -9 would leave it
    const auto start = Clock::now();
    EXPECT_EQ(loomAllReduce(values.data(), values.data(), values.size(), loomFloat32, loomSum, comm, nullptr),
              loomRemoteError);
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
    EXPECT_NE(lastError(comm).find("rank 2"), std::string::npos) << lastError(comm);
    const int dead = 2;
    loomComm_t sub = nullptr;
    LOOM_ASSERT_OK(loomCommShrink(comm, &dead, 1, &sub, nullptr, LOOM_SHRINK_DEFAULT), comm);
    expectWorks(sub, {0, 1, 3}, rank);
    loomResult_t async = loomSuccess;
    LOOM_EXPECT_OK(loomCommGetAsyncError(comm, &async), comm);
    EXPECT_EQ(async, loomRemoteError);  // the parent keeps its error
    LOOM_EXPECT_OK(loomCommDestroy(sub), nullptr);
  }, options);
}

INSTANTIATE_TEST_SUITE_P(Transports, ShrinkDeadRank, testing::Values("", "ucx"),
                         [](const auto& info) { return std::string(info.param[0] ? info.param : "default"); });

INSTANTIATE_TEST_SUITE_P(Modes, Shrink, testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& info) { return loomtest::modeName(info.param); });

// Rank 2 of 3 stays alive but never joins the allreduce the others are blocked in; each of
// them shrinks with LOOM_SHRINK_ABORT from a second thread, which ends that call at once.
TEST(ShrinkAbort, EndsACallWaitingOnTheLeftOutRank) {
  std::atomic<int> finished{0};
  loomtest::RankOptions options;
  options.timeoutMs = 30000;
  loomtest::runRanks(3, Mode::kThreads, [&](loomComm_t comm, int rank) {
    if (rank == 2) return stayUntilDone(finished, 2);
    WaitingCall caller(comm);
    const int silent = 2;
    loomComm_t sub = nullptr;
    LOOM_EXPECT_OK(loomCommShrink(comm, &silent, 1, &sub, nullptr, LOOM_SHRINK_ABORT), comm);
    caller.join();
    EXPECT_NE(caller.result, loomSuccess);
    EXPECT_LT(caller.seconds, 10.0);  // ended by the abort, long before the 30 s timeout
    // Ended by this rank's abort, or first by the other survivor's (which closed its links).
    const std::string why = lastError(comm);
    EXPECT_TRUE(why.find("LOOM_SHRINK_ABORT") != std::string::npos || why.find("rank ") != std::string::npos) << why;
    if (sub != nullptr) {
      expectWorks(sub, {0, 1}, rank);
      LOOM_EXPECT_OK(loomCommDestroy(sub), nullptr);
    }
    finished.fetch_add(1);
  }, options);
}

// (mode, an emulated device communicator)
class Revoke : public testing::TestWithParam<std::tuple<Mode, bool>> {};

// Rank 0 revokes from a second thread while an allreduce waits for rank 1, which has not
// called: the call ends at once, saying why (on the emulated device, its kernel stops). Both
// ranks revoke; the communicator then refuses calls, reports no error (revoking is none) and
// splits into one that works.
TEST_P(Revoke, EndsAWaitingCallAndTheRanksSplitAgain) {
  loomtest::RankOptions options;
  options.timeoutMs = 30000;
  loomtest::ScopedEnv env;
  if (std::get<1>(GetParam())) {
    env.set("LOOM_DEVICE_EMULATION", "1");
    options.device = 0;
  }
  loomtest::runRanks(2, std::get<0>(GetParam()), [](loomComm_t comm, int rank) {
    if (rank == 0) {
      WaitingCall caller(comm);
      LOOM_EXPECT_OK(loomCommRevoke(comm, LOOM_REVOKE_DEFAULT), comm);
      caller.join();
      EXPECT_NE(caller.result, loomSuccess);
      EXPECT_LT(caller.seconds, 10.0);  // ended by the revoke, long before the 30 s timeout
      EXPECT_NE(lastError(comm).find("loomCommRevoke"), std::string::npos) << lastError(comm);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // silent meanwhile
      LOOM_EXPECT_OK(loomCommRevoke(comm, LOOM_REVOKE_DEFAULT), comm);
    }
    loomResult_t async = loomInternalError;
    LOOM_EXPECT_OK(loomCommGetAsyncError(comm, &async), comm);
    EXPECT_EQ(async, loomSuccess);
    std::vector<int> values(10, 1);
    EXPECT_EQ(loomAllReduce(values.data(), values.data(), values.size(), loomInt32, loomSum, comm, nullptr),
              loomInvalidUsage);
    EXPECT_NE(lastError(comm).find("revoked"), std::string::npos) << lastError(comm);
    loomComm_t sub = nullptr;
    LOOM_ASSERT_OK(loomCommSplit(comm, 0, rank, &sub, nullptr), comm);
    expectWorks(sub, {0, 1}, rank);
    LOOM_EXPECT_OK(loomCommDestroy(sub), nullptr);
  }, options);
}

INSTANTIATE_TEST_SUITE_P(Modes, Revoke, testing::Combine(testing::Values(Mode::kThreads, Mode::kProcesses),
                                                          testing::Bool()),
                         [](const auto& info) {
                           return loomtest::modeName(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_emulated_device" : "_host");
                         });

// Ranks 0 and 2 leave out rank 3, rank 1 leaves out nobody (so it waits for rank 3, which
// does not call): 0 and 2 see the disagreement in what rank 1 published, rank 1 gives up at
// its deadline; nobody hangs.
TEST(ShrinkMismatch, RanksThatDisagreeFail) {
  std::atomic<int> finished{0};
  loomtest::RankOptions options;
  options.timeoutMs = 2000;
  loomtest::runRanks(4, Mode::kThreads, [&](loomComm_t comm, int rank) {
    if (rank == 3) return stayUntilDone(finished, 3);
    const int three = 3;
    loomComm_t sub = nullptr;
    const auto start = Clock::now();
    const loomResult_t r = loomCommShrink(comm, &three, rank == 1 ? 0 : 1, &sub, nullptr, LOOM_SHRINK_DEFAULT);
    EXPECT_NE(r, loomSuccess);
    EXPECT_EQ(sub, nullptr);
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
    if (rank != 1) {
      EXPECT_EQ(r, loomInvalidUsage);
      EXPECT_NE(lastError(comm).find("rank 1 excludes other ranks"), std::string::npos) << lastError(comm);
    }
    finished.fetch_add(1);
  }, options);
}

}  // namespace
