// Every collective against references computed locally (collective_reference.h), as threads
// and as processes, for each forced algorithm (LOOM_ALGO) and transport set
// (LOOM_TRANSPORTS); plus host streams, groups, ~16M-element calls and sockets with a tiny
// send buffer.
//
// One parameter is one configuration (mode, ranks, LOOM_ALGO, LOOM_TRANSPORTS): its
// communicators are made once and every case of the configuration runs through them, so a
// failure names the configuration (the test's name) and the case (its message).
//
// By default a slice runs: every axis value appears, each configuration sees every
// collective x type x op once with rotating counts/in-place/roots. LOOM_TEST_FULL=1 runs the
// full matrix (docs/TESTING.md).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "multirank/collective_reference.h"
#include "multirank/harness.h"
#include "transport/shm_board.h"

namespace {

using loomtest::CaseOutcome;
using loomtest::Collective;
using loomtest::CollectiveCase;
using loomtest::CollectiveRun;
using loomtest::Mode;
using loomtest::ScopedEnv;

using loomtest::MatrixScale;
using loomtest::matrixScale;

struct Config {
  Mode mode;
  int nranks;
  std::string algo;        // LOOM_ALGO; "" = unset (the default choice)
  std::string transports;  // LOOM_TRANSPORTS; "" = unset (shm,socket)
  std::string sliceBytes;  // LOOM_CHUNK_SIZE; "" = unset; small slices pipeline small calls
  unsigned rotation = 0;   // shifts which case meets which count, root and in-place
};

std::string sanitize(const std::string& text) {
  std::string out;
  for (char c : text) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

std::string configName(const Config& c) {
  return loomtest::modeName(c.mode) + "_" + std::to_string(c.nranks) + "_" +
         (c.algo.empty() ? "defaultalgo" : sanitize(c.algo)) + "_" +
         (c.transports.empty() ? "shm" : sanitize(c.transports)) +
         (c.sliceBytes.empty() ? "" : "_slice" + c.sliceBytes);
}

const char* const kMixedAlgo = "allreduce=tree,broadcast=ring,reduce=tree";
const char* const kMixedAlgo2 = "allreduce=rd,broadcast=tree,reduce=ring";

const char* const kAlgos[] = {"", "ring", "tree", "rd", "oneshot", "pairwise", kMixedAlgo};

// UCX links (LOOM_TRANSPORTS=ucx, over UCX's TCP as between hosts) in both modes, for the
// algorithms with different traffic, small slices included; where meson built Loom with UCX
// (it sets LOOM_TEST_UCX).
void appendUcxConfigs(std::vector<Config>* configs, unsigned* rotation) {
  if (std::getenv("LOOM_TEST_UCX") == nullptr) return;
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    configs->push_back({mode, 2, "", "ucx", "", (*rotation)++});
    configs->push_back({mode, 3, "ring", "ucx", "", (*rotation)++});
    configs->push_back({mode, 4, kMixedAlgo, "ucx", "4096", (*rotation)++});
    configs->push_back({mode, 5, "pairwise", "ucx", "", (*rotation)++});
  }
}

// Whether the quick slice keeps a configuration: in each mode one rank alone, and each
// LOOM_ALGO value on one rank count of {2, 3, 4, 5, 8}, a different one per mode (under a
// sanitizer a configuration's communicators cost seconds to make, whatever its cases).
bool inQuickSlice(Mode mode, int nranks, size_t algoIndex) {
  if (nranks == 1) return algoIndex == 0;
  return nranks == loomtest::quickRankCount(algoIndex + (mode == Mode::kProcesses ? 2 : 0));
}

// The default slice: every mode x rank count x LOOM_ALGO value (the quick slice: those
// inQuickSlice keeps), the transport set alternating between the default and socket-only
// (so each algorithm meets both in each mode), plus small pipeline slices for a few; each
// configuration with its own rotation of the case list.
std::vector<Config> sliceConfigs(bool quick) {
  std::vector<Config> configs;
  unsigned rotation = 0;
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    for (int nranks : {1, 2, 3, 4, 5, 8}) {
      for (size_t a = 0; a < std::size(kAlgos); ++a) {
        if (quick && !inQuickSlice(mode, nranks, a)) continue;
        const char* algo = kAlgos[a];
        const char* transports = (rotation + static_cast<unsigned>(mode == Mode::kProcesses)) % 2 ? "socket" : "";
        configs.push_back({mode, nranks, algo, transports, "", rotation++});
      }
    }
    configs.push_back({mode, 3, "ring", "", "4096", rotation++});
    configs.push_back({mode, 4, kMixedAlgo2, "socket", "4096", rotation++});
  }
  appendUcxConfigs(&configs, &rotation);
  return configs;
}

// Every mode x rank count x LOOM_ALGO value x transport set, and small pipeline slices for
// every mode x rank count.
std::vector<Config> fullConfigs() {
  std::vector<Config> configs;
  unsigned rotation = 0;
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    for (int nranks : {1, 2, 3, 4, 5, 8}) {
      for (const char* algo : kAlgos) {
        for (const char* transports : {"", "socket"}) {
          configs.push_back({mode, nranks, algo, transports, "", rotation++});
        }
      }
      configs.push_back({mode, nranks, "", "", "4096", rotation++});
    }
  }
  appendUcxConfigs(&configs, &rotation);
  return configs;
}

std::vector<Config> configs() {
  switch (matrixScale()) {
    case MatrixScale::kFull:
      std::printf("collectives_test: LOOM_TEST_FULL=1: the full matrix\n");
      return fullConfigs();
    case MatrixScale::kQuick:
      std::printf("collectives_test: LOOM_TEST_QUICK=1: the quick slice (docs/TESTING.md)\n");
      return sliceConfigs(true);
    default:
      std::printf("collectives_test: the default slice; LOOM_TEST_FULL=1 runs the full matrix "
                  "(docs/TESTING.md)\n");
      return sliceConfigs(false);
  }
}

constexpr int kMaxReportedPerRank = 5;

// Runs `cases` on this rank and reports what went wrong, at most a few cases per rank (the
// count of the rest at the end). Stops at a call that fails: the communicator is then
// unusable, and its peers' calls fail too.
void runCases(const std::vector<CollectiveCase>& cases, loomComm_t comm, int rank, int nranks) {
  int wrong = 0;
  for (const CollectiveCase& c : cases) {
    CaseOutcome outcome = loomtest::runCollectiveCase(c, comm, rank, nranks);
    if (!outcome.error.empty() && ++wrong <= kMaxReportedPerRank) {
      ADD_FAILURE() << "rank " << rank << ": " << outcome.error;
    }
    if (outcome.callFailed) {
      ADD_FAILURE() << "rank " << rank << ": stopped at the failed call";
      return;
    }
  }
  if (wrong > kMaxReportedPerRank) {
    ADD_FAILURE() << "rank " << rank << ": " << wrong << " of " << cases.size()
                  << " cases were wrong (the first " << kMaxReportedPerRank << " are above)";
  }
}

// Float AllReduces whose sums round: identical on every rank and from call to call.
void runDeterminism(loomComm_t comm, int rank, int nranks, unsigned rotation, MatrixScale scale) {
  struct D {
    loomDataType_t type;
    loomRedOp_t op;
    size_t count;
  };
  std::vector<D> ds = {{loomFloat16, loomSum, 65537}, {loomBfloat16, loomAvg, 4097}, {loomFloat8e4m3, loomSum, 65537}};
  if (scale != MatrixScale::kQuick) {
    ds.push_back({loomFloat32, loomSum, 300007});
    ds.push_back({loomFloat64, loomAvg, 1023});
  }
  if (scale == MatrixScale::kFull) {
    ds.push_back({loomFloat32, loomAvg, 65537});
    ds.push_back({loomFloat64, loomSum, 300007});
    ds.push_back({loomFloat16, loomAvg, 7});
    ds.push_back({loomBfloat16, loomSum, 300007});
    ds.push_back({loomFloat8e5m2, loomAvg, 4097});
  }
  uint64_t seed = 900000 + rotation * 100;
  for (const D& d : ds) {
    CaseOutcome outcome = loomtest::runDeterminismCase(d.type, d.op, d.count, ++seed, comm, rank, nranks);
    if (!outcome.error.empty()) ADD_FAILURE() << "rank " << rank << ": " << outcome.error;
    if (outcome.callFailed) return;
  }
}

class CollectivesTest : public testing::TestWithParam<Config> {};

TEST_P(CollectivesTest, EveryCollectiveTypeAndOpAgainstTheReference) {
  const Config& config = GetParam();
  const MatrixScale scale = matrixScale();
  const bool full = scale == MatrixScale::kFull;
  ScopedEnv algo("LOOM_ALGO", config.algo);
  ScopedEnv transports("LOOM_TRANSPORTS", config.transports);
  ScopedEnv ucxWire("UCX_TLS", config.transports == "ucx" ? "tcp" : "");
  ScopedEnv slice("LOOM_CHUNK_SIZE", config.sliceBytes);
  const std::vector<CollectiveCase> cases = loomtest::casesAt(scale, config.nranks, config.rotation);
  loomtest::RankOptions options;
  options.timeoutMs = 30000;
  options.deadlineMs = full ? 1800000 : 300000;
  auto start = std::chrono::steady_clock::now();
  loomtest::runRanks(config.nranks, config.mode, [&](loomComm_t comm, int rank) {
    runCases(cases, comm, rank, config.nranks);
    if (!testing::Test::HasFailure()) runDeterminism(comm, rank, config.nranks, config.rotation, scale);
  }, options);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %zu cases + determinism in %.1f s\n", configName(config).c_str(), cases.size(),
              seconds);
}

INSTANTIATE_TEST_SUITE_P(Matrix, CollectivesTest, testing::ValuesIn(configs()),
                         [](const auto& info) { return configName(info.param); });

// ---- ~16M elements ---------------------------------------------------------------------

CollectiveCase largeAllReduce(bool inPlace) {
  CollectiveCase c;
  c.collective = Collective::kAllReduce;
  c.type = loomFloat32;
  c.op = loomSum;
  c.count = loomtest::kLargeCount;
  c.inPlace = inPlace;
  c.seed = 16000001;
  return c;
}

TEST(LargeCollectives, Float32SumAllReduceOf16MElementsTwoProcesses) {
  const CollectiveCase c = largeAllReduce(false);
  loomtest::runRanks(2, Mode::kProcesses, [&](loomComm_t comm, int rank) {
    CaseOutcome outcome = loomtest::runCollectiveCase(c, comm, rank, 2);
    EXPECT_TRUE(outcome.error.empty()) << "rank " << rank << ": " << outcome.error;
  });
}

TEST(LargeCollectives, Float32SumAllReduceOf16MElementsInPlaceTwoThreadsOverSockets) {
  ScopedEnv transports("LOOM_TRANSPORTS", "socket");
  const CollectiveCase c = largeAllReduce(true);
  loomtest::runRanks(2, Mode::kThreads, [&](loomComm_t comm, int rank) {
    CaseOutcome outcome = loomtest::runCollectiveCase(c, comm, rank, 2);
    EXPECT_TRUE(outcome.error.empty()) << "rank " << rank << ": " << outcome.error;
  });
}

// In place is each rank's own: one rank passing one buffer and the other two must still run
// one algorithm. With constants like an Intel Xeon VM's machine calibration the model once
// priced a 40 MiB call inside the cache in place (recursive doubling) and past it out of
// place (the ring), and the two ranks ran different plans over one link.
TEST(InPlaceOnOneRank, RanksAgreeOnTheAlgorithmTwoProcesses) {
  const loomtest::ScopedFile tuning(
      "# loom tuning file v1\nintra.latency_us = 1.06\nintra.gbps = 5.12\nreduce.gbps = 35.8\n"
      "copy.gbps = 58\nstreaming.gbps = 4.78\nstreaming.min_bytes = 33554432\nshm.direct_min_bytes = 131072\n");
  ScopedEnv env("LOOM_TUNING_FILE", tuning.path());
  env.set("LOOM_MACHINE_CALIBRATION", "0");
  CollectiveCase c = largeAllReduce(false);
  c.count = (40 << 20) / sizeof(float);
  loomtest::runRanks(2, Mode::kProcesses, [&](loomComm_t comm, int rank) {
    CollectiveCase mine = c;
    mine.inPlace = rank == 0;
    CaseOutcome outcome = loomtest::runCollectiveCase(mine, comm, rank, 2);
    EXPECT_TRUE(outcome.error.empty()) << "rank " << rank << ": " << outcome.error;
  });
}

// The smallest send buffer the kernel allows (it rounds 4096 up to its minimum): every
// message over a few KiB leaves in many partial sends, which must join up in order on
// every link, as they do on a slow network.
TEST(SocketSendBuffer, CallsOfAQuarterMillionElementsThroughATinySendBufferThreeProcesses) {
  ScopedEnv transports("LOOM_TRANSPORTS", "socket");
  ScopedEnv sendBuffer("LOOM_SOCKET_SNDBUF", "4096");
  std::vector<CollectiveCase> cases;
  const Collective collectives[] = {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce,
                                    Collective::kAllGather, Collective::kReduceScatter, Collective::kAllToAll};
  uint64_t seed = 4096000;
  for (Collective collective : collectives) {
    for (bool inPlace : {false, true}) {
      if (inPlace && !loomtest::hasInPlace(collective)) continue;
      CollectiveCase c;
      c.collective = collective;
      c.count = (1u << 18) + 3;
      c.root = 1;
      c.inPlace = inPlace;
      c.seed = ++seed;
      cases.push_back(c);
    }
  }
  loomtest::runRanks(3, Mode::kProcesses, [&](loomComm_t comm, int rank) { runCases(cases, comm, rank, 3); });
}

// ---- Buffers only the root may touch ----------------------------------------------------

// Page-aligned memory with the given protection, so that a touch the contract forbids is a
// SIGSEGV of that rank (processes only: in threads it would take the whole test down).
class Pages {
 public:
  Pages(size_t bytes, int protection) : bytes_((bytes + 4095) / 4096 * 4096 + 4096) {
    void* p = ::mmap(nullptr, bytes_, protection, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : p;
  }
  ~Pages() {
    if (data_ != nullptr) ::munmap(data_, bytes_);
  }
  Pages(const Pages&) = delete;
  Pages& operator=(const Pages&) = delete;
  void* data() const { return data_; }

 private:
  size_t bytes_;
  void* data_;
};

class RootOnlyBuffers : public testing::TestWithParam<std::string> {};

// Broadcast never touches a non-root's sendbuff (PROT_NONE); Reduce never writes a
// non-root's recvbuff (PROT_READ). Small and large counts, so that the small- and the
// large-message algorithms both run; the parameter is LOOM_ALGO.
TEST_P(RootOnlyBuffers, OffTheRootTheyAreNeverTouched) {
  ScopedEnv algo("LOOM_ALGO", GetParam());
  const int nranks = 4;
  loomtest::runRanks(nranks, Mode::kProcesses, [&](loomComm_t comm, int rank) {
    uint64_t seed = 4000;
    for (size_t count : {size_t{1023}, size_t{300007}}) {
      for (int root : {0, 3}) {
        for (Collective coll : {Collective::kBroadcast, Collective::kReduce}) {
          CollectiveCase c;
          c.collective = coll;
          c.type = loomFloat32;
          c.op = loomSum;
          c.count = count;
          c.root = root;
          c.seed = ++seed;
          Pages pages(count * sizeof(float), coll == Collective::kBroadcast ? PROT_NONE : PROT_READ);
          ASSERT_NE(pages.data(), nullptr) << "mmap failed";
          CollectiveRun run(c, rank, nranks, pages.data());
          LOOM_ASSERT_OK(run.launch(comm, nullptr), comm);  // the communicator is unusable after a failure
          std::string wrong = run.check();
          EXPECT_TRUE(wrong.empty()) << "rank " << rank << ": " << c.describe() << ": " << wrong;
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Algorithms, RootOnlyBuffers, testing::Values("", "ring", "tree"),
                         [](const auto& info) { return info.param.empty() ? std::string("defaultalgo") : info.param; });

// ---- Host streams and groups -------------------------------------------------------------

// One case of each collective, with assorted types, ops and roots.
std::vector<CollectiveCase> oneOfEach(int nranks, uint64_t seed) {
  std::vector<CollectiveCase> cases;
  auto add = [&](Collective coll, loomDataType_t type, loomRedOp_t op, size_t count, bool inPlace) {
    CollectiveCase c;
    c.collective = coll;
    c.type = type;
    c.op = op;
    c.count = count;
    c.inPlace = inPlace;
    c.root = static_cast<int>(cases.size()) % nranks;
    c.seed = seed + cases.size();
    cases.push_back(c);
  };
  add(Collective::kAllReduce, loomFloat32, loomSum, 4097, false);
  add(Collective::kBroadcast, loomInt32, loomSum, 1023, false);
  add(Collective::kReduce, loomBfloat16, loomMax, 1023, true);
  add(Collective::kAllGather, loomFloat16, loomSum, 1023, false);
  add(Collective::kReduceScatter, loomInt64, loomProd, 1023, true);
  add(Collective::kAllToAll, loomUint8, loomSum, 1023, false);
  add(Collective::kAllReduce, loomInt8, loomAvg, 70001, true);
  add(Collective::kReduce, loomFloat64, loomAvg, 7, false);
  return cases;
}

void checkAll(const std::vector<CollectiveRun>& runs, int rank) {
  for (const CollectiveRun& run : runs) {
    std::string wrong = run.check();
    EXPECT_TRUE(wrong.empty()) << "rank " << rank << ": " << run.collectiveCase().describe()
                               << ": " << wrong;
  }
}

class StreamsAndGroups : public testing::TestWithParam<Mode> {};

// Every collective queued on one host stream, without waiting in between; one synchronize.
TEST_P(StreamsAndGroups, CollectivesQueuedOnAHostStream) {
  const int nranks = 3;
  loomtest::runRanks(nranks, GetParam(), [&](loomComm_t comm, int rank) {
    std::vector<CollectiveRun> runs;
    for (const CollectiveCase& c : oneOfEach(nranks, 500)) runs.emplace_back(c, rank, nranks);
    loomStream_t stream = nullptr;
    LOOM_ASSERT_OK(loomStreamCreate(&stream), nullptr);
    for (CollectiveRun& run : runs) LOOM_EXPECT_OK(run.launch(comm, stream), comm);
    LOOM_EXPECT_OK(loomStreamSynchronize(stream), nullptr);
    EXPECT_EQ(loomStreamQuery(stream), loomSuccess);
    checkAll(runs, rank);
    LOOM_EXPECT_OK(loomStreamDestroy(stream), nullptr);
  });
}

// The stream runs its calls in order: the second AllReduce reads what the first wrote.
TEST_P(StreamsAndGroups, AStreamRunsCallsInOrder) {
  const int nranks = 3;
  loomtest::runRanks(nranks, GetParam(), [&](loomComm_t comm, int rank) {
    const size_t count = 300000;  // several pipeline slices
    std::vector<int32_t> a(count), x(count, -7), y(count, -7);
    for (size_t i = 0; i < count; ++i) a[i] = rank + static_cast<int32_t>(i);
    loomStream_t stream = nullptr;
    LOOM_ASSERT_OK(loomStreamCreate(&stream), nullptr);
    LOOM_EXPECT_OK(loomAllReduce(a.data(), x.data(), count, loomInt32, loomSum, comm, stream), comm);
    LOOM_EXPECT_OK(loomAllReduce(x.data(), y.data(), count, loomInt32, loomSum, comm, stream), comm);
    LOOM_EXPECT_OK(loomStreamSynchronize(stream), nullptr);
    for (size_t i = 0; i < count; ++i) {
      int32_t xi = nranks * (nranks - 1) / 2 + nranks * static_cast<int32_t>(i);
      ASSERT_EQ(x[i], xi) << "at " << i;
      ASSERT_EQ(y[i], nranks * xi) << "at " << i;
    }
    LOOM_EXPECT_OK(loomStreamDestroy(stream), nullptr);
  });
}

// Several collectives recorded in one group on the NULL stream, launched by GroupEnd.
TEST_P(StreamsAndGroups, SeveralCollectivesInOneGroup) {
  const int nranks = 4;
  loomtest::runRanks(nranks, GetParam(), [&](loomComm_t comm, int rank) {
    std::vector<CollectiveRun> runs;
    for (const CollectiveCase& c : oneOfEach(nranks, 600)) runs.emplace_back(c, rank, nranks);
    LOOM_ASSERT_OK(loomGroupStart(), comm);
    for (CollectiveRun& run : runs) LOOM_EXPECT_OK(run.launch(comm, nullptr), comm);
    LOOM_ASSERT_OK(loomGroupEnd(), comm);
    checkAll(runs, rank);
  });
}

// A group whose calls go onto a host stream: GroupEnd enqueues, Synchronize completes.
TEST_P(StreamsAndGroups, AGroupOnAHostStream) {
  const int nranks = 3;
  loomtest::runRanks(nranks, GetParam(), [&](loomComm_t comm, int rank) {
    std::vector<CollectiveRun> runs;
    for (const CollectiveCase& c : oneOfEach(nranks, 700)) runs.emplace_back(c, rank, nranks);
    loomStream_t stream = nullptr;
    LOOM_ASSERT_OK(loomStreamCreate(&stream), nullptr);
    LOOM_ASSERT_OK(loomGroupStart(), comm);
    for (CollectiveRun& run : runs) LOOM_EXPECT_OK(run.launch(comm, stream), comm);
    LOOM_ASSERT_OK(loomGroupEnd(), comm);
    LOOM_EXPECT_OK(loomStreamSynchronize(stream), nullptr);
    checkAll(runs, rank);
    LOOM_EXPECT_OK(loomStreamDestroy(stream), nullptr);
  });
}

INSTANTIATE_TEST_SUITE_P(Modes, StreamsAndGroups,
                         testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& info) { return loomtest::modeName(info.param); });

// On the board a broadcast's root and a reduce's other ranks return once they have posted, so
// they run ahead of the ranks that read their posts; the slot a post takes must still wait for
// its last readers. Thousands of small calls, the roots changing every 16 calls (so that the
// same ranks run ahead a while), lone and grouped (the executor's path), between allreduces that
// every rank reads: each result is checked, and a post written over before it was read would
// show as a wrong value or a hang.
class RanksThatReadNothing : public testing::TestWithParam<std::tuple<Mode, int>> {};

TEST_P(RanksThatReadNothing, RunAheadWithoutOverwritingAnUnreadPost) {
  auto [mode, nranks] = GetParam();
  loomtest::RankOptions options;
  options.timeoutMs = 5000;
  loomtest::runRanks(nranks, mode, [&, n = nranks](loomComm_t comm, int rank) {
    constexpr size_t kCount = 16;  // every call below is on the board
    std::vector<float> bcast(kCount), reduced(kCount), mine(kCount), sum(kCount);
    auto broadcast = [&](int i) {
      const int root = i / 16 % n;
      std::fill(bcast.begin(), bcast.end(), rank == root ? static_cast<float>(i) : -1.0f);
      return loomBroadcast(bcast.data(), bcast.data(), kCount, loomFloat32, root, comm, nullptr);
    };
    auto reduce = [&](int i) {
      std::fill(mine.begin(), mine.end(), static_cast<float>(i + rank));
      return loomReduce(mine.data(), reduced.data(), kCount, loomFloat32, loomSum, (i / 16 + 1) % n, comm, nullptr);
    };
    auto check = [&](int i) {
      if (bcast[kCount - 1] != static_cast<float>(i)) return false;
      // The root's sum of i + r over the ranks.
      return rank != (i / 16 + 1) % n || reduced[0] == static_cast<float>(n * i + n * (n - 1) / 2);
    };
    for (int i = 0; i < 3000; ++i) {
      if (i % 5 == 4) {
        LOOM_ASSERT_OK(loomGroupStart(), comm);
        LOOM_ASSERT_OK(broadcast(i), comm);
        LOOM_ASSERT_OK(reduce(i), comm);
        LOOM_ASSERT_OK(loomGroupEnd(), comm);
      } else {
        LOOM_ASSERT_OK(broadcast(i), comm);
        LOOM_ASSERT_OK(reduce(i), comm);
      }
      ASSERT_TRUE(check(i)) << "call " << i << " on rank " << rank << ": broadcast " << bcast[kCount - 1]
                            << ", reduce " << reduced[0];
      if (i % 7 == 6) {
        std::fill(sum.begin(), sum.end(), 1.0f);
        LOOM_ASSERT_OK(loomAllReduce(sum.data(), sum.data(), kCount, loomFloat32, loomSum, comm, nullptr), comm);
        ASSERT_EQ(sum[0], static_cast<float>(n)) << "call " << i;
      }
    }
  }, options);
}

INSTANTIATE_TEST_SUITE_P(Board, RanksThatReadNothing,
                         testing::Combine(testing::Values(Mode::kThreads, Mode::kProcesses), testing::Values(2, 3)),
                         [](const auto& info) {
                           return loomtest::modeName(std::get<0>(info.param)) + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });

// How far ahead: a root runs ShmBoard::kSlots - 1 small broadcasts ahead of a rank that has not
// begun them (each call's bytes kept until read), and its next broadcast returns only after
// that rank has begun to read. The order is causal (the reader notes the time before its first
// call), not a timing.
class BoardRunAhead : public testing::TestWithParam<Mode> {};

TEST_P(BoardRunAhead, ARootRunsAheadByTheBoardsSlotsAndNoFurther) {
  constexpr int kAhead = static_cast<int>(loom::transport::ShmBoard::kSlots) - 1;
  using Clock = std::chrono::steady_clock;  // one clock for every process of the host
  // [0]: the root's kAhead calls returned; [1]: when the reader began; [2]: when the root's next call returned.
  void* mapped = ::mmap(nullptr, 3 * sizeof(std::atomic<int64_t>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  auto* shared = static_cast<std::atomic<int64_t>*>(mapped);
  for (int i = 0; i < 3; ++i) shared[i].store(0);
  auto now = [] { return static_cast<int64_t>(Clock::now().time_since_epoch().count()); };
  loomtest::RankOptions options;
  options.timeoutMs = 5000;
  loomtest::runRanks(2, GetParam(), [&](loomComm_t comm, int rank) {
    std::vector<float> data(16, 1.0f);
    LOOM_ASSERT_OK(loomAllReduce(data.data(), data.data(), data.size(), loomFloat32, loomSum, comm, nullptr), comm);
    auto broadcast = [&](int i) {
      std::fill(data.begin(), data.end(), rank == 0 ? static_cast<float>(i + 1) : -1.0f);
      return loomBroadcast(data.data(), data.data(), data.size(), loomFloat32, 0, comm, nullptr);
    };
    if (rank == 0) {
      for (int i = 0; i < kAhead; ++i) LOOM_ASSERT_OK(broadcast(i), comm);
      shared[0].store(1);
      LOOM_ASSERT_OK(broadcast(kAhead), comm);
      shared[2].store(now());
      return;
    }
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(20);
    while (shared[0].load() == 0) {
      ASSERT_LT(Clock::now(), deadline) << "the root's first " << kAhead << " broadcasts waited for this rank";
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    shared[1].store(now());
    for (int i = 0; i <= kAhead; ++i) {
      LOOM_ASSERT_OK(broadcast(i), comm);
      ASSERT_EQ(data[15], static_cast<float>(i + 1)) << "broadcast " << i;
    }
  }, options);
  EXPECT_GE(shared[2].load(), shared[1].load()) << "the root's broadcast " << kAhead + 1
                                                << " returned before the reader began its first";
  ::munmap(mapped, 3 * sizeof(std::atomic<int64_t>));
}

INSTANTIATE_TEST_SUITE_P(Board, BoardRunAhead, testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& info) { return loomtest::modeName(info.param); });

// One thread drives every rank of a loomCommInitAll through one group: without the group
// the first blocking collective would wait forever for ranks this thread has not reached.
TEST(OneThreadManyCommunicators, AllCollectivesInOneGroup) {
  const int nranks = 4;
  std::vector<loomComm_t> comms(nranks);
  LOOM_ASSERT_OK(loomCommInitAll(comms.data(), nranks, nullptr), nullptr);
  std::vector<std::vector<CollectiveRun>> runs(nranks);
  const std::vector<CollectiveCase> cases = oneOfEach(nranks, 800);
  for (int r = 0; r < nranks; ++r) {
    for (const CollectiveCase& c : cases) runs[r].emplace_back(c, r, nranks);
  }
  LOOM_ASSERT_OK(loomGroupStart(), nullptr);
  for (size_t i = 0; i < cases.size(); ++i) {
    for (int r = 0; r < nranks; ++r) LOOM_EXPECT_OK(runs[r][i].launch(comms[r], nullptr), comms[r]);
  }
  LOOM_ASSERT_OK(loomGroupEnd(), nullptr);
  for (int r = 0; r < nranks; ++r) checkAll(runs[r], r);
  for (loomComm_t c : comms) LOOM_EXPECT_OK(loomCommDestroy(c), nullptr);
}

}  // namespace
