// Bad input gets a clear error and leaves the communicator working; runtime failures
// (mismatched calls, a dead peer, an abort, a silent peer) end in an error on every rank
// involved, never a hang.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "multirank/harness.h"

namespace {

std::string lastError(loomComm_t comm) { return loomGetLastError(comm); }

// One allreduce of 1000 floats: its result, and in *seconds how long it took.
loomResult_t timedAllReduce(loomComm_t comm, double* seconds) {
  std::vector<float> a(1000, 1.0f), b(1000, 0.0f);
  const auto start = std::chrono::steady_clock::now();
  const loomResult_t result = loomAllReduce(a.data(), b.data(), a.size(), loomFloat32, loomSum, comm, nullptr);
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

#define EXPECT_ERROR(call, code, comm, text)                                               \
  do {                                                                                     \
    EXPECT_EQ((call), (code)) << #call;                                                    \
    EXPECT_NE(lastError(comm).find(text), std::string::npos) << #call << ": " << lastError(comm); \
  } while (0)

TEST(Validation, BadArgumentsAreRejectedAndTheCommunicatorKeepsWorking) {
  std::vector<loomComm_t> comms(2);
  LOOM_ASSERT_OK(loomCommInitAll(comms.data(), 2, nullptr), nullptr);
  loomComm_t c = comms[0];
  int x = 0;
  EXPECT_ERROR(loomSend(nullptr, 4, loomInt32, 1, c, nullptr), loomInvalidArgument, c, "sendbuff is NULL with count 4");
  EXPECT_ERROR(loomRecv(nullptr, 1, loomFloat32, 1, c, nullptr), loomInvalidArgument, c, "recvbuff is NULL");
  EXPECT_ERROR(loomSend(&x, 1, static_cast<loomDataType_t>(12), 1, c, nullptr), loomInvalidArgument, c,
               "datatype 12");
  EXPECT_ERROR(loomSend(&x, 1, static_cast<loomDataType_t>(-1), 1, c, nullptr), loomInvalidArgument, c,
               "datatype -1");
  EXPECT_ERROR(loomSend(&x, SIZE_MAX / 2, loomInt64, 1, c, nullptr), loomInvalidArgument, c, "overflows");
  EXPECT_ERROR(loomSend(&x, 1, loomInt32, 2, c, nullptr), loomInvalidArgument, c, "peer 2 is out of range [0, 2)");
  EXPECT_ERROR(loomRecv(&x, 1, loomInt32, -1, c, nullptr), loomInvalidArgument, c, "peer -1");
  int notAStream = 0;
  EXPECT_ERROR(loomSend(&x, 1, loomInt32, 1, c, &notAStream), loomInvalidUsage, c, "not a live host stream");
  EXPECT_ERROR(loomSend(&x, 1, loomInt32, 1, nullptr, nullptr), loomInvalidArgument, nullptr, "comm is NULL");
  EXPECT_ERROR(loomCommCount(c, nullptr), loomInvalidArgument, c, "output pointer is NULL");
  EXPECT_ERROR(loomGroupEnd(), loomInvalidUsage, nullptr, "without a matching loomGroupStart");
  LOOM_EXPECT_OK(loomGroupStart(), nullptr);
  EXPECT_ERROR(loomBarrier(c, nullptr), loomInvalidUsage, c, "inside a loomGroupStart/End group");
  LOOM_EXPECT_OK(loomGroupEnd(), nullptr);
  EXPECT_ERROR(loomCommSplit(c, -5, 0, nullptr, nullptr), loomInvalidArgument, c, "newcomm is NULL");
  loomComm_t sub = nullptr;
  EXPECT_ERROR(loomCommSplit(c, -5, 0, &sub, nullptr), loomInvalidArgument, c, "color -5");
  const int one = 1, twice[2] = {1, 1}, outside = 2, self = 0;
  EXPECT_ERROR(loomCommShrink(c, &one, 1, nullptr, nullptr, LOOM_SHRINK_DEFAULT), loomInvalidArgument, c,
               "newcomm is NULL");
  EXPECT_ERROR(loomCommShrink(c, &one, 1, &sub, nullptr, 2), loomInvalidArgument, c, "flags 2");
  EXPECT_ERROR(loomCommShrink(c, &one, -1, &sub, nullptr, LOOM_SHRINK_DEFAULT), loomInvalidArgument, c,
               "excludeCount -1");
  EXPECT_ERROR(loomCommShrink(c, nullptr, 1, &sub, nullptr, LOOM_SHRINK_DEFAULT), loomInvalidArgument, c,
               "excludeRanks is NULL");
  EXPECT_ERROR(loomCommShrink(c, &outside, 1, &sub, nullptr, LOOM_SHRINK_DEFAULT), loomInvalidArgument, c,
               "excluded rank 2 is out of range [0, 2)");
  EXPECT_ERROR(loomCommShrink(c, twice, 2, &sub, nullptr, LOOM_SHRINK_DEFAULT), loomInvalidArgument, c,
               "rank 1 is excluded twice");
  EXPECT_ERROR(loomCommShrink(c, &self, 1, &sub, nullptr, LOOM_SHRINK_ABORT), loomInvalidArgument, c,
               "excludes itself");
  EXPECT_ERROR(loomCommShrink(nullptr, &one, 1, &sub, nullptr, LOOM_SHRINK_DEFAULT), loomInvalidArgument, nullptr,
               "comm is NULL");
  EXPECT_ERROR(loomCommRevoke(c, 1), loomInvalidArgument, c, "flags 1");
  double us = 0;
  EXPECT_ERROR(loomGroupSimulateEnd(&us), loomInvalidUsage, nullptr, "without a matching loomGroupStart");
  LOOM_EXPECT_OK(loomGroupStart(), nullptr);
  EXPECT_ERROR(loomGroupSimulateEnd(nullptr), loomInvalidArgument, nullptr, "estimatedUs is NULL");
  LOOM_EXPECT_OK(loomGroupEnd(), nullptr);  // the refused simulation left the group open
  EXPECT_ERROR(loomCommRevoke(nullptr, LOOM_REVOKE_DEFAULT), loomInvalidArgument, nullptr, "comm is NULL");
  // Premultiplied sums: made and used on one communicator, for one type, while they live.
  float two = 2.0f;
  float values[4] = {};
  loomRedOp_t premul = loomSum, premulOther = loomSum;
  EXPECT_ERROR(loomRedOpCreatePreMulSum(nullptr, &two, loomFloat32, loomScalarHostImmediate, c), loomInvalidArgument,
               c, "op is NULL");
  EXPECT_ERROR(loomRedOpCreatePreMulSum(&premul, nullptr, loomFloat32, loomScalarHostImmediate, c),
               loomInvalidArgument, c, "scalar is NULL");
  EXPECT_ERROR(loomRedOpCreatePreMulSum(&premul, &two, loomNumTypes, loomScalarHostImmediate, c), loomInvalidArgument,
               c, "datatype 12");
  EXPECT_ERROR(loomRedOpCreatePreMulSum(&premul, &two, loomFloat32, static_cast<loomScalarResidence_t>(2), c),
               loomInvalidArgument, c, "residence 2");
  EXPECT_ERROR(loomRedOpCreatePreMulSum(&premul, &two, loomFloat32, loomScalarHostImmediate, nullptr),
               loomInvalidArgument, nullptr, "comm is NULL");
  LOOM_ASSERT_OK(loomRedOpCreatePreMulSum(&premul, &two, loomFloat32, loomScalarHostImmediate, c), c);
  EXPECT_ERROR(loomAllReduce(values, values, 4, loomInt32, premul, c, nullptr), loomInvalidArgument, c,
               "was made for datatype float32; the call's datatype is int32");
  EXPECT_ERROR(loomReduce(values, values, 4, loomFloat32, premul, 0, comms[1], nullptr), loomInvalidArgument,
               comms[1], "nor a live op from loomRedOpCreatePreMulSum on this communicator");
  EXPECT_ERROR(loomRedOpDestroy(premul, comms[1]), loomInvalidArgument, comms[1], "not an op made by");
  EXPECT_ERROR(loomRedOpDestroy(loomSum, c), loomInvalidArgument, c, "not an op made by");
  LOOM_EXPECT_OK(loomRedOpCreatePreMulSum(&premulOther, &two, loomFloat32, loomScalarDevice, c), c);
  EXPECT_NE(premul, premulOther);
  LOOM_EXPECT_OK(loomRedOpDestroy(premul, c), c);
  EXPECT_ERROR(loomRedOpDestroy(premul, c), loomInvalidArgument, c, "not an op made by");
  EXPECT_ERROR(loomReduceScatter(values, values, 2, loomFloat32, premul, c, nullptr), loomInvalidArgument, c,
               "nor a live op");
  EXPECT_ERROR(loomAllReduce(values, values, 4, loomFloat32, static_cast<loomRedOp_t>(-1), c, nullptr),
               loomInvalidArgument, c, "op -1");
  LOOM_EXPECT_OK(loomRedOpDestroy(premulOther, c), c);
  EXPECT_ERROR(loomStreamSynchronize(&notAStream), loomInvalidUsage, nullptr, "not a live host stream");
  EXPECT_ERROR(loomGetVersion(nullptr), loomInvalidArgument, nullptr, "version is NULL");

  // Still works: the rejected calls changed nothing.
  loomResult_t async = loomInternalError;
  LOOM_EXPECT_OK(loomCommGetAsyncError(c, &async), c);
  EXPECT_EQ(async, loomSuccess);
  std::thread other([&] { LOOM_EXPECT_OK(loomBarrier(comms[1], nullptr), comms[1]); });
  LOOM_EXPECT_OK(loomBarrier(c, nullptr), c);
  other.join();
  for (loomComm_t comm : comms) LOOM_EXPECT_OK(loomCommDestroy(comm), nullptr);

  // Use after destroy.
  EXPECT_ERROR(loomBarrier(c, nullptr), loomInvalidUsage, nullptr, "not a live communicator");
  EXPECT_ERROR(loomCommDestroy(c), loomInvalidUsage, nullptr, "not a live communicator");
}

TEST(Validation, InitArguments) {
  loomUniqueId id;
  LOOM_ASSERT_OK(loomGetUniqueId(&id), nullptr);
  loomComm_t comm = nullptr;
  EXPECT_ERROR(loomCommInitRank(&comm, 0, id, 0), loomInvalidArgument, nullptr, "nranks 0");
  EXPECT_ERROR(loomCommInitRank(&comm, 2, id, 2), loomInvalidArgument, nullptr, "rank 2 is out of range");
  EXPECT_ERROR(loomCommInitRank(nullptr, 1, id, 0), loomInvalidArgument, nullptr, "output pointer");
  loomUniqueId garbage;
  std::memset(&garbage, 0x5a, sizeof(garbage));
  EXPECT_ERROR(loomCommInitRank(&comm, 1, garbage, 0), loomInvalidArgument, nullptr, "bad magic");
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.device = 999;  // no machine has it, with or without a GPU
  EXPECT_ERROR(loomCommInitRankConfig(&comm, 1, id, 0, &config), loomInvalidUsage, nullptr,
               "config.device=999 asks for a device communicator");
  config = LOOM_CONFIG_INITIALIZER;
  config.timeoutMs = -3;
  EXPECT_ERROR(loomCommInitRankConfig(&comm, 1, id, 0, &config), loomInvalidArgument, nullptr,
               "timeoutMs=-3");
  loomConfig_t zeroed{};
  EXPECT_ERROR(loomCommInitRankConfig(&comm, 1, id, 0, &zeroed), loomInvalidArgument, nullptr,
               "LOOM_CONFIG_INITIALIZER");
  EXPECT_ERROR(loomCommInitAll(&comm, 0, nullptr), loomInvalidArgument, nullptr, "ndev 0");
  EXPECT_EQ(comm, nullptr);
  // None of the rejected calls reached the root: the id still forms a communicator.
  LOOM_EXPECT_OK(loomCommInitRank(&comm, 1, id, 0), nullptr);
  LOOM_EXPECT_OK(loomCommDestroy(comm), nullptr);
}

class Runtime : public testing::TestWithParam<loomtest::Mode> {};

TEST_P(Runtime, MismatchedCountsAreAnErrorOnTheReceiver) {
  loomtest::RankOptions options;
  options.timeoutMs = 3000;
  loomtest::runRanks(2, GetParam(), [](loomComm_t comm, int rank) {
    std::vector<float> buf(100, 1.0f);
    if (rank == 0) {
      LOOM_EXPECT_OK(loomSend(buf.data(), 100, loomFloat32, 1, comm, nullptr), comm);
    } else {
      EXPECT_EQ(loomRecv(buf.data(), 50, loomFloat32, 0, comm, nullptr), loomInvalidUsage);
      std::string m = lastError(comm);
      EXPECT_NE(m.find("rank 0 sent 400 bytes but this rank's loomRecv expects 200"), std::string::npos) << m;
      loomResult_t async = loomSuccess;
      LOOM_EXPECT_OK(loomCommGetAsyncError(comm, &async), comm);
      EXPECT_EQ(async, loomInvalidUsage);
      // The links are out of step now: later calls fail fast instead of misreading data.
      EXPECT_EQ(loomBarrier(comm, nullptr), loomInvalidUsage);
      EXPECT_NE(lastError(comm).find("error state"), std::string::npos) << lastError(comm);
    }
  }, options);
}

TEST_P(Runtime, SilentPeerIsATimeoutNamingIt) {
  loomtest::RankOptions options;
  options.timeoutMs = 1000;
  loomtest::runRanks(2, GetParam(), [](loomComm_t comm, int rank) {
    if (rank == 1) {  // alive but silent: exiting would make it a dead peer instead
      std::this_thread::sleep_for(std::chrono::milliseconds(2000));
      return;
    }
    int x = 0;
    auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(loomRecv(&x, 1, loomInt32, 1, comm, nullptr), loomTimeout);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(s, 4.0);
    std::string m = lastError(comm);
    EXPECT_NE(m.find("loomRecv from rank 1 (0 of 4 bytes received) timed out after 1000 ms"),
              std::string::npos) << m;
  }, options);
}

// A collective's timeout names the call by its number, the peer and how far it got.
TEST_P(Runtime, CollectiveTimeoutNamesCallPeerAndProgress) {
  // The plan's link steps time out here, not the mapped allreduce's board (its own test).
  loomtest::ScopedEnv plan("LOOM_MAPPED_MIN_BYTES", "0");
  loomtest::RankOptions options;
  options.timeoutMs = 1000;
  loomtest::runRanks(2, GetParam(), [](loomComm_t comm, int rank) {
    std::vector<float> a(100000, 1.0f), b(100000, 0.0f);
    for (int i = 0; i < 2; ++i)
      LOOM_EXPECT_OK(loomAllReduce(a.data(), b.data(), a.size(), loomFloat32, loomSum, comm, nullptr), comm);
    if (rank == 1) {  // alive but silent from its third call on
      std::this_thread::sleep_for(std::chrono::milliseconds(2000));
      return;
    }
    EXPECT_EQ(loomAllReduce(a.data(), b.data(), a.size(), loomFloat32, loomSum, comm, nullptr), loomTimeout);
    std::string m = lastError(comm);
    EXPECT_NE(m.find("call #3 loomAllReduce(count 100000, float32, sum): "), std::string::npos) << m;
    EXPECT_TRUE(m.find("receiving from rank 1 (") != std::string::npos ||
                m.find("sending to rank 1 (") != std::string::npos) << m;
    EXPECT_NE(m.find(" bytes of this step "), std::string::npos) << m;
    EXPECT_NE(m.find("timed out after 1000 ms"), std::string::npos) << m;
  }, options);
}

// On a stream the call returns at once and the deadline ends the stream's work instead:
// loomStreamSynchronize returns the same loomTimeout, naming the call, the peer and the bytes.
TEST_P(Runtime, StreamSynchronizeEndsAtTheDeadlineNamingCallAndPeer) {
  loomtest::ScopedEnv plan("LOOM_MAPPED_MIN_BYTES", "0");
  loomtest::RankOptions options;
  options.timeoutMs = 1000;
  loomtest::runRanks(2, GetParam(), [](loomComm_t comm, int rank) {
    std::vector<float> a(100000, 1.0f), b(100000, 0.0f);
    LOOM_EXPECT_OK(loomAllReduce(a.data(), b.data(), a.size(), loomFloat32, loomSum, comm, nullptr), comm);
    if (rank == 1) {  // alive but silent from its second call on
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      return;
    }
    loomStream_t stream = nullptr;
    LOOM_ASSERT_OK(loomStreamCreate(&stream), nullptr);
    auto start = std::chrono::steady_clock::now();
    LOOM_EXPECT_OK(loomAllReduce(a.data(), b.data(), a.size(), loomFloat32, loomSum, comm, stream), comm);
    EXPECT_EQ(loomStreamSynchronize(stream), loomTimeout);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(s, 2.0);
    std::string m = lastError(nullptr);
    EXPECT_NE(m.find("call #2 loomAllReduce(count 100000, float32, sum): "), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1 ("), std::string::npos) << m;
    EXPECT_NE(m.find("timed out after 1000 ms"), std::string::npos) << m;
    LOOM_EXPECT_OK(loomStreamDestroy(stream), nullptr);
  }, options);
}

INSTANTIATE_TEST_SUITE_P(Modes, Runtime, testing::Values(loomtest::Mode::kThreads, loomtest::Mode::kProcesses),
                         [](const auto& info) { return loomtest::modeName(info.param); });

TEST(Runtime, DeadPeerIsARemoteErrorWithinSeconds) {
  loomtest::RankOptions options;
  options.timeoutMs = 60000;  // the error must come from the closed socket, not a timeout
  loomtest::runRanks(3, loomtest::Mode::kProcesses, [](loomComm_t comm, int rank) {
    LOOM_EXPECT_OK(loomBarrier(comm, nullptr), comm);
    if (rank == 2) ::_exit(0);  // dies without a word, as kill -9 would leave it
    std::vector<char> big(1 << 20);
    auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(loomRecv(big.data(), big.size(), loomUint8, 2, comm, nullptr), loomRemoteError);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(s, 5.0);
    std::string m = lastError(comm);
    EXPECT_NE(m.find("loomRecv from rank 2"), std::string::npos) << m;
    // Over shared memory (same host) the peer's exit is seen by its pid, over TCP by the
    // closed connection.
    EXPECT_TRUE(m.find("has exited") != std::string::npos || m.find("closed the connection") != std::string::npos)
        << m;
  }, options);
}

// Over TCP links are made on first use: a rank that dies before its links to the others
// exist must not leave them waiting to connect until the deadline (60 s here).
TEST(Runtime, PeerDeadBeforeItsSocketLinksExistIsARemoteError) {
  loomtest::RankOptions options;
  options.timeoutMs = 60000;
  ::setenv("LOOM_TRANSPORTS", "socket", 1);
  loomtest::runRanks(3, loomtest::Mode::kProcesses, [](loomComm_t comm, int rank) {
    if (rank == 2) ::_exit(0);  // no link to anyone yet
    double s = 0;
    EXPECT_EQ(timedAllReduce(comm, &s), loomRemoteError);
    EXPECT_LT(s, 5.0);
    // Rank 2 itself, or a neighbour that gave up because of it and said so.
    std::string m = lastError(comm);
    EXPECT_NE(m.find("rank 2"), std::string::npos) << m;
    EXPECT_NE(m.find("call #1 loomAllReduce(count 1000, float32, sum)"), std::string::npos) << m;
  }, options);
  ::unsetenv("LOOM_TRANSPORTS");
}

// A peer that is alive but never makes its first link: the deadline names the call, the peer
// and that the links were still being made.
TEST(Runtime, SilentPeerBeforeItsFirstLinkIsATimeoutNamingCallAndPeer) {
  loomtest::RankOptions options;
  options.timeoutMs = 1000;
  ::setenv("LOOM_TRANSPORTS", "socket", 1);
  loomtest::runRanks(2, loomtest::Mode::kProcesses, [](loomComm_t comm, int rank) {
    if (rank == 0) {  // alive but silent: rank 1 waits for its connection
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      return;
    }
    double s = 0;
    EXPECT_EQ(timedAllReduce(comm, &s), loomTimeout);
    EXPECT_LT(s, 2.0);
    std::string m = lastError(comm);
    EXPECT_NE(m.find("call #1 loomAllReduce(count 1000, float32, sum): making its links: socket transport: waiting "
                     "for a connection from rank 0: "),
              std::string::npos) << m;
    EXPECT_NE(m.find("before the deadline"), std::string::npos) << m;
  }, options);
  ::unsetenv("LOOM_TRANSPORTS");
}

TEST(Runtime, AbortFromAnotherThreadUnblocksAWait) {
  std::vector<loomComm_t> comms(2);
  ::setenv("LOOM_TIMEOUT_MS", "60000", 1);
  LOOM_ASSERT_OK(loomCommInitAll(comms.data(), 2, nullptr), nullptr);
  loomStream_t stream = nullptr;
  LOOM_ASSERT_OK(loomStreamCreate(&stream), nullptr);
  int x = 0;
  // Rank 0 waits on its stream for a message rank 1 never sends.
  LOOM_EXPECT_OK(loomRecv(&x, 1, loomInt32, 1, comms[0], stream), comms[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(loomStreamQuery(stream), loomInProgress);
  auto start = std::chrono::steady_clock::now();
  LOOM_EXPECT_OK(loomCommAbort(comms[0]), nullptr);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 2.0);
  EXPECT_EQ(loomStreamSynchronize(stream), loomInvalidUsage);
  EXPECT_NE(lastError(nullptr).find("aborted"), std::string::npos) << lastError(nullptr);
  LOOM_EXPECT_OK(loomStreamDestroy(stream), nullptr);
  LOOM_EXPECT_OK(loomCommDestroy(comms[1]), nullptr);
  ::unsetenv("LOOM_TIMEOUT_MS");
}

// The blocking form: a thread is inside loomRecv on the NULL stream when another thread
// aborts; the call returns the abort error and the communicator is freed only after it left.
TEST(Runtime, AbortUnblocksACallInsideAnotherThread) {
  std::vector<loomComm_t> comms(2);
  ::setenv("LOOM_TIMEOUT_MS", "60000", 1);
  LOOM_ASSERT_OK(loomCommInitAll(comms.data(), 2, nullptr), nullptr);
  ::unsetenv("LOOM_TIMEOUT_MS");
  loomResult_t result = loomSuccess;
  std::string message;
  std::thread blocked([&] {
    int x = 0;
    result = loomRecv(&x, 1, loomInt32, 1, comms[0], nullptr);
    message = loomGetLastError(nullptr);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto start = std::chrono::steady_clock::now();
  LOOM_EXPECT_OK(loomCommAbort(comms[0]), nullptr);
  blocked.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 2.0);
  EXPECT_EQ(result, loomInvalidUsage);
  EXPECT_NE(message.find("aborted"), std::string::npos) << message;
  LOOM_EXPECT_OK(loomCommDestroy(comms[1]), nullptr);
}

}  // namespace
