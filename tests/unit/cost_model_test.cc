// The tuner's cost model: the shape of its predictions (growth with size, who wins small and
// large, where a slow network moves the choice), values derived by hand from the formulas in
// cost_model.cc, crossovers that agree with the predictions, and the tuning file and link
// fit that calibration uses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/tuning_file.h"

namespace loom {
namespace {

using Kind = CallInfo::Kind;
constexpr Kind kCollectives[] = {Kind::kAllReduce, Kind::kBroadcast,     Kind::kReduce,
                                 Kind::kAllGather, Kind::kReduceScatter, Kind::kAllToAll};
constexpr Algorithm kAlgorithms[] = {Algorithm::kRing, Algorithm::kTree, Algorithm::kRecursiveDoubling,
                                     Algorithm::kOneShot, Algorithm::kPairwise, Algorithm::kHierarchical};
constexpr size_t kKiB = 1 << 10, kMiB = 1 << 20;

double simpleUs(Kind kind, Algorithm algorithm, size_t bytes, const CommProfile& p) {
  return predictUs(kind, algorithm, Protocol::kSimple, bytes, p);
}

double allReduceUs(Algorithm algorithm, size_t bytes, const CommProfile& p) {
  return simpleUs(Kind::kAllReduce, algorithm, bytes, p);
}

// Multiples of 4 from 8 B to 1 GiB: the powers of two, 4 bytes either side of them (slice
// and channel boundaries), and halfway to the next.
std::vector<size_t> sweep() {
  std::vector<size_t> sizes;
  for (size_t b = 8; b <= (size_t{1} << 30); b *= 2) {
    if (b > 8) sizes.push_back(b - 4);
    sizes.push_back(b);
    sizes.push_back(b + 4);
    sizes.push_back(b + b / 2);
  }
  return sizes;
}

// Checks that predictions never shrink as the size grows, over the sizes where `protocol`
// exists; returns how many finite predictions it compared.
int expectGrowing(const CommProfile& p, Protocol protocol) {
  int compared = 0;
  for (Kind kind : kCollectives) {
    for (Algorithm algorithm : kAlgorithms) {
      double previous = -1;
      for (size_t bytes : sweep()) {
        if (protocol == Protocol::kStreaming && bytes < p.streamingMinBytes) continue;
        const double us = predictUs(kind, algorithm, protocol, bytes, p);
        if (std::isinf(us)) continue;
        EXPECT_GE(us, previous) << "n " << p.nranks << " hosts " << p.nhosts << " kind " << static_cast<int>(kind)
                                << " " << algorithmName(algorithm) << " " << protocolName(protocol) << " at " << bytes;
        previous = us;
        ++compared;
      }
    }
  }
  return compared;
}

TEST(CostModel, PredictionsGrowWithSize) {
  const int layouts[][2] = {{2, 1}, {3, 1}, {4, 1}, {5, 1}, {8, 1}, {16, 1},
                            {4, 2}, {6, 3}, {8, 2}, {8, 4}, {16, 4}, {16, 16}};
  for (const auto& layout : layouts) {
    CommProfile p = CommProfile::defaults(layout[0], layout[1]);
    p.channels = 1;        // channels switching on speed a call up on purpose (next test)
    p.directMinBytes = 0;  // and so do direct reads (DirectReadsFromTheirThreshold)
    EXPECT_GT(expectGrowing(p, Protocol::kSimple), 0);
    EXPECT_GT(expectGrowing(p, Protocol::kStreaming), 0);
  }
}

// From channels * 2 slices on, a call runs one ring per TCP connection: between hosts the
// bandwidth multiplies; on one host the channels share one shared-memory link.
TEST(CostModel, ChannelsMultiplyOnlyInterHostBandwidth) {
  CommProfile two = CommProfile::defaults(8, 2);
  ASSERT_EQ(two.channels, 2);
  CommProfile one = two;
  one.channels = 1;
  const size_t on = 2 * 2 * two.sliceBytes;
  EXPECT_EQ(allReduceUs(Algorithm::kRing, on - 4, two), allReduceUs(Algorithm::kRing, on - 4, one));
  EXPECT_LT(allReduceUs(Algorithm::kRing, on, two), 0.6 * allReduceUs(Algorithm::kRing, on, one));

  CommProfile shm = CommProfile::defaults(8, 1);
  shm.channels = 2;
  CommProfile shmOne = shm;
  shmOne.channels = 1;
  EXPECT_GE(allReduceUs(Algorithm::kRing, on, shm), allReduceUs(Algorithm::kRing, on, shmOne));
}

TEST(CostModel, LatencyAlgorithmsWinSmallRingWinsLarge) {
  for (int n : {2, 4, 8}) {
    const CommProfile p = CommProfile::defaults(n, 1);
    SCOPED_TRACE(n);
    EXPECT_LT(allReduceUs(Algorithm::kRecursiveDoubling, 8, p), allReduceUs(Algorithm::kRing, 8, p));
    EXPECT_LT(allReduceUs(Algorithm::kOneShot, 8, p), allReduceUs(Algorithm::kRing, 8, p));
    EXPECT_LT(allReduceUs(Algorithm::kOneShot, 8, p), allReduceUs(Algorithm::kRecursiveDoubling, 8, p));
    for (size_t bytes : {kMiB, 256 * kMiB}) {
      EXPECT_LT(allReduceUs(Algorithm::kRing, bytes, p), allReduceUs(Algorithm::kRecursiveDoubling, bytes, p));
    }
  }
}

// Values worked out by hand from cost_model.cc's formulas with the defaults (intra 1.5 µs,
// 8 GB/s = 8000 B/µs; inter 25 µs, 1200 B/µs; reduce 10000 B/µs; copy 13000 B/µs; direct
// reads 10000 B/µs from 512 KiB; slices of 512 KiB).
TEST(CostModel, HandDerivedValues) {
  // Ring allreduce, 4 ranks, 1 MiB: 6 steps of a 256 KiB chunk (one slice, no fill, below
  // the direct reads); the reductions read the FIFO in place, so they cost only their extra
  // over a copy: 6 x 1.5 + 6 x 262144 / 8000 + 3/4 x 1048576 x (1/10000 - 1/13000)
  // = 9 + 196.608 + 18.1484...
  const double extra = 1 / 10000.0 - 1 / 13000.0;
  EXPECT_NEAR(allReduceUs(Algorithm::kRing, kMiB, CommProfile::defaults(4, 1)), 205.608 + 786432 * extra, 1e-9);

  // 16 hosts of one rank, 128 KiB (below the channels' 2 MiB). Ring: 30 steps, all between
  // hosts, of 8 KiB: 30 x 25 + 30 x 8192 / 1200 + 15/16 x 131072 / 10000
  // = 750 + 204.8 + 12.288.
  const CommProfile hosts = CommProfile::defaults(16, 16);
  EXPECT_NEAR(allReduceUs(Algorithm::kRing, 128 * kKiB, hosts), 967.088, 1e-9);
  // Double tree: 4 levels between hosts up and down (8 x 25); each tree carries 64 KiB in
  // one slice, so the chain's fill is 7 slices; the busiest rank sends its half up both
  // trees and down to 2 children (4 halves) and folds 2 children's halves:
  // 200 + 7 x 65536 / 1200 + 4 x 65536 / 1200 + 2 x 65536 / 10000.
  EXPECT_NEAR(allReduceUs(Algorithm::kTree, 128 * kKiB, hosts), 200 + 11 * 65536 / 1200.0 + 13.1072, 1e-9);

  // 2 hosts of 4 ranks, 8 B: of the ring's 14 steps, a walk meets a host boundary every 4
  // hops, so the last to finish crosses 4 times (hops 0, 4, 8, 12); each step moves 1 byte
  // at the slower link: 4 x 25 + 10 x 1.5 + 14 x 1 / 1200 + 7/8 x 8 / 10000.
  const CommProfile twoHosts = CommProfile::defaults(8, 2);
  EXPECT_NEAR(allReduceUs(Algorithm::kRing, 8, twoHosts), 115 + 14 / 1200.0 + 0.0007, 1e-9);
  // Recursive doubling there: partners 1 and 2 apart share a host, 4 apart do not:
  // 2 x 1.5 + 25 + 3 x 8 / 1200 + 3 x 8 / 10000.
  EXPECT_NEAR(allReduceUs(Algorithm::kRecursiveDoubling, 8, twoHosts), 28 + 24 / 1200.0 + 0.0024, 1e-9);

  // Two ranks below the direct reads: ring = 2 x 1.5 + B / 8000 + (B / 2) extra and rd =
  // 1.5 + B / 8000 + B extra, equal at B = 2 x 1.5 / extra = 130000 bytes.
  const CommProfile two = CommProfile::defaults(2, 1);
  EXPECT_NEAR(static_cast<double>(crossoverBytes(Kind::kAllReduce, Algorithm::kRecursiveDoubling, Algorithm::kRing,
                                                 two)),
              130000, 4);
  // From 512 KiB rd reads its partner's buffer directly, then reduces it in full: 1 MiB is
  // 1.5 + 1048576 / 10000 + 1048576 / 10000. The ring's allgather half comes through the
  // FIFO all the same (Step::viaFifo): 3 + 2 x 524288 / 8000 + 524288 extra.
  EXPECT_NEAR(allReduceUs(Algorithm::kRecursiveDoubling, kMiB, two), 1.5 + 2 * 104.8576, 1e-9);
  EXPECT_NEAR(allReduceUs(Algorithm::kRing, kMiB, two), 3 + 131.072 + 524288 * extra, 1e-9);
  // Only the first round's send (the input, which its rank does not write again) is read
  // directly; the second round's (the result, rewritten by the next reduction) comes through
  // the FIFO, reduced in place. 4 ranks, 1 MiB:
  // 2 x 1.5 + 1048576 / 10000 (direct) + 1048576 / 10000 (in full) + 1048576 / 8000 + 1048576 extra.
  EXPECT_NEAR(allReduceUs(Algorithm::kRecursiveDoubling, kMiB, CommProfile::defaults(4, 1)),
              3 + 2 * 104.8576 + 131.072 + 1048576 * extra, 1e-9);
  // With a fold (3 ranks) the busiest rank sends the folded result in every round: nothing
  // direct. Fold and hand back (2 x 1.5) + one round (1.5), one slice's wait (524288 / 8000)
  // and two buffers streamed and reduced in place.
  EXPECT_NEAR(allReduceUs(Algorithm::kRecursiveDoubling, kMiB, CommProfile::defaults(3, 1)),
              4.5 + 65.536 + 2 * (131.072 + 1048576 * extra), 1e-9);
  // Between hosts no hop is shared memory: the reductions pay in full, nothing reads directly.
  // 4 hosts of one rank, rd of 1 MiB: 2 x (25 + 1048576 / 1200 + 1048576 / 10000).
  EXPECT_NEAR(allReduceUs(Algorithm::kRecursiveDoubling, kMiB, CommProfile::defaults(4, 4)),
              2 * (25 + 1048576 / 1200.0 + 104.8576), 1e-9);
}

// A shared-memory receive reads the sender's buffer from LOOM_SHM_DIRECT_MIN_BYTES on: a
// broadcast between 2 ranks is one hop, 1.5 + B / 8000 through the FIFO and 1.5 + B / 10000
// read directly; never with direct reads off (LOOM_SHM_DIRECT), past the cache (mem.gbps
// measures those hops), or between hosts.
TEST(CostModel, DirectReadsFromTheirThreshold) {
  CommProfile p = CommProfile::defaults(2, 1);
  const size_t from = p.directMinBytes;
  auto broadcastUs = [&](size_t bytes, const CommProfile& profile) {
    return simpleUs(Kind::kBroadcast, Algorithm::kRing, bytes, profile);
  };
  EXPECT_NEAR(broadcastUs(from - 4, p), 1.5 + (from - 4) / 8000.0, 1e-9);
  EXPECT_NEAR(broadcastUs(from, p), 1.5 + from / 10000.0, 1e-9);
  CommProfile off = p;
  off.directMinBytes = 0;
  EXPECT_NEAR(broadcastUs(from, off), 1.5 + from / 8000.0, 1e-9);
  // Above the 512 KiB slice a relayed broadcast still reads slice by slice: 4 ranks, 4 MiB
  // has the direct term, 2 hosts of 2 ranks does not.
  const CommProfile four = CommProfile::defaults(4, 1);
  CommProfile fourOff = four;
  fourOff.directMinBytes = 0;
  EXPECT_LT(broadcastUs(4 * kMiB, four), broadcastUs(4 * kMiB, fourOff));
  CommProfile hosts = CommProfile::defaults(4, 2);
  CommProfile hostsOff = hosts;
  hostsOff.directMinBytes = 0;
  EXPECT_EQ(broadcastUs(4 * kMiB, hosts), broadcastUs(4 * kMiB, hostsOff));
  const size_t past = p.streamingMinBytes;
  EXPECT_EQ(broadcastUs(past, p), broadcastUs(past, off));
  // Reductions that read the FIFO in place never read directly, and neither does the ring
  // allreduce's allgather half (Step::viaFifo): a reduce-scatter and an allreduce are the
  // same with direct reads on or off, an allgather is not.
  EXPECT_EQ(simpleUs(Kind::kReduceScatter, Algorithm::kRing, 4 * kMiB, four),
            simpleUs(Kind::kReduceScatter, Algorithm::kRing, 4 * kMiB, fourOff));
  EXPECT_EQ(simpleUs(Kind::kAllReduce, Algorithm::kRing, 4 * kMiB, four),
            simpleUs(Kind::kAllReduce, Algorithm::kRing, 4 * kMiB, fourOff));
  EXPECT_LT(simpleUs(Kind::kAllGather, Algorithm::kRing, 4 * kMiB, four),
            simpleUs(Kind::kAllGather, Algorithm::kRing, 4 * kMiB, fourOff));
}

TEST(CostModel, CrossoverAgreesWithPredictions) {
  struct Case {
    Kind kind;
    Algorithm a, b;
    int nranks, nhosts;
  };
  const Case cases[] = {
      {Kind::kAllReduce, Algorithm::kRecursiveDoubling, Algorithm::kRing, 2, 1},
      {Kind::kAllReduce, Algorithm::kRecursiveDoubling, Algorithm::kRing, 4, 1},
      {Kind::kAllReduce, Algorithm::kRecursiveDoubling, Algorithm::kRing, 8, 1},
      {Kind::kAllReduce, Algorithm::kRecursiveDoubling, Algorithm::kRing, 16, 4},
      {Kind::kAllReduce, Algorithm::kTree, Algorithm::kRing, 8, 1},
      {Kind::kAllReduce, Algorithm::kTree, Algorithm::kRing, 16, 16},
      {Kind::kAllReduce, Algorithm::kOneShot, Algorithm::kRecursiveDoubling, 4, 1},
      {Kind::kBroadcast, Algorithm::kTree, Algorithm::kRing, 8, 1},
      {Kind::kReduce, Algorithm::kTree, Algorithm::kRing, 4, 1},
  };
  for (const Case& c : cases) {
    const CommProfile p = CommProfile::defaults(c.nranks, c.nhosts);
    const size_t at = crossoverBytes(c.kind, c.a, c.b, p);
    SCOPED_TRACE(std::string(algorithmName(c.a)) + " -> " + algorithmName(c.b) + " n " + std::to_string(c.nranks) +
                 " hosts " + std::to_string(c.nhosts) + " at " + std::to_string(at));
    ASSERT_GT(at, 8u);  // a real crossing: b slower at 8 B, caught up by 1 GiB
    EXPECT_EQ(at % 4, 0u);
    EXPECT_GT(predict(c.kind, c.b, at - 4, p).us, predict(c.kind, c.a, at - 4, p).us);
    EXPECT_LE(predict(c.kind, c.b, at, p).us, predict(c.kind, c.a, at, p).us);
  }
  // Already as fast at 8 B.
  EXPECT_EQ(crossoverBytes(Kind::kAllReduce, Algorithm::kRing, Algorithm::kRecursiveDoubling,
                           CommProfile::defaults(4, 1)),
            8u);
  // Never: b cannot run (one-shot across hosts), or is still slower at 1 GiB: on 2 ranks
  // ring and rd move the same bytes, and with reductions as cheap as copies and no direct
  // reads nothing pays for the ring's extra alpha.
  EXPECT_EQ(crossoverBytes(Kind::kAllReduce, Algorithm::kRing, Algorithm::kOneShot, CommProfile::defaults(4, 2)), 0u);
  CommProfile freeReduce = CommProfile::defaults(2, 1);
  freeReduce.reduceGbps = freeReduce.copyGbps;
  freeReduce.directMinBytes = 0;
  freeReduce.streamingMinBytes = 0;
  EXPECT_EQ(crossoverBytes(Kind::kAllReduce, Algorithm::kRecursiveDoubling, Algorithm::kRing, freeReduce), 0u);
}

// Why the network moves the choice, from the formulas. At 128 KiB both trees' halves are
// one slice, so the double tree is a store-and-forward chain of 2 x depth hops, while the
// ring pays an alpha per step but moves 1/n of the buffer a step:
//   one host of 16:  ring 30 x 1.5 + 30 x 8192 / 8000 + 12.3            =  88 µs
//                    tree  8 x 1.5 + 11 x 65536 / 8000 + 13.1           = 115 µs
//   16 hosts of 1:   ring 30 x 25  + 30 x 8192 / 1200 + 12.3            = 967 µs
//                    tree  8 x 25  + 11 x 65536 / 1200 + 13.1           = 814 µs
// 22 more alphas cost the ring 33 µs over shared memory but 550 µs over TCP. At 256 MiB the
// bandwidth terms decide (ring 2(n-1)/n of the buffer a rank, the tree 2 buffers), so the
// ring is ahead again.
TEST(CostModel, SlowNetworkMakesTheTreeWinMidSizes) {
  const CommProfile oneHost = CommProfile::defaults(16, 1), manyHosts = CommProfile::defaults(16, 16);
  EXPECT_LT(allReduceUs(Algorithm::kRing, 128 * kKiB, oneHost), allReduceUs(Algorithm::kTree, 128 * kKiB, oneHost));
  EXPECT_LT(allReduceUs(Algorithm::kTree, 128 * kKiB, manyHosts),
            allReduceUs(Algorithm::kRing, 128 * kKiB, manyHosts));
  EXPECT_LT(allReduceUs(Algorithm::kRing, 256 * kMiB, manyHosts),
            allReduceUs(Algorithm::kTree, 256 * kMiB, manyHosts));
}

TEST(CostModel, OneShotOnlyOnOneHostAndUpTo32KiB) {
  const CommProfile oneHost = CommProfile::defaults(4, 1);
  EXPECT_TRUE(std::isfinite(allReduceUs(Algorithm::kOneShot, 32 * kKiB, oneHost)));
  EXPECT_TRUE(std::isinf(allReduceUs(Algorithm::kOneShot, 32 * kKiB + 4, oneHost)));
  const CommProfile twoHosts = CommProfile::defaults(4, 2);
  EXPECT_TRUE(std::isinf(allReduceUs(Algorithm::kOneShot, 8, twoHosts)));
  for (const Prediction& p : rankAlgorithms(Kind::kAllReduce, 8, twoHosts)) {
    EXPECT_NE(p.algorithm, Algorithm::kOneShot);
  }
}

// A one-shot broadcast posts the root's buffer once and every other rank copies it at once:
// its prediction does not grow with the ranks, where the allreduce's folds every slot.
TEST(CostModel, OneShotBroadcastIsOnePostAndOneCopyWhateverTheRanks) {
  const CommProfile two = CommProfile::defaults(2, 1), eight = CommProfile::defaults(8, 1);
  for (size_t bytes : {size_t{8}, 4 * kKiB, 32 * kKiB}) {
    const double broadcast = simpleUs(Kind::kBroadcast, Algorithm::kOneShot, bytes, two);
    EXPECT_DOUBLE_EQ(broadcast, simpleUs(Kind::kBroadcast, Algorithm::kOneShot, bytes, eight)) << bytes;
    EXPECT_DOUBLE_EQ(broadcast, two.oneShotLatencyUs + 2 * static_cast<double>(bytes) / (two.intra.gbps * 1e3))
        << bytes;
    EXPECT_LT(broadcast, simpleUs(Kind::kAllReduce, Algorithm::kOneShot, bytes, eight)) << bytes;
  }
  EXPECT_TRUE(std::isinf(simpleUs(Kind::kBroadcast, Algorithm::kOneShot, 32 * kKiB + 4, two)));
  EXPECT_TRUE(std::isinf(simpleUs(Kind::kBroadcast, Algorithm::kOneShot, 8, CommProfile::defaults(4, 2))));
  EXPECT_EQ(rankAlgorithms(Kind::kBroadcast, 8, two).front().algorithm, Algorithm::kOneShot);
}

// Every collective has its one-shot form, the fastest for a small call on one host (a post and
// one pass over the peers' slots against a FIFO hop per step), out of reach above the board's
// slot or across hosts. What a rank posts and reads sets the order between them: an allgather
// posts one block where an all-to-all posts every block but its own (as much with 2 ranks),
// and a reduce-scatter folds one block of each peer's post where an allreduce folds the whole.
TEST(CostModel, EveryCollectiveHasAOneShotForSmallCallsOnOneHost) {
  for (int n : {2, 3, 8}) {
    const CommProfile p = CommProfile::defaults(n, 1);
    for (Kind kind : {Kind::kReduce, Kind::kAllGather, Kind::kReduceScatter, Kind::kAllToAll}) {
      const size_t small = 64 * static_cast<size_t>(n);
      EXPECT_TRUE(std::isfinite(simpleUs(kind, Algorithm::kOneShot, small, p))) << n;
      EXPECT_EQ(rankAlgorithms(kind, small, p).front().algorithm, Algorithm::kOneShot) << n << " ranks";
      EXPECT_TRUE(std::isinf(simpleUs(kind, Algorithm::kOneShot, 32 * kKiB + 4, p))) << n;
      EXPECT_TRUE(std::isinf(simpleUs(kind, Algorithm::kOneShot, small, CommProfile::defaults(n, 2)))) << n;
    }
    const size_t bytes = 16 * kKiB;
    if (n == 2) {
      EXPECT_DOUBLE_EQ(simpleUs(Kind::kAllGather, Algorithm::kOneShot, bytes, p),
                       simpleUs(Kind::kAllToAll, Algorithm::kOneShot, bytes, p));
    } else {
      EXPECT_LT(simpleUs(Kind::kAllGather, Algorithm::kOneShot, bytes, p),
                simpleUs(Kind::kAllToAll, Algorithm::kOneShot, bytes, p));
    }
    EXPECT_LT(simpleUs(Kind::kReduceScatter, Algorithm::kOneShot, bytes, p),
              simpleUs(Kind::kAllReduce, Algorithm::kOneShot, bytes, p));
    EXPECT_DOUBLE_EQ(simpleUs(Kind::kReduce, Algorithm::kOneShot, bytes, p),
                     simpleUs(Kind::kAllReduce, Algorithm::kOneShot, bytes, p));
  }
}

TEST(CostModel, AlgorithmsACollectiveLacksCannotRun) {
  const CommProfile p = CommProfile::defaults(4, 1);
  EXPECT_TRUE(std::isinf(simpleUs(Kind::kAllGather, Algorithm::kTree, kKiB, p)));
  EXPECT_TRUE(std::isinf(simpleUs(Kind::kBroadcast, Algorithm::kRecursiveDoubling, kKiB, p)));
  EXPECT_TRUE(std::isinf(simpleUs(Kind::kAllToAll, Algorithm::kRing, kKiB, p)));
  EXPECT_TRUE(std::isinf(simpleUs(Kind::kAllReduce, Algorithm::kPairwise, kKiB, p)));
  EXPECT_TRUE(std::isinf(simpleUs(Kind::kSend, Algorithm::kRing, kKiB, p)));
  EXPECT_TRUE(std::isfinite(simpleUs(Kind::kAllToAll, Algorithm::kPairwise, kKiB, p)));
}

TEST(CostModel, StreamingOnlyFromItsThreshold) {
  CommProfile p = CommProfile::defaults(4, 1);
  const size_t from = p.streamingMinBytes;
  EXPECT_TRUE(std::isinf(predictUs(Kind::kAllReduce, Algorithm::kRing, Protocol::kStreaming, from - 4, p)));
  const double streaming = predictUs(Kind::kAllReduce, Algorithm::kRing, Protocol::kStreaming, from, p);
  EXPECT_LT(streaming, allReduceUs(Algorithm::kRing, from, p));  // 6 GB/s streaming beats 4.5 cached
  const Prediction best = predict(Kind::kAllReduce, Algorithm::kRing, from, p);
  EXPECT_EQ(best.protocol, Protocol::kStreaming);
  EXPECT_EQ(best.us, streaming);
  EXPECT_EQ(predict(Kind::kAllReduce, Algorithm::kRing, from - 4, p).protocol, Protocol::kSimple);

  // Only shared-memory hops change: with one rank per host there are none.
  const CommProfile apart = CommProfile::defaults(4, 4);
  EXPECT_EQ(predictUs(Kind::kAllReduce, Algorithm::kRing, Protocol::kStreaming, from, apart),
            predictUs(Kind::kAllReduce, Algorithm::kRing, Protocol::kSimple, from, apart));

  p.streamingMinBytes = 0;  // LOOM_STREAMING_MIN_BYTES=0: never
  EXPECT_TRUE(std::isinf(predictUs(Kind::kAllReduce, Algorithm::kRing, Protocol::kStreaming, size_t{1} << 30, p)));
}

// The ring allreduce forwards what it reduces from the cache only where every link is shared
// memory: past the cache it then moves 2 bytes of memory traffic per busbw byte, not 2.5.
TEST(CostModel, RingAllReduceForwardsOnlyOverSharedMemory) {
  const CommProfile shm = CommProfile::defaults(2, 1);
  EXPECT_TRUE(ringsSliceBySlice(shm));
  CommProfile sockets = shm;  // LOOM_TRANSPORTS=socket on one host
  sockets.sharedMemory = false;
  EXPECT_FALSE(ringsSliceBySlice(sockets));
  EXPECT_FALSE(ringsSliceBySlice(CommProfile::defaults(4, 2)));
  EXPECT_FALSE(ringsSliceBySlice(CommProfile::deviceDefaults(2, 1)));
  const size_t past = 2 * shm.streamingMinBytes, cached = size_t{1} << 20;
  EXPECT_LT(allReduceUs(Algorithm::kRing, past, shm), allReduceUs(Algorithm::kRing, past, sockets));
  EXPECT_EQ(allReduceUs(Algorithm::kRing, cached, shm), allReduceUs(Algorithm::kRing, cached, sockets));
}

// Device communicators: low latency wins small calls where its alpha is the smaller (a
// calibrated GPU's figures, here NCCL-like ones) and simple large ones (its bandwidth); the
// built-in figures, measured on an H100 where ll was no faster, never pick it. Neither
// streaming nor one-shot exists there, and hosts never run low latency.
TEST(CostModel, LowLatencyOnlyOnDevicesAndOnlyWhileSmall) {
  const CommProfile host = CommProfile::defaults(2, 1);
  EXPECT_TRUE(std::isinf(predictUs(Kind::kAllReduce, Algorithm::kRing, Protocol::kLowLatency, 8, host)));
  CommProfile device = CommProfile::deviceDefaults(2, 1);
  EXPECT_EQ(predict(Kind::kAllReduce, Algorithm::kRing, 8, device).protocol, Protocol::kSimple);
  device.lowLatency = {1.0, 100.0};
  EXPECT_EQ(predict(Kind::kAllReduce, Algorithm::kRing, 8, device).protocol, Protocol::kLowLatency);
  EXPECT_EQ(predict(Kind::kAllReduce, Algorithm::kRing, size_t{64} << 20, device).protocol, Protocol::kSimple);
  EXPECT_TRUE(std::isinf(predictUs(Kind::kAllReduce, Algorithm::kOneShot, Protocol::kSimple, 8, device)));
  EXPECT_TRUE(std::isinf(predictUs(Kind::kAllReduce, Algorithm::kRing, Protocol::kStreaming, size_t{1} << 30, device)));
  // By hand, 2-rank ring allreduce: 2 hops of alpha, 2 x (bytes / 2) over the link.
  const double bytes = 1 << 20;
  const double ll = 2 * device.lowLatency.latencyUs + bytes / (device.lowLatency.gbps * 1e3);
  EXPECT_NEAR(predictUs(Kind::kAllReduce, Algorithm::kRing, Protocol::kLowLatency, 1 << 20, device), ll, 1e-9);
  // Across hosts the hops between hosts cost what they cost on the simple wire.
  const CommProfile twoHosts = CommProfile::deviceDefaults(2, 2);
  EXPECT_EQ(predictUs(Kind::kAllReduce, Algorithm::kRing, Protocol::kLowLatency, 1 << 20, twoHosts),
            predictUs(Kind::kAllReduce, Algorithm::kRing, Protocol::kSimple, 1 << 20, twoHosts));
}

TEST(CostModel, RankingIsFastestFirstAndHonoursTheMask) {
  const CommProfile p = CommProfile::defaults(8, 1);
  const std::vector<Prediction> all = rankAlgorithms(Kind::kAllReduce, 8, p);
  ASSERT_EQ(all.size(), 5u);  // pairwise is no allreduce
  EXPECT_EQ(all.front().algorithm, Algorithm::kOneShot);
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LE(all[i - 1].us, all[i].us);
  for (const Prediction& x : all) EXPECT_EQ(x.us, allReduceUs(x.algorithm, 8, p));

  const uint32_t noOneShot = ~(1u << static_cast<unsigned>(Algorithm::kOneShot));
  const std::vector<Prediction> rest = rankAlgorithms(Kind::kAllReduce, 8, p, noOneShot);
  ASSERT_EQ(rest.size(), 4u);
  EXPECT_EQ(rest.front().algorithm, Algorithm::kRecursiveDoubling);

  // Alone, every algorithm is the same copy: ties keep ring, tree, rd, oneshot, hierarchical.
  const std::vector<Prediction> tied = rankAlgorithms(Kind::kAllReduce, kKiB, CommProfile::defaults(1, 1));
  ASSERT_EQ(tied.size(), 5u);
  EXPECT_EQ(tied[0].algorithm, Algorithm::kRing);
  EXPECT_EQ(tied[1].algorithm, Algorithm::kTree);
  EXPECT_EQ(tied[2].algorithm, Algorithm::kRecursiveDoubling);
  EXPECT_EQ(tied[3].algorithm, Algorithm::kOneShot);
  EXPECT_EQ(tied[4].algorithm, Algorithm::kHierarchical);
}

// Across hosts the hierarchical allreduce sends each connection 1/r of the flat ring's bytes
// (r ranks per host) and crosses fewer host boundaries: it wins large calls there. On one host
// it is the ring; on a device it cannot run.
TEST(CostModel, HierarchicalWinsLargeCallsAcrossHosts) {
  const CommProfile hosts = CommProfile::defaults(8, 4);
  EXPECT_LT(allReduceUs(Algorithm::kHierarchical, 64 * kMiB, hosts), allReduceUs(Algorithm::kRing, 64 * kMiB, hosts));
  EXPECT_EQ(rankAlgorithms(Kind::kAllReduce, 64 * kMiB, hosts).front().algorithm, Algorithm::kHierarchical);
  // By hand: 4 hosts x 2 ranks, 64 MiB, 2 channels (one per socket).
  const double b = 64.0 * kMiB, perRank = b / 2;
  const double across = 6 * 25.0 + 6 * (perRank / 4) / (2 * 1.2e3) + 3 * (perRank / 4) / 10e3;
  const double host = 2 * 1.5 + 2 * (b / 4) / (8e3 / 2) + std::max(0.0, (b / 2) / 10e3 - (b / 2) / 13e3);
  const CommProfile streamingOff = [&] {
    CommProfile p = hosts;
    p.streamingMinBytes = 0;
    return p;
  }();
  EXPECT_NEAR(allReduceUs(Algorithm::kHierarchical, 64 * kMiB, streamingOff), across + host, 1e-6 * (across + host));
  const CommProfile oneHost = CommProfile::defaults(8, 1);
  EXPECT_EQ(allReduceUs(Algorithm::kHierarchical, 4 * kMiB, oneHost), allReduceUs(Algorithm::kRing, 4 * kMiB, oneHost));
  EXPECT_TRUE(std::isinf(allReduceUs(Algorithm::kHierarchical, 4 * kMiB, CommProfile::deviceDefaults(8, 4))));
}

// The hierarchical broadcast and reduce spread what crosses between hosts over a host's r
// ranks: where the network is the only cost (shared memory taken as free), 2 ranks a host
// take half the flat chain's time; the tuner takes them for large calls across hosts. On one
// host they are the chain; on a device they cannot run.
TEST(CostModel, HierarchicalBroadcastAndReduceSpreadTheNetworkOverAHostsRanks) {
  const CommProfile hosts = CommProfile::defaults(8, 4);
  CommProfile freeHosts = hosts;
  freeHosts.intra = {0.0, 1e9};
  freeHosts.copyGbps = freeHosts.reduceGbps = freeHosts.memGbps = freeHosts.streamingGbps = freeHosts.directGbps = 1e9;
  const CommProfile oneHost = CommProfile::defaults(8, 1);
  for (Kind kind : {Kind::kBroadcast, Kind::kReduce}) {
    SCOPED_TRACE(kind == Kind::kBroadcast ? "broadcast" : "reduce");
    const auto us = [kind](Algorithm a, size_t bytes, const CommProfile& p) { return predict(kind, a, bytes, p).us; };
    EXPECT_LT(us(Algorithm::kHierarchical, 64 * kMiB, hosts), us(Algorithm::kRing, 64 * kMiB, hosts));
    EXPECT_EQ(rankAlgorithms(kind, 64 * kMiB, hosts).front().algorithm, Algorithm::kHierarchical);
    EXPECT_NEAR(us(Algorithm::kRing, size_t{1} << 30, freeHosts) / us(Algorithm::kHierarchical, size_t{1} << 30, freeHosts),
                2.0, 0.05);
    EXPECT_EQ(us(Algorithm::kHierarchical, 4 * kMiB, oneHost), us(Algorithm::kRing, 4 * kMiB, oneHost));
    EXPECT_TRUE(std::isinf(us(Algorithm::kHierarchical, 4 * kMiB, CommProfile::deviceDefaults(8, 4))));
  }
  EXPECT_TRUE(std::isinf(predict(Kind::kAllGather, Algorithm::kHierarchical, 4 * kMiB, hosts).us));
}

// ---- tuning file ----

std::string tempPath(const std::string& name) { return ::testing::TempDir() + "loom_cost_model_test_" + name; }

std::string writeFile(const std::string& name, const std::string& text) {
  const std::string path = tempPath(name);
  std::ofstream(path) << text;
  return path;
}

// Removes the file when the test is done with it.
struct RemoveAtEnd {
  std::string path;
  ~RemoveAtEnd() { std::remove(path.c_str()); }
};

std::string readFile(const std::string& path) {
  std::ostringstream text;
  text << std::ifstream(path).rdbuf();
  return text.str();
}

void expectSameConstants(const CommProfile& a, const CommProfile& b) {
  EXPECT_EQ(a.intra.latencyUs, b.intra.latencyUs);
  EXPECT_EQ(a.intra.gbps, b.intra.gbps);
  EXPECT_EQ(a.inter.latencyUs, b.inter.latencyUs);
  EXPECT_EQ(a.inter.gbps, b.inter.gbps);
  EXPECT_EQ(a.reduceGbps, b.reduceGbps);
  EXPECT_EQ(a.copyGbps, b.copyGbps);
  EXPECT_EQ(a.oneShotLatencyUs, b.oneShotLatencyUs);
  EXPECT_EQ(a.memGbps, b.memGbps);
  EXPECT_EQ(a.streamingGbps, b.streamingGbps);
  EXPECT_EQ(a.directGbps, b.directGbps);
  EXPECT_EQ(a.streamingMinBytes, b.streamingMinBytes);
  EXPECT_EQ(a.oneShotTimedMax, b.oneShotTimedMax);
}

TEST(TuningFile, SavedConstantsLoadBackExactly) {
  CommProfile saved = CommProfile::defaults(4, 2);
  saved.intra = {1.0 / 3, 7.77};
  saved.inter = {31.25, 0.1};
  saved.reduceGbps = 12345.678901234;
  saved.copyGbps = 1e-3;
  saved.oneShotLatencyUs = 0;
  saved.memGbps = 2.0 / 3;
  saved.streamingGbps = 9.5;
  saved.directGbps = 11.25;
  saved.streamingMinBytes = (size_t{1} << 40) + 3;
  saved.oneShotTimedMax[static_cast<size_t>(CallInfo::Kind::kReduceScatter)] = 16384;
  const std::string path = tempPath("roundtrip");
  RemoveAtEnd cleanup{path};
  Status status = saveTuningFile(path, saved, "node17");
  ASSERT_TRUE(status.isOk()) << status.message();
  const std::string text = readFile(path);
  EXPECT_EQ(text.rfind("# loom tuning file v1\nmachine = node17\n", 0), 0u) << text;
  // A collective the board was timed for has its limit; the others, untimed, no line.
  EXPECT_NE(text.find("\noneshot.max_bytes.reducescatter = 16384\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("oneshot.max_bytes.allreduce"), std::string::npos) << text;

  CommProfile loaded = CommProfile::defaults(4, 2);
  status = loadTuningFile(path, &loaded);
  ASSERT_TRUE(status.isOk()) << status.message();
  expectSameConstants(loaded, saved);
}

TEST(TuningFile, LoadsOnlyTheKeysPresent) {
  const std::string path = writeFile("partial",
                                     "# loom tuning file v1\n"
                                     "\n"
                                     "  inter.gbps =  3.5   # measured with iperf\n"
                                     "machine = somewhere # informational\n");
  RemoveAtEnd cleanup{path};
  CommProfile loaded = CommProfile::defaults(8, 2);
  std::vector<std::string> keys;
  Status status = loadTuningFile(path, &loaded, &keys);
  ASSERT_TRUE(status.isOk()) << status.message();
  CommProfile expected = CommProfile::defaults(8, 2);
  expected.inter.gbps = 3.5;
  expectSameConstants(loaded, expected);
  EXPECT_EQ(keys, std::vector<std::string>{"inter.gbps"});
  EXPECT_EQ(tuningText(loaded, {"inter.gbps", "copy.gbps"}), "inter.gbps = 3.5\ncopy.gbps = 13\n");
}

// One file holds a machine's host and device figures: each key sets the communicators it is
// for (device.* a device one's plan kernel, intra.* to direct.gbps a host one's, inter.*
// both), and an earlier file's ll.* read as device.ll.*.
TEST(TuningFile, HostAndDeviceKeysSetTheirOwnCommunicators) {
  const std::string path = writeFile("scopes",
                                     "# loom tuning file v1\n"
                                     "intra.gbps = 9\n"
                                     "copy.gbps = 21\n"
                                     "inter.gbps = 3.5\n"
                                     "device.simple.latency_us = 7.5\n"
                                     "device.simple.gbps = 310\n"
                                     "device.copy.gbps = 1500\n"
                                     "device.reduce.gbps = 900\n"
                                     "ll.latency_us = 2.25\n"
                                     "device.ll.gbps = 40\n");
  RemoveAtEnd cleanup{path};
  CommProfile host = CommProfile::defaults(2, 1);
  std::vector<std::string> hostKeys;
  Status status = loadTuningFile(path, &host, &hostKeys);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(host.intra.gbps, 9);
  EXPECT_EQ(host.copyGbps, 21);
  EXPECT_EQ(host.inter.gbps, 3.5);
  EXPECT_EQ(host.reduceGbps, CommProfile::defaults(2, 1).reduceGbps);
  EXPECT_EQ(hostKeys, (std::vector<std::string>{"intra.gbps", "copy.gbps", "inter.gbps"}));
  EXPECT_EQ(tuningText(host).find("device."), std::string::npos) << tuningText(host);

  CommProfile device = CommProfile::deviceDefaults(2, 1);
  std::vector<std::string> deviceKeys;
  status = loadTuningFile(path, &device, &deviceKeys);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(device.intra.latencyUs, 7.5);
  EXPECT_EQ(device.intra.gbps, 310);
  EXPECT_EQ(device.copyGbps, 1500);
  EXPECT_EQ(device.reduceGbps, 900);
  EXPECT_EQ(device.lowLatency.latencyUs, 2.25);
  EXPECT_EQ(device.lowLatency.gbps, 40);
  EXPECT_EQ(device.inter.gbps, 3.5);
  EXPECT_EQ(deviceKeys, (std::vector<std::string>{"inter.gbps", "device.simple.latency_us", "device.simple.gbps",
                                                  "device.copy.gbps", "device.reduce.gbps", "device.ll.latency_us",
                                                  "device.ll.gbps"}));
  EXPECT_TRUE(std::isnan(tuningValue(host, "device.copy.gbps")));
  EXPECT_TRUE(std::isnan(tuningValue(device, "copy.gbps")));
  EXPECT_EQ(tuningValue(device, "device.copy.gbps"), 1500);
  EXPECT_EQ(tuningText(device, {"intra.gbps", "device.simple.gbps"}), "device.simple.gbps = 310\n");

  // A device communicator's constants saved and read back.
  const std::string saved = tempPath("device-roundtrip");
  RemoveAtEnd cleanupSaved{saved};
  ASSERT_TRUE(saveTuningFile(saved, device, "gpu0").isOk());
  CommProfile loaded = CommProfile::deviceDefaults(2, 1);
  ASSERT_TRUE(loadTuningFile(saved, &loaded).isOk());
  EXPECT_EQ(tuningText(loaded), tuningText(device));

  // Checked wherever they stand: a bad device value fails a host communicator's load too.
  const std::string bad = writeFile("bad-device", "device.ll.gbps = 0\n");
  RemoveAtEnd cleanupBad{bad};
  status = loadTuningFile(bad, &host);
  EXPECT_EQ(status.code(), loomInvalidArgument);
  EXPECT_NE(status.message().find("device.ll.gbps"), std::string::npos) << status.message();
}

// The data-path sizes travel beside the constants: read into DataPathSizes (never into the
// profile or the keys read), written back by saveTuningFile, refused like any size.
TEST(TuningFile, CarriesTheDataPathSizes) {
  const std::string path = writeFile("sizes",
                                     "# loom tuning file v1\n"
                                     "chunk.bytes = 262144\n"
                                     "intra.gbps = 7\n"
                                     "socket.sndbuf = 0   # the kernel's autotuning\n"
                                     "shm.direct_min_bytes = 1048576\n");
  RemoveAtEnd cleanup{path};
  CommProfile loaded = CommProfile::defaults(2, 1);
  std::vector<std::string> keys;
  loom::DataPathSizes sizes;
  Status status = loadTuningFile(path, &loaded, &keys, &sizes);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(sizes.chunkBytes, 262144);
  EXPECT_EQ(sizes.shmFifoBytes, -1);
  EXPECT_EQ(sizes.socketSendBuffer, 0);
  EXPECT_EQ(sizes.shmDirectMinBytes, 1048576);
  EXPECT_EQ(keys, std::vector<std::string>{"intra.gbps"});
  CommProfile expected = CommProfile::defaults(2, 1);
  expected.intra.gbps = 7;
  expectSameConstants(loaded, expected);
  // Without a place for them they are checked and skipped.
  CommProfile again = CommProfile::defaults(2, 1);
  ASSERT_TRUE(loadTuningFile(path, &again).isOk());
  expectSameConstants(again, expected);
  EXPECT_EQ(loom::dataPathText(sizes), "chunk.bytes = 262144\nsocket.sndbuf = 0\nshm.direct_min_bytes = 1048576\n");

  const std::string saved = tempPath("sizes_saved");
  RemoveAtEnd cleanupSaved{saved};
  loom::DataPathSizes written;
  written.shmFifoBytes = 4 << 20;
  ASSERT_TRUE(saveTuningFile(saved, expected, "", {"intra.gbps"}, "", written).isOk());
  EXPECT_EQ(readFile(saved), "# loom tuning file v1\nintra.gbps = 7\nshm.fifo_bytes = 4194304\n");
  loom::DataPathSizes read;
  ASSERT_TRUE(loadTuningFile(saved, &again, nullptr, &read).isOk());
  EXPECT_EQ(read.shmFifoBytes, 4 << 20);
  EXPECT_EQ(read.chunkBytes, -1);

  // A bad line leaves the sizes untouched too.
  const std::string bad = writeFile("sizes_bad", "chunk.bytes = 8192\nshm.fifo_bytes = 1.5\n");
  RemoveAtEnd cleanupBad{bad};
  loom::DataPathSizes untouched;
  status = loadTuningFile(bad, &again, nullptr, &untouched);
  EXPECT_EQ(status.code(), loomInvalidArgument);
  EXPECT_NE(status.message().find(":2: shm.fifo_bytes = 1.5: expected a whole number of bytes"), std::string::npos)
      << status.message();
  EXPECT_EQ(untouched.chunkBytes, -1);
}

// Loads `text` and returns the error's message; the profile must come back untouched.
std::string loadError(const std::string& name, const std::string& text) {
  const std::string path = writeFile(name, text);
  RemoveAtEnd cleanup{path};
  CommProfile profile = CommProfile::defaults(4, 1);
  Status status = loadTuningFile(path, &profile);
  EXPECT_EQ(status.code(), loomInvalidArgument) << text;
  expectSameConstants(profile, CommProfile::defaults(4, 1));
  return status.message();
}

TEST(TuningFile, ErrorsNameFileLineAndKey) {
  const std::string path = tempPath("unknown");
  std::string message = loadError("unknown", "intra.gbps = 9\n# fine so far\nintra.bandwidth = 9\n");
  EXPECT_NE(message.find(path + ":3"), std::string::npos) << message;
  EXPECT_NE(message.find("unknown key \"intra.bandwidth\""), std::string::npos) << message;

  message = loadError("number", "intra.latency_us = 2\nintra.gbps = fast\n");
  EXPECT_NE(message.find(tempPath("number") + ":2"), std::string::npos) << message;
  EXPECT_NE(message.find("intra.gbps = \"fast\" is not a number"), std::string::npos) << message;

  message = loadError("trailing", "copy.gbps = 12 GB/s\n");
  EXPECT_NE(message.find(":1: copy.gbps = \"12 GB/s\" is not a number"), std::string::npos) << message;

  message = loadError("zero", "\n\n\n\nreduce.gbps = 0\n");
  EXPECT_NE(message.find(tempPath("zero") + ":5: reduce.gbps = 0: a bandwidth"), std::string::npos) << message;

  message = loadError("negative", "inter.latency_us = -1\n");
  EXPECT_NE(message.find(":1: inter.latency_us = -1: a latency cannot be negative"), std::string::npos) << message;

  message = loadError("fraction", "streaming.min_bytes = 1.5\n");
  EXPECT_NE(message.find(":1: streaming.min_bytes = 1.5: expected a whole number of bytes"), std::string::npos)
      << message;
  message = loadError("negativesize", "streaming.min_bytes = -4096\n");
  EXPECT_NE(message.find(":1: streaming.min_bytes = -4096: expected a whole number"), std::string::npos) << message;

  message = loadError("noequals", "intra.gbps 8\n");
  EXPECT_NE(message.find(":1: \"intra.gbps 8\" is not key = value"), std::string::npos) << message;

  CommProfile profile = CommProfile::defaults(4, 1);
  Status status = loadTuningFile(tempPath("does_not_exist"), &profile);
  EXPECT_EQ(status.code(), loomInvalidArgument);
  EXPECT_NE(status.message().find(tempPath("does_not_exist") + ": cannot open it"), std::string::npos)
      << status.message();
}

TEST(TuningFile, SaveToAnImpossiblePathFails) {
  Status status = saveTuningFile(tempPath("no_such_dir/tuning"), CommProfile::defaults(2, 1), "");
  EXPECT_EQ(status.code(), loomSystemError);
  EXPECT_NE(status.message().find("no_such_dir/tuning"), std::string::npos) << status.message();
}

// ---- link fit ----

TEST(LinkFit, RecoversLatencyAndBandwidthFromExactPoints) {
  // 5 µs + bytes / (2 GB/s = 2000 bytes per µs).
  std::vector<std::pair<size_t, double>> points;
  for (size_t bytes : {size_t{1} << 10, size_t{64} << 10, size_t{1} << 20, size_t{16} << 20, size_t{1} << 30}) {
    points.emplace_back(bytes, 5 + static_cast<double>(bytes) / 2000);
  }
  LinkCost link;
  Status status = fitLinkCost(points, &link);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_NEAR(link.latencyUs, 5, 1e-6);
  EXPECT_NEAR(link.gbps, 2, 1e-9);
}

TEST(LinkFit, ClampsANegativeLatencyToZero) {
  // -3 µs + bytes / 1000: the intercept would be negative; the line through the origin
  // has slope sum(xy) / sum(xx).
  const std::vector<std::pair<size_t, double>> points = {{10000, 7}, {100000, 97}};
  LinkCost link;
  ASSERT_TRUE(fitLinkCost(points, &link).isOk());
  EXPECT_EQ(link.latencyUs, 0);
  const double usPerByte = (10000.0 * 7 + 100000.0 * 97) / (10000.0 * 10000 + 100000.0 * 100000);
  EXPECT_NEAR(link.gbps, 1 / (usPerByte * 1e3), 1e-12);
}

TEST(LinkFit, RejectsWhatCannotBeFitted) {
  LinkCost link{7, 7};
  Status status = fitLinkCost({{4096, 10.0}}, &link);
  EXPECT_EQ(status.code(), loomInvalidArgument);
  EXPECT_NE(status.message().find("fewer than two distinct sizes"), std::string::npos) << status.message();
  EXPECT_EQ(fitLinkCost({{4096, 10.0}, {4096, 11.0}}, &link).code(), loomInvalidArgument);
  EXPECT_EQ(fitLinkCost({}, &link).code(), loomInvalidArgument);
  status = fitLinkCost({{1000, 20.0}, {100000, 10.0}}, &link);  // slower for less
  EXPECT_EQ(status.code(), loomInvalidArgument);
  EXPECT_NE(status.message().find("do not grow with size"), std::string::npos) << status.message();
  EXPECT_EQ(link.latencyUs, 7);
  EXPECT_EQ(link.gbps, 7);
}

// On hosts a call gets as many channels as get two slices each, at least one, at most the
// links; the step from one to all links at once left mid sizes on one channel (23 GB/s at
// 32 MiB on an H100 where 32 channels gave 254 at 512 MiB). On a device, one per half slice:
// a channel is one thread block, and 8 MiB ran 1.5x faster on 8 channels than on 2.
TEST(CostModel, ChannelsGrowWithTheSlicesACallHas) {
  constexpr size_t kSlice = 2 << 20;
  EXPECT_EQ(channelsFor(0, kSlice, 32, false), 1);
  EXPECT_EQ(channelsFor(3 * kSlice, kSlice, 32, false), 1);
  EXPECT_EQ(channelsFor(4 * kSlice, kSlice, 32, false), 2);
  EXPECT_EQ(channelsFor(16 * kSlice, kSlice, 32, false), 8);
  EXPECT_EQ(channelsFor(1000 * kSlice, kSlice, 32, false), 32);
  EXPECT_EQ(channelsFor(1000 * kSlice, kSlice, 1, false), 1);
  // Two links (sockets between hosts): both from four slices on, as before.
  EXPECT_EQ(channelsFor(4 * kSlice - 1, kSlice, 2, false), 1);
  EXPECT_EQ(channelsFor(4 * kSlice, kSlice, 2, false), 2);
  // Device: 8 MiB on 8 channels, 32 MiB on 32, capped by the links the block budget allows.
  EXPECT_EQ(channelsFor(kSlice / 2 - 1, kSlice, 32, true), 1);
  EXPECT_EQ(channelsFor(kSlice, kSlice, 32, true), 2);
  EXPECT_EQ(channelsFor(4 * kSlice, kSlice, 32, true), 8);
  EXPECT_EQ(channelsFor(16 * kSlice, kSlice, 32, true), 32);
  EXPECT_EQ(channelsFor(16 * kSlice, kSlice, 16, true), 16);
}

}  // namespace
}  // namespace loom
