// The mapped allreduce (core/mapped_allreduce.h): results against the reference for every
// type and op, in place and out of place, on 2-4 ranks as threads and as processes, with
// buffers from loomMemAlloc, from the heap and mixed; it runs mapped exactly where every
// rank reaches every other's buffers and otherwise the call's plan gives the same result (the
// plan chosen for every rank in place where all are);
// mismatched calls and a dead peer are errors, not hangs; loomMemAlloc's own errors, and its
// memory in a forked child.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/communicator.h"
#include "core/registry.h"
#include "multirank/collective_reference.h"
#include "multirank/harness.h"

namespace {

using loomtest::Collective;
using loomtest::CollectiveCase;
using loomtest::CollectiveRun;
using loomtest::Mode;
using loomtest::ScopedEnv;

// Calls from this size try the mapped allreduce; the cases are larger than the one-shot
// board's calls (32 KiB) and cover a few pieces per slice.
constexpr const char* kMinBytes = "4096";
constexpr size_t kCaseBytes = 64 << 10;

const loom::MappedPeers& mappedPeers(loomComm_t comm) {
  return reinterpret_cast<loom::Communicator*>(comm)->mappedPeers();
}

uint64_t mappedCalls(loomComm_t comm) { return mappedPeers(comm).mappedCalls(); }

// A loomMemAlloc buffer holding a copy of `image` (nothing for an empty image).
class LoomBuffer {
 public:
  explicit LoomBuffer(const std::vector<unsigned char>& image) : bytes_(image.size()) {
    if (bytes_ == 0) return;
    EXPECT_EQ(loomMemAlloc(&data_, bytes_), loomSuccess);
    if (data_ != nullptr) std::memcpy(data_, image.data(), bytes_);
  }
  ~LoomBuffer() { EXPECT_EQ(loomMemFree(data_), loomSuccess); }
  LoomBuffer(const LoomBuffer&) = delete;
  LoomBuffer& operator=(const LoomBuffer&) = delete;
  void* data() const { return data_; }
  void copyTo(std::vector<unsigned char>* image) const {
    if (bytes_ > 0 && data_ != nullptr) std::memcpy(image->data(), data_, bytes_);
  }

 private:
  size_t bytes_;
  void* data_ = nullptr;
};

// Runs one case on this rank, its buffers from loomMemAlloc or the heap; "" when right.
std::string runCase(const CollectiveCase& c, loomComm_t comm, int rank, int nranks, bool loomMemory,
                    loomStream_t stream = nullptr) {
  CollectiveRun run(c, rank, nranks);
  loomResult_t r;
  if (loomMemory) {
    LoomBuffer send(run.sendBuffer()), recv(run.recvBuffer());
    r = run.launchMirrored(comm, stream, send.data(), recv.data());
    if (r == loomSuccess && stream != nullptr) r = loomStreamSynchronize(stream);
    send.copyTo(&run.sendBuffer());
    recv.copyTo(&run.recvBuffer());
  } else {
    r = run.launch(comm, stream);
    if (r == loomSuccess && stream != nullptr) r = loomStreamSynchronize(stream);
  }
  if (r != loomSuccess) return c.describe() + ": " + loomGetErrorString(r) + ": " + loomGetLastError(comm);
  std::string wrong = run.check();
  return wrong.empty() ? "" : c.describe() + ": " + wrong;
}

// Every type and op once, each at least kCaseBytes with an odd count (slices of unequal
// length), in place and out of place in turn; one float32 sum of 4 MiB and more.
std::vector<CollectiveCase> mappedCases() {
  std::vector<CollectiveCase> cases;
  uint64_t seed = 11;
  for (loomDataType_t type : loomtest::kAllTypes) {
    for (loomRedOp_t op : loomtest::kAllOps) {
      CollectiveCase c;
      c.type = type;
      c.op = op;
      c.count = kCaseBytes / loomtest::typeSize(type) + 2 * cases.size() + 1;
      c.inPlace = cases.size() % 2 == 1;
      c.seed = seed++;
      cases.push_back(c);
    }
  }
  CollectiveCase large;
  large.count = (1 << 20) + 3;
  large.seed = seed;
  cases.push_back(large);
  return cases;
}

enum class Memory { kHeap, kLoom, kMixed };  // kMixed: rank 0's buffers from loomMemAlloc

struct Config {
  Mode mode;
  int nranks;
  Memory memory;
};

std::string configName(const Config& c) {
  const char* memory = c.memory == Memory::kHeap ? "heap" : c.memory == Memory::kLoom ? "loommem" : "mixed";
  return loomtest::modeName(c.mode) + std::to_string(c.nranks) + "_" + memory;
}

class MappedAllReduce : public testing::TestWithParam<Config> {};

TEST_P(MappedAllReduce, MatchesTheReferenceAndRunsMappedWhereEveryRankReachesEveryBuffer) {
  const Config config = GetParam();
  ScopedEnv env("LOOM_MAPPED_MIN_BYTES", kMinBytes);
  const std::vector<CollectiveCase> cases = mappedCases();
  // Threads reach each other's buffers whatever they are; processes only loomMemAlloc's.
  const bool mapped = config.mode == Mode::kThreads || config.memory == Memory::kLoom;
  loomtest::runRanks(config.nranks, config.mode, [&](loomComm_t comm, int rank) {
    const bool loomMemory = config.memory == Memory::kLoom || (config.memory == Memory::kMixed && rank == 0);
    for (const CollectiveCase& c : cases) {
      const std::string wrong = runCase(c, comm, rank, config.nranks, loomMemory);
      ASSERT_EQ(wrong, "") << "rank " << rank;
    }
    // Below LOOM_MAPPED_MIN_BYTES the plan runs without asking.
    CollectiveCase small;
    small.count = 7;
    ASSERT_EQ(runCase(small, comm, rank, config.nranks, loomMemory), "") << "rank " << rank;
    EXPECT_EQ(mappedCalls(comm), mapped ? cases.size() : 0u) << "rank " << rank;
  });
}

std::vector<Config> configs() {
  std::vector<Config> out;
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    for (int n : {2, 3, 4}) out.push_back({mode, n, Memory::kLoom});
    out.push_back({mode, 2, Memory::kHeap});
    out.push_back({mode, 3, Memory::kMixed});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Memory, MappedAllReduce, testing::ValuesIn(configs()),
                         [](const auto& info) { return configName(info.param); });

class MappedAllReduceModes : public testing::TestWithParam<Mode> {};

TEST_P(MappedAllReduceModes, RunsOnHostStreamsAndInGroups) {
  ScopedEnv env("LOOM_MAPPED_MIN_BYTES", kMinBytes);
  loomtest::runRanks(2, GetParam(), [&](loomComm_t comm, int rank) {
    loomStream_t stream = nullptr;
    LOOM_ASSERT_OK(loomStreamCreate(&stream), comm);
    CollectiveCase c;
    c.count = 70001;
    EXPECT_EQ(runCase(c, comm, rank, 2, true, stream), "") << "rank " << rank;
    // Two in one group: each takes its own board rounds, in call order.
    CollectiveCase a = c, b = c;
    b.type = loomInt32;
    b.op = loomMax;
    b.seed = 5;
    CollectiveRun runA(a, rank, 2), runB(b, rank, 2);
    LoomBuffer sendA(runA.sendBuffer()), recvA(runA.recvBuffer()), sendB(runB.sendBuffer()), recvB(runB.recvBuffer());
    LOOM_ASSERT_OK(loomGroupStart(), comm);
    LOOM_EXPECT_OK(runA.launchMirrored(comm, nullptr, sendA.data(), recvA.data()), comm);
    LOOM_EXPECT_OK(runB.launchMirrored(comm, nullptr, sendB.data(), recvB.data()), comm);
    LOOM_ASSERT_OK(loomGroupEnd(), comm);
    recvA.copyTo(&runA.recvBuffer());
    recvB.copyTo(&runB.recvBuffer());
    EXPECT_EQ(runA.check(), "") << "rank " << rank;
    EXPECT_EQ(runB.check(), "") << "rank " << rank;
    EXPECT_EQ(mappedCalls(comm), 3u) << "rank " << rank;
    LOOM_EXPECT_OK(loomStreamDestroy(stream), comm);
  });
}

TEST_P(MappedAllReduceModes, NotWhereLoomAlgoNamesOneAlgorithm) {
  ScopedEnv env("LOOM_MAPPED_MIN_BYTES", kMinBytes);
  env.set("LOOM_ALGO", "ring");
  loomtest::runRanks(2, GetParam(), [&](loomComm_t comm, int rank) {
    CollectiveCase c;
    c.count = 70001;
    EXPECT_EQ(runCase(c, comm, rank, 2, true), "") << "rank " << rank;
    EXPECT_EQ(mappedCalls(comm), 0u) << "rank " << rank;
  });
}

TEST_P(MappedAllReduceModes, MismatchedCountsAreAnErrorOnEveryRank) {
  ScopedEnv env("LOOM_MAPPED_MIN_BYTES", kMinBytes);
  loomtest::runRanks(2, GetParam(), [&](loomComm_t comm, int rank) {
    const size_t count = rank == 0 ? 65537 : 65539;
    void* send = nullptr;
    void* recv = nullptr;
    ASSERT_EQ(loomMemAlloc(&send, count * 4), loomSuccess);
    ASSERT_EQ(loomMemAlloc(&recv, count * 4), loomSuccess);
    loomResult_t r = loomAllReduce(send, recv, count, loomFloat32, loomSum, comm, nullptr);
    EXPECT_EQ(r, loomInvalidUsage) << "rank " << rank << ": " << loomGetLastError(comm);
    EXPECT_NE(std::string(loomGetLastError(comm)).find("count"), std::string::npos) << loomGetLastError(comm);
    EXPECT_EQ(loomMemFree(send), loomSuccess);
    EXPECT_EQ(loomMemFree(recv), loomSuccess);
  });
}

// A rank alive but silent: the deadline ends the call, naming it, the board round and the rank.
TEST_P(MappedAllReduceModes, ATimeoutNamesTheRankTheBoardWaitsFor) {
  ScopedEnv env("LOOM_MAPPED_MIN_BYTES", kMinBytes);
  loomtest::RankOptions options;
  options.timeoutMs = 1000;
  loomtest::runRanks(
      2, GetParam(),
      [&](loomComm_t comm, int rank) {
        std::vector<float> a(100000, 1.0f), b(100000, 0.0f);
        LOOM_EXPECT_OK(loomAllReduce(a.data(), b.data(), a.size(), loomFloat32, loomSum, comm, nullptr), comm);
        if (rank == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2000));
          return;
        }
        EXPECT_EQ(loomAllReduce(a.data(), b.data(), a.size(), loomFloat32, loomSum, comm, nullptr), loomTimeout);
        const std::string m = loomGetLastError(comm);
        EXPECT_NE(m.find("call #2 loomAllReduce(count 100000, float32, sum): waiting on the shared-memory board for "
                         "rank 1 (mapped allreduce, round 1 of 3) timed out after 1000 ms"),
                  std::string::npos)
            << m;
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Modes, MappedAllReduceModes, testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& info) { return loomtest::modeName(info.param); });

// loomCommMappedMinBytes says from which size a call runs mapped, and 0 where none does.
struct Threshold {
  const char* name;
  std::vector<std::pair<const char*, const char*>> env;
  bool ownHosts;  // processes only: each rank a LOOM_HOSTID of its own
  size_t threads, processes;  // what the query answers in each mode
};

class MappedMinBytesQuery : public testing::TestWithParam<Mode> {};

TEST_P(MappedMinBytesQuery, SaysWhereCallsRunMapped) {
  const Mode mode = GetParam();
  const Threshold thresholds[] = {
      {"defaults", {}, false, 64 << 10, 1 << 20},
      {"LOOM_MAPPED_MIN_BYTES=8192", {{"LOOM_MAPPED_MIN_BYTES", "8192"}}, false, 8192, 8192},
      // Below the board's slot the setting still says where calls run mapped: the board, which
      // the tuner picks for 1 KiB, is not offered to them.
      {"LOOM_MAPPED_MIN_BYTES=1024", {{"LOOM_MAPPED_MIN_BYTES", "1024"}}, false, 1024, 1024},
      {"LOOM_MAPPED_MIN_BYTES=0", {{"LOOM_MAPPED_MIN_BYTES", "0"}}, false, 0, 0},
      {"LOOM_ALGO=ring", {{"LOOM_ALGO", "ring"}}, false, 0, 0},
      {"LOOM_TRANSPORTS=socket", {{"LOOM_TRANSPORTS", "socket"}}, false, 0, 0},
      {"two hosts", {}, true, 0, 0},
  };
  for (const Threshold& t : thresholds) {
    if (t.ownHosts && mode == Mode::kThreads) continue;  // LOOM_HOSTID is the process's
    SCOPED_TRACE(t.name);
    ScopedEnv env("LOOM_MAPPED_MIN_BYTES", "");
    for (const auto& [name, value] : t.env) env.set(name, value);
    loomtest::RankOptions options;
    if (t.ownHosts) options.beforeInit = [](int rank) { ::setenv("LOOM_HOSTID", rank == 0 ? "host-a" : "host-b", 1); };
    const size_t want = mode == Mode::kThreads ? t.threads : t.processes;
    loomtest::runRanks(2, mode, [&](loomComm_t comm, int rank) {
      size_t bytes = 1;
      LOOM_ASSERT_OK(loomCommMappedMinBytes(comm, &bytes), comm);
      EXPECT_EQ(bytes, want) << "rank " << rank;
      // The answer is where calls start to run mapped: one element less runs the plan.
      const size_t count = (want > 0 ? want : kCaseBytes) / sizeof(float);
      for (size_t c : {count - 1, count}) {
        CollectiveCase one;
        one.count = c;
        ASSERT_EQ(runCase(one, comm, rank, 2, true), "") << "rank " << rank;
      }
      EXPECT_EQ(mappedCalls(comm), want > 0 ? 1u : 0u) << "rank " << rank;
    }, options);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, MappedMinBytesQuery, testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& info) { return loomtest::modeName(info.param); });

TEST(MappedMinBytesQuery, ALoneRankNeverRunsMappedAndANullOutputIsRefused) {
  loomComm_t comm = nullptr;
  LOOM_ASSERT_OK(loomCommInitAll(&comm, 1, nullptr), nullptr);
  size_t bytes = 1;
  LOOM_EXPECT_OK(loomCommMappedMinBytes(comm, &bytes), comm);
  EXPECT_EQ(bytes, 0u);
  EXPECT_EQ(loomCommMappedMinBytes(comm, nullptr), loomInvalidArgument);
  EXPECT_NE(std::string(loomGetLastError(comm)).find("output pointer is NULL"), std::string::npos);
  EXPECT_EQ(loomCommMappedMinBytes(nullptr, &bytes), loomInvalidArgument);
  LOOM_EXPECT_OK(loomCommDestroy(comm), nullptr);
}

// Fresh allocations on every call: the peers' mappings of freed ones are let go (only the
// last call's two stay), and every call still maps the new ones.
TEST(MappedAllReduceProcesses, NewAllocationsEveryCall) {
  ScopedEnv env("LOOM_MAPPED_MIN_BYTES", kMinBytes);
  constexpr int kCalls = 40;
  loomtest::runRanks(2, Mode::kProcesses, [&](loomComm_t comm, int rank) {
    for (int i = 0; i < kCalls; ++i) {
      CollectiveCase c;
      c.count = 20000 + static_cast<size_t>(i);
      c.seed = static_cast<uint64_t>(i) + 1;
      ASSERT_EQ(runCase(c, comm, rank, 2, true), "") << "rank " << rank << ", call " << i;
    }
    EXPECT_EQ(mappedCalls(comm), static_cast<uint64_t>(kCalls)) << "rank " << rank;
    EXPECT_LE(mappedPeers(comm).mappingsKept(), 2u) << "rank " << rank;
  });
}

// Heap buffers between processes run a plan after the step's first round, which also tells
// the ranks whether all are in place. With an Intel Xeon VM's machine calibration the tuner
// prefers recursive doubling out of place and the ring in place at 4 MiB
// (Tuner.EveryRankInPlaceComparesTheAlgorithmsInPlace): ranks all in place run the ring,
// and a rank alone in place runs recursive doubling with the others; results right either way.
TEST(MappedAllReduceProcesses, RanksAllInPlaceRunThePlanChosenForThat) {
  const loomtest::ScopedFile tuning(
      "# loom tuning file v1\nintra.latency_us = 1.08\nintra.gbps = 5.54\nreduce.gbps = 33.7\ncopy.gbps = 50.9\n"
      "streaming.gbps = 5.29\nstreaming.min_bytes = 33554432\nshm.direct_min_bytes = 32768\n");
  ScopedEnv env("LOOM_TUNING_FILE", tuning.path());
  env.set("LOOM_MACHINE_CALIBRATION", "0");
  constexpr int kCalls = 3;
  loomtest::runRanks(2, Mode::kProcesses, [&](loomComm_t comm, int rank) {
    CollectiveCase c;
    c.count = (4 << 20) / sizeof(float) + 5;
    for (int i = 0; i < kCalls; ++i) {
      c.seed = static_cast<uint64_t>(i) + 1;
      c.inPlace = true;
      ASSERT_EQ(runCase(c, comm, rank, 2, false), "") << "rank " << rank << ", call " << i;
    }
    EXPECT_EQ(mappedPeers(comm).everyRankInPlaceCalls(), static_cast<uint64_t>(kCalls)) << "rank " << rank;
    for (int i = 0; i < kCalls; ++i) {
      c.seed = static_cast<uint64_t>(i) + 100;
      c.inPlace = rank == 1;
      ASSERT_EQ(runCase(c, comm, rank, 2, false), "") << "rank " << rank << ", call " << i << " (rank 1 in place)";
      c.inPlace = false;
      ASSERT_EQ(runCase(c, comm, rank, 2, false), "") << "rank " << rank << ", call " << i << " (out of place)";
    }
    EXPECT_EQ(mappedPeers(comm).everyRankInPlaceCalls(), static_cast<uint64_t>(kCalls)) << "rank " << rank;
    EXPECT_EQ(mappedCalls(comm), 0u) << "rank " << rank;
  });
}

// Buffers a program keeps (DDP's buckets, dozens in a large model) are mapped once each,
// however many it cycles through.
TEST(MappedAllReduceProcesses, ManyKeptBuffersAreMappedOnce) {
  ScopedEnv env("LOOM_MAPPED_MIN_BYTES", kMinBytes);
  constexpr int kBuffers = 40, kRounds = 3;
  constexpr size_t kCount = 20000;
  loomtest::runRanks(2, Mode::kProcesses, [&](loomComm_t comm, int rank) {
    std::vector<float*> buffers(kBuffers);
    for (float*& b : buffers) {
      ASSERT_EQ(loomMemAlloc(reinterpret_cast<void**>(&b), kCount * sizeof(float)), loomSuccess);
    }
    for (int round = 0; round < kRounds; ++round) {
      for (int i = 0; i < kBuffers; ++i) {
        for (size_t e = 0; e < kCount; ++e) buffers[i][e] = static_cast<float>(rank + i + round);
        ASSERT_EQ(loomAllReduce(buffers[i], buffers[i], kCount, loomFloat32, loomSum, comm, nullptr), loomSuccess);
        const float want = static_cast<float>(1 + 2 * (i + round));
        ASSERT_EQ(buffers[i][kCount - 1], want) << "rank " << rank << ", buffer " << i << ", round " << round;
      }
    }
    EXPECT_EQ(mappedCalls(comm), static_cast<uint64_t>(kBuffers * kRounds)) << "rank " << rank;
    EXPECT_EQ(mappedPeers(comm).mappingsMade(), static_cast<uint64_t>(kBuffers)) << "rank " << rank;
    for (float* b : buffers) EXPECT_EQ(loomMemFree(b), loomSuccess);
  });
}

TEST(MappedAllReduceProcesses, APeerThatExitedIsARemoteError) {
  ScopedEnv env("LOOM_MAPPED_MIN_BYTES", kMinBytes);
  loomtest::RankOptions options;
  options.timeoutMs = 30000;
  loomtest::runRanks(
      2, Mode::kProcesses,
      [&](loomComm_t comm, int rank) {
        std::vector<unsigned char> image(1 << 20);
        LoomBuffer buffer(image);
        const size_t count = image.size() / 4;
        // One call together first: the links exist, so the next call waits on the board.
        LOOM_ASSERT_OK(loomAllReduce(buffer.data(), buffer.data(), count, loomFloat32, loomSum, comm, nullptr), comm);
        ASSERT_EQ(mappedCalls(comm), 1u);
        if (rank == 1) ::_exit(0);  // leaves without a word, as a crash would
        loomResult_t r = loomAllReduce(buffer.data(), buffer.data(), count, loomFloat32, loomSum, comm, nullptr);
        EXPECT_EQ(r, loomRemoteError) << loomGetLastError(comm);
        EXPECT_NE(std::string(loomGetLastError(comm)).find("rank 1"), std::string::npos) << loomGetLastError(comm);
      },
      options);
}

TEST(LoomMemAlloc, GivesZeroedPagesAndRefusesBadArguments) {
  void* p = nullptr;
  EXPECT_EQ(loomMemAlloc(nullptr, 64), loomInvalidArgument);
  EXPECT_EQ(loomMemAlloc(&p, 0), loomInvalidArgument);
  EXPECT_EQ(p, nullptr);
  ASSERT_EQ(loomMemAlloc(&p, 5000), loomSuccess);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE)), 0u);
  const auto* bytes = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < 8192; ++i) ASSERT_EQ(bytes[i], 0) << "byte " << i;  // rounded up to whole pages
  std::memset(p, 0xab, 8192);
  int onStack = 0;
  EXPECT_EQ(loomMemFree(&onStack), loomInvalidArgument);
  EXPECT_EQ(loomMemFree(static_cast<char*>(p) + 64), loomInvalidArgument);  // not the start
  EXPECT_EQ(loomMemFree(p), loomSuccess);
  EXPECT_EQ(loomMemFree(p), loomInvalidArgument);  // twice
  EXPECT_EQ(loomMemFree(nullptr), loomSuccess);
}

TEST(LoomMemAlloc, AForkedChildsWritesStayInTheChild) {
  constexpr size_t kBytes = 3 * 4096;
  void* p = nullptr;
  ASSERT_EQ(loomMemAlloc(&p, kBytes), loomSuccess);
  auto* bytes = static_cast<unsigned char*>(p);
  std::memset(bytes, 0xab, kBytes);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::memset(bytes, 0xcd, kBytes);
    ::_exit(bytes[kBytes - 1] == 0xcd ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child could not write its copy";
  for (size_t i = 0; i < kBytes; ++i) ASSERT_EQ(bytes[i], 0xab) << "the child's write reached the parent at byte " << i;
  // The parent's memory is still what its peers map.
  loom::MappedRange range;
  ASSERT_TRUE(loom::Registry::instance().mappedAllocations().find(p, kBytes, &range));
  loom::PeerAllocation asPeer;
  ASSERT_TRUE(loom::mapPeerAllocation(::getpid(), range, &asPeer).isOk());
  bytes[5] = 0x5a;
  EXPECT_EQ(static_cast<unsigned char>(asPeer.mapping.data()[5]), 0x5a);
  EXPECT_EQ(loomMemFree(p), loomSuccess);
}

}  // namespace
