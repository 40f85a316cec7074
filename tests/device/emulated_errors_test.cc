// Failures of device communicators, in the CPU emulation (LOOM_DEVICE_EMULATION=1), which runs
// the plan kernel's own code: calls the ranks disagree on, a timeout and loomCommAbort while a
// kernel waits, a peer process that dies mid-call (and the survivors' shrink), and ranks on
// different hosts (LOOM_HOSTID), whose FIFOs a proxy thread bridges over sockets. Each must end
// in a clear error on every rank that waited, never a hang or a wrong result.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common/sanitizer.h"
#include "multirank/collective_reference.h"
#include "multirank/harness.h"
#include "multirank/shared_records.h"

namespace {

using loomtest::CaseOutcome;
using loomtest::CollectiveCase;
using loomtest::Mode;
using loomtest::ScopedEnv;
using loomtest::SharedRecords;

loomtest::RankOptions emulated(int timeoutMs) {
  loomtest::RankOptions options;
  options.device = 0;
  options.timeoutMs = timeoutMs;
  options.deadlineMs = 120000;
  return options;
}

bool contains(const std::string& text, const char* what) { return text.find(what) != std::string::npos; }

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class EmulatedDeviceErrors : public testing::TestWithParam<Mode> {};

// Counts that differ: the receiver of the short piece names both sizes; its peer, waiting
// on it, learns that it failed. Every rank's call returns an error.
TEST_P(EmulatedDeviceErrors, MismatchedCountsFailOnEveryRank) {
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  loomtest::runRanks(2, GetParam(), [](loomComm_t comm, int rank) {
    std::vector<float> buf(4096, 1.0f);
    const size_t count = rank == 0 ? 1000 : 2000;
    const loomResult_t r = loomAllReduce(buf.data(), buf.data(), count, loomFloat32, loomSum, comm, nullptr);
    EXPECT_NE(r, loomSuccess) << "rank " << rank << ": the mismatch went unnoticed";
    const std::string text = loomGetLastError(comm);
    EXPECT_TRUE(contains(text, "loomAllReduce")) << text;
    EXPECT_TRUE(contains(text, "mismatched calls") || contains(text, "gave up because rank")) << text;
    loomResult_t async = loomSuccess;
    EXPECT_EQ(loomCommGetAsyncError(comm, &async), loomSuccess);
    EXPECT_NE(async, loomSuccess);
    std::printf("rank %d: %s\n", rank, text.c_str());
  }, emulated(20000));
}

// The same count of another type: the call headers differ, and the error says how.
TEST_P(EmulatedDeviceErrors, MismatchedTypesAreNamed) {
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  loomtest::runRanks(2, GetParam(), [](loomComm_t comm, int rank) {
    std::vector<int32_t> buf(1024, 1);
    const loomDataType_t type = rank == 0 ? loomInt32 : loomFloat32;
    EXPECT_NE(loomAllReduce(buf.data(), buf.data(), buf.size(), type, loomSum, comm, nullptr), loomSuccess);
    const std::string text = loomGetLastError(comm);
    EXPECT_TRUE(contains(text, "mismatched calls") || contains(text, "gave up because rank")) << text;
    std::printf("rank %d: %s\n", rank, text.c_str());
  }, emulated(20000));
}

// LOOM_CHECK=1 catches the mismatch on the host, before any kernel starts.
TEST_P(EmulatedDeviceErrors, TheCheckerNamesTheFieldBeforeLaunching) {
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  env.set("LOOM_CHECK", "1");
  loomtest::runRanks(3, GetParam(), [](loomComm_t comm, int rank) {
    std::vector<float> buf(64, 1.0f);
    const loomRedOp_t op = rank == 2 ? loomMax : loomSum;
    EXPECT_EQ(loomAllReduce(buf.data(), buf.data(), buf.size(), loomFloat32, op, comm, nullptr), loomInvalidUsage);
    const std::string text = loomGetLastError(comm);
    EXPECT_TRUE(contains(text, "op")) << text;
  }, emulated(20000));
}

// Rank 1 makes the first call with rank 0 (they connect on it) but not the second: rank 0's
// kernel waits until its wait has seen nothing move for the timeout, and the error names the
// call, the step and the peer.
TEST_P(EmulatedDeviceErrors, AWaitingKernelEndsAtTheTimeout) {
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  loomtest::runRanks(2, GetParam(), [&](loomComm_t comm, int rank) {
    std::vector<float> buf(1 << 16, 1.0f);
    LOOM_ASSERT_OK(loomAllReduce(buf.data(), buf.data(), buf.size(), loomFloat32, loomSum, comm, nullptr), comm);
    if (rank == 1) {
      // Stays alive (an exited process is a dead peer, another test) without calling.
      std::this_thread::sleep_for(std::chrono::seconds(4));
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    const loomResult_t r = loomAllReduce(buf.data(), buf.data(), buf.size(), loomFloat32, loomSum, comm, nullptr);
    const double seconds = secondsSince(start);
    EXPECT_EQ(r, loomTimeout) << loomGetLastError(comm);
    const std::string text = loomGetLastError(comm);
    EXPECT_TRUE(contains(text, "call #2 loomAllReduce")) << text;
    EXPECT_TRUE(contains(text, "rank 1")) << text;
    EXPECT_TRUE(contains(text, "timed out")) << text;
    // Rank 1 sent nothing of this call: the receiver says it waited for the FIFO, not a step.
    EXPECT_TRUE(contains(text, "it waited for piece")) << text;
    EXPECT_LT(seconds, 3.0) << text;
    std::printf("rank 0 after %.2f s: %s\n", seconds, text.c_str());
  }, emulated(1000));
}

// Calls where every rank waits for another's bytes send nothing a kernel could compare: each
// rank names itself a reduce's root, or the second call of a group differs so (its first is
// the same everywhere). The watchdogs compare the running launches' calls on the shared-memory
// board and stop them within milliseconds, not at the 10 s timeout; every rank fails, one at
// least naming the mismatch. With 3 ranks a rank may wait for a peer's FIFO handle that never
// comes (the peer needs no connection to it in its call); it compares the calls too.
class EmulatedDeviceWaitingForEachOther : public testing::TestWithParam<std::tuple<Mode, int, bool, bool>> {};

TEST_P(EmulatedDeviceWaitingForEachOther, FailWithinASecond) {
  auto [mode, nranks, inGroup, twoHosts] = GetParam();
  SKIP_PROCESSES_UNDER_TSAN(mode == Mode::kProcesses);
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  loomtest::RankOptions options = emulated(10000);
  if (twoHosts) {
    options.beforeInit = [](int rank) { ::setenv("LOOM_HOSTID", rank % 2 == 0 ? "host-a" : "host-b", 1); };
  }
  SharedRecords records(nranks);
  ASSERT_TRUE(records.ok()) << "mmap failed";
  loomtest::runRanks(nranks, mode, [&, inGroup = inGroup](loomComm_t comm, int rank) {
    std::vector<float> data(4096, 1.0f), other(4096, 1.0f);
    LOOM_ASSERT_OK(loomAllReduce(data.data(), data.data(), 64, loomFloat32, loomSum, comm, nullptr), comm);
    loomtest::record(records[rank], comm, [&] {
      if (!inGroup) return loomReduce(data.data(), data.data(), data.size(), loomFloat32, loomSum, rank, comm, nullptr);
      loomResult_t r = loomGroupStart();
      if (r == loomSuccess) {
        r = loomAllReduce(other.data(), other.data(), other.size(), loomFloat32, loomSum, comm, nullptr);
      }
      if (r == loomSuccess) {
        r = loomReduce(data.data(), data.data(), data.size(), loomFloat32, loomSum, rank, comm, nullptr);
      }
      const loomResult_t end = loomGroupEnd();
      return r != loomSuccess ? r : end;
    });
    // A rank that failed keeps its communicator past the bound: a peer still connecting to it
    // must find the mismatch itself, not learn it from the connection closing.
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  }, options);
  loomtest::expectMismatchFoundWithin(records, nranks, 1.0);
  std::printf("%s\n", records.summary().c_str());
}

INSTANTIATE_TEST_SUITE_P(Board, EmulatedDeviceWaitingForEachOther,
                         testing::Combine(testing::Values(Mode::kThreads, Mode::kProcesses), testing::Values(2, 3),
                                          testing::Bool(), testing::Values(false)),
                         [](const auto& info) {
                           return loomtest::modeName(std::get<0>(info.param)) + "_" +
                                  std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) ? "_SecondCallOfAGroup" : "_Alone");
                         });

// Ranks on two hosts (processes: LOOM_HOSTID) have no board: the watchdogs tell each other over
// a bootstrap channel of their own.
INSTANTIATE_TEST_SUITE_P(TwoHosts, EmulatedDeviceWaitingForEachOther,
                         testing::Combine(testing::Values(Mode::kProcesses), testing::Values(2, 4), testing::Bool(),
                                          testing::Values(true)),
                         [](const auto& info) {
                           return std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) ? "_SecondCallOfAGroup" : "_Alone");
                         });

// loomCommAbort from another thread while rank 0's call waits inside its kernel for rank 1:
// the call returns the abort error at once, and the communicator is freed after it left.
TEST(EmulatedDeviceAbort, AbortEndsACallWaitingInItsKernel) {
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  env.set("LOOM_TIMEOUT_MS", "60000");
  std::vector<loomComm_t> comms(2);
  const int devices[2] = {0, 0};
  LOOM_ASSERT_OK(loomCommInitAll(comms.data(), 2, devices), nullptr);
  std::vector<float> a(1 << 16, 1.0f), b(1 << 16, 2.0f);
  // Together first, so that the ranks are connected (a first call connects on the host).
  LOOM_ASSERT_OK(loomGroupStart(), nullptr);
  LOOM_EXPECT_OK(loomAllReduce(a.data(), a.data(), a.size(), loomFloat32, loomSum, comms[0], nullptr), comms[0]);
  LOOM_EXPECT_OK(loomAllReduce(b.data(), b.data(), b.size(), loomFloat32, loomSum, comms[1], nullptr), comms[1]);
  LOOM_ASSERT_OK(loomGroupEnd(), nullptr);
  ASSERT_EQ(a[0], 3.0f);
  loomResult_t result = loomSuccess;
  std::string message;
  std::thread blocked([&] {
    result = loomAllReduce(a.data(), a.data(), a.size(), loomFloat32, loomSum, comms[0], nullptr);
    message = loomGetLastError(nullptr);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  LOOM_EXPECT_OK(loomCommAbort(comms[0]), nullptr);
  blocked.join();
  EXPECT_LT(secondsSince(start), 2.0);
  EXPECT_EQ(result, loomInvalidUsage);
  EXPECT_TRUE(contains(message, "loomAllReduce") && contains(message, "aborted")) << message;
  std::printf("the blocked call: %s\n", message.c_str());
  LOOM_EXPECT_OK(loomCommDestroy(comms[1]), nullptr);
}

// Rank 2's process exits in the middle of the ranks' second call: ranks 0 and 1 end with an
// error naming it (or naming the rank that gave up because of it) long before the timeout,
// then shrink the communicator and go on without it.
TEST(EmulatedDevicePeers, AProcessThatDiesMidCallLeavesErrorsNotHangs) {
  // Only processes can die this way; ThreadSanitizer reported the order their FIFOs give as a
  // race once two channels carried a call of this size (plain and ASan builds run it).
  SKIP_PROCESSES_UNDER_TSAN(true);
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  loomtest::runRanks(3, Mode::kProcesses, [](loomComm_t comm, int rank) {
    std::vector<float> buf(1 << 16, 1.0f);
    LOOM_ASSERT_OK(loomAllReduce(buf.data(), buf.data(), buf.size(), loomFloat32, loomSum, comm, nullptr), comm);
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::fflush(nullptr);
      ::_exit(0);  // dies without a word, as a crashed process does
    }
    const auto start = std::chrono::steady_clock::now();
    const loomResult_t r = loomAllReduce(buf.data(), buf.data(), buf.size(), loomFloat32, loomSum, comm, nullptr);
    const double seconds = secondsSince(start);
    EXPECT_EQ(r, loomRemoteError) << loomGetLastError(comm);
    const std::string text = loomGetLastError(comm);
    EXPECT_TRUE(contains(text, "rank 2") || contains(text, "because rank 2")) << text;
    EXPECT_LT(seconds, 10.0) << text;
    std::printf("rank %d after %.2f s: %s\n", rank, seconds, text.c_str());
    // The two left go on as a device communicator of their own.
    const int dead = 2;
    loomComm_t pair = nullptr;
    LOOM_ASSERT_OK(loomCommShrink(comm, &dead, 1, &pair, nullptr, LOOM_SHRINK_DEFAULT), comm);
    int device = -1;
    LOOM_EXPECT_OK(loomCommDevice(pair, &device), pair);
    EXPECT_EQ(device, 0);
    std::fill(buf.begin(), buf.end(), static_cast<float>(rank + 1));
    LOOM_EXPECT_OK(loomAllReduce(buf.data(), buf.data(), buf.size(), loomFloat32, loomSum, pair, nullptr), pair);
    EXPECT_EQ(buf.front(), 3.0f);
    EXPECT_EQ(buf.back(), 3.0f);
    LOOM_EXPECT_OK(loomCommDestroy(pair), nullptr);
  }, emulated(60000));
}

// A rank on another host that gives up and stays alive (here it aborts its communicator
// instead of making the call) tells its peers so over the watchdogs' channel: the peer waiting
// in its kernel fails within a second, not at its timeout (20 s), nor a second after the
// aborted rank's proxy link closes.
TEST(EmulatedDevicePeers, ARankOnAnotherHostThatGivesUpAliveLeavesErrors) {
  SKIP_PROCESSES_UNDER_TSAN(true);
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  loomtest::RankOptions options = emulated(20000);
  options.beforeInit = [](int rank) { ::setenv("LOOM_HOSTID", rank == 0 ? "hostA" : "hostB", 1); };
  loomtest::runRanks(2, Mode::kProcesses, [](loomComm_t comm, int rank) {
    loomComm_t sub = nullptr;
    LOOM_ASSERT_OK(loomCommSplit(comm, 0, rank, &sub, nullptr), comm);
    std::vector<float> buf(1 << 16, 1.0f);
    LOOM_ASSERT_OK(loomAllReduce(buf.data(), buf.data(), buf.size(), loomFloat32, loomSum, sub, nullptr), sub);
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      LOOM_EXPECT_OK(loomCommAbort(sub), nullptr);
      std::this_thread::sleep_for(std::chrono::seconds(3));
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    const loomResult_t r = loomAllReduce(buf.data(), buf.data(), buf.size(), loomFloat32, loomSum, sub, nullptr);
    const double seconds = secondsSince(start);
    const std::string text = loomGetLastError(sub);
    EXPECT_EQ(r, loomRemoteError) << text;
    EXPECT_TRUE(contains(text, "rank 1 gave up")) << text;
    EXPECT_LT(seconds, 1.0) << text;
    std::printf("rank 0 after %.2f s: %s\n", seconds, text.c_str());
    LOOM_EXPECT_OK(loomCommDestroy(sub), nullptr);
  }, options);
}

// Ranks 0-1 and 2-3 on two "hosts": FIFOs to the other host are bridged by each rank's proxy
// thread over sockets, the rest stay in shared memory. Every collective must match the
// references on both wires (ll only runs within a host: between hosts the proxy carries it
// on the simple wire).
class EmulatedDeviceAcrossHosts : public testing::TestWithParam<const char*> {};

TEST_P(EmulatedDeviceAcrossHosts, EveryCollectiveAgainstTheReference) {
  SKIP_PROCESSES_UNDER_TSAN(true);
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  env.set("LOOM_PROTO", GetParam()).set("LOOM_CHANNELS", "2").set("LOOM_DEVICE_FIFO_BYTES", "16384");
  constexpr int kRanks = 4;
  const std::vector<CollectiveCase> cases = loomtest::sliceCases(kRanks, 3);
  loomtest::RankOptions options = emulated(30000);
  options.beforeInit = [](int rank) { ::setenv("LOOM_HOSTID", rank < 2 ? "hostA" : "hostB", 1); };
  loomtest::runRanks(kRanks, Mode::kProcesses, [&](loomComm_t comm, int rank) {
    int wrong = 0;
    for (const CollectiveCase& c : cases) {
      const CaseOutcome outcome = loomtest::runCollectiveCase(c, comm, rank, kRanks);
      if (!outcome.error.empty() && ++wrong <= 5) ADD_FAILURE() << "rank " << rank << ": " << outcome.error;
      if (outcome.callFailed) return;
    }
  }, options);
}

INSTANTIATE_TEST_SUITE_P(Wires, EmulatedDeviceAcrossHosts, testing::Values("simple", "ll"),
                         [](const auto& info) { return std::string(info.param); });

// A rank on the other host whose process exits: the proxy's socket closes, and the ranks
// waiting on it end with an error.
TEST(EmulatedDevicePeers, ARankOnAnotherHostThatDiesLeavesErrors) {
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  loomtest::RankOptions options = emulated(60000);
  options.beforeInit = [](int rank) { ::setenv("LOOM_HOSTID", rank == 0 ? "hostA" : "hostB", 1); };
  loomtest::runRanks(2, Mode::kProcesses, [](loomComm_t comm, int rank) {
    std::vector<float> buf(1 << 16, 1.0f);
    LOOM_ASSERT_OK(loomAllReduce(buf.data(), buf.data(), buf.size(), loomFloat32, loomSum, comm, nullptr), comm);
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::fflush(nullptr);
      ::_exit(0);
    }
    const auto start = std::chrono::steady_clock::now();
    const loomResult_t r = loomAllReduce(buf.data(), buf.data(), buf.size(), loomFloat32, loomSum, comm, nullptr);
    const double seconds = secondsSince(start);
    EXPECT_EQ(r, loomRemoteError) << loomGetLastError(comm);
    const std::string text = loomGetLastError(comm);
    EXPECT_TRUE(contains(text, "rank 1")) << text;
    EXPECT_LT(seconds, 10.0) << text;
    std::printf("rank 0 after %.2f s: %s\n", seconds, text.c_str());
  }, options);
}

// A rank that sends and then leaves at once (destroys its communicator, exits) while its
// peer has not even started to receive: what it sent still arrives whole, on one host (the
// FIFO is the receiver's memory) and across hosts (the proxy sends what is left before the
// sockets close), and the peer's watchdog does not mistake the clean exit for a failure.
class EmulatedDeviceDepartures : public testing::TestWithParam<bool> {};

TEST_P(EmulatedDeviceDepartures, ASenderThatLeavesRightAfterSendingStillDelivers) {
  const bool twoHosts = GetParam();
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  env.set("LOOM_DEVICE_FIFO_BYTES", "65536");
  loomtest::RankOptions options = emulated(20000);
  if (twoHosts) options.beforeInit = [](int rank) { ::setenv("LOOM_HOSTID", rank == 0 ? "hostA" : "hostB", 1); };
  // Across hosts several times the FIFO, so that most of it is still on its way when the
  // sender leaves; on one host what fits the FIFO (a larger send would wait for the receiver).
  const size_t count = twoHosts ? (1 << 20) : (8 << 10);
  loomtest::runRanks(2, Mode::kProcesses, [&](loomComm_t comm, int rank) {
    std::vector<int32_t> buf(count);
    if (rank == 0) {
      for (size_t i = 0; i < count; ++i) buf[i] = static_cast<int32_t>(i * 7 + 1);
      LOOM_ASSERT_OK(loomSend(buf.data(), count, loomInt32, 1, comm, nullptr), comm);
      return;  // the harness destroys the communicator and the process exits
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    LOOM_ASSERT_OK(loomRecv(buf.data(), count, loomInt32, 0, comm, nullptr), comm);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(buf[i], static_cast<int32_t>(i * 7 + 1)) << "element " << i;
    // Later calls with no peer left to answer are another matter (a timeout or "gone").
  }, options);
}

INSTANTIATE_TEST_SUITE_P(Hosts, EmulatedDeviceDepartures, testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "two_hosts" : "one_host"); });

// The same between thread ranks, whose FIFO blocks are each other's memory by address: the
// sender destroys its communicator before the receiver has even connected, and the receiver
// then writes its consumer counters into the sender's block. The block must outlive the
// sender's communicator until the receiver's is gone too (ASan and TSan see it if not).
TEST(EmulatedDeviceThreadDepartures, ASenderThatDestroysItsCommunicatorFirstLeavesItsBlockToThePeer) {
  ScopedEnv env("LOOM_DEVICE_EMULATION", "1");
  env.set("LOOM_DEVICE_FIFO_BYTES", "65536");
  const size_t count = 8 << 10;  // fits the FIFO: the send ends without the receiver
  loomtest::runRanks(2, Mode::kThreads, [&](loomComm_t comm, int rank) {
    // A communicator of the body's own, so that the sender destroys it while its peer runs.
    loomComm_t sub = nullptr;
    LOOM_ASSERT_OK(loomCommSplit(comm, 0, rank, &sub, nullptr), comm);
    std::vector<int32_t> buf(count);
    if (rank == 0) {
      for (size_t i = 0; i < count; ++i) buf[i] = static_cast<int32_t>(i * 5 + 3);
      LOOM_EXPECT_OK(loomSend(buf.data(), count, loomInt32, 1, sub, nullptr), sub);
      LOOM_EXPECT_OK(loomCommDestroy(sub), nullptr);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    LOOM_EXPECT_OK(loomRecv(buf.data(), count, loomInt32, 0, sub, nullptr), sub);
    for (size_t i = 0; i < count; ++i) EXPECT_EQ(buf[i], static_cast<int32_t>(i * 5 + 3)) << "element " << i;
    LOOM_EXPECT_OK(loomCommDestroy(sub), nullptr);
  }, emulated(20000));
}

INSTANTIATE_TEST_SUITE_P(Modes, EmulatedDeviceErrors, testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& info) { return loomtest::modeName(info.param); });

}  // namespace
