// Collectives given bad arguments, called differently on different ranks, or left by a
// rank that dies: an error with a message on the rank that sees it, never a hang.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/select.h"
#include "core/communicator.h"
#include "multirank/collective_reference.h"
#include "multirank/harness.h"
#include "multirank/shared_records.h"
#include "transport/shm_board.h"

namespace {

using loomtest::Collective;
using loomtest::Mode;
using loomtest::RankRecord;
using loomtest::SharedRecords;
using loomtest::record;
using loomtest::ScopedEnv;

std::string lastError(loomComm_t comm) { return loomGetLastError(comm); }

// The call returns `code` and loomGetLastError(comm) contains every fragment.
#define EXPECT_ERROR(call, code, comm, ...)                                                  \
  do {                                                                                       \
    loomResult_t r_ = (call);                                                                \
    EXPECT_EQ(r_, (code)) << #call << ": " << loomGetErrorString(r_);                        \
    std::string m_ = lastError(comm);                                                        \
    for (const char* f_ : {__VA_ARGS__}) {                                                   \
      EXPECT_NE(m_.find(f_), std::string::npos) << #call << ": message \"" << m_             \
                                                << "\" does not contain \"" << f_ << "\"";   \
    }                                                                                        \
  } while (0)

#define EXPECT_INVALID(call, comm, ...) EXPECT_ERROR(call, loomInvalidArgument, comm, __VA_ARGS__)

// ---- Validation: rejected before anything reaches a peer -------------------------------

class CollectiveValidation : public testing::Test {
 protected:
  void SetUp() override {
    comms_.resize(2);
    LOOM_ASSERT_OK(loomCommInitAll(comms_.data(), 2, nullptr), nullptr);
    c_ = comms_[0];
    a_.assign(64, 1.0f);
    b_.assign(64, 2.0f);
  }

  // Both ranks still agree on a real AllReduce after the rejected calls.
  void TearDown() override {
    std::vector<float> in0(8, 1.0f), in1(8, 2.0f), out0(8), out1(8);
    std::thread other([&] {
      LOOM_EXPECT_OK(loomAllReduce(in1.data(), out1.data(), 8, loomFloat32, loomSum, comms_[1], nullptr),
                     comms_[1]);
    });
    LOOM_EXPECT_OK(loomAllReduce(in0.data(), out0.data(), 8, loomFloat32, loomSum, c_, nullptr), c_);
    other.join();
    EXPECT_EQ(out0[7], 3.0f);
    EXPECT_EQ(out1[0], 3.0f);
    loomResult_t async = loomInternalError;
    LOOM_EXPECT_OK(loomCommGetAsyncError(c_, &async), c_);
    EXPECT_EQ(async, loomSuccess);
    for (loomComm_t comm : comms_) LOOM_EXPECT_OK(loomCommDestroy(comm), nullptr);
  }

  std::vector<loomComm_t> comms_;
  loomComm_t c_ = nullptr;  // rank 0: every bad call is made here
  std::vector<float> a_, b_;
};

TEST_F(CollectiveValidation, NullBuffersWithACount) {
  float* a = a_.data();
  float* b = b_.data();
  EXPECT_INVALID(loomAllReduce(nullptr, b, 4, loomFloat32, loomSum, c_, nullptr), c_, "sendbuff", "NULL");
  EXPECT_INVALID(loomAllReduce(a, nullptr, 4, loomFloat32, loomSum, c_, nullptr), c_, "recvbuff", "NULL");
  // Rank 0 is the root here: its buffers are needed.
  EXPECT_INVALID(loomBroadcast(nullptr, b, 4, loomFloat32, 0, c_, nullptr), c_, "sendbuff", "NULL");
  EXPECT_INVALID(loomBroadcast(a, nullptr, 4, loomFloat32, 0, c_, nullptr), c_, "recvbuff", "NULL");
  EXPECT_INVALID(loomReduce(nullptr, b, 4, loomFloat32, loomSum, 0, c_, nullptr), c_, "sendbuff", "NULL");
  EXPECT_INVALID(loomReduce(a, nullptr, 4, loomFloat32, loomSum, 0, c_, nullptr), c_, "recvbuff", "NULL");
  EXPECT_INVALID(loomAllGather(nullptr, b, 4, loomFloat32, c_, nullptr), c_, "sendbuff", "NULL");
  EXPECT_INVALID(loomAllGather(a, nullptr, 4, loomFloat32, c_, nullptr), c_, "recvbuff", "NULL");
  EXPECT_INVALID(loomReduceScatter(nullptr, b, 4, loomFloat32, loomSum, c_, nullptr), c_, "sendbuff", "NULL");
  EXPECT_INVALID(loomReduceScatter(a, nullptr, 4, loomFloat32, loomSum, c_, nullptr), c_, "recvbuff", "NULL");
  EXPECT_INVALID(loomAllToAll(nullptr, b, 4, loomFloat32, c_, nullptr), c_, "sendbuff", "NULL");
  EXPECT_INVALID(loomAllToAll(a, nullptr, 4, loomFloat32, c_, nullptr), c_, "recvbuff", "NULL");
  EXPECT_INVALID(loomAllReduce(a, b, 4, loomFloat32, loomSum, nullptr, nullptr), nullptr, "comm is NULL");
}

TEST_F(CollectiveValidation, BadDatatype) {
  float* a = a_.data();
  float* b = b_.data();
  for (int bad : {42, -1, static_cast<int>(loomNumTypes)}) {
    auto type = static_cast<loomDataType_t>(bad);
    std::string value = "datatype " + std::to_string(bad);
    const char* v = value.c_str();
    EXPECT_INVALID(loomAllReduce(a, b, 4, type, loomSum, c_, nullptr), c_, v);
    EXPECT_INVALID(loomBroadcast(a, b, 4, type, 0, c_, nullptr), c_, v);
    EXPECT_INVALID(loomReduce(a, b, 4, type, loomSum, 0, c_, nullptr), c_, v);
    EXPECT_INVALID(loomAllGather(a, b, 4, type, c_, nullptr), c_, v);
    EXPECT_INVALID(loomReduceScatter(a, b, 4, type, loomSum, c_, nullptr), c_, v);
    EXPECT_INVALID(loomAllToAll(a, b, 4, type, c_, nullptr), c_, v);
  }
}

TEST_F(CollectiveValidation, BadOp) {
  float* a = a_.data();
  float* b = b_.data();
  for (int bad : {77, -1, 5}) {
    auto op = static_cast<loomRedOp_t>(bad);
    std::string value = "op " + std::to_string(bad);
    const char* v = value.c_str();
    EXPECT_INVALID(loomAllReduce(a, b, 4, loomFloat32, op, c_, nullptr), c_, v);
    EXPECT_INVALID(loomReduce(a, b, 4, loomFloat32, op, 0, c_, nullptr), c_, v);
    EXPECT_INVALID(loomReduceScatter(a, b, 4, loomFloat32, op, c_, nullptr), c_, v);
  }
}

TEST_F(CollectiveValidation, RootOutOfRange) {
  float* a = a_.data();
  float* b = b_.data();
  EXPECT_INVALID(loomBroadcast(a, b, 4, loomFloat32, -1, c_, nullptr), c_, "root -1");
  EXPECT_INVALID(loomBroadcast(a, b, 4, loomFloat32, 2, c_, nullptr), c_, "root 2");
  EXPECT_INVALID(loomReduce(a, b, 4, loomFloat32, loomSum, -1, c_, nullptr), c_, "root -1");
  EXPECT_INVALID(loomReduce(a, b, 4, loomFloat32, loomSum, 2, c_, nullptr), c_, "root 2");
  // Even with count 0: the root is checked before anything is skipped.
  EXPECT_INVALID(loomBroadcast(a, b, 0, loomFloat32, 7, c_, nullptr), c_, "root 7");
}

TEST_F(CollectiveValidation, CountsThatOverflow) {
  float* a = a_.data();
  float* b = b_.data();
  const char* max = "18446744073709551615";  // SIZE_MAX, as the message should print it
  EXPECT_INVALID(loomAllReduce(a, b, SIZE_MAX, loomFloat32, loomSum, c_, nullptr), c_, max, "overflow");
  EXPECT_INVALID(loomBroadcast(a, b, SIZE_MAX, loomFloat32, 0, c_, nullptr), c_, max, "overflow");
  EXPECT_INVALID(loomReduce(a, b, SIZE_MAX, loomFloat32, loomSum, 0, c_, nullptr), c_, max, "overflow");
  EXPECT_INVALID(loomAllGather(a, b, SIZE_MAX, loomInt8, c_, nullptr), c_, max, "overflow");
  EXPECT_INVALID(loomReduceScatter(a, b, SIZE_MAX, loomInt8, loomSum, c_, nullptr), c_, max, "overflow");
  EXPECT_INVALID(loomAllToAll(a, b, SIZE_MAX, loomInt8, c_, nullptr), c_, max, "overflow");
  // One block fits in size_t; nranks blocks do not.
  const size_t half = SIZE_MAX / 2 + 1;
  const std::string h = std::to_string(half);
  EXPECT_INVALID(loomAllGather(a, b, half, loomInt8, c_, nullptr), c_, h.c_str(), "overflow");
  EXPECT_INVALID(loomReduceScatter(a, b, half, loomUint8, loomMax, c_, nullptr), c_, h.c_str(), "overflow");
  EXPECT_INVALID(loomAllToAll(a, b, half, loomUint8, c_, nullptr), c_, h.c_str(), "overflow");
}

// Out-of-place buffers that overlap, and in-place offsets other than NCCL's.
TEST_F(CollectiveValidation, OverlappingBuffers) {
  float* a = a_.data();
  EXPECT_INVALID(loomAllReduce(a, a + 1, 8, loomFloat32, loomSum, c_, nullptr), c_, "overlap");
  EXPECT_INVALID(loomAllReduce(a + 7, a, 8, loomFloat32, loomSum, c_, nullptr), c_, "overlap");
  EXPECT_INVALID(loomBroadcast(a, a + 3, 8, loomFloat32, 0, c_, nullptr), c_, "overlap");
  EXPECT_INVALID(loomReduce(a, a + 2, 8, loomFloat32, loomSum, 0, c_, nullptr), c_, "overlap");
  // Rank 0's in-place AllGather sendbuff would be recvbuff + 0; + 1 element overlaps.
  EXPECT_INVALID(loomAllGather(a + 1, a, 4, loomFloat32, c_, nullptr), c_, "overlap");
  // ... and rank 1's offset (recvbuff + 4 elements) is not rank 0's.
  EXPECT_INVALID(loomAllGather(a + 4, a, 4, loomFloat32, c_, nullptr), c_, "overlap");
  EXPECT_INVALID(loomReduceScatter(a, a + 1, 4, loomFloat32, loomSum, c_, nullptr), c_, "overlap");
  EXPECT_INVALID(loomReduceScatter(a, a + 4, 4, loomFloat32, loomSum, c_, nullptr), c_, "overlap");
  // AllToAll has no in-place form.
  EXPECT_INVALID(loomAllToAll(a, a, 4, loomFloat32, c_, nullptr), c_, "overlap");
  EXPECT_INVALID(loomAllToAll(a, a + 6, 4, loomFloat32, c_, nullptr), c_, "overlap");
}

TEST_F(CollectiveValidation, NotAStream) {
  int notAStream = 0;
  EXPECT_ERROR(loomAllReduce(a_.data(), b_.data(), 4, loomFloat32, loomSum, c_, &notAStream),
               loomInvalidUsage, c_, "not a live host stream");
}

// count 0 moves nothing, so NULL buffers are fine (on every rank, as every call is collective).
TEST_F(CollectiveValidation, CountZeroWithNullBuffersIsFine) {
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([this, r] {
      loomComm_t c = comms_[static_cast<size_t>(r)];
      LOOM_EXPECT_OK(loomAllReduce(nullptr, nullptr, 0, loomFloat32, loomSum, c, nullptr), c);
      LOOM_EXPECT_OK(loomBroadcast(nullptr, nullptr, 0, loomInt8, 1, c, nullptr), c);
      LOOM_EXPECT_OK(loomReduce(nullptr, nullptr, 0, loomBfloat16, loomAvg, 0, c, nullptr), c);
      LOOM_EXPECT_OK(loomAllGather(nullptr, nullptr, 0, loomUint64, c, nullptr), c);
      LOOM_EXPECT_OK(loomReduceScatter(nullptr, nullptr, 0, loomFloat16, loomMin, c, nullptr), c);
      LOOM_EXPECT_OK(loomAllToAll(nullptr, nullptr, 0, loomInt32, c, nullptr), c);
    });
  }
  for (std::thread& t : ranks) t.join();
}

// ---- Mismatched calls: an error on at least one rank, and no rank hangs ------------------

enum class Mismatch { kCount, kCollective, kRoot, kDatatype, kOp, kAllGatherCount };

std::string mismatchName(Mismatch m) {
  switch (m) {
    case Mismatch::kCount: return "Count";
    case Mismatch::kCollective: return "Collective";
    case Mismatch::kRoot: return "Root";
    case Mismatch::kDatatype: return "Datatype";
    case Mismatch::kOp: return "Op";
    case Mismatch::kAllGatherCount: return "AllGatherCount";
  }
  return "?";
}

// Rank 0 makes one call, every other rank a different one.
loomResult_t mismatchedCall(Mismatch m, size_t count, loomComm_t comm, int rank,
                            std::vector<float>& send, std::vector<float>& recv) {
  const bool odd = rank == 0;
  switch (m) {
    case Mismatch::kCount:
      return loomAllReduce(send.data(), recv.data(), odd ? count : count / 2, loomFloat32, loomSum,
                           comm, nullptr);
    case Mismatch::kCollective:
      return odd ? loomAllReduce(send.data(), recv.data(), count, loomFloat32, loomSum, comm, nullptr)
                 : loomBroadcast(send.data(), recv.data(), count, loomFloat32, 0, comm, nullptr);
    case Mismatch::kRoot:
      return loomBroadcast(send.data(), recv.data(), count, loomFloat32, odd ? 0 : 1, comm, nullptr);
    case Mismatch::kDatatype:  // same size in bytes: only the type says they differ
      return loomAllReduce(send.data(), recv.data(), count, odd ? loomFloat32 : loomInt32, loomSum,
                           comm, nullptr);
    case Mismatch::kOp:
      return loomAllReduce(send.data(), recv.data(), count, loomFloat32, odd ? loomMax : loomSum,
                           comm, nullptr);
    case Mismatch::kAllGatherCount:
      return loomAllGather(send.data(), recv.data(), odd ? count / 10 : count / 10 - 1, loomFloat32,
                           comm, nullptr);
  }
  return loomInternalError;
}

// count: 1000 floats take the small-message algorithms, 100000 the large-message ones.
// transports: LOOM_TRANSPORTS ("" for the default, shared memory here); over sockets a
// call header and its payload travel together.
class MismatchedCalls
    : public testing::TestWithParam<std::tuple<Mode, int, Mismatch, size_t, std::string>> {};

TEST_P(MismatchedCalls, AreAnErrorOnSomeRankAndNoRankHangs) {
  auto [mode, nranks, mismatch, count, transports] = GetParam();
  ScopedEnv env("LOOM_TRANSPORTS", transports);
  loomtest::RankOptions options;
  options.timeoutMs = 3000;
  options.deadlineMs = 30000;
  SharedRecords records(nranks), followUps(nranks);
  ASSERT_TRUE(records.ok() && followUps.ok()) << "mmap failed";
  loomtest::runRanks(nranks, mode, [&, m = mismatch, count = count](loomComm_t comm, int rank) {
    std::vector<float> send(count * 3, 1.0f), recv(count * 3, 0.0f);
    // A matched call first, so the links are up and the mismatch is the only thing wrong.
    LOOM_ASSERT_OK(loomAllReduce(send.data(), recv.data(), 10, loomFloat32, loomSum, comm, nullptr), comm);
    record(records[rank], comm, [&] { return mismatchedCall(m, count, comm, rank, send, recv); });
    // A mismatched call can complete on every rank when no rank had to receive anything
    // (two ranks that both think they are the root just send): its message then waits in
    // the link, and the next call that reads the link must see it. An AllToAll reads every
    // link.
    if (records[rank].result == loomSuccess) {
      record(followUps[rank], comm, [&] {
        return loomAllToAll(send.data(), recv.data(), 10, loomFloat32, comm, nullptr);
      });
    }
  }, options);

  const double limit = options.timeoutMs / 1000.0 + 3.0;
  int invalidUsage = 0;
  const std::string summary = "\nthe mismatched call:" + records.summary() +
                              "\nthe matched AllToAll after it (where the first succeeded):" +
                              followUps.summary();
  for (int r = 0; r < nranks; ++r) {
    for (SharedRecords* calls : {&records, &followUps}) {
      const RankRecord& rec = (*calls)[r];
      if (calls == &followUps && records[r].result != loomSuccess) continue;  // not made
      ASSERT_GE(rec.result, 0) << "rank " << r << " never returned" << summary;
      EXPECT_LT(rec.seconds, limit) << "rank " << r << summary;
      const auto result = static_cast<loomResult_t>(rec.result);
      // No rank waits out its timeout: a peer in another call is seen in its announcement (also
      // while waiting for that peer to make a link), and one whose communicator failed on the
      // board (ShmBoard::markFailed).
      EXPECT_TRUE(result == loomSuccess || result == loomInvalidUsage || result == loomRemoteError)
          << "rank " << r << summary;
      if (result != loomSuccess) {
        EXPECT_NE(rec.message[0], '\0') << "rank " << r << ": an error without a message";
        EXPECT_EQ(rec.asyncError, rec.result)
            << "rank " << r << ": the communicator should keep the error" << summary;
      }
      if (result == loomInvalidUsage) ++invalidUsage;
    }
  }
  EXPECT_GE(invalidUsage, 1) << "no rank saw the mismatch as loomInvalidUsage" << summary;
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, MismatchedCalls,
    testing::Combine(testing::Values(Mode::kThreads, Mode::kProcesses), testing::Values(2, 3),
                     testing::Values(Mismatch::kCount, Mismatch::kCollective, Mismatch::kRoot,
                                     Mismatch::kDatatype, Mismatch::kOp, Mismatch::kAllGatherCount),
                     testing::Values(size_t{1000}, size_t{100000}), testing::Values(std::string(), "socket")),
    [](const auto& info) {
      const std::string& transports = std::get<4>(info.param);
      return loomtest::modeName(std::get<0>(info.param)) + "_" +
             std::to_string(std::get<1>(info.param)) + "_" + mismatchName(std::get<2>(info.param)) +
             "_" + std::to_string(std::get<3>(info.param)) + (transports.empty() ? "" : "_" + transports);
    });

// ---- Tuners that disagree: an internal error, not a wrong result ----------------------

// Ranks on different algorithms exchange bytes that fit each other's counts and mean something
// else (on 2 ranks every algorithm sends and receives the whole buffer's worth): a tuner that
// chose differently on two ranks once made every element of an in-place allreduce wrong
// (docs/RESULTS.md, "In place is each rank's own"). The calls' headers carry the algorithm, so
// that is an error instead. The ranks' choice cannot differ through any setting (LOOM_ALGO is
// rank 0's), so this test makes it differ behind the communicator's back: rank 0's allreduce
// forced to the ring, the others' to the tree.
class DisagreeingTuners : public testing::TestWithParam<std::tuple<Mode, std::string>> {};

TEST_P(DisagreeingTuners, AreAnInternalErrorOnSomeRankAndNoRankHangs) {
  auto [mode, transports] = GetParam();
  ScopedEnv env("LOOM_TRANSPORTS", transports);
  env.set("LOOM_MAPPED_MIN_BYTES", "0");  // the plans alone: no rank goes to the mapped allreduce
  loomtest::RankOptions options;
  options.timeoutMs = 3000;
  options.deadlineMs = 30000;
  constexpr int kRanks = 2;
  constexpr size_t kCount = 64 << 10;
  SharedRecords records(kRanks);
  ASSERT_TRUE(records.ok()) << "mmap failed";
  loomtest::runRanks(kRanks, mode, [&](loomComm_t comm, int rank) {
    std::vector<float> send(kCount, 1.0f), recv(kCount, 0.0f);
    LOOM_ASSERT_OK(loomAllReduce(send.data(), recv.data(), 10, loomFloat32, loomSum, comm, nullptr), comm);
    auto& config = const_cast<loom::CommConfig&>(reinterpret_cast<loom::Communicator*>(comm)->config());
    ASSERT_TRUE(loom::parseAlgorithmSetting(rank == 0 ? "allreduce=ring" : "allreduce=tree", &config.algorithms)
                    .isOk());
    record(records[rank], comm, [&] {
      return loomAllReduce(send.data(), recv.data(), kCount, loomFloat32, loomSum, comm, nullptr);
    });
  }, options);

  const std::string summary = records.summary();
  int internal = 0;
  for (int r = 0; r < kRanks; ++r) {
    const RankRecord& rec = records[r];
    ASSERT_GE(rec.result, 0) << "rank " << r << " never returned" << summary;
    EXPECT_LT(rec.seconds, options.timeoutMs / 1000.0 + 3.0) << "rank " << r << summary;
    const auto result = static_cast<loomResult_t>(rec.result);
    EXPECT_TRUE(result == loomInternalError || result == loomRemoteError) << "rank " << r << summary;
    if (result == loomInternalError) {
      ++internal;
      EXPECT_NE(std::string(rec.message).find("the ranks' tuners disagree"), std::string::npos) << rec.message;
    }
  }
  EXPECT_GE(internal, 1) << "no rank saw the algorithms differ" << summary;
}

INSTANTIATE_TEST_SUITE_P(Transports, DisagreeingTuners,
                         testing::Combine(testing::Values(Mode::kThreads, Mode::kProcesses),
                                          testing::Values(std::string(), "socket")),
                         [](const auto& info) {
                           const std::string& transports = std::get<1>(info.param);
                           return loomtest::modeName(std::get<0>(info.param)) +
                                  (transports.empty() ? "" : "_" + transports);
                         });

// Every rank names itself the root: no rank receives, so no header is compared in the data.
// Where the ranks share the board (one host), a broadcast through the links is loomInvalidUsage
// on at least one rank (Run::checkUnheardCall), naming both roots, rather than a later call that
// reads the bytes left in the link; the follow-up below is a small allreduce, which runs on the
// board and never reads them. A small broadcast runs on the board itself, where a root returns
// once it has posted (as over links, or in MPI): there every rank's next call on the board
// names it. Over sockets alone only such a later call can tell (MismatchedCalls). The board's
// built-in reach (32 KiB): a machine calibration may take a broadcast of 4000 bytes off it.
class EveryRankTheRoot : public testing::TestWithParam<std::tuple<Mode, int, size_t>> {};

TEST_P(EveryRankTheRoot, IsAnErrorInTheBroadcastItself) {
  auto [mode, nranks, count] = GetParam();
  ScopedEnv env("LOOM_MACHINE_CALIBRATION", "0");
  loomtest::RankOptions options;
  options.timeoutMs = 3000;
  options.deadlineMs = 30000;
  SharedRecords records(nranks), followUps(nranks);
  ASSERT_TRUE(records.ok() && followUps.ok()) << "mmap failed";
  loomtest::runRanks(nranks, mode, [&, count = count](loomComm_t comm, int rank) {
    std::vector<float> data(count, static_cast<float>(rank + 1));
    // A matched call first, so the links are up and the roots are the only thing wrong.
    LOOM_ASSERT_OK(loomAllReduce(data.data(), data.data(), 10, loomFloat32, loomSum, comm, nullptr), comm);
    record(records[rank], comm,
           [&] { return loomBroadcast(data.data(), data.data(), count, loomFloat32, rank, comm, nullptr); });
    if (records[rank].result == loomSuccess) {
      record(followUps[rank], comm,
             [&] { return loomAllReduce(data.data(), data.data(), 10, loomFloat32, loomSum, comm, nullptr); });
    }
  }, options);
  const std::string summary = "\nthe broadcast:" + records.summary() + "\nthe allreduce after it:" + followUps.summary();
  int invalidUsage = 0;
  for (int r = 0; r < nranks; ++r) {
    ASSERT_GE(records[r].result, 0) << "rank " << r << " never returned" << summary;
    if (records[r].result != loomInvalidUsage) continue;
    ++invalidUsage;
    const std::string message = records[r].message;
    EXPECT_NE(message.find("mismatched calls"), std::string::npos) << message;
    EXPECT_NE(message.find("root " + std::to_string(r)), std::string::npos) << message;
  }
  const bool onTheBoard = count * sizeof(float) <= 32 * 1024;
  if (onTheBoard) {
    EXPECT_EQ(invalidUsage, 0) << "a root on the board reads no post" << summary;
  } else {
    EXPECT_GE(invalidUsage, 1) << "no rank's broadcast saw the other roots" << summary;
  }
  // A rank whose broadcast returned first and succeeded learns it in its next call.
  for (int r = 0; r < nranks; ++r) {
    if (records[r].result != loomSuccess) continue;
    EXPECT_NE(followUps[r].result, loomSuccess) << "rank " << r << summary;
    if (!onTheBoard) continue;
    EXPECT_EQ(followUps[r].result, loomInvalidUsage) << "rank " << r << summary;
    const std::string message = followUps[r].message;
    EXPECT_NE(message.find("previous call on the shared-memory board: mismatched calls"), std::string::npos)
        << message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Roots, EveryRankTheRoot,
    testing::Combine(testing::Values(Mode::kThreads, Mode::kProcesses), testing::Values(2, 3),
                     testing::Values(size_t{1000}, size_t{100000})),
    [](const auto& info) {
      return loomtest::modeName(std::get<0>(info.param)) + "_" + std::to_string(std::get<1>(info.param)) + "_" +
             std::to_string(std::get<2>(info.param));
    });

// Ranks that each wait for the others' bytes in calls that differ send nothing that a header
// could be compared in: every rank the root of its reduce, or rank 0 a reduce's root while the
// others wait for rank 0's broadcast. On one host the board's announcements show it; where no
// board is (sockets alone, or ranks on two hosts) a rank that has waited
// RemoteAnnouncements::kTellAfter tells the peers it waits on which call it is in
// (core/remote_announcements.h), so every rank fails within a second, loomInvalidUsage where it
// heard the mismatch, loomRemoteError where a peer gave up first, instead of waiting its
// timeout out (10 s here).
enum class EachWaits { kReduceRoots, kReduceAgainstBroadcast };

class WaitingForEachOther : public testing::TestWithParam<std::tuple<Mode, int, EachWaits, bool>> {};

TEST_P(WaitingForEachOther, FailWithinASecond) {
  auto [mode, nranks, calls, twoHosts] = GetParam();
  ScopedEnv env("LOOM_TRANSPORTS", twoHosts ? "" : "socket");
  loomtest::RankOptions options;
  options.timeoutMs = 10000;
  options.deadlineMs = 60000;
  if (twoHosts) {
    options.beforeInit = [](int rank) { ::setenv("LOOM_HOSTID", rank % 2 == 0 ? "host-a" : "host-b", 1); };
  }
  SharedRecords records(nranks);
  ASSERT_TRUE(records.ok()) << "mmap failed";
  loomtest::runRanks(nranks, mode, [&, calls = calls](loomComm_t comm, int rank) {
    std::vector<float> data(1000, 1.0f);
    LOOM_ASSERT_OK(loomAllReduce(data.data(), data.data(), 10, loomFloat32, loomSum, comm, nullptr), comm);
    record(records[rank], comm, [&] {
      if (calls == EachWaits::kReduceRoots || rank == 0) {
        return loomReduce(data.data(), data.data(), data.size(), loomFloat32, loomSum,
                          calls == EachWaits::kReduceRoots ? rank : 0, comm, nullptr);
      }
      return loomBroadcast(data.data(), data.data(), data.size(), loomFloat32, 0, comm, nullptr);
    });
  }, options);
  loomtest::expectMismatchFoundWithin(records, nranks, 1.0);
}

INSTANTIATE_TEST_SUITE_P(
    NoBoard, WaitingForEachOther,
    testing::Values(std::make_tuple(Mode::kThreads, 2, EachWaits::kReduceRoots, false),
                    std::make_tuple(Mode::kProcesses, 3, EachWaits::kReduceRoots, false),
                    std::make_tuple(Mode::kProcesses, 2, EachWaits::kReduceAgainstBroadcast, false),
                    std::make_tuple(Mode::kProcesses, 2, EachWaits::kReduceRoots, true),
                    std::make_tuple(Mode::kProcesses, 4, EachWaits::kReduceAgainstBroadcast, true)),
    [](const auto& info) {
      return loomtest::modeName(std::get<0>(info.param)) + "_" + std::to_string(std::get<1>(info.param)) +
             (std::get<2>(info.param) == EachWaits::kReduceRoots ? "_ReduceRoots" : "_ReduceAgainstBroadcast") +
             (std::get<3>(info.param) ? "_TwoHosts" : "_Sockets");
    });

// A rank that reads no post returns once it has posted, may run ahead of the others by up to
// ShmBoard::kSlots - 1 rounds, and compares its call with the others' once they have all posted
// it. Ranks that each name themselves the root of small broadcast after small broadcast read
// nothing at all: each still fails one of its next kSlots - 1 broadcasts, with the mismatch and
// the call it was in named, rather than running on.
class RootsThatReadNothing : public testing::TestWithParam<std::tuple<Mode, int>> {};

TEST_P(RootsThatReadNothing, FailWithinTheBoardsSlots) {
  auto [mode, nranks] = GetParam();
  loomtest::RankOptions options;
  options.timeoutMs = 3000;
  options.deadlineMs = 30000;
  constexpr int kAhead = static_cast<int>(loom::transport::ShmBoard::kSlots) - 1;
  constexpr int kCalls = 2 * kAhead + 2;
  SharedRecords records(nranks), failedAt(nranks);  // failedAt[r].result: the index of the call that failed
  ASSERT_TRUE(records.ok() && failedAt.ok()) << "mmap failed";
  loomtest::runRanks(nranks, mode, [&](loomComm_t comm, int rank) {
    std::vector<float> data(16, static_cast<float>(rank));
    LOOM_ASSERT_OK(loomAllReduce(data.data(), data.data(), 16, loomFloat32, loomSum, comm, nullptr), comm);
    for (int i = 0; i < kCalls; ++i) {
      record(records[rank], comm, [&] { return loomBroadcast(data.data(), data.data(), 16, loomFloat32, rank, comm,
                                                             nullptr); });
      failedAt[rank].result = i;
      if (records[rank].result != loomSuccess) return;
    }
  }, options);
  const std::string summary = records.summary();
  for (int r = 0; r < nranks; ++r) {
    EXPECT_EQ(records[r].result, loomInvalidUsage) << "rank " << r << summary;
    EXPECT_GE(failedAt[r].result, 1) << "rank " << r << summary;
    EXPECT_LE(failedAt[r].result, kAhead) << "rank " << r << summary;
    const std::string message = records[r].message;
    const std::string back = failedAt[r].result == 1 ? "this rank's previous call on the shared-memory board"
                                                     : "this rank's call on the shared-memory board ";
    EXPECT_NE(message.find(back), std::string::npos) << message;
    EXPECT_NE(message.find("mismatched calls"), std::string::npos) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(Board, RootsThatReadNothing,
                         testing::Combine(testing::Values(Mode::kThreads, Mode::kProcesses), testing::Values(2, 3)),
                         [](const auto& info) {
                           return loomtest::modeName(std::get<0>(info.param)) + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });

// On one host a small call of every collective runs on the board, where each rank that reads
// the others' posts compares every rank's call before it makes its result: ranks that disagree
// fail that very call, with the call named. A rank that reads no post (a reduce's leaf, a
// broadcast's root) returns once it has posted, as over links, and fails its next call on the
// board instead, naming the one before. Rank 0 makes one call, the others another.
enum class BoardMismatch { kReduceRoot, kBroadcastRoot, kAllGatherCount, kReduceScatterOp, kAllToAllType };

std::string boardMismatchName(BoardMismatch m) {
  switch (m) {
    case BoardMismatch::kReduceRoot: return "ReduceRoot";
    case BoardMismatch::kBroadcastRoot: return "BroadcastRoot";
    case BoardMismatch::kAllGatherCount: return "AllGatherCount";
    case BoardMismatch::kReduceScatterOp: return "ReduceScatterOp";
    case BoardMismatch::kAllToAllType: return "AllToAllType";
  }
  return "?";
}

// The root rank r names in its call: rank 0 names itself, the others rank 1.
int boardRootOf(int rank) { return rank == 0 ? 0 : 1; }

// Whether rank r's own call reads the others' posts (and so fails at once).
bool readsPostsInItsCall(BoardMismatch m, int rank) {
  switch (m) {
    case BoardMismatch::kReduceRoot: return rank == boardRootOf(rank);
    case BoardMismatch::kBroadcastRoot: return rank != boardRootOf(rank);
    default: return true;
  }
}

// Every rank fails: at once where it reads the posts, else in its next call. `lateRank` (-1:
// none) makes its call 100 ms after the others.
void expectBoardMismatchFails(Mode mode, int nranks, BoardMismatch mismatch, int lateRank) {
  loomtest::RankOptions options;
  options.timeoutMs = 3000;
  options.deadlineMs = 30000;
  SharedRecords records(nranks), next(nranks);
  ASSERT_TRUE(records.ok() && next.ok()) << "mmap failed";
  const size_t count = 64;  // per rank: every call below is on the board (32 KiB at most in all)
  static const char* const kNames[] = {"loomReduce", "loomBroadcast", "loomAllGather", "loomReduceScatter",
                                       "loomAllToAll"};
  const char* name = kNames[static_cast<int>(mismatch)];
  loomtest::runRanks(nranks, mode, [&, m = mismatch](loomComm_t comm, int rank) {
    std::vector<float> send(count * static_cast<size_t>(nranks), 1.0f), recv(count * static_cast<size_t>(nranks));
    const bool odd = rank == 0;
    const int root = boardRootOf(rank);
    if (rank == lateRank) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    record(records[rank], comm, [&] {
      switch (m) {
        case BoardMismatch::kReduceRoot:
          return loomReduce(send.data(), recv.data(), count, loomFloat32, loomSum, root, comm, nullptr);
        case BoardMismatch::kBroadcastRoot:
          return loomBroadcast(send.data(), recv.data(), count, loomFloat32, root, comm, nullptr);
        case BoardMismatch::kAllGatherCount:
          return loomAllGather(send.data(), recv.data(), odd ? count : count - 1, loomFloat32, comm, nullptr);
        case BoardMismatch::kReduceScatterOp:
          return loomReduceScatter(send.data(), recv.data(), count, loomFloat32, odd ? loomMax : loomSum, comm,
                                   nullptr);
        case BoardMismatch::kAllToAllType:  // the same bytes: only the type says they differ
          return loomAllToAll(send.data(), recv.data(), count, odd ? loomFloat32 : loomInt32, comm, nullptr);
      }
      return loomInternalError;
    });
    if (records[rank].result != loomSuccess) return;
    record(next[rank], comm, [&] {
      return loomAllReduce(send.data(), recv.data(), count, loomFloat32, loomSum, comm, nullptr);
    });
  }, options);
  const std::string summary = records.summary() + next.summary();
  for (int r = 0; r < nranks; ++r) {
    const bool atOnce = readsPostsInItsCall(mismatch, r);
    const RankRecord& failed = atOnce ? records[r] : next[r];
    EXPECT_EQ(failed.result, loomInvalidUsage) << "rank " << r << (atOnce ? "" : ", its next call") << summary;
    const std::string message = failed.message;
    EXPECT_NE(message.find("mismatched calls"), std::string::npos) << message;
    EXPECT_NE(message.find(name), std::string::npos) << message;
    if (atOnce) continue;
    EXPECT_EQ(records[r].result, loomSuccess) << "rank " << r << summary;
    EXPECT_NE(message.find("previous call"), std::string::npos) << message;
  }
}

class MismatchOnTheBoard : public testing::TestWithParam<std::tuple<Mode, int, BoardMismatch>> {};

TEST_P(MismatchOnTheBoard, FailsTheCallOrTheNextOnEveryRank) {
  auto [mode, nranks, mismatch] = GetParam();
  expectBoardMismatchFails(mode, nranks, mismatch, -1);
}

// Rank 1, a broadcast's root, comes late: rank 2 finds the mismatch in rank 0's announcement
// and gives up before rank 1 has posted. Rank 0, the other root, names the mismatch from the
// posts there are (rank 2's), not rank 2's exit.
class MismatchOnTheBoardLateRoot : public testing::TestWithParam<Mode> {};

TEST_P(MismatchOnTheBoardLateRoot, TheEarlyRootNamesTheMismatch) {
  expectBoardMismatchFails(GetParam(), 3, BoardMismatch::kBroadcastRoot, 1);
}

INSTANTIATE_TEST_SUITE_P(Board, MismatchOnTheBoardLateRoot, testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& info) { return loomtest::modeName(info.param); });

INSTANTIATE_TEST_SUITE_P(
    Kinds, MismatchOnTheBoard,
    testing::Combine(testing::Values(Mode::kThreads, Mode::kProcesses), testing::Values(2, 3),
                     testing::Values(BoardMismatch::kReduceRoot, BoardMismatch::kBroadcastRoot,
                                     BoardMismatch::kAllGatherCount, BoardMismatch::kReduceScatterOp,
                                     BoardMismatch::kAllToAllType)),
    [](const auto& info) {
      return loomtest::modeName(std::get<0>(info.param)) + "_" + std::to_string(std::get<1>(info.param)) + "_" +
             boardMismatchName(std::get<2>(info.param));
    });

// ---- LOOM_CHECK=1: every rank gets the same loomInvalidUsage, and the communicator lives ---

const char* differingField(Mismatch m) {
  switch (m) {
    case Mismatch::kCount:
    case Mismatch::kAllGatherCount: return "the count differ";
    case Mismatch::kCollective: return "the collective, root differ";  // allreduce has no root
    case Mismatch::kRoot: return "the root differ";
    case Mismatch::kDatatype: return "the type differ";
    case Mismatch::kOp: return "the op differ";
  }
  return "?";
}

class CheckedCalls : public testing::TestWithParam<std::tuple<Mode, int, Mismatch>> {};

TEST_P(CheckedCalls, MismatchIsInvalidUsageOnEveryRankNamingRanksAndField) {
  auto [mode, nranks, mismatch] = GetParam();
  ::setenv("LOOM_CHECK", "1", 1);  // read when the communicators are made (forks inherit it)
  SharedRecords records(nranks);
  ASSERT_TRUE(records.ok()) << "mmap failed";
  loomtest::runRanks(nranks, mode, [&, m = mismatch](loomComm_t comm, int rank) {
    const size_t count = 1000;
    std::vector<float> send(count * 4, 1.0f), recv(count * 4, 0.0f);
    record(records[rank], comm, [&] { return mismatchedCall(m, count, comm, rank, send, recv); });
    // Nothing moved: the communicator still works, with the right result.
    LOOM_EXPECT_OK(loomAllReduce(send.data(), recv.data(), count, loomFloat32, loomSum, comm, nullptr), comm);
    EXPECT_EQ(recv[count - 1], static_cast<float>(nranks));
  });
  ::unsetenv("LOOM_CHECK");
  const std::string others = nranks == 2 ? "rank 1 called" : "ranks 1, 2 called";
  for (int r = 0; r < nranks; ++r) {
    const RankRecord& rec = records[r];
    EXPECT_EQ(rec.result, loomInvalidUsage) << "rank " << r << records.summary();
    const std::string message = rec.message;
    EXPECT_NE(message.find("LOOM_CHECK: mismatched calls: "), std::string::npos) << message;
    EXPECT_NE(message.find(differingField(mismatch)), std::string::npos) << message;
    // Rank 0 is the odd one: it and the others are named, whichever rank reports.
    EXPECT_NE(message.find("rank 0 called"), std::string::npos) << message;
    EXPECT_NE(message.find(others), std::string::npos) << message;
    EXPECT_EQ(rec.asyncError, loomSuccess) << "rank " << r << ": the communicator should stay usable";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, CheckedCalls,
    testing::Combine(testing::Values(Mode::kThreads, Mode::kProcesses), testing::Values(2, 3),
                     testing::Values(Mismatch::kCount, Mismatch::kCollective, Mismatch::kRoot,
                                     Mismatch::kDatatype, Mismatch::kOp, Mismatch::kAllGatherCount)),
    [](const auto& info) {
      return loomtest::modeName(std::get<0>(info.param)) + "_" + std::to_string(std::get<1>(info.param)) + "_" +
             mismatchName(std::get<2>(info.param));
    });

// In a group the ranks compare the whole launch: its length and each call.
TEST(CheckedCalls, GroupsDifferInLengthOrInALaterCall) {
  ::setenv("LOOM_CHECK", "1", 1);
  SharedRecords longer(3), later(3);
  ASSERT_TRUE(longer.ok() && later.ok()) << "mmap failed";
  loomtest::runRanks(3, Mode::kThreads, [&](loomComm_t comm, int rank) {
    std::vector<float> a(100, 1.0f), b(100, 0.0f), c(100, 0.0f);
    record(longer[rank], comm, [&] {
      loomGroupStart();
      loomAllReduce(a.data(), b.data(), 100, loomFloat32, loomSum, comm, nullptr);
      if (rank == 2) loomBroadcast(a.data(), c.data(), 100, loomFloat32, 0, comm, nullptr);
      return loomGroupEnd();
    });
    record(later[rank], comm, [&] {
      loomGroupStart();
      loomAllReduce(a.data(), b.data(), 100, loomFloat32, loomSum, comm, nullptr);
      loomBroadcast(a.data(), c.data(), 100, loomFloat32, rank == 2 ? 1 : 0, comm, nullptr);
      return loomGroupEnd();
    });
  });
  ::unsetenv("LOOM_CHECK");
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(longer[r].result, loomInvalidUsage) << longer.summary();
    EXPECT_NE(std::string(longer[r].message).find("ranks 0, 1 launched 1 collective(s) together here, rank 2 2"),
              std::string::npos)
        << longer[r].message;
    EXPECT_EQ(later[r].result, loomInvalidUsage) << later.summary();
    EXPECT_NE(std::string(later[r].message).find("loomBroadcast(count 100, float32, root 1)"), std::string::npos)
        << later[r].message;
  }
}

// ---- A rank that dies --------------------------------------------------------------------

class DeadRank : public testing::TestWithParam<Collective> {};

// Four processes; rank 2 dies while the others are inside the call. Every survivor that
// needs rank 2's data gets loomRemoteError (or loomTimeout) within the timeout; none hangs.
TEST_P(DeadRank, SurvivorsGetAnErrorWithinTheTimeout) {
  const Collective coll = GetParam();
  const int nranks = 4, victim = 2;
  loomtest::RankOptions options;
  options.timeoutMs = 4000;
  options.deadlineMs = 30000;
  SharedRecords records(nranks);
  ASSERT_TRUE(records.ok()) << "mmap failed";
  // Broadcast from the victim: everyone needs it. Reduce to rank 0: the root needs it.
  const int root = coll == Collective::kBroadcast ? victim : 0;

  loomtest::runRanks(nranks, Mode::kProcesses, [&](loomComm_t comm, int rank) {
    auto call = [&](size_t count) {
      loomtest::CollectiveCase c;
      c.collective = coll;
      c.type = loomFloat32;
      c.op = loomSum;
      c.root = root;
      c.count = count;
      c.seed = 77;
      loomtest::CollectiveRun run(c, rank, nranks);
      return run.launch(comm, nullptr);
    };
    LOOM_ASSERT_OK(call(1023), comm);  // everybody alive: connections are up
    if (rank == victim) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ::_exit(0);  // without a word, as kill -9 would leave it
    }
    record(records[rank], comm, [&] { return call(1 << 20); });
  }, options);

  const bool everyoneNeedsIt = coll != Collective::kReduce;
  for (int r = 0; r < nranks; ++r) {
    if (r == victim) continue;
    const RankRecord& rec = records[r];
    ASSERT_GE(rec.result, 0) << "rank " << r << " never returned" << records.summary();
    EXPECT_LT(rec.seconds, options.timeoutMs / 1000.0 + 3.0) << "rank " << r << records.summary();
    const auto result = static_cast<loomResult_t>(rec.result);
    bool acceptable = result == loomRemoteError || result == loomTimeout;
    if (!everyoneNeedsIt && r != root) acceptable = acceptable || result == loomSuccess;
    EXPECT_TRUE(acceptable) << "rank " << r << records.summary();
  }
}

INSTANTIATE_TEST_SUITE_P(Collectives, DeadRank,
                         testing::ValuesIn(std::vector<Collective>(std::begin(loomtest::kAllCollectives),
                                                                   std::end(loomtest::kAllCollectives))),
                         [](const auto& info) { return std::string(loomtest::collectiveName(info.param)); });

}  // namespace
