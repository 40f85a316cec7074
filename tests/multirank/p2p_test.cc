// Point-to-point calls, groups and host streams, as threads and as processes.
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/communicator.h"
#include "multirank/harness.h"

namespace {

using loomtest::Mode;

// Deterministic contents for (sender, message index, element).
int32_t pattern(int sender, int message, size_t i) {
  return static_cast<int32_t>(sender * 1000003 + message * 7919 + static_cast<int>(i % 65521));
}

class P2PTest : public testing::TestWithParam<std::tuple<Mode, int>> {};

// Every rank sends three messages of different sizes to every other rank, all in one
// group, in an order that would deadlock without groups.
TEST_P(P2PTest, AllPairsInOneGroupKeepOrder) {
  auto [mode, nranks] = GetParam();
  loomtest::runRanks(nranks, mode, [nranks = nranks](loomComm_t comm, int rank) {
    const size_t sizes[3] = {0, 7, 70000};
    std::vector<std::vector<int32_t>> out(3), in(3 * static_cast<size_t>(nranks));
    for (int m = 0; m < 3; ++m) {
      out[m].resize(sizes[m]);
      for (size_t i = 0; i < sizes[m]; ++i) out[m][i] = pattern(rank, m, i);
    }
    LOOM_ASSERT_OK(loomGroupStart(), comm);
    for (int peer = 0; peer < nranks; ++peer) {
      for (int m = 0; m < 3; ++m) {
        auto& buf = in[static_cast<size_t>(peer * 3 + m)];
        buf.assign(sizes[m], -1);
        LOOM_EXPECT_OK(loomRecv(buf.data(), sizes[m], loomInt32, peer, comm, nullptr), comm);
      }
      for (int m = 0; m < 3; ++m) {
        LOOM_EXPECT_OK(loomSend(out[m].data(), sizes[m], loomInt32, peer, comm, nullptr), comm);
      }
    }
    LOOM_ASSERT_OK(loomGroupEnd(), comm);
    for (int peer = 0; peer < nranks; ++peer) {
      for (int m = 0; m < 3; ++m) {
        const auto& buf = in[static_cast<size_t>(peer * 3 + m)];
        for (size_t i = 0; i < sizes[m]; ++i) {
          ASSERT_EQ(buf[i], pattern(peer, m, i)) << "from rank " << peer << " message " << m << " at " << i;
        }
      }
    }
  });
}

// A large ring shift on a host stream: the call returns at once, synchronize completes it.
TEST_P(P2PTest, RingShiftOnHostStream) {
  auto [mode, nranks] = GetParam();
  loomtest::runRanks(nranks, mode, [nranks = nranks](loomComm_t comm, int rank) {
    const size_t count = 1 << 20;  // 4 MiB: more than socket buffers hold
    std::vector<int32_t> out(count), in(count, -1);
    for (size_t i = 0; i < count; ++i) out[i] = pattern(rank, 0, i);
    loomStream_t stream = nullptr;
    LOOM_ASSERT_OK(loomStreamCreate(&stream), nullptr);
    int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    LOOM_EXPECT_OK(loomGroupStart(), comm);
    LOOM_EXPECT_OK(loomSend(out.data(), count, loomFloat32, right, comm, stream), comm);
    LOOM_EXPECT_OK(loomRecv(in.data(), count, loomFloat32, left, comm, stream), comm);
    LOOM_EXPECT_OK(loomGroupEnd(), comm);
    LOOM_EXPECT_OK(loomBarrier(comm, stream), comm);
    LOOM_EXPECT_OK(loomStreamSynchronize(stream), comm);
    EXPECT_EQ(loomStreamQuery(stream), loomSuccess);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(in[i], pattern(left, 0, i)) << "at " << i;
    LOOM_EXPECT_OK(loomStreamDestroy(stream), nullptr);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, P2PTest,
                         testing::Combine(testing::Values(Mode::kThreads, Mode::kProcesses),
                                          testing::Values(1, 2, 3, 5, 8)),
                         [](const auto& info) {
                           return loomtest::modeName(std::get<0>(info.param)) + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });

class GroupSimulate : public testing::TestWithParam<Mode> {};

// loomGroupSimulateEnd on rank 0 alone: a prediction that grows with the bytes, no data moved,
// an inner level closed with 0; then both ranks' collectives line up, and the simulated calls'
// numbers were taken back (a later failure names the call by its number).
TEST_P(GroupSimulate, PredictsWithoutMakingTheCalls) {
  loomtest::RankOptions options;
  options.timeoutMs = 1000;
  loomtest::runRanks(2, GetParam(), [](loomComm_t comm, int rank) {
    std::vector<float> in(1 << 20, 1.0f), out(in.size(), -1.0f);
    if (rank == 0) {
      auto simulate = [&](size_t count) {
        double us = -1;
        LOOM_EXPECT_OK(loomGroupStart(), comm);
        LOOM_EXPECT_OK(loomAllReduce(in.data(), out.data(), count, loomFloat32, loomSum, comm, nullptr), comm);
        LOOM_EXPECT_OK(loomSend(in.data(), count, loomFloat32, 1, comm, nullptr), comm);
        LOOM_EXPECT_OK(loomGroupSimulateEnd(&us), comm);
        return us;
      };
      const double small = simulate(16), large = simulate(in.size());
      EXPECT_GT(small, 0.0);
      EXPECT_GT(large, small);
      for (float v : out) ASSERT_EQ(v, -1.0f) << "a simulated allreduce wrote its output";
      double inner = -1;
      LOOM_EXPECT_OK(loomGroupStart(), comm);
      LOOM_EXPECT_OK(loomGroupStart(), comm);
      LOOM_EXPECT_OK(loomGroupSimulateEnd(&inner), comm);
      EXPECT_EQ(inner, 0.0);
      LOOM_EXPECT_OK(loomGroupEnd(), comm);
    }
    for (size_t count : {size_t{4}, in.size()}) {
      LOOM_ASSERT_OK(loomAllReduce(in.data(), out.data(), count, loomFloat32, loomSum, comm, nullptr), comm);
      EXPECT_EQ(out[0], 2.0f);
      EXPECT_EQ(out[count - 1], 2.0f);
    }
    if (rank != 0) return;
    // A third collective that rank 1 does not make: its error numbers it #3, not #5.
    EXPECT_NE(loomAllReduce(in.data(), out.data(), in.size(), loomFloat32, loomSum, comm, nullptr), loomSuccess);
    const std::string why = loomGetLastError(comm);
    EXPECT_NE(why.find("call #3 "), std::string::npos) << why;
  }, options);
}

// A rank that gives up tells every peer (its failure notice), and a waiting call hears it; but
// a receive waits on its own peer alone. Rank 2's receive is ended by its revoke while rank 0
// waits 1.5 s for rank 1's late send: rank 0's call must finish, not fail on rank 2's notice.
class P2PNotices : public testing::TestWithParam<Mode> {};

TEST_P(P2PNotices, ANoticeFromARankOutsideTheExchangeEndsNothing) {
  loomtest::RankOptions options;
  options.timeoutMs = 20000;
  loomtest::runRanks(3, GetParam(), [](loomComm_t comm, int rank) {
    int32_t value = -1;
    if (rank == 2) {
      std::thread revoker([comm] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        LOOM_EXPECT_OK(loomCommRevoke(comm, LOOM_REVOKE_DEFAULT), comm);
      });
      EXPECT_NE(loomRecv(&value, 1, loomInt32, 0, comm, nullptr), loomSuccess);  // rank 0 never sends
      revoker.join();
      // Ended while it still waited for its link: named after the revoke all the same.
      const std::string text = loomGetLastError(comm);
      EXPECT_NE(text.find("loomCommRevoke"), std::string::npos) << text;
      return;
    }
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      value = 41;
      LOOM_EXPECT_OK(loomSend(&value, 1, loomInt32, 0, comm, nullptr), comm);
      return;
    }
    LOOM_EXPECT_OK(loomRecv(&value, 1, loomInt32, 1, comm, nullptr), comm);
    EXPECT_EQ(value, 41);
  }, options);
}

INSTANTIATE_TEST_SUITE_P(Modes, P2PNotices, testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& info) { return loomtest::modeName(info.param); });

INSTANTIATE_TEST_SUITE_P(Modes, GroupSimulate, testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& info) { return loomtest::modeName(info.param); });

// One thread drives four communicators of one loomCommInitAll, as NCCL users do with one
// thread per process and several devices: only a group makes this possible.
TEST(P2PSingleThread, OneThreadDrivesAllRanksInAGroup) {
  const int n = 4;
  std::vector<loomComm_t> comms(n);
  LOOM_ASSERT_OK(loomCommInitAll(comms.data(), n, nullptr), nullptr);
  std::vector<int64_t> out(n), in(n, -1);
  LOOM_ASSERT_OK(loomGroupStart(), nullptr);
  for (int r = 0; r < n; ++r) {
    out[r] = 100 + r;
    LOOM_EXPECT_OK(loomSend(&out[r], 1, loomInt64, (r + 1) % n, comms[r], nullptr), comms[r]);
    LOOM_EXPECT_OK(loomRecv(&in[r], 1, loomInt64, (r + n - 1) % n, comms[r], nullptr), comms[r]);
  }
  LOOM_ASSERT_OK(loomGroupEnd(), nullptr);
  for (int r = 0; r < n; ++r) EXPECT_EQ(in[r], 100 + (r + n - 1) % n);
  for (loomComm_t c : comms) LOOM_EXPECT_OK(loomCommDestroy(c), nullptr);
}

TEST(P2PSingleThread, SendToSelfInAGroupAndNestedGroups) {
  loomComm_t comm = nullptr;
  LOOM_ASSERT_OK(loomCommInitAll(&comm, 1, nullptr), nullptr);
  double out[3] = {1.5, 2.5, 3.5}, in[3] = {};
  LOOM_ASSERT_OK(loomGroupStart(), comm);
  LOOM_ASSERT_OK(loomGroupStart(), comm);
  LOOM_EXPECT_OK(loomSend(out, 3, loomFloat64, 0, comm, nullptr), comm);
  LOOM_ASSERT_OK(loomGroupEnd(), comm);  // inner End launches nothing yet
  EXPECT_EQ(in[0], 0.0);
  LOOM_EXPECT_OK(loomRecv(in, 3, loomFloat64, 0, comm, nullptr), comm);
  LOOM_ASSERT_OK(loomGroupEnd(), comm);
  EXPECT_EQ(in[2], 3.5);

  // Unmatched send to self: an error, and the communicator stays usable.
  LOOM_ASSERT_OK(loomGroupStart(), comm);
  LOOM_EXPECT_OK(loomSend(out, 3, loomFloat64, 0, comm, nullptr), comm);
  EXPECT_EQ(loomGroupEnd(), loomInvalidUsage);
  EXPECT_NE(std::string(loomGetLastError(nullptr)).find("send(s) to self"), std::string::npos)
      << loomGetLastError(nullptr);
  LOOM_EXPECT_OK(loomBarrier(comm, nullptr), comm);
  LOOM_EXPECT_OK(loomCommDestroy(comm), nullptr);
}

// UCX over TCP reports an eager send done once its bytes are in the worker's buffer; when the
// socket is full (the receiver is busy elsewhere) the rest of them stay there until a
// progress call. A sender that returns from its call and then waits outside Loom must still
// deliver them: here it waits on a pipe for the receiver, who reads only after a while. The
// UCX settings make that certain rather than likely: 512 KiB messages go as one eager copy
// (no zero-copy, no rendezvous) into socket buffers far smaller than a message.
TEST(P2PUcx, SendsReachAPeerWhileTheSenderWaitsOutsideLoom) {
  if (std::getenv("LOOM_TEST_UCX") == nullptr) GTEST_SKIP() << "skipped: this Loom was built without UCX";
  loomtest::ScopedEnv env("LOOM_TRANSPORTS", "ucx");
  env.set("UCX_TLS", "tcp").set("UCX_TCP_TX_SEG_SIZE", "1m").set("UCX_TCP_RX_SEG_SIZE", "1m");
  env.set("UCX_ZCOPY_THRESH", "inf").set("UCX_RNDV_THRESH", "inf");
  env.set("UCX_TCP_SNDBUF", "4k").set("UCX_TCP_RCVBUF", "64k");
  int received[2];
  ASSERT_EQ(pipe(received), 0);
  constexpr int kMessages = 4;
  constexpr size_t kInts = 128 << 10;  // 512 KiB
  loomtest::RankOptions options;
  options.timeoutMs = 5000;
  loomtest::runRanks(2, Mode::kProcesses, [&](loomComm_t comm, int rank) {
    std::vector<int32_t> buffer(kInts);
    if (rank == 0) {
      for (int m = 0; m < kMessages; ++m) {
        for (size_t i = 0; i < kInts; ++i) buffer[i] = pattern(0, m, i);
        LOOM_ASSERT_OK(loomSend(buffer.data(), kInts, loomInt32, 1, comm, nullptr), comm);
      }
      pollfd fd{received[0], POLLIN, 0};
      ASSERT_EQ(poll(&fd, 1, 15000), 1) << "the receiver did not report within 15 s";
      char ok = 0;
      ASSERT_EQ(read(received[0], &ok, 1), 1);
      EXPECT_EQ(ok, 1) << "the receiver did not get every message";
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    char ok = 1;
    for (int m = 0; m < kMessages && ok; ++m) {
      loomResult_t r = loomRecv(buffer.data(), kInts, loomInt32, 0, comm, nullptr);
      EXPECT_EQ(r, loomSuccess) << "message " << m << ": " << loomGetLastError(comm);
      for (size_t i = 0; i < kInts && r == loomSuccess; ++i) {
        if (buffer[i] != pattern(0, m, i)) r = loomInternalError;
      }
      EXPECT_EQ(r, loomSuccess) << "message " << m << " arrived wrong";
      ok = r == loomSuccess;
    }
    ASSERT_EQ(write(received[1], &ok, 1), 1);
  }, options);
  close(received[0]);
  close(received[1]);
}

// Rank 1 gives 42 to rank 0 in one call: a send and a receive, or an allreduce.
using Exchange = loomResult_t (*)(int64_t* value, int rank, loomComm_t comm);

loomResult_t sendToRankZero(int64_t* value, int rank, loomComm_t comm) {
  return rank == 1 ? loomSend(value, 1, loomInt64, 0, comm, nullptr) : loomRecv(value, 1, loomInt64, 1, comm, nullptr);
}

loomResult_t sumAtEveryRank(int64_t* value, int, loomComm_t comm) {
  return loomAllReduce(value, value, 1, loomInt64, loomSum, comm, nullptr);
}

// Rank 0 waits a second for rank 1, which is busy elsewhere, and must use a small part of that
// second's CPU time (spinning, even yielding, took nearly all of it).
void expectAWaitingRankLeavesTheCpu(const char* what, Exchange exchange = sendToRankZero) {
  loomtest::runRanks(2, Mode::kProcesses, [what, exchange](loomComm_t comm, int rank) {
    int64_t value = 42;
    LOOM_ASSERT_OK(loomBarrier(comm, nullptr), comm);  // links made, both sides ready
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      LOOM_EXPECT_OK(exchange(&value, rank, comm), comm);
      return;
    }
    auto cpuSeconds = [] {
      rusage usage{};
      getrusage(RUSAGE_THREAD, &usage);
      return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + 1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
    };
    const double cpuBefore = cpuSeconds();
    const auto start = std::chrono::steady_clock::now();
    value = 0;
    LOOM_EXPECT_OK(exchange(&value, rank, comm), comm);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double cpu = cpuSeconds() - cpuBefore;
    EXPECT_EQ(value, 42);
    EXPECT_GT(wall, 0.5);
    EXPECT_LT(cpu, 0.2 * wall) << "the waiting rank used " << cpu << " s of CPU in " << wall << " s";
    std::printf("waiting %.2f s on a %s link took %.3f s of CPU\n", wall, what, cpu);
  });
}

// UCX: the rank sleeps on the worker's event descriptor.
TEST(P2PUcx, AWaitingRankSleepsOnTheWorkersDescriptor) {
  if (std::getenv("LOOM_TEST_UCX") == nullptr) GTEST_SKIP() << "skipped: this Loom was built without UCX";
  loomtest::ScopedEnv env("LOOM_TRANSPORTS", "ucx");
  env.set("UCX_TLS", "tcp");
  expectAWaitingRankLeavesTheCpu("UCX");
}

// Shared memory has no descriptor: past a short spin the rank naps, longer the longer it has
// waited (the cores go to whatever the peer is busy with, as DDP's backward pass).
TEST(P2PShm, AWaitingRankNaps) {
  loomtest::ScopedEnv env("LOOM_TRANSPORTS", "shm");
  expectAWaitingRankLeavesTheCpu("shared-memory");
}

// Messages that moved through a registration so far (the communicator's count).
uint64_t usesOf(loomComm_t handle, void* registration) {
  loom::Communicator* comm = nullptr;
  EXPECT_TRUE(loom::lookupComm(handle, &comm).isOk());
  return comm == nullptr ? 0 : comm->registrationUses(registration);
}

// Bad registrations are refused with loomInvalidArgument and leave the communicator working;
// over shared memory a registration changes nothing (nothing there needs one).
TEST(Registration, BadArgumentsAreRefusedAndTheCommunicatorGoesOn) {
  loomtest::runRanks(2, Mode::kThreads, [](loomComm_t comm, int rank) {
    std::vector<float> buffer(1024, 1.0f);
    void* handle = nullptr;
    EXPECT_EQ(loomCommRegister(comm, buffer.data(), 4096, nullptr), loomInvalidArgument);
    EXPECT_EQ(loomCommRegister(comm, nullptr, 4096, &handle), loomInvalidArgument);
    EXPECT_EQ(loomCommRegister(comm, buffer.data(), 0, &handle), loomInvalidArgument);
    EXPECT_NE(std::string(loomGetLastError(comm)).find("nothing to register"), std::string::npos);
    EXPECT_EQ(loomCommRegister(nullptr, buffer.data(), 4096, &handle), loomInvalidArgument);
    EXPECT_EQ(loomCommDeregister(comm, buffer.data()), loomInvalidArgument);
    LOOM_ASSERT_OK(loomCommRegister(comm, buffer.data(), 4096, &handle), comm);
    LOOM_EXPECT_OK(loomAllReduce(buffer.data(), buffer.data(), 1024, loomFloat32, loomSum, comm, nullptr), comm);
    EXPECT_EQ(buffer[1023], 2.0f);
    EXPECT_EQ(usesOf(comm, handle), 0u) << "rank " << rank << ": shared memory used a registration";
    LOOM_EXPECT_OK(loomCommDeregister(comm, handle), comm);
    EXPECT_EQ(loomCommDeregister(comm, handle), loomInvalidArgument);
    EXPECT_NE(std::string(loomGetLastError(comm)).find("not a registration"), std::string::npos);
    void* left = nullptr;  // ended by the communicator's destruction
    LOOM_EXPECT_OK(loomCommRegister(comm, buffer.data(), 4096, &left), comm);
    LOOM_EXPECT_OK(loomAllReduce(buffer.data(), buffer.data(), 1024, loomFloat32, loomSum, comm, nullptr), comm);
    EXPECT_EQ(buffer[0], 4.0f);
  });
}

// Over UCX a message inside a registered region carries its memory handle, one outside it does
// not, and what arrives is right either way, whichever of UCX's protocols moves it (over
// TCP: UCX's shared-memory transports lack the peer failure handling Loom asks for). A small
// payload travels in one message with its call header, a copy, and uses no handle.
struct UcxProtocol {
  const char* name;
  const char* variable;  // set to 0 to force the protocol, or nullptr for UCX's choice
};
void PrintTo(const UcxProtocol& protocol, std::ostream* out) { *out << protocol.name; }
class RegistrationUcx : public testing::TestWithParam<UcxProtocol> {};

TEST_P(RegistrationUcx, MessagesInsideARegionUseItsHandle) {
  if (std::getenv("LOOM_TEST_UCX") == nullptr) GTEST_SKIP() << "skipped: this Loom was built without UCX";
  loomtest::ScopedEnv env("LOOM_TRANSPORTS", "ucx");
  env.set("UCX_TLS", "tcp");
  if (GetParam().variable != nullptr) env.set(GetParam().variable, "0");
  loomtest::runRanks(2, Mode::kProcesses, [](loomComm_t comm, int rank) {
    constexpr size_t kInts = 1 << 20;  // 4 MiB: UCX's rendezvous; the executor's sends of 512 KiB too
    std::vector<int32_t> region(kInts + 64), outside(kInts);
    void* handle = nullptr;
    LOOM_ASSERT_OK(loomCommRegister(comm, region.data(), region.size() * sizeof(int32_t), &handle), comm);
    int32_t* inside = region.data() + 16;  // a range within the region, not at its start
    const int peer = 1 - rank;
    for (size_t count : {size_t{30000}, kInts}) {
      for (size_t i = 0; i < count; ++i) inside[i] = pattern(rank, 0, i);
      const uint64_t before = usesOf(comm, handle);
      LOOM_ASSERT_OK(loomGroupStart(), comm);
      LOOM_EXPECT_OK(loomSend(inside, count, loomInt32, peer, comm, nullptr), comm);
      LOOM_EXPECT_OK(loomRecv(outside.data(), count, loomInt32, peer, comm, nullptr), comm);
      LOOM_ASSERT_OK(loomGroupEnd(), comm);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(outside[i], pattern(peer, 0, i)) << count << " ints, at " << i;
      EXPECT_GT(usesOf(comm, handle), before) << count << " ints sent from the region did not use its handle";

      const uint64_t sent = usesOf(comm, handle);
      LOOM_ASSERT_OK(loomGroupStart(), comm);
      LOOM_EXPECT_OK(loomSend(outside.data(), count, loomInt32, peer, comm, nullptr), comm);
      LOOM_EXPECT_OK(loomRecv(inside, count, loomInt32, peer, comm, nullptr), comm);
      LOOM_ASSERT_OK(loomGroupEnd(), comm);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(inside[i], pattern(rank, 0, i)) << count << " ints back, at " << i;
      EXPECT_GT(usesOf(comm, handle), sent) << count << " ints received into the region did not use its handle";
    }
    for (size_t i = 0; i < kInts; ++i) inside[i] = static_cast<int32_t>(i % 1000) + rank;
    LOOM_EXPECT_OK(loomAllReduce(inside, inside, kInts, loomInt32, loomSum, comm, nullptr), comm);
    for (size_t i = 0; i < kInts; ++i) ASSERT_EQ(inside[i], 2 * static_cast<int32_t>(i % 1000) + 1) << "at " << i;

    const uint64_t registered = usesOf(comm, handle);
    LOOM_EXPECT_OK(loomAllReduce(outside.data(), outside.data(), kInts, loomInt32, loomSum, comm, nullptr), comm);
    EXPECT_EQ(usesOf(comm, handle), registered) << "an allreduce outside the region used its handle";
    LOOM_EXPECT_OK(loomCommDeregister(comm, handle), comm);
    for (size_t i = 0; i < kInts; ++i) inside[i] = 1;
    LOOM_EXPECT_OK(loomAllReduce(inside, inside, kInts, loomInt32, loomSum, comm, nullptr), comm);
    EXPECT_EQ(inside[kInts - 1], 2) << "after the registration ended";
  });
}

INSTANTIATE_TEST_SUITE_P(Protocols, RegistrationUcx,
                         testing::Values(UcxProtocol{"chosen", nullptr}, UcxProtocol{"zerocopy", "UCX_ZCOPY_THRESH"},
                                         UcxProtocol{"rendezvous", "UCX_RNDV_THRESH"}),
                         [](const testing::TestParamInfo<UcxProtocol>& info) { return std::string(info.param.name); });

// A small allreduce on the one-shot board waits the same way.
TEST(P2PShm, ARankWaitingOnTheOneShotBoardNaps) {
  loomtest::ScopedEnv env("LOOM_TRANSPORTS", "shm");
  env.set("LOOM_ALGO", "allreduce=oneshot");
  expectAWaitingRankLeavesTheCpu("one-shot board", sumAtEveryRank);
}

// The stream call returns before the matching receive is even posted. 16 MiB: more than
// the shm FIFO holds, so the send cannot finish before the receive (one int could, and
// then the query would rightly say it is done).
TEST(HostStream, CallsReturnAtOnceAndQueryReportsProgress) {
  std::vector<loomComm_t> comms(2);
  LOOM_ASSERT_OK(loomCommInitAll(comms.data(), 2, nullptr), nullptr);
  loomStream_t stream = nullptr;
  LOOM_ASSERT_OK(loomStreamCreate(&stream), nullptr);
  constexpr size_t kCount = 4 << 20;
  std::vector<int> values(kCount, 42), got(kCount, 0);
  LOOM_EXPECT_OK(loomSend(values.data(), kCount, loomInt32, 1, comms[0], stream), comms[0]);
  EXPECT_EQ(loomStreamQuery(stream), loomInProgress);
  std::thread receiver([&] { LOOM_EXPECT_OK(loomRecv(got.data(), kCount, loomInt32, 0, comms[1], nullptr), comms[1]); });
  receiver.join();
  LOOM_EXPECT_OK(loomStreamSynchronize(stream), nullptr);
  EXPECT_EQ(loomStreamQuery(stream), loomSuccess);
  EXPECT_EQ(got, values);
  LOOM_EXPECT_OK(loomStreamDestroy(stream), nullptr);
  for (loomComm_t c : comms) LOOM_EXPECT_OK(loomCommDestroy(c), nullptr);
}

}  // namespace
